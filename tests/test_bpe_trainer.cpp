// Byte-level BPE training (`frugal tokenizer train`): the incremental trainer against the
// by-definition reference (same merges, ties included), a checked-in fixture of expected merges,
// exact round trips of every line of WikiText-2 under the 8192-token tokenizer trained on it, the
// encoder's rank rule (merge rank, not any split of a token), frugal's tokenizer file carrying a
// trained tokenizer, and Hugging Face `tokenizers` giving the same ids (skipped without .venv-torch).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "frugal/app/hf_model.h"
#include "frugal/core/error.h"
#include "frugal/data/bpe_trainer.h"
#include "frugal/data/corpus.h"
#include "frugal/data/text.h"
#include "frugal/data/tokenizer.h"
#include "paths.h"
#include "run_cli.h"
#include "torch_python.h"

namespace fs = std::filesystem;
using frugal::testing::torch_python;
using frugal::data::BpeModel;
using frugal::data::PieceCounts;
using frugal::data::read_text_file;

namespace {

fs::path temp_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("frugal_test_bpe_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

PieceCounts counts_of(std::string_view text) {
  PieceCounts c;
  c.add(text);
  return c;
}

std::string shakespeare(size_t bytes) {
  const std::string text = read_text_file(frugal::data::data_dir() + "/tinyshakespeare/input.txt");
  size_t cut = std::min(bytes, text.size());
  while (cut < text.size() && !frugal::data::is_encode_boundary(text, cut)) ++cut;
  return text.substr(0, cut);
}

// A decompressed file of the bundled data (train.txt.xz), read as `frugal prepare` reads it.
std::string read_data_file(const std::string& name) {
  const auto in = frugal::data::ByteStream::open(frugal::data::data_dir() + "/" + name);
  std::string text, buf(1 << 16, '\0');
  while (const size_t n = in->read(buf.data(), buf.size())) text.append(buf.data(), n);
  return text;
}

std::unique_ptr<frugal::data::Tokenizer> write_and_load(const BpeModel& model, const fs::path& dir) {
  frugal::data::write_bpe_files(model, dir.string());
  return frugal::data::load_tokenizer("gpt2:" + dir.string());
}

std::vector<std::vector<int32_t>> hf_ids(const std::string& python, const fs::path& dir, const fs::path& text) {
  const std::string cmd = python + " " + std::string(test_paths::source_dir()) + "/tools/hf_tokenizer_ids.py " + dir.string() + " " + text.string();
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[1 << 16];
  while (const size_t n = std::fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  EXPECT_EQ(::pclose(p), 0) << cmd;
  std::vector<std::vector<int32_t>> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    lines.emplace_back();
    for (int32_t id; words >> id;) lines.back().push_back(id);
  }
  return lines;
}

}  // namespace

// Ties (many pairs of count 1 and 2), runs of one byte (overlapping pairs: "aaaa" holds (a, a)
// three times but merges twice) and a pair whose bytes are already a token.
TEST(BpeTrainer, IncrementalMatchesReferenceOnTiesAndRuns) {
  const std::string text = "aaaa aaaaaaa aaa ab ab abc bca cab abab baba zz zy yz xyzzy xx\n\n  \t a-b a.b";
  for (int vocab : {257, 260, 270, 300}) {
    const BpeModel fast = frugal::data::train_bpe(counts_of(text), vocab);
    const BpeModel ref = frugal::data::train_bpe_reference(counts_of(text), vocab);
    EXPECT_EQ(fast.merges, ref.merges) << "vocab " << vocab;
    EXPECT_EQ(fast.tokens, ref.tokens) << "vocab " << vocab;
  }
  // The tie rule: of pairs with the highest count, the smallest (left id, right id) is merged.
  const BpeModel m = frugal::data::train_bpe(counts_of("ba ba ab ab"), 258);
  ASSERT_EQ(m.merges.size(), 1u);
  EXPECT_EQ(m.tokens[256], "ab");  // (a, b) and (b, a): 2 each; a's id (64) < b's (65)
  EXPECT_EQ(m.tokens.back(), "<|endoftext|>");
  EXPECT_EQ(m.eot, 257);
}

TEST(BpeTrainer, IncrementalMatchesReferenceOnShakespeare) {
  const PieceCounts counts = counts_of(shakespeare(60000));
  const BpeModel fast = frugal::data::train_bpe(counts, 700);
  const BpeModel ref = frugal::data::train_bpe_reference(counts, 700);
  ASSERT_EQ(fast.merges.size(), 700u - 257u);
  EXPECT_EQ(fast.merges, ref.merges);
  EXPECT_EQ(fast.tokens, ref.tokens);
  // Every token from exactly one merge, ids in merge order.
  for (size_t i = 0; i < fast.merges.size(); ++i)
    EXPECT_EQ(fast.tokens[256 + i], fast.tokens[fast.merges[i].first] + fast.tokens[fast.merges[i].second]);
  std::set<std::string> distinct(fast.tokens.begin(), fast.tokens.end());
  EXPECT_EQ(distinct.size(), fast.tokens.size());
}

// A fixture that cannot be skipped: the merges of a tokenizer trained on a checked-in text.
TEST(BpeTrainer, FixtureMerges) {
  const std::string dir = std::string(test_paths::test_data()) + "/tokenizer/bpe_fixture";
  const BpeModel m = frugal::data::train_bpe(counts_of(read_text_file(dir + "/input.txt")), 300);
  std::string merges = "#version: 0.2\n";
  for (const std::string& line : frugal::data::bpe_merge_lines(m)) merges += line + "\n";
  EXPECT_EQ(merges, read_text_file(dir + "/merges.txt"));
  const fs::path out = temp_dir("fixture");
  const auto tok = write_and_load(m, out);
  EXPECT_EQ(read_text_file((out / "merges.txt").string()), read_text_file(dir + "/merges.txt"));
  std::ostringstream ids;
  for (int32_t id : tok->encode(read_text_file(dir + "/sentence.txt"))) ids << id << "\n";
  EXPECT_EQ(ids.str(), read_text_file(dir + "/sentence_ids.txt"));
}

// The done-when tokenizer: 8192 tokens trained on WikiText-2's training split; every line of the
// three splits decodes back to itself exactly.
TEST(BpeTrainer, WikiText8192RoundTripsEveryLine) {
  frugal::data::CorpusSampleOptions o;
  o.inputs = {frugal::data::data_dir() + "/wikitext-2/train.txt.xz"};
  const frugal::data::CorpusSample sample = frugal::data::sample_corpus(o);
  EXPECT_FALSE(sample.truncated);
  EXPECT_EQ(sample.bytes, 10797148);
  const BpeModel m = frugal::data::train_bpe(sample.counts, 8192);
  ASSERT_EQ(m.tokens.size(), 8192u);
  const auto tok = write_and_load(m, temp_dir("wikitext"));
  for (const char* file : {"wikitext-2/train.txt.xz", "wikitext-2/valid.txt", "wikitext-2/test.txt"}) {
    const std::string text = read_data_file(file);
    size_t lines = 0, bad = 0, tokens = 0;
    for (size_t pos = 0; pos < text.size();) {
      const size_t end = std::min(text.find('\n', pos), text.size() - 1) + 1;
      const std::string line = text.substr(pos, end - pos);
      const std::vector<int32_t> ids = tok->encode(line);
      tokens += ids.size();
      bad += tok->decode(ids) != line;
      ++lines;
      pos = end;
    }
    EXPECT_EQ(bad, 0u) << file;
    EXPECT_GT(lines, 3000u) << file;
    EXPECT_LT(tokens, text.size() / 3) << file;  // it compresses: > 3 bytes per token
  }
}

// The encoder merges by merge rank only. Merges (b, c), (a, b), (ab, c): "abc" is a token, but
// BPE of "abc" merges (b, c) first and (a, bc) is no merge, so it stays [a, bc] (GPT-2's rule
// and `tokenizers`'); ranking any split of a token by its id would give [abc].
TEST(BpeTrainer, EncoderRanksByMergeNotByAnySplit) {
  BpeModel m;
  for (int id = 0; id < 256; ++id) m.tokens.emplace_back(1, static_cast<char>(frugal::data::gpt2_byte_order()[id]));
  const auto id_of = [&](char c) {
    for (int id = 0; id < 256; ++id)
      if (m.tokens[id][0] == c) return id;
    return -1;
  };
  m.merges = {{id_of('b'), id_of('c')}, {id_of('a'), id_of('b')}, {257, id_of('c')}};
  m.tokens.insert(m.tokens.end(), {"bc", "ab", "abc", "<|endoftext|>"});
  m.eot = 259;
  const fs::path dir = temp_dir("rank_rule");
  const auto tok = write_and_load(m, dir);
  EXPECT_EQ(tok->encode("abc"), (std::vector<int32_t>{id_of('a'), 256}));
  EXPECT_EQ(tok->encode("abcc ab"), (std::vector<int32_t>{id_of('a'), 256, id_of('c'), id_of(' '), 257}));
  EXPECT_EQ(tok->encode("xab c"), (std::vector<int32_t>{id_of('x'), 257, id_of(' '), id_of('c')}));
  const std::string python = torch_python();
  if (python.empty()) GTEST_SKIP() << "no .venv-torch with tokenizers and transformers: `tokenizers` not checked";
  std::ofstream(dir / "text.txt", std::ios::binary) << "abc abcc xab c";
  const auto hf = hf_ids(python, dir, dir / "text.txt");
  ASSERT_EQ(hf.size(), 2u);
  EXPECT_EQ(hf[0], tok->encode("abc abcc xab c"));
}

// frugal's tokenizer file of a trained tokenizer holds its vocabulary and merges: a data
// directory or checkpoint keeps working when the tokenizer's directory is gone.
TEST(BpeTrainer, TokenizerFileCarriesTheTrainedTokenizer) {
  const fs::path dir = temp_dir("carried");
  const std::string text = shakespeare(30000);
  const auto tok = write_and_load(frugal::data::train_bpe(counts_of(text), 400), dir / "tok");
  std::ofstream(dir / "frugal_tokenizer.json") << tok->to_json();
  fs::remove_all(dir / "tok");
  const auto back = frugal::data::load_tokenizer_json((dir / "frugal_tokenizer.json").string());
  EXPECT_EQ(frugal::data::vocabulary_difference(*back, "reloaded", *tok, "trained"), "");
  EXPECT_EQ(back->encode(text), tok->encode(text));
  EXPECT_EQ(back->spec(), tok->spec());
  EXPECT_EQ(back->eot_token(), 399);
}

// The command: the files it writes, prepare using them (the tokenizer file carrying the vocabulary),
// one-line refusals of an existing tokenizer and a vocabulary below 257, and the sample bound.
TEST(BpeTrainer, TokenizerTrainCommand) {
  using frugal::testing::contains;
  using frugal::testing::run_frugal;
  const fs::path dir = temp_dir("cli");
  const std::string input = frugal::data::data_dir() + "/tinyshakespeare/input.txt";
  const std::string out = (dir / "tok").string();
  auto r = run_frugal("tokenizer train --input " + input + " --vocab-size 600 --sample-bytes 200000 --out " + out);
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "600 tokens (343 merges)") && contains(r.output, "cut at the sample bound")) << r.output;
  for (const char* f : {"vocab.json", "merges.txt", "tokenizer.json"}) EXPECT_TRUE(fs::exists(dir / "tok" / f)) << f;
  r = run_frugal("tokenizer train --input " + input + " --vocab-size 600 --out " + out);
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.output, "exists; choose another --out or pass --overwrite")) << r.output;
  r = run_frugal("tokenizer train --input " + input + " --vocab-size 100 --overwrite --out " + out);
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.output, "at least 257")) << r.output;
  // The sample bound: the text up to the last boundary within 200000 bytes trains the same merges.
  const std::string text = read_text_file(input);
  size_t cut = 200000;
  while (!frugal::data::is_encode_boundary(text, cut)) --cut;
  const BpeModel direct = frugal::data::train_bpe(counts_of(text.substr(0, cut)), 600);
  std::string merges = "#version: 0.2\n";
  for (const std::string& line : frugal::data::bpe_merge_lines(direct)) merges += line + "\n";
  EXPECT_EQ(read_text_file(out + "/merges.txt"), merges);
  r = run_frugal("prepare --tokenizer gpt2:" + out + " --input " + input + " --out " + (dir / "data").string());
  ASSERT_EQ(r.rc, 0) << r.output;
  fs::remove_all(dir / "tok");
  r = run_frugal("tokenize --tokenizer " + (dir / "data" / "frugal_tokenizer.json").string() + " " + input);
  EXPECT_EQ(r.rc, 0) << r.output.substr(0, 300);
}

