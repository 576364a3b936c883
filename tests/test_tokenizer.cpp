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
  return nlohmann::json::parse(read_text_file(std::string(FRUGAL_TEST_DATA) + "/tokenizer/" + name));
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
