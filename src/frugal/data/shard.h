// Token shards: a 64-byte header then the tokens as little-endian uint16 (vocab <= 65536) or
// uint32. Written atomically (temp file, fsync, rename; ShardWriter streams them); read through
// mmap with every header field, the file size and every token checked. Other programs' token
// files are read too (TokenShard::open_foreign): llm.c's shards and nanoGPT's raw uint16 files.
//
// Header (little-endian):
//   0  char[8]  magic "FRUGTOK\0"
//   8  uint32   version (1)
//   12 uint32   bytes per token (2 or 4)
//   16 uint64   token count
//   24 uint32   vocabulary size (every token is < this)
//   28 ...      zeros up to byte 64
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace frugal::io {
class AtomicFileWriter;
}

namespace frugal::data {

inline constexpr char kShardMagic[8] = {'F', 'R', 'U', 'G', 'T', 'O', 'K', '\0'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderBytes = 64;

// Bytes per token for a vocabulary: 2 when every id fits in uint16, else 4.
int shard_token_bytes(int vocab_size);

// llm.c's token files (dev/data/data_common.py): a header of 256 little-endian int32 (magic,
// version, token count, zeros), then the tokens: uint16 for GPT-2 (magic 20240520, version 1),
// uint32 for Llama 3 (magic 20240801, version 7).
inline constexpr size_t kLlmcHeaderBytes = 256 * 4;
inline constexpr int32_t kLlmcGpt2Magic = 20240520, kLlmcLlama3Magic = 20240801;

// Writes tokens (each in [0, vocab_size)) to path atomically: path.tmp, fsync, rename.
void write_shard(const std::string& path, std::span<const int32_t> tokens, int vocab_size);

// Streams a shard: append() any number of times, then commit() (header completed, fsync, rename).
// Destroying it uncommitted (an exception, an interrupted run) leaves no file at `path`.
class ShardWriter {
 public:
  ShardWriter(const std::string& path, int vocab_size);
  ~ShardWriter();
  // Checks each token against the vocabulary (Error naming the position) and writes it.
  void append(std::span<const int32_t> tokens);
  void commit();
  int64_t size() const { return count_; }

 private:
  std::unique_ptr<io::AtomicFileWriter> out_;
  int vocab_size_;
  int token_bytes_;
  int64_t count_ = 0;
  std::vector<uint8_t> block_;  // tokens converted to their stored width
};

// A read-only, memory-mapped token shard. Opening checks the magic, version, dtype, that the file
// size equals header + count * dtype, and that every token is below the vocabulary size.
class TokenShard {
 public:
  static TokenShard open(const std::string& path);
  // A file of another program, recognised by its first bytes: llm.c's shard (magic 20240520 or
  // 20240801 and its version), else nanoGPT's raw little-endian uint16 tokens (no header; the
  // size must be even). Every token must be below vocab_size (the tokenizer the user names).
  static TokenShard open_foreign(const std::string& path, int vocab_size);
  TokenShard(TokenShard&& other) noexcept;
  TokenShard& operator=(TokenShard&& other) noexcept;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;
  ~TokenShard();

  int64_t size() const { return count_; }  // number of tokens
  int vocab_size() const { return vocab_size_; }
  int token_bytes() const { return token_bytes_; }
  const std::string& path() const { return path_; }

  int32_t operator[](int64_t i) const {
    return token_bytes_ == 2 ? static_cast<const uint16_t*>(tokens_)[i]
                             : static_cast<int32_t>(static_cast<const uint32_t*>(tokens_)[i]);
  }
  // out (n) = tokens [start, start + n); the range must lie inside the shard.
  void read(int64_t start, int64_t n, int32_t* out) const;

 private:
  TokenShard() = default;
  static TokenShard map(const std::string& path);  // the whole file mapped, nothing checked
  void check_tokens() const;                       // every token below vocab_size_

  std::string path_;
  void* map_ = nullptr;  // the whole file
  size_t map_bytes_ = 0;
  const void* tokens_ = nullptr;
  int64_t count_ = 0;
  int vocab_size_ = 0;
  int token_bytes_ = 0;
};

}  // namespace frugal::data