// Hugging Face `tokenizers` (tokenizer.json) and transformers' AutoTokenizer (an export's
// directory) give frugal's ids on WikiText-2's validation text and on hard strings.
TEST(BpeTrainer, HuggingFaceTokenizersGiveTheSameIds) {
  const std::string python = torch_python();
  if (python.empty()) GTEST_SKIP() << "no .venv-torch with tokenizers and transformers";
  frugal::data::CorpusSampleOptions o;
  o.inputs = {frugal::data::data_dir() + "/wikitext-2/train.txt.xz"};
  const auto tok = write_and_load(frugal::data::train_bpe(frugal::data::sample_corpus(o).counts, 8192),
                                  temp_dir("hf") / "tok");
  const fs::path dir = temp_dir("hf_export");
  ASSERT_TRUE(frugal::io::export_hf_tokenizer(*tok, 128, dir.string()));
  const std::string text = read_text_file(frugal::data::data_dir() + "/wikitext-2/valid.txt") +
                           "Ünïcödé — “quotes” 日本語 🙂\r\n\t  tabs   spaces<|endoftext|>it's 12,345.6 x\u00a0y\n";
  std::ofstream(dir / "text.txt", std::ios::binary) << text;
  const std::vector<int32_t> ours = tok->encode(text);
  const auto hf = hf_ids(python, dir, dir / "text.txt");
  ASSERT_EQ(hf.size(), 2u);
  EXPECT_EQ(hf[0].size(), ours.size());
  EXPECT_TRUE(hf[0] == ours) << "tokenizers";
  EXPECT_TRUE(hf[1] == ours) << "AutoTokenizer";
}
