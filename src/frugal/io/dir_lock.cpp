// DirLock: flock(2) on DIR/.lock and the exclusive holder's record; see dir_lock.h.
#include "frugal/io/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>
#include <utility>

#include "frugal/core/error.h"
#include "frugal/io/atomic_file.h"

namespace frugal::io {
namespace {
namespace fs = std::filesystem;

std::string lock_path(const std::string& dir) { return (fs::path(dir) / kLockFileName).string(); }

// flock(2), retried when a signal interrupts it; returns 0 or the errno.
int flock_retrying(int fd, int operation) {
  while (::flock(fd, operation) != 0)
    if (errno != EINTR) return errno;
  return 0;
}

// This process's command line with the program's directory left out, e.g. "frugal train a.toml".
std::string command_line() {
  constexpr size_t kMaxChars = 200;
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string command;
  for (std::string arg; std::getline(in, arg, '\0');)
    command += command.empty() ? fs::path(arg).filename().string() : " " + arg;
  std::replace(command.begin(), command.end(), '\n', ' ');
  if (command.size() > kMaxChars) command = command.substr(0, kMaxChars) + "...";
  return command.empty() ? "command unknown" : command;
}

// What a refused process prints about this one: "pid 1234 on HOST (frugal train a.toml) since
// 2024-05-01 12:00:00 UTC".
std::string holder_record() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "an unknown host");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  ::localtime_r(&now, &local);
  char since[64];
  std::strftime(since, sizeof since, "%Y-%m-%d %H:%M:%S %Z", &local);
  return fmt::format("pid {} on {} ({}) since {}", ::getpid(), host, command_line(), since);
}

// The record in the lock file at `path`. Its holder writes it right after taking the lock, so an
// empty file is read again for a moment before the holder is left unnamed.
std::string read_holder(const std::string& path) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    std::ifstream in(path);
    std::string record;
    std::getline(in, record);
    if (!record.empty()) return "frugal " + record;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return "another frugal process (which has not recorded its pid)";
}

}  // namespace

DirLock DirLock::exclusive(const std::string& dir, std::string_view what, std::string_view advice) {
  create_directories(dir, what);
  const std::string path = lock_path(dir);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  FRUGAL_CHECK(fd >= 0, "cannot open the lock file {}: {}; {} {} must be a writable directory", path,
               std::strerror(errno), what, dir);
  const int err = flock_retrying(fd, LOCK_EX | LOCK_NB);
  if (err != 0) {
    ::close(fd);
    if (err == EWOULDBLOCK) fail("{} {} is in use by {}; {}", what, dir, read_holder(path), advice);
    fail("cannot lock {}: {}", path, std::strerror(err));
  }
  DirLock lock(fd, true);
  const std::string record = holder_record() + "\n";
  const int write_err = ::ftruncate(fd, 0) != 0 ? errno : write_all(fd, record.data(), record.size());
  FRUGAL_CHECK(write_err == 0, "cannot write the lock file {}: {}", path, std::strerror(write_err));
  return lock;
}

std::optional<DirLock> DirLock::try_exclusive(const std::string& dir) {
  const std::string path = lock_path(dir);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  FRUGAL_CHECK(fd >= 0, "cannot open the lock file {}: {}", path, std::strerror(errno));
  const int err = flock_retrying(fd, LOCK_EX | LOCK_NB);
  if (err == 0) return DirLock(fd, false);
  ::close(fd);
  FRUGAL_CHECK(err == EWOULDBLOCK, "cannot lock {}: {}", path, std::strerror(err));
  return std::nullopt;
}

std::optional<DirLock> DirLock::shared(const std::string& dir) {
  const std::string path = lock_path(dir);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    FRUGAL_CHECK(errno == ENOENT, "cannot open the lock file {}: {}", path, std::strerror(errno));
    return std::nullopt;
  }
  DirLock lock(fd, false);
  const int err = flock_retrying(fd, LOCK_SH);
  FRUGAL_CHECK(err == 0, "cannot lock {}: {}", path, std::strerror(err));
  struct stat st {};
  FRUGAL_CHECK(::fstat(fd, &st) == 0, "cannot stat {}: {}", path, std::strerror(errno));
  if (st.st_nlink == 0) return std::nullopt;  // deleted, with its directory, while we waited
  return lock;
}

DirLock::DirLock(DirLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), recorded_(other.recorded_) {}

DirLock::~DirLock() {
  if (fd_ < 0) return;
  // Erase the record so that no dead holder's name lingers. Failing is harmless: only a process
  // that finds the lock held reads the record, and every holder writes its own first.
  if (recorded_ && ::ftruncate(fd_, 0) != 0) {
  }
  ::close(fd_);  // releases the lock
}

}  // namespace frugal::io
