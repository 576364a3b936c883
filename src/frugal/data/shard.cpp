// Token shard writer (atomic) and memory-mapped reader with full validation.
#include "frugal/data/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "frugal/core/error.h"
#include "frugal/io/atomic_file.h"

namespace frugal::data {
namespace {

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t token_bytes;
  uint64_t count;
  uint32_t vocab_size;
  uint8_t zeros[kShardHeaderBytes - 28];
};
static_assert(sizeof(Header) == kShardHeaderBytes);

constexpr const char* kRedo = "re-run `frugal prepare` to write it again";

template <class T>
void write_tokens(io::AtomicFileWriter& out, std::span<const int32_t> tokens) {
  constexpr size_t kBlock = 1 << 16;
  std::vector<T> block;
  for (size_t start = 0; start < tokens.size(); start += kBlock) {
    const size_t n = std::min(kBlock, tokens.size() - start);
    block.assign(tokens.begin() + start, tokens.begin() + start + n);
    out.write(block.data(), n * sizeof(T));
  }
}

}  // namespace

int shard_token_bytes(int vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

void write_shard(const std::string& path, std::span<const int32_t> tokens, int vocab_size) {
  FRUGAL_CHECK(vocab_size > 0, "cannot write shard '{}': vocabulary size {} must be positive", path, vocab_size);
  for (size_t i = 0; i < tokens.size(); ++i)
    FRUGAL_CHECK(tokens[i] >= 0 && tokens[i] < vocab_size, "cannot write shard '{}': token {} at "
                 "position {} is outside the vocabulary [0, {}); the tokenizer and vocabulary "
                 "size disagree", path, tokens[i], i, vocab_size);
  Header h{};
  std::memcpy(h.magic, kShardMagic, sizeof(kShardMagic));
  h.version = kShardVersion;
  h.token_bytes = static_cast<uint32_t>(shard_token_bytes(vocab_size));
  h.count = tokens.size();
  h.vocab_size = static_cast<uint32_t>(vocab_size);

  io::AtomicFileWriter out(path);
  out.write(&h, sizeof(h));
  if (h.token_bytes == 2)
    write_tokens<uint16_t>(out, tokens);
  else
    write_tokens<uint32_t>(out, tokens);
  out.commit();
}

TokenShard TokenShard::open(const std::string& path) {
  TokenShard s;
  s.path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  FRUGAL_CHECK(fd >= 0, "cannot open token shard '{}': {}; check the path or {}", path,
               std::strerror(errno), kRedo);
  struct stat st{};
  ::fstat(fd, &st);
  s.map_bytes_ = static_cast<size_t>(st.st_size);
  if (s.map_bytes_ > 0) {
    s.map_ = ::mmap(nullptr, s.map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (s.map_ == MAP_FAILED) s.map_ = nullptr;
  }
  ::close(fd);
  FRUGAL_CHECK(s.map_bytes_ >= kShardHeaderBytes, "token shard '{}' is {} bytes, shorter than its "
               "{}-byte header (truncated or not a shard); {}", path, s.map_bytes_, kShardHeaderBytes, kRedo);
  FRUGAL_CHECK(s.map_, "cannot map token shard '{}' into memory: {}", path, std::strerror(errno));
  Header h;
  std::memcpy(&h, s.map_, sizeof(h));
  FRUGAL_CHECK(std::memcmp(h.magic, kShardMagic, sizeof(kShardMagic)) == 0, "'{}' is not a frugal "
               "token shard (bad magic bytes); pass a .bin written by `frugal prepare` or {}", path, kRedo);
  FRUGAL_CHECK(h.version == kShardVersion, "token shard '{}' has format version {}, this frugal "
               "reads version {}; {}", path, h.version, kShardVersion, kRedo);
  FRUGAL_CHECK(h.token_bytes == 2 || h.token_bytes == 4, "token shard '{}' has {} bytes per "
               "token (must be 2 or 4); the file is damaged, {}", path, h.token_bytes, kRedo);
  FRUGAL_CHECK(h.vocab_size > 0 && h.vocab_size <= (h.token_bytes == 2 ? 65536u : 0x7FFFFFFFu),
               "token shard '{}' has vocabulary size {}, impossible for {}-byte tokens; the file "
               "is damaged, {}", path, h.vocab_size, h.token_bytes, kRedo);
  const uint64_t expected = kShardHeaderBytes + h.count * h.token_bytes;
  FRUGAL_CHECK(h.count <= (s.map_bytes_ / h.token_bytes) && expected == s.map_bytes_,
               "token shard '{}' is {} bytes but its header promises {} tokens ({} bytes); the "
               "file is truncated or damaged, {}", path, s.map_bytes_, h.count, expected, kRedo);
  s.tokens_ = static_cast<const char*>(s.map_) + kShardHeaderBytes;
  s.count_ = static_cast<int64_t>(h.count);
  s.vocab_size_ = static_cast<int>(h.vocab_size);
  s.token_bytes_ = static_cast<int>(h.token_bytes);
  for (int64_t i = 0; i < s.count_; ++i) {
    const int32_t t = s[i];
    FRUGAL_CHECK(t >= 0 && t < s.vocab_size_, "token shard '{}': token {} at position {} is not "
                 "below the vocabulary size {}; the file is damaged, {}", path, t, i, s.vocab_size_, kRedo);
  }
  return s;
}

TokenShard::TokenShard(TokenShard&& other) noexcept { *this = std::move(other); }

TokenShard& TokenShard::operator=(TokenShard&& other) noexcept {
  if (this != &other) {
    if (map_) ::munmap(map_, map_bytes_);
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
    count_ = std::exchange(other.count_, 0);
    vocab_size_ = std::exchange(other.vocab_size_, 0);
    token_bytes_ = std::exchange(other.token_bytes_, 0);
  }
  return *this;
}

TokenShard::~TokenShard() {
  if (map_) ::munmap(map_, map_bytes_);
}

void TokenShard::read(int64_t start, int64_t n, int32_t* out) const {
  FRUGAL_CHECK(start >= 0 && n >= 0 && start + n <= count_, "reading tokens [{}, {}) of shard "
               "'{}', which has {}; this is a bug in the caller", start, start + n, path_, count_);
  if (token_bytes_ == 2) {
    const auto* p = static_cast<const uint16_t*>(tokens_) + start;
    for (int64_t i = 0; i < n; ++i) out[i] = p[i];
  } else {
    const auto* p = static_cast<const uint32_t*>(tokens_) + start;
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(p[i]);
  }
}

}  // namespace frugal::data
