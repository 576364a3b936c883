// Token shards: a 64-byte header then the tokens as little-endian uint16 (vocab <= 65536) or
// uint32. Written atomically (temp file, fsync, rename); read through mmap with every header
// field, the file size and every token checked.
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
#include <span>
#include <string>

namespace frugal::data {

inline constexpr char kShardMagic[8] = {'F', 'R', 'U', 'G', 'T', 'O', 'K', '\0'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderBytes = 64;

// Bytes per token for a vocabulary: 2 when every id fits in uint16, else 4.
int shard_token_bytes(int vocab_size);

// Writes tokens (each in [0, vocab_size)) to path atomically: path.tmp, fsync, rename.
void write_shard(const std::string& path, std::span<const int32_t> tokens, int vocab_size);

// A read-only, memory-mapped token shard. Opening checks the magic, version, dtype, that the file
// size equals header + count * dtype, and that every token is below the vocabulary size.
class TokenShard {
 public:
  static TokenShard open(const std::string& path);
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

  std::string path_;
  void* map_ = nullptr;  // the whole file
  size_t map_bytes_ = 0;
  const void* tokens_ = nullptr;
  int64_t count_ = 0;
  int vocab_size_ = 0;
  int token_bytes_ = 0;
};

}  // namespace frugal::data
