// Run directories are used by one writing process at a time (io/dir_lock.h): a second DirLock,
// Trainer or `frugal train` on a directory in use is refused at once, naming the holder's pid, and
// touches nothing in it; a lock is free again when its holder exits, also after kill -9. Readers
// pin checkpoints: pruning skips a checkpoint being read instead of deleting it underneath.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "error_of.h"
#include "frugal/core/error.h"
#include "frugal/data/tokenizer.h"
#include "frugal/io/dir_lock.h"
#include "frugal/train/checkpoint.h"
#include "frugal/train/run_config.h"
#include "frugal/train/trainer.h"
#include "paths.h"
#include "run_cli.h"
#include "temp_dir.h"
#include "train_data.h"

using namespace frugal;
namespace fs = std::filesystem;
using frugal::testing::contains;
using frugal::testing::TempDir;

namespace {

using frugal::testing::error_of;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  return names;
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

io::Config tiny_config(const std::string& data_dir, const std::string& out_dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> overrides = {
      "data.dir=" + data_dir, "train.out_dir=" + out_dir, "model.n_layer=2", "model.n_head=2",
      "model.n_embd=32", "model.block_size=32", "train.batch_size=4", "train.max_steps=3",
      "train.eval_interval=4", "train.eval_batches=2", "sample.count=0"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return io::Config::load(run_schema(), "", overrides);
}

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
  std::atomic<bool> asking{false}, answered{false};
  std::thread reader([&] {
    asking = true;
    reader_got_it = io::DirLock::shared(dir).has_value();
    answered = true;
  });
  while (!asking) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(answered) << "the reader did not wait for the deleter";
  fs::remove_all(dir);
  deleter.reset();
  reader.join();
  EXPECT_FALSE(reader_got_it);
}

TEST(CheckpointPin, PruningSkipsACheckpointBeingReadAndDeletesItLater) {
  TempDir tmp;
  const std::string run = tmp.file("run");
  io::Config config = io::Config::load(run_schema(), "", {"model.vocab_size=8", "model.block_size=8",
                                                          "model.n_layer=1", "model.n_head=1", "model.n_embd=8"});
  GPT model(run_settings(config).model);
  model.init_weights(1);
  const std::string tokenizer = data::CharTokenizer::from_text("abcdefg").to_json();
  auto save = [&](int64_t step) { return save_checkpoint(run, config, model, nullptr, {.step = step}, tokenizer, 1); };
  const std::string first = save(1);
  {
    const PinnedCheckpoint pinned = pin_checkpoint(run);  // what eval, sample and export do
    ASSERT_EQ(pinned.dir, first);
    ASSERT_TRUE(pinned.lock.has_value());
    save(2);  // keep_checkpoints = 1 would delete step 1
    EXPECT_TRUE(fs::exists(first + "/model.safetensors")) << "pruned while being read";
    EXPECT_EQ(load_checkpoint_model(pinned.dir)->config().n_embd, 8);
  }
  save(3);
  EXPECT_EQ(listing(run + "/checkpoints"), (std::vector<std::string>{"latest", "step_00000003"}));
}

TEST(TrainerLock, ASecondTrainerIsRefusedAndTouchesNothing) {
  TempDir tmp;
  const std::string data = frugal::testing::make_shakespeare_data(tmp, 20000);
  const std::string out = tmp.file("run");
  Trainer first(tiny_config(data, out, {"train.checkpoint_interval=1", "train.keep_checkpoints=5"}), {.quiet = true});
  first.fit();
  const std::vector<std::string> checkpoints = listing(out + "/checkpoints");
  const std::string metrics = read_file(out + "/metrics.jsonl"), config = read_file(out + "/config.toml");
  const std::string holder = "run directory " + out + " is in use by frugal pid " + std::to_string(::getpid());
  for (const TrainerOptions& options : {TrainerOptions{.quiet = true, .overwrite = true},
                                        TrainerOptions{.resume = out, .quiet = true}}) {
    const std::string msg = error_of([&] {
      Trainer second(tiny_config(data, out, {"train.max_steps=5", "train.seed=9"}), options);
    });
    EXPECT_TRUE(contains(msg, holder)) << msg;
    EXPECT_TRUE(contains(msg, "set another train.out_dir")) << msg;
  }
  EXPECT_EQ(listing(out + "/checkpoints"), checkpoints);
  EXPECT_EQ(read_file(out + "/metrics.jsonl"), metrics);
  EXPECT_EQ(read_file(out + "/config.toml"), config);
}

// Two `frugal train` processes on one directory: the second refuses at once, naming the first,
// and --overwrite deletes nothing; once the first is killed (-9), the directory is free.
TEST(TrainerLock, TwoTrainProcessesOnOneDirectory) {
  TempDir tmp;
  const std::string data = frugal::testing::make_shakespeare_data(tmp, 20000);
  const std::string out = tmp.file("run"), log = tmp.file("first.log");
  const std::string settings = " --set data.dir=" + data + " --set train.out_dir=" + out +
                               " --set model.n_layer=2 --set model.n_embd=32 --set model.n_head=2"
                               " --set model.block_size=32 --set sample.count=0 --set train.log_interval=1";
  ChildProcess first;
  first.pid = ::fork();
  ASSERT_GE(first.pid, 0);
  if (first.pid == 0) {
    const std::string cmd = std::string("exec ") + test_paths::binary() + " train /dev/null" + settings +
                            " --set train.max_steps=1000000 --set train.checkpoint_interval=1 > " + log + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  bool checkpointed = false;
  for (int i = 0; i < 900 && !checkpointed; ++i) {
    checkpointed = fs::exists(out + "/checkpoints/latest");
    if (!checkpointed) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(checkpointed) << "no checkpoint within 90 s:\n" << read_file(log);

  const auto second = frugal::testing::run_frugal("train /dev/null" + settings + " --set train.max_steps=2 --overwrite");
  EXPECT_EQ(second.rc, 1) << second.output;
  EXPECT_EQ(std::count(second.output.begin(), second.output.end(), '\n'), 1) << second.output;
  EXPECT_TRUE(contains(second.output, "error: run directory " + out + " is in use by frugal pid " +
                                          std::to_string(first.pid) + " on ")) << second.output;
  EXPECT_TRUE(contains(second.output, "(frugal train /dev/null --set")) << second.output;
  EXPECT_TRUE(fs::exists(out + "/checkpoints/latest")) << "--overwrite deleted the first run's checkpoints";
  EXPECT_NE(read_file(out + "/metrics.jsonl"), "") << "--overwrite emptied the first run's log";

  first.kill_now();
  const auto third = frugal::testing::run_frugal("train /dev/null" + settings + " --set train.max_steps=2 --overwrite");
  EXPECT_EQ(third.rc, 0) << third.output;
}
