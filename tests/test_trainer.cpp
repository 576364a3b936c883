// The training loop end to end on a small slice of Tiny Shakespeare: bit-exact resume, determinism,
// checkpoints kept/atomic, clear errors for bad configs, data and checkpoints, SIGINT handling.
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "frugal/core/error.h"
#include "frugal/data/prepare.h"
#include "frugal/train/checkpoint.h"
#include "frugal/train/trainer.h"
#include "temp_dir.h"

using namespace frugal;
namespace fs = std::filesystem;
using frugal::testing::TempDir;

namespace {

// 60 kB of Tiny Shakespeare as a prepared character-level data directory.
std::string make_data(const TempDir& dir) {
  std::ifstream in(std::string(FRUGAL_SOURCE_DIR) + "/data/tinyshakespeare/input.txt");
  std::string text(60000, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  std::ofstream(dir.file("text.txt")) << text;
  data::PrepareOptions o;
  o.tokenizer = "char";
  o.inputs = {dir.file("text.txt")};
  o.out_dir = dir.file("data");
  data::prepare(o);
  return o.out_dir;
}

io::Config tiny_config(const std::string& data_dir, const std::string& out_dir,
                       std::vector<std::string> extra = {}) {
  std::vector<std::string> overrides = {
      "data.dir=" + data_dir, "train.out_dir=" + out_dir, "model.n_layer=2", "model.n_head=2",
      "model.n_embd=32", "model.block_size=32", "train.batch_size=4", "train.max_steps=8",
      "train.eval_interval=4", "train.eval_batches=2", "model.dropout=0.1", "optim.warmup_steps=2",
      "sample.count=0"};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return io::Config::load(run_schema(), "", overrides);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Trainer, ResumeIsBitExact) {
  TempDir dir;
  const std::string data = make_data(dir);
  TrainerOptions quiet{.quiet = true};
  Trainer straight(tiny_config(data, dir.file("a")), quiet);
  FitResult all = straight.fit();
  ASSERT_EQ(all.losses.size(), 8u);

  Trainer half(tiny_config(data, dir.file("b"), {"train.checkpoint_interval=3", "train.keep_checkpoints=5"}), quiet);
  FitResult halves = half.fit();
  EXPECT_EQ(halves.losses, all.losses) << "checkpointing must not perturb training";
  fs::remove_all(dir.file("b/checkpoints/step_00000008"));
  fs::remove_all(dir.file("b/checkpoints/step_00000006"));
  std::ofstream(dir.file("b/checkpoints/latest")) << "step_00000003\n";
  TrainerOptions resume{.resume = dir.file("b"), .quiet = true};
  Trainer resumed(tiny_config(data, dir.file("b")), resume);
  FitResult rest = resumed.fit();
  ASSERT_EQ(rest.losses.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(rest.losses[i], all.losses[3 + i]) << "step " << 3 + i;
}

TEST(Trainer, SameSeedSameLossesAndCheckpointsKept) {
  TempDir dir;
  const std::string data = make_data(dir);
  TrainerOptions quiet{.quiet = true};
  Trainer a(tiny_config(data, dir.file("a"), {"train.checkpoint_interval=2", "train.keep_checkpoints=2"}), quiet);
  Trainer b(tiny_config(data, dir.file("b")), quiet);
  EXPECT_EQ(a.fit().losses, b.fit().losses);
  std::vector<std::string> kept;
  for (const auto& e : fs::directory_iterator(dir.file("a/checkpoints"))) kept.push_back(e.path().filename());
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(kept, (std::vector<std::string>{"latest", "step_00000006", "step_00000008"}));
  EXPECT_EQ(resolve_checkpoint(dir.file("a")), dir.file("a/checkpoints/step_00000008"));
  auto model = load_checkpoint_model(resolve_checkpoint(dir.file("a")));
  EXPECT_EQ(model->config().n_embd, 32);
}

TEST(Trainer, BadInputGivesClearErrors) {
  TempDir dir;
  const std::string data = make_data(dir);
  EXPECT_NE(error_of([&] { tiny_config(data, dir.file("x"), {"model.n_layers=3"}); }).find("did you mean 'model.n_layer'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { tiny_config(data, dir.file("x"), {"optim.lr=fast"}); }).find("expects a number"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Trainer t(tiny_config(dir.file("nowhere"), dir.file("x")), {.quiet = true}); }).find("frugal prepare"),
            std::string::npos);
  fs::remove(dir.file("data/val.bin"));
  EXPECT_NE(error_of([&] { Trainer t(tiny_config(data, dir.file("x")), {.quiet = true}); }).find("val.bin not found"),
            std::string::npos);
}

TEST(Trainer, CheckpointFromAnotherShapeIsRefused) {
  TempDir dir;
  const std::string data = make_data(dir);
  Trainer a(tiny_config(data, dir.file("a"), {"train.max_steps=1"}), {.quiet = true});
  a.fit();
  const std::string msg = error_of([&] {
    Trainer b(tiny_config(data, dir.file("b"), {"model.n_embd=64"}), {.resume = dir.file("a"), .quiet = true});
  });
  EXPECT_NE(msg.find("different model shape"), std::string::npos) << msg;
}

TEST(Trainer, FullDiskKeepsThePreviousCheckpoint) {
  TempDir dir;
  const std::string data = make_data(dir);
  const std::string out = dir.file("small");
  fs::create_directories(out);
  if (::mount("tmpfs", out.c_str(), "tmpfs", 0, "size=2000k") != 0) GTEST_SKIP() << "needs root to mount a tmpfs";
  struct Unmount {
    std::string p;
    ~Unmount() { ::umount(p.c_str()); }
  } unmount{out};
  // One checkpoint of this model is ~1.3 MB (weights + AdamW moments): the first fits, the second cannot.
  Trainer t(tiny_config(data, out, {"model.n_embd=64", "train.max_steps=2", "train.checkpoint_interval=1",
                                    "train.keep_checkpoints=5"}), {.quiet = true});
  const std::string msg = error_of([&] { t.fit(); });
  EXPECT_NE(msg.find("disk full"), std::string::npos) << msg;
  EXPECT_EQ(resolve_checkpoint(out), out + "/checkpoints/step_00000001");
  auto model = load_checkpoint_model(resolve_checkpoint(out));
  EXPECT_EQ(model->config().n_embd, 64);
}

TEST(TrainerCli, SigintWritesACheckpointAndExitsZero) {
  TempDir dir;
  const std::string data = make_data(dir);
  const std::string cmd = std::string("timeout --preserve-status -s INT 3 ") + FRUGAL_BINARY + " train /dev/null --set data.dir=" + data +
                          " --set train.out_dir=" + dir.file("run") +
                          " --set model.n_layer=2 --set model.n_embd=32 --set model.n_head=2 --set model.block_size=32"
                          " --set train.max_steps=1000000 --set sample.count=0 > " + dir.file("log") + " 2>&1";
  const int status = std::system(cmd.c_str());
  EXPECT_EQ(WEXITSTATUS(status), 0) << "timeout reports 124 only when the program ignored the signal";
  EXPECT_TRUE(fs::exists(dir.file("run/checkpoints/latest")));
  std::ifstream log(dir.file("log"));
  std::string text((std::istreambuf_iterator<char>(log)), {});
  EXPECT_NE(text.find("stopped by signal"), std::string::npos) << text;
}
