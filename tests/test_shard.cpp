// Token shard tests: round trips in both dtypes, and each kind of damage gives an error that
// says what is wrong and to re-run `frugal prepare`.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "frugal/core/error.h"
#include "frugal/data/shard.h"
#include "frugal/data/text.h"

namespace fs = std::filesystem;
using frugal::data::TokenShard;
using frugal::data::write_shard;

namespace {

fs::path temp_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("frugal_test_shard_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string bytes_of(const fs::path& p) { return frugal::data::read_text_file(p.string()); }
void write_bytes(const fs::path& p, const std::string& b) { std::ofstream(p, std::ios::binary) << b; }

void expect_open_error(const fs::path& p, std::initializer_list<std::string_view> parts) {
  try {
    TokenShard::open(p.string());
    ADD_FAILURE() << "expected an error opening " << p;
  } catch (const frugal::Error& e) {
    for (auto part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(Shard, RoundTripUint16AndUint32) {
  const fs::path dir = temp_dir("roundtrip");
  for (int vocab : {65, 50257, 65536, 100000}) {
    std::vector<int32_t> tokens;
    for (int i = 0; i < 1000; ++i) tokens.push_back((i * 7919) % vocab);
    tokens.push_back(vocab - 1);
    const fs::path p = dir / "s.bin";
    write_shard(p.string(), tokens, vocab);
    EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);  // no temp file left
    const int bytes = vocab <= 65536 ? 2 : 4;
    EXPECT_EQ(fs::file_size(p), 64 + tokens.size() * bytes);
    const TokenShard s = TokenShard::open(p.string());
    EXPECT_EQ(s.size(), static_cast<int64_t>(tokens.size()));
    EXPECT_EQ(s.vocab_size(), vocab);
    EXPECT_EQ(s.token_bytes(), bytes);
    std::vector<int32_t> back(tokens.size());
    s.read(0, s.size(), back.data());
    EXPECT_EQ(back, tokens);
    EXPECT_EQ(s[s.size() - 1], vocab - 1);
  }
}

TEST(Shard, EmptyShardAndBadWrites) {
  const fs::path dir = temp_dir("empty");
  write_shard((dir / "e.bin").string(), {}, 10);
  EXPECT_EQ(TokenShard::open((dir / "e.bin").string()).size(), 0);
  const std::vector<int32_t> bad = {1, 2, 10};
  EXPECT_THROW(write_shard((dir / "b.bin").string(), bad, 10), frugal::Error);
  EXPECT_FALSE(fs::exists(dir / "b.bin"));
}

TEST(Shard, DamagedFilesGiveClearErrors) {
  const fs::path dir = temp_dir("damaged");
  const fs::path good = dir / "good.bin";
  std::vector<int32_t> tokens(100);
  for (int i = 0; i < 100; ++i) tokens[i] = i % 50;
  write_shard(good.string(), tokens, 50);
  const std::string ok = bytes_of(good);
  const fs::path p = dir / "bad.bin";

  std::string b = ok;
  b[0] = 'X';
  write_bytes(p, b);
  expect_open_error(p, {"bad magic", "frugal prepare"});

  b = ok;
  b[8] = 9;  // version
  write_bytes(p, b);
  expect_open_error(p, {"format version 9", "frugal prepare"});

  b = ok;
  b[12] = 3;  // bytes per token
  write_bytes(p, b);
  expect_open_error(p, {"3 bytes per token", "frugal prepare"});

  write_bytes(p, ok.substr(0, ok.size() - 1));
  expect_open_error(p, {"truncated", "frugal prepare"});

  write_bytes(p, ok.substr(0, 10));
  expect_open_error(p, {"shorter than its 64-byte header", "frugal prepare"});

  b = ok;
  b[64 + 2 * 7] = 60;  // token 7 := 60 >= vocab 50
  write_bytes(p, b);
  expect_open_error(p, {"token 60 at position 7", "frugal prepare"});

  expect_open_error(dir / "missing.bin", {"cannot open", "frugal prepare"});
}
