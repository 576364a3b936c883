// Directory locks (io/dir_lock.h): a second exclusive holder is refused at once, naming the
// holder's pid; a lock is free again when its holder exits, also after kill -9; shared holders
// keep a deleter that never waits out.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "frugal/core/error.h"
#include "frugal/io/dir_lock.h"
#include "run_cli.h"
#include "temp_dir.h"

using namespace frugal;
namespace fs = std::filesystem;
using frugal::testing::contains;
using frugal::testing::TempDir;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

io::DirLock lock_run(const std::string& dir) { return io::DirLock::exclusive(dir, "run directory", "wait"); }

// A child process that holds dir's exclusive lock until it is killed; returns its pid (-1 when it
// could not take the lock).
pid_t spawn_lock_holder(const std::string& dir) {
  int ready[2];
  if (::pipe(ready) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ready[0]);
    try {
      const io::DirLock lock = lock_run(dir);
      if (::write(ready[1], "1", 1) == 1)
        for (;;) ::pause();
    } catch (...) {
    }
    ::_exit(1);
  }
  ::close(ready[1]);
  char byte = 0;
  const bool locked = pid > 0 && ::read(ready[0], &byte, 1) == 1;
  ::close(ready[0]);
  return locked ? pid : -1;
}

// A process started by a test, killed (SIGKILL) and reaped when the test ends however it ends.
struct ChildProcess {
  pid_t pid = -1;
  void kill_now() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    pid = -1;
  }
  ~ChildProcess() { kill_now(); }
};

}  // namespace

TEST(DirLock, ASecondHolderIsRefusedNamingTheFirstUntilItIsKilled) {
  TempDir tmp;
  const std::string dir = tmp.file("run");
  ChildProcess holder{spawn_lock_holder(dir)};
  ASSERT_GT(holder.pid, 0);
  const std::string msg = error_of([&] { io::DirLock::exclusive(dir, "run directory", "wait for it"); });
  EXPECT_TRUE(contains(msg, "run directory " + dir + " is in use by frugal pid " + std::to_string(holder.pid) + " on "))
      << msg;
  EXPECT_TRUE(contains(msg, "(test_run_lock")) << "the holder's command: " << msg;
  EXPECT_TRUE(contains(msg, ") since ")) << msg;
  EXPECT_TRUE(msg.ends_with("; wait for it")) << msg;

  holder.kill_now();  // SIGKILL: no clean-up ran, the kernel released the lock
  const io::DirLock mine = lock_run(dir);
  EXPECT_TRUE(contains(read_file(dir + "/.lock"), "pid " + std::to_string(::getpid()) + " on ")) << "our record replaced the dead one's";
}

TEST(DirLock, TwoLocksInOneProcessExcludeEachOtherAndReleaseOnDestruction) {
  TempDir tmp;
  const std::string dir = tmp.file("a/b");  // created with its parents
  {
    const io::DirLock first = lock_run(dir);
    EXPECT_TRUE(contains(error_of([&] { lock_run(dir); }), "pid " + std::to_string(::getpid())));
    EXPECT_FALSE(io::DirLock::try_exclusive(dir).has_value());
  }
  EXPECT_EQ(read_file(dir + "/.lock"), "") << "a released lock keeps no holder's name";
  EXPECT_NO_THROW(lock_run(dir));
}

TEST(DirLock, SharedLocksBlockDeletersWhoNeverWait) {
  TempDir tmp;
  const std::string dir = tmp.file("checkpoint");
  fs::create_directories(dir);
  EXPECT_FALSE(io::DirLock::shared(dir).has_value()) << "readers never create the lock file";
  ASSERT_TRUE(io::DirLock::try_exclusive(dir).has_value());  // creates it
  {
    const std::optional<io::DirLock> reader = io::DirLock::shared(dir);
    ASSERT_TRUE(reader.has_value());
    const std::optional<io::DirLock> other_reader = io::DirLock::shared(dir);
    EXPECT_TRUE(other_reader.has_value());
    EXPECT_FALSE(io::DirLock::try_exclusive(dir).has_value());
  }
  // A reader arriving while the directory is being deleted waits, then finds it gone.
  std::optional<io::DirLock> deleter = io::DirLock::try_exclusive(dir);
  ASSERT_TRUE(deleter.has_value());
  bool reader_got_it = true;
  std::thread reader([&] { reader_got_it = io::DirLock::shared(dir).has_value(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  fs::remove_all(dir);
  deleter.reset();
  reader.join();
  EXPECT_FALSE(reader_got_it);
}
