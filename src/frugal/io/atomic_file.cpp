// AtomicFileWriter: temp file in the target's directory, checked writes, fsync, rename, dir fsync;
// append_to_file: one checked append, cut back on failure.
#include "frugal/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "frugal/core/error.h"

namespace frugal::io {
namespace {

constexpr size_t kBufferBytes = size_t{1} << 20;  // small writes are coalesced into 1 MiB chunks

bool is_out_of_space(int err) { return err == ENOSPC || err == EDQUOT; }

std::string parent_directory(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? std::string(".") : dir;
}

}  // namespace

int write_all(int fd, const void* data, size_t size) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, bytes, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;
    bytes += n;
    size -= static_cast<size_t>(n);
  }
  return 0;
}

int fsync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  int err = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  // Some filesystems refuse fsync on directories; that is not a failure of this write.
  return (err == EINVAL || err == EROFS) ? 0 : err;
}

AtomicFileWriter::AtomicFileWriter(std::string path)
    : path_(std::move(path)), temp_path_(path_ + ".tmp." + std::to_string(::getpid())) {
  FRUGAL_CHECK(!path_.empty(), "cannot write a file with an empty path; pass a file name");
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    int err = errno;
    fail("cannot create '{}' to write '{}': {}; check that the directory exists and is writable",
         temp_path_, path_, std::strerror(err));
  }
  buffer_.reserve(kBufferBytes);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (committed_) return;
  if (fd_ >= 0) ::close(fd_);
  ::unlink(temp_path_.c_str());
}

void AtomicFileWriter::abandon(int err, const char* during) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(temp_path_.c_str());
  committed_ = true;  // nothing left for the destructor to clean up
  if (is_out_of_space(err))
    fail("disk full while writing {}: the previous file is intact; free space and retry", path_);
  fail("{} failed while writing {}: {}; the previous file is intact; check the disk and retry",
       during, path_, std::strerror(err));
}

void AtomicFileWriter::flush_buffer() {
  if (buffer_.empty()) return;
  int err = write_all(fd_, buffer_.data(), buffer_.size());
  buffer_.clear();
  if (err) abandon(err, "write");
}

void AtomicFileWriter::write(std::span<const uint8_t> bytes) {
  FRUGAL_CHECK(fd_ >= 0 && !committed_, "write to '{}' after it was committed or abandoned; "
               "create a new AtomicFileWriter", path_);
  bytes_written_ += bytes.size();
  if (buffer_.size() + bytes.size() <= kBufferBytes) {
    buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
    return;
  }
  flush_buffer();
  if (bytes.size() < kBufferBytes) {
    buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
    return;
  }
  int err = write_all(fd_, bytes.data(), bytes.size());
  if (err) abandon(err, "write");
}

void AtomicFileWriter::write(const void* data, size_t size) {
  write(std::span<const uint8_t>(static_cast<const uint8_t*>(data), size));
}

void AtomicFileWriter::write_at(uint64_t offset, const void* data, size_t size) {
  FRUGAL_CHECK(fd_ >= 0 && !committed_ && offset + size <= bytes_written_, "write_at [{}, {}) of "
               "'{}', which holds {} bytes or was committed; this is a bug in the caller", offset,
               offset + size, path_, bytes_written_);
  flush_buffer();
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::pwrite(fd_, p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) abandon(n < 0 ? errno : EIO, "write");
    p += n, offset += static_cast<uint64_t>(n), size -= static_cast<size_t>(n);
  }
}

void AtomicFileWriter::commit() {
  FRUGAL_CHECK(fd_ >= 0 && !committed_, "commit of '{}' twice or after a failure; "
               "create a new AtomicFileWriter", path_);
  flush_buffer();
  if (::fsync(fd_) != 0) abandon(errno, "fsync");
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) abandon(errno, "close");
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) abandon(errno, "rename");
  committed_ = true;
  int err = fsync_directory(parent_directory(path_));
  // The new file is in place; a failed directory sync only weakens durability after a crash.
  FRUGAL_CHECK(err == 0, "wrote {} but could not fsync its directory: {}; the file may not "
               "survive a power loss, check the disk", path_, std::strerror(err));
}

void create_directories(const std::string& path, std::string_view what) {
  std::error_code ec;
  FRUGAL_CHECK(!std::filesystem::exists(path, ec) || std::filesystem::is_directory(path, ec),
               "cannot use {} as {}: it is a file, not a directory; choose another path", path, what);
  std::filesystem::create_directories(path, ec);
  FRUGAL_CHECK(!ec, "cannot create {} ({}): {}; choose another path or check its permissions",
               path, what, ec.message());
}

void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes) {
  AtomicFileWriter writer(path);
  writer.write(bytes);
  writer.commit();
}

void write_file_atomic(const std::string& path, std::string_view text) {
  write_file_atomic(path, std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

void append_to_file(const std::string& path, std::string_view text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) fail("could not write {}: {}", path, std::strerror(errno));
  struct stat before {};
  const bool regular = ::fstat(fd, &before) == 0 && S_ISREG(before.st_mode);
  int err = write_all(fd, text.data(), text.size());
  if (err != 0 && regular && ::ftruncate(fd, before.st_size) != 0) {
    // the part written stays; readers of such logs skip a line cut off (as after a crash)
  }
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) fail("could not write {}: {}", path, std::strerror(err));
}

}  // namespace frugal::io
