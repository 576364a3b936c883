// Token shard writer (atomic) and memory-mapped reader with full validation.
#include "frugal/data/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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

}  // namespace

int shard_token_bytes(int vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

void write_shard(const std::string& path, std::span<const int32_t> tokens, int vocab_size) {
  ShardWriter out(path, vocab_size);
  out.append(tokens);
  out.commit();
}

ShardWriter::ShardWriter(const std::string& path, int vocab_size)
    : vocab_size_(vocab_size), token_bytes_(shard_token_bytes(vocab_size)) {
  FRUGAL_CHECK(vocab_size > 0, "cannot write shard '{}': vocabulary size {} must be positive", path, vocab_size);
  out_ = std::make_unique<io::AtomicFileWriter>(path);
  const Header placeholder{};  // completed by commit(), when the count is known
  out_->write(&placeholder, sizeof(placeholder));
}

ShardWriter::~ShardWriter() = default;

void ShardWriter::append(std::span<const int32_t> tokens) {
  block_.resize(tokens.size() * static_cast<size_t>(token_bytes_));
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t t = tokens[i];
    FRUGAL_CHECK(t >= 0 && t < vocab_size_, "cannot write shard '{}': token {} at position {} is "
                 "outside the vocabulary [0, {}); the tokenizer and vocabulary size disagree",
                 out_->path(), t, count_ + static_cast<int64_t>(i), vocab_size_);
    if (token_bytes_ == 2) {
      const auto v = static_cast<uint16_t>(t);
      std::memcpy(block_.data() + 2 * i, &v, 2);
    } else {
      const auto v = static_cast<uint32_t>(t);
      std::memcpy(block_.data() + 4 * i, &v, 4);
    }
  }
  out_->write(block_.data(), block_.size());
  count_ += static_cast<int64_t>(tokens.size());
}

void ShardWriter::commit() {
  Header h{};
  std::memcpy(h.magic, kShardMagic, sizeof(kShardMagic));
  h.version = kShardVersion;
  h.token_bytes = static_cast<uint32_t>(token_bytes_);
  h.count = static_cast<uint64_t>(count_);
  h.vocab_size = static_cast<uint32_t>(vocab_size_);
  out_->write_at(0, &h, sizeof(h));
  out_->commit();
}

TokenShard TokenShard::map(const std::string& path) {
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
  FRUGAL_CHECK(s.map_ || s.map_bytes_ == 0, "cannot map token shard '{}' into memory: {}", path,
               std::strerror(errno));
  return s;
}

void TokenShard::check_tokens() const {
  for (int64_t i = 0; i < count_; ++i) {
    const int32_t t = (*this)[i];
    FRUGAL_CHECK(t >= 0 && t < vocab_size_, "token shard '{}': token {} at position {} is not "
                 "below the vocabulary size {}; the file is damaged or belongs to another "
                 "tokenizer, {}", path_, t, i, vocab_size_, kRedo);
  }
}

TokenShard TokenShard::open(const std::string& path) {
  TokenShard s = map(path);
  FRUGAL_CHECK(s.map_bytes_ >= kShardHeaderBytes, "token shard '{}' is {} bytes, shorter than its "
               "{}-byte header (truncated or not a shard); {}", path, s.map_bytes_, kShardHeaderBytes, kRedo);
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
  s.check_tokens();
  return s;
}

TokenShard TokenShard::open_foreign(const std::string& path, int vocab_size) {
  FRUGAL_CHECK(vocab_size > 0, "reading '{}' needs the tokenizer's vocabulary size, got {}", path, vocab_size);
  TokenShard s = map(path);
  int32_t head[3] = {0, 0, 0};
  if (s.map_bytes_ >= sizeof(head)) std::memcpy(head, s.map_, sizeof(head));
  size_t header = 0;
  s.token_bytes_ = 2;
  if (head[0] == kLlmcGpt2Magic || head[0] == kLlmcLlama3Magic) {  // llm.c
    const int32_t version = head[0] == kLlmcGpt2Magic ? 1 : 7;
    FRUGAL_CHECK(head[1] == version, "'{}' has llm.c's magic {} but version {} (expected {}); the "
                 "file is damaged or of a newer llm.c", path, head[0], head[1], version);
    header = kLlmcHeaderBytes;
    s.token_bytes_ = head[0] == kLlmcGpt2Magic ? 2 : 4;
    FRUGAL_CHECK(head[2] >= 0 && s.map_bytes_ == header + static_cast<size_t>(head[2]) * s.token_bytes_,
                 "llm.c shard '{}' is {} bytes but its header promises {} tokens ({} bytes); the "
                 "file is truncated or damaged, write it again", path, s.map_bytes_, head[2],
                 header + static_cast<size_t>(std::max(head[2], 0)) * s.token_bytes_);
  } else {  // nanoGPT: np.uint16 tokens, nothing else
    FRUGAL_CHECK(s.map_bytes_ % 2 == 0, "'{}' is {} bytes, an odd size, so it is not raw uint16 "
                 "tokens (nanoGPT's .bin) nor llm.c's shard (no magic 20240520); write it again",
                 path, s.map_bytes_);
  }
  s.tokens_ = static_cast<const char*>(s.map_) + header;
  s.count_ = static_cast<int64_t>((s.map_bytes_ - header) / s.token_bytes_);
  s.vocab_size_ = vocab_size;
  s.check_tokens();
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
