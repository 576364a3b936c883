// Atomic file replacement: bytes go to `<path>.tmp.<pid>` in the same directory, every write is
// checked, the file is fsync'ed and renamed over `path`, then the directory is fsync'ed. On any
// failure the temporary file is removed and the previous `path` (if any) is left untouched.
// Also the other checked writes to files: appending a record (a metrics line) whole or not at all;
// and creating the directories files are written into, with errors that say what to do.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace frugal::io {

// Streaming writer for big files (checkpoints): write() any number of times, then commit().
// Destroying it without commit() (e.g. while an exception unwinds) removes the temporary file.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);  // creates the temporary file; throws Error
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(std::span<const uint8_t> bytes);  // buffered; throws Error (e.g. disk full)
  void write(const void* data, size_t size);
  // Overwrites bytes already written at `offset` (e.g. a header whose counts are known only at
  // the end); offset + size must not pass bytes_written(). Throws Error like write().
  void write_at(uint64_t offset, const void* data, size_t size);
  // Flushes, fsyncs, renames over the target and fsyncs the directory. Throws Error on failure
  // (the temporary file is removed, the target untouched).
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }
  uint64_t bytes_written() const { return bytes_written_; }

 private:
  void flush_buffer();
  [[noreturn]] void abandon(int err, const char* during);  // cleans up, throws Error

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  bool committed_ = false;
  std::vector<uint8_t> buffer_;
  uint64_t bytes_written_ = 0;
};

// Replaces `path` with `bytes` atomically (see AtomicFileWriter).
void write_file_atomic(const std::string& path, std::span<const uint8_t> bytes);
void write_file_atomic(const std::string& path, std::string_view text);

// Appends `text` to `path` (created when missing) with every step checked. On failure the file is
// cut back to its previous length, so that it never ends in part of a record, and Error says why
// ("could not write PATH: No space left on device").
void append_to_file(const std::string& path, std::string_view text);

// Writes all of [data, data + size) to fd, retrying short writes and EINTR; returns 0 or the errno.
int write_all(int fd, const void* data, size_t size);

// Creates directory `path` and its parents unless it exists. Throws Error naming `what` (the
// setting it came from, e.g. "train.out_dir") when it cannot: it or a parent is a file, or no
// permission.
void create_directories(const std::string& path, std::string_view what);

// fsync of a directory, making renames into it durable. Returns 0 or the errno; filesystems that
// refuse to sync directories count as success.
int fsync_directory(const std::string& dir);

}  // namespace frugal::io
