// Atomic file writes: content, replacement, temp-file cleanup, and failures that keep the old file.
#include "frugal/io/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/resource.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iterator>

#include "frugal/core/error.h"
#include "temp_dir.h"

using frugal::Error;
using frugal::io::AtomicFileWriter;
using frugal::io::write_file_atomic;
using frugal::testing::TempDir;

namespace {

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

size_t files_in(const std::filesystem::path& dir) {
  return static_cast<size_t>(std::distance(std::filesystem::directory_iterator(dir),
                                           std::filesystem::directory_iterator()));
}

// Writes `size` bytes of 'x' through a streaming writer in 1000-byte pieces.
void write_stream(const std::string& path, size_t size) {
  AtomicFileWriter w(path);
  std::vector<uint8_t> piece(1000, 'x');
  for (size_t done = 0; done < size; done += piece.size())
    w.write(piece.data(), std::min(piece.size(), size - done));
  w.commit();
}

}  // namespace

TEST(AtomicFile, WritesAndReplacesWithoutLeavingTempFiles) {
  TempDir dir;
  std::string path = dir.file("a.bin");
  write_file_atomic(path, bytes_of("first"));
  EXPECT_EQ(read_all(path), "first");
  write_file_atomic(path, bytes_of("second, longer"));
  EXPECT_EQ(read_all(path), "second, longer");
  write_file_atomic(path, std::span<const uint8_t>{});
  EXPECT_EQ(read_all(path), "");
  EXPECT_EQ(files_in(dir.path()), 1u);
}

TEST(AtomicFile, StreamingWriterHandlesSmallAndLargePieces) {
  TempDir dir;
  std::string path = dir.file("big.bin");
  AtomicFileWriter w(path);
  std::vector<uint8_t> expected;
  for (size_t size : {size_t{3}, size_t{5} << 20, size_t{1000}, size_t{(1 << 20) - 7}}) {
    std::vector<uint8_t> piece(size);
    for (size_t i = 0; i < size; ++i) piece[i] = static_cast<uint8_t>((i * 31 + size) & 0xff);
    w.write(piece);
    expected.insert(expected.end(), piece.begin(), piece.end());
  }
  EXPECT_EQ(w.bytes_written(), expected.size());
  EXPECT_FALSE(std::filesystem::exists(path));  // nothing visible before commit
  w.commit();
  std::string got = read_all(path);
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_TRUE(std::equal(got.begin(), got.end(), expected.begin(),
                         [](char a, uint8_t b) { return static_cast<uint8_t>(a) == b; }));
  EXPECT_THROW(w.write(bytes_of("late")), Error);
}

TEST(AtomicFile, AbandonedWriterRemovesTempFileAndKeepsOldFile) {
  TempDir dir;
  std::string path = dir.file("a.bin");
  write_file_atomic(path, bytes_of("old"));
  {
    AtomicFileWriter w(path);
    w.write(bytes_of("half-written"));
    EXPECT_TRUE(std::filesystem::exists(w.temp_path()));
  }
  EXPECT_EQ(read_all(path), "old");
  EXPECT_EQ(files_in(dir.path()), 1u);
}

TEST(AtomicFile, MissingDirectoryIsAClearError) {
  TempDir dir;
  try {
    write_file_atomic(dir.file("no/such/dir/a.bin"), bytes_of("x"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("check that the directory exists"), std::string::npos)
        << e.what();
  }
}

// A write that fails mid-file (here: RLIMIT_FSIZE, available without root) must leave the
// previous file and no temp file behind.
TEST(AtomicFile, FailedWriteKeepsPreviousFile) {
  TempDir dir;
  std::string path = dir.file("a.bin");
  write_file_atomic(path, bytes_of("previous"));
  rlimit old_limit{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old_limit;
  small.rlim_cur = 64 << 10;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string message;
  try {
    write_stream(path, 4 << 20);
  } catch (const Error& e) {
    message = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_NE(message.find("the previous file is intact"), std::string::npos) << message;
  EXPECT_EQ(read_all(path), "previous");
  EXPECT_EQ(files_in(dir.path()), 1u);
}

// A real full filesystem: a 64 KiB tmpfs (needs permission to mount; skipped otherwise).
TEST(AtomicFile, DiskFullKeepsPreviousFile) {
  TempDir dir;
  std::string mnt = dir.file("tmpfs");
  std::filesystem::create_directories(mnt);
  if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64k") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (needs root): " << std::strerror(errno);
  std::string path = mnt + "/ckpt.bin";
  write_stream(path, 20 << 10);  // fits
  std::string message;
  try {
    write_stream(path, 4 << 20);  // cannot fit
  } catch (const Error& e) {
    message = e.what();
  }
  std::string previous = read_all(path);
  size_t files = files_in(mnt);
  umount(mnt.c_str());
  EXPECT_EQ(message, "disk full while writing " + path +
                         ": the previous file is intact; free space and retry");
  EXPECT_EQ(previous, std::string(20 << 10, 'x'));
  EXPECT_EQ(files, 1u);
}
