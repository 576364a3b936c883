// Tokenizer tests: GPT-2 parity with tiktoken (fixture strings and whole WikiText-2 digests
// written by tools/make_tokenizer_fixtures.py), round trips, thread-count independence, bad
// tokenizer files, and the character tokenizer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "frugal/core/error.h"
#include "frugal/data/text.h"
#include "frugal/data/tokenizer.h"
#include "paths.h"
#include "sha256.h"

namespace fs = std::filesystem;
using frugal::data::CharTokenizer;
using frugal::data::load_tokenizer;
using frugal::data::read_text_file;
using frugal::data::Tokenizer;
using frugal::data::TokenizerOptions;

namespace {

const Tokenizer& gpt2(bool allow_special) {
  static const auto special = load_tokenizer("gpt2", {.allow_special = true});
  static const auto plain = load_tokenizer("gpt2", {.allow_special = false});
  return allow_special ? *special : *plain;
}

nlohmann::json read_fixture(const std::string& name) {
  return nlohmann::json::parse(read_text_file(std::string(test_paths::test_data()) + "/tokenizer/" + name));
}

std::vector<int32_t> as_ids(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

fs::path temp_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("frugal_test_tokenizer_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_file(const fs::path& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// Expects fn to throw frugal::Error whose message contains every one of the given parts.
template <class Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string_view> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected a frugal::Error";
  } catch (const frugal::Error& e) {
    for (auto p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(Gpt2Tokenizer, MatchesTiktokenOnHardStrings) {
  const auto fixture = read_fixture("hard_strings.json");
  ASSERT_GE(fixture["cases"].size(), 40u);
  for (const auto& c : fixture["cases"]) {
    const std::string text = c["text"];
    EXPECT_EQ(gpt2(false).encode(text), as_ids(c["ids_plain"])) << "text: " << text;
    EXPECT_EQ(gpt2(true).encode(text), as_ids(c["ids_special"])) << "text: " << text;
    EXPECT_EQ(gpt2(true).decode(gpt2(true).encode(text)), text);
  }
}

TEST(Gpt2Tokenizer, MatchesTiktokenOnWholeCorpora) {
  const auto fixture = read_fixture("wikitext2_digest.json");
  ASSERT_EQ(fixture["files"].size(), 4u);
  for (const auto& f : fixture["files"]) {
    const std::string text = read_text_file(frugal::data::data_dir() + "/" + f["file"].get<std::string>());
    const std::vector<int32_t> ids = gpt2(false).encode(text);
    EXPECT_EQ(ids.size(), f["tokens"].get<size_t>()) << f["file"];
    std::vector<uint32_t> le(ids.begin(), ids.end());  // x86-64 is little-endian
    EXPECT_EQ(frugal::test::sha256_hex(le.data(), le.size() * 4), f["sha256_u32le"].get<std::string>())
        << f["file"];
    EXPECT_EQ(gpt2(false).decode(ids), text) << f["file"];
  }
}

TEST(Gpt2Tokenizer, ThreadCountDoesNotChangeTokens) {
  const std::string valid = read_text_file(frugal::data::data_dir() + "/wikitext-2/valid.txt");
  // Same text with special tokens sprinkled in, so chunks also start and end near them.
  std::string with_specials;
  for (size_t pos = 0; pos < valid.size(); pos += 5000)
    with_specials += valid.substr(pos, 5000) + (pos % 3 == 0 ? "<|endoftext|>" : " <|endoftext|> ");
  for (bool special : {false, true}) {
    const auto one = load_tokenizer("gpt2", {.allow_special = special, .threads = 1});
    const auto many = load_tokenizer("gpt2", {.allow_special = special, .threads = 5});
    for (const std::string* text : {&valid, static_cast<const std::string*>(&with_specials)}) {
      const auto ids = one->encode(*text);
      EXPECT_EQ(many->encode(*text), ids);
      EXPECT_EQ(many->decode(ids), *text);
    }
  }
}

TEST(Gpt2Tokenizer, BasicProperties) {
  const Tokenizer& tok = gpt2(true);
  EXPECT_EQ(tok.vocab_size(), 50257);
  EXPECT_EQ(tok.eot_token(), 50256);
  EXPECT_EQ(tok.spec(), "gpt2");
  EXPECT_EQ(tok.piece(220), " ");
  EXPECT_EQ(tok.piece(198), "\n");
  EXPECT_EQ(tok.piece(50256), "<|endoftext|>");
  EXPECT_EQ(tok.encode("<|endoftext|>"), std::vector<int32_t>{50256});
  expect_error([&] { tok.piece(50257); }, {"outside the vocabulary", "of gpt2"});
  expect_error([&] { tok.encode("ab\xff"); }, {"not valid UTF-8", "byte offset 2"});
  // tokenizer.json round trip keeps the special-token choice.
  const fs::path dir = temp_dir("json");
  write_file(dir / "tokenizer.json", gpt2(false).to_json());
  const auto reloaded = frugal::data::load_tokenizer_json((dir / "tokenizer.json").string());
  EXPECT_EQ(reloaded->encode("a<|endoftext|>"), gpt2(false).encode("a<|endoftext|>"));
}

TEST(Gpt2Tokenizer, BadFilesGiveClearErrors) {
  const std::string src = frugal::data::data_dir() + "/gpt2-bpe";
  const std::string encoder = read_text_file(src + "/encoder.json");
  const std::string merges = read_text_file(src + "/vocab.bpe");
  const fs::path dir = temp_dir("bad");
  const std::string spec = "gpt2:" + dir.string();

  write_file(dir / "encoder.json", encoder);
  expect_error([&] { load_tokenizer(spec); }, {"holds neither vocab.json + merges.txt",
                                               "nor encoder.json + vocab.bpe", dir.string()});

  write_file(dir / "vocab.bpe", merges);
  write_file(dir / "encoder.json", encoder.substr(0, encoder.size() / 2));
  expect_error([&] { load_tokenizer(spec); }, {"encoder.json", "not valid JSON", "use the vocab.json"});

  write_file(dir / "encoder.json", encoder);
  // Swap merges 1 and 2: each then makes the other's token.
  const size_t l1 = merges.find('\n') + 1, l2 = merges.find('\n', l1) + 1, l3 = merges.find('\n', l2) + 1;
  write_file(dir / "vocab.bpe", merges.substr(0, l1) + merges.substr(l2, l3 - l2) +
                                    merges.substr(l1, l2 - l1) + merges.substr(l3));
  expect_error([&] { load_tokenizer(spec); }, {"vocab.bpe", "line 2", "should make token 256", "written together"});

  write_file(dir / "vocab.bpe", merges.substr(0, l1) + "justoneword\n" + merges.substr(l2));
  expect_error([&] { load_tokenizer(spec); }, {"vocab.bpe", "line 2", "expected a merge"});

  write_file(dir / "vocab.bpe", merges);
  EXPECT_EQ(load_tokenizer(spec)->encode("Hello world"), gpt2(true).encode("Hello world"));
  expect_error([&] { load_tokenizer("bpe"); }, {"unknown tokenizer", "gpt2"});
}

// gpt2:DIR reads Hugging Face's names for GPT-2's files too (vocab.json + merges.txt: what
// `frugal export --format hf` and transformers write), the same tokenizer as OpenAI's files.
TEST(Gpt2Tokenizer, ReadsHuggingFaceFileNames) {
  const std::string src = frugal::data::data_dir() + "/gpt2-bpe";
  const fs::path dir = temp_dir("hf_names");
  write_file(dir / "vocab.json", read_text_file(src + "/encoder.json"));
  write_file(dir / "merges.txt", read_text_file(src + "/vocab.bpe"));
  const auto tok = load_tokenizer("gpt2:" + dir.string());
  EXPECT_EQ(tok->spec(), "gpt2:" + dir.string());
  EXPECT_EQ(frugal::data::vocabulary_difference(*tok, "HF's", gpt2(true), "OpenAI's"), "");
  EXPECT_EQ(tok->encode("Hello world<|endoftext|>"), gpt2(true).encode("Hello world<|endoftext|>"));
  const frugal::data::Gpt2Files files = frugal::data::find_gpt2_files(dir.string());
  EXPECT_EQ(files.vocab, (dir / "vocab.json").string());
  EXPECT_EQ(files.merges, (dir / "merges.txt").string());
}

// frugal's tokenizer file is not named tokenizer.json (Hugging Face's file, another format), but
// directories written by earlier versions hold one: tokenizer_file reads it when it is the only one.
TEST(TokenizerFile, FrugalsNameAndTheOldOne) {
  const fs::path dir = temp_dir("file_name");
  EXPECT_EQ(frugal::data::tokenizer_file(dir.string()), (dir / "frugal_tokenizer.json").string());
  write_file(dir / "tokenizer.json", gpt2(true).to_json());
  EXPECT_EQ(frugal::data::tokenizer_file(dir.string()), (dir / "tokenizer.json").string());
  write_file(dir / "frugal_tokenizer.json", gpt2(true).to_json());
  EXPECT_EQ(frugal::data::tokenizer_file(dir.string()), (dir / "frugal_tokenizer.json").string());
}

TEST(TokenizerFile, HuggingFacesTokenizerJsonIsRefusedNamingGpt2Dir) {
  const fs::path dir = temp_dir("hf_json");
  write_file(dir / "tokenizer.json", R"({"version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []}})");
  expect_error([&] { load_tokenizer((dir / "tokenizer.json").string()); },
               {"is a Hugging Face tokenizer.json", "gpt2:DIR", "vocab.json and merges.txt"});
}

TEST(CharTokenizer, TinyShakespeareVocabularyAndRoundTrip) {
  const std::string text = read_text_file(frugal::data::data_dir() + "/tinyshakespeare/input.txt");
  CharTokenizer tok = CharTokenizer::from_text(text);
  EXPECT_EQ(tok.vocab_size(), 65);
  EXPECT_EQ(tok.eot_token(), -1);
  EXPECT_EQ(tok.piece(0), "\n");
  EXPECT_EQ(tok.piece(1), " ");
  const auto ids = tok.encode(text);
  EXPECT_EQ(ids.size(), text.size());
  EXPECT_EQ(tok.decode(ids), text);

  const fs::path dir = temp_dir("char");
  tok.save((dir / "vocab.json").string());
  EXPECT_EQ(tok.spec(), "char:" + (dir / "vocab.json").string());
  const auto loaded = load_tokenizer(tok.spec());
  EXPECT_EQ(loaded->vocab_size(), 65);
  EXPECT_EQ(loaded->encode("To be, or not"), tok.encode("To be, or not"));
  expect_error([&] { loaded->encode("To be é"); },
               {"'é' (U+00E9)", "byte offset 6", "not in the character vocabulary", "rebuild"});
}

TEST(CharTokenizer, MultiByteCharactersAndBadVocabularies) {
  const std::string text = "héllo wörld ✓ 😀\n";
  CharTokenizer tok = CharTokenizer::from_text(text);
  EXPECT_EQ(tok.vocab_size(), 12);
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
  EXPECT_EQ(tok.piece(tok.vocab_size() - 1), "😀");

  const fs::path dir = temp_dir("char_bad");
  write_file(dir / "v.json", R"({"type": "char", "chars": ["a", "bc"]})");
  expect_error([&] { load_tokenizer("char:" + (dir / "v.json").string()); }, {"not a single character"});
  write_file(dir / "v.json", R"({"type": "char", "chars": ["b", "a"]})");
  expect_error([&] { load_tokenizer("char:" + (dir / "v.json").string()); }, {"code point order"});
  write_file(dir / "v.json", R"({"type": "gpt2"})");
  expect_error([&] { load_tokenizer("char:" + (dir / "v.json").string()); }, {"not a character vocabulary"});
}
