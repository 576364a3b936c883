// Data-parallel training under mpirun (parallel/data_parallel.h), through the `frugal` binary:
// N ranks × A micro-batches give one process's run with N·A micro-batches; ZeRO-1/2 give stage
// 0's run bit for bit; sharded checkpoints resume bit-exactly with the same world size and with
// another one; freeze, sparse24 and mst run under it (mst chooses its masks from the reduced
// gradients, so every rank draws the same ones); a killed or a hung rank stops the job with a
// line naming it and leaves a resumable checkpoint. Every rank runs 1 thread and so does the
// one-process reference (oneDNN's results depend on the thread count). np = 4 oversubscribes the
// machine's 2 cores.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <tuple>

#include "mpi_runs.h"
#include "paths.h"
#include "run_cli.h"
#include "temp_dir.h"
#include "train_data.h"

namespace frugal {
namespace {
namespace fs = std::filesystem;
using testing::budget_records;
using testing::CliResult;
using testing::contains;
using testing::expect_identical;
using testing::logged_records;
using testing::max_relative_difference;
using testing::mpirun;
using testing::run_frugal;
using testing::run_shell;
using testing::TempDir;
using testing::TrainedRun;

// A model large enough that the weight-gradient GEMMs block over their K = B·T dimension.
const std::string kModel =
    "--set model.n_layer=3 --set model.n_embd=128 --set model.n_head=4 --set model.dropout=0.1 "
    "--set train.batch_size=4 --set train.seq_len=128 --set model.block_size=128 "
    "--set train.log_interval=1 --set train.eval_interval=4 --set train.eval_batches=2 "
    "--set sample.count=0 --set optim.warmup_steps=2 --set optim.grad_clip=0.5";

class DataParallel : public testing::MpiRuns {
 protected:
  DataParallel() : MpiRuns(kModel) {}
  // Trains `settings` for `steps` steps on 2 ranks (run `name`) and in one process with twice the
  // accumulation, prints `what`'s largest relative difference and checks it against `tolerance`;
  // returns the 2-rank run.
  TrainedRun expect_two_ranks_equal_one_process(const std::string& name, const std::string& what, int steps,
                                                const std::string& settings, double tolerance) const {
    const TrainedRun parallel = train(name, 2, steps, settings);
    const TrainedRun single = train(name + "-ref", 0, steps, settings + " --set train.grad_accum=2");
    const double diff = max_relative_difference(single.steps, parallel.steps);
    std::printf("%s: np=2 vs 1 process: max relative difference %.3g\n", what.c_str(), diff);
    EXPECT_LE(diff, tolerance) << what;
    return parallel;
  }
};

// "optimizer state X MiB" of the memory plan a run printed.
double optimizer_mib(const std::string& output) {
  const size_t at = output.find("optimizer state ");
  EXPECT_NE(at, std::string::npos) << output;
  return at == std::string::npos ? -1 : std::stod(output.substr(at + 16));
}

// The documented tolerance (docs/parallel.md): N ranks against one process with N× the
// accumulation agree to 1e-6 relative over these 8 steps of dense training (the sum of the ranks'
// gradients rounds differently from one buffer that the GEMMs accumulate into, and training
// amplifies the difference step by step); 2:4 sparsity's mask choice amplifies it more, to 1e-5,
// and bf16's roundings (of activations, gradients and weights) to 1e-4 to a few 1e-3 (measured,
// the weights rounded to nearest / stochastically: AVX-512 2.0e-3 / 1.1e-3, AVX2 2.6e-3 / 7.7e-4,
// reference 2.5e-4 / 1.5e-3).
// The measured difference is printed.
constexpr double kTolerance = 1e-6, kMaskTolerance = 1e-5, kBf16Tolerance = 1e-2;

TEST_F(DataParallel, RanksEqualOneProcessWithTheirAccumulation) {
  for (auto [np, accum] : {std::pair{2, 1}, {2, 2}, {4, 1}}) {
    const std::string name = fmt::format("np{}a{}", np, accum);
    const TrainedRun parallel = train(name, np, 8, fmt::format("--set train.grad_accum={}", accum));
    const TrainedRun single = train(name + "-ref", 0, 8, fmt::format("--set train.grad_accum={}", np * accum));
    const double diff = max_relative_difference(single.steps, parallel.steps);
    std::printf("np=%d grad_accum=%d vs 1 process grad_accum=%d: max relative difference %.3g\n", np,
                accum, np * accum, diff);
    EXPECT_LE(diff, kTolerance) << name;
    EXPECT_TRUE(contains(parallel.output, fmt::format("{} ranks (data-parallel)", np))) << parallel.output;
  }
}

TEST_F(DataParallel, ZeroStagesGiveStageZerosRunBitForBit) {
  const TrainedRun zero0 = train("zero0", 2, 8, "");
  for (int stage : {1, 2}) {
    const TrainedRun zero = train(fmt::format("zero{}", stage), 2, 8, fmt::format("--set parallel.zero={}", stage));
    expect_identical(zero0.steps, zero.steps);
    EXPECT_TRUE(contains(zero.output, fmt::format("ZeRO-{}", stage))) << zero.output;
    // The memory plan (rank 0's) shows half of AdamW's state, and bytes per parameter of
    // 4 + 4 + 8/N (stage 1) and 4 + (4 + 8)/N (stage 2).
    EXPECT_NEAR(optimizer_mib(zero.output), optimizer_mib(zero0.output) / 2, 0.11) << zero.output;
    EXPECT_TRUE(contains(zero.output, stage == 1 ? "state 12.00 bytes per parameter" : "state 10.00 bytes per parameter"))
        << zero.output;
  }
  EXPECT_TRUE(contains(zero0.output, "state 16.00 bytes per parameter")) << zero0.output;
  const TrainedRun four = train("zero2-np4", 4, 4, "--set parallel.zero=2");
  EXPECT_LE(max_relative_difference(train("np4", 4, 4, "").steps, four.steps), 0.0);
}

// parallel.comm_dtype = bf16: every step hands the collectives half the bytes of fp32; with two
// ranks each sum is one exactly commutative bf16 addition, so the ZeRO stages (all-reduce or
// reduce-scatter) still give the same run bit for bit; and it trains close to the fp32 wire
// (within 1e-2 relative over 8 steps; the measured difference is printed).
TEST_F(DataParallel, ABf16WireHalvesTheBytesAndTrainsCloseToFp32) {
  const TrainedRun fp32 = train("fp32", 2, 8, "");
  const TrainedRun bf16 = train("bf16", 2, 8, "--set parallel.comm_dtype=bf16");
  ASSERT_EQ(fp32.steps.size(), bf16.steps.size());
  for (size_t i = 0; i < fp32.steps.size(); ++i)
    EXPECT_EQ(2 * bf16.steps[i]["comm"]["bytes_reduced"].get<double>(), fp32.steps[i]["comm"]["bytes_reduced"].get<double>())
        << "step " << i + 1;
  const double diff = max_relative_difference(fp32.steps, bf16.steps);
  std::printf("np=2, a bf16 wire vs fp32: max relative difference %.3g\n", diff);
  EXPECT_GT(diff, 0.0) << "the gradients were not rounded";
  EXPECT_LE(diff, 1e-2);
  for (int stage : {1, 2})
    expect_identical(bf16.steps, train(fmt::format("bf16-zero{}", stage), 2, 8,
                                       fmt::format("--set parallel.comm_dtype=bf16 --set parallel.zero={}", stage)).steps);
}

TEST_F(DataParallel, ShardedCheckpointResumesBitExactlyAndWithAnotherWorldSize) {
  const std::string zero2 = "--set parallel.zero=2 --set train.checkpoint_interval=4 --set train.keep_checkpoints=5";
  const TrainedRun straight = train("run", 2, 8, zero2);
  const std::string step4 = straight.dir + "/checkpoints/step_00000004";
  ASSERT_TRUE(fs::exists(step4 + "/optimizer.rank00000.safetensors"));
  ASSERT_TRUE(fs::exists(step4 + "/optimizer.rank00001.safetensors"));
  // Same world size: steps 5-8 again, bit for bit.
  fs::copy(straight.dir, tmp_.file("copy"), fs::copy_options::recursive);
  CliResult r = run_shell(mpirun(2) + " " + train_args("copy", 8, zero2) + " --resume " +
                          tmp_.file("copy") + "/checkpoints/step_00000004");
  ASSERT_EQ(r.rc, 0) << r.output;
  expect_identical(straight.steps, logged_records(tmp_.file("copy")));
  // One process with the same global batch (and four ranks with ZeRO-2 sharding differently
  // would need grad_accum 1/2): the moments of both shards are read from their files.
  fs::copy(straight.dir, tmp_.file("single"), fs::copy_options::recursive);
  r = run_frugal(train_args("single", 8, "--set train.grad_accum=2 --set train.threads=1") +
                " --resume " + tmp_.file("single") + "/checkpoints/step_00000004");
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_LE(max_relative_difference(straight.steps, logged_records(tmp_.file("single"))), kTolerance);
  // The other way: a one-process checkpoint (whole moments) resumed by two ZeRO-2 ranks, each
  // taking its shard of them.
  const TrainedRun one = train("one", 0, 8, "--set train.grad_accum=2 --set train.checkpoint_interval=4 --set train.keep_checkpoints=5");
  fs::copy(one.dir, tmp_.file("one-copy"), fs::copy_options::recursive);
  r = run_shell(mpirun(2) + " " + train_args("one-copy", 8, zero2) + " --resume " + tmp_.file("one-copy") +
                "/checkpoints/step_00000004");
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_LE(max_relative_difference(one.steps, logged_records(tmp_.file("one-copy"))), kTolerance);
  // A world size that changes the global batch is refused, naming the keys to change.
  r = run_frugal(train_args("run", 8, "") + " --resume " + step4);
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.output, "micro-batches per step (ranks × train.grad_accum")) << r.output;
  EXPECT_TRUE(contains(r.output, "= 2 × 1 in the checkpoint, 1 × 1 now")) << r.output;
}

TEST_F(DataParallel, MethodsRunAsInOneProcess) {
  for (auto [method, tolerance] : {std::pair<std::string, double>{"--set methods.freeze.alpha=0.5 --set methods.freeze.interval=2", kTolerance},
                                   {"--set methods.sparse24.mask_interval=2", kMaskTolerance},
                                   {"--set methods.mst.update_interval=2 --set methods.mst.sparsity_initial=0.5 "
                                    "--set methods.mst.warmup_fraction=0.25 --set methods.mst.restore_fraction=0.75 "
                                    "--set methods.mst.attention_window=16 --set methods.mst.attention_stride=16",
                                    kMaskTolerance}}) {
    expect_two_ranks_equal_one_process("method", method, 8, method, tolerance);
  }
}

// Every method under ZeRO-1 and ZeRO-2 gives its ZeRO-0 run bit for bit (the sums are the same;
// only who keeps which moments and gradients changes). ZeRO-2 leaves each rank its shard's
// gradients only: at the steps where mst's topology update or adaptive freezing reads every
// block's, the shards are all-gathered first (mst updates at steps 2 and 4; adaptive freezing
// reads every step). One test per stage: each stays well inside the timeout on the ref path.
class DataParallelMethodsUnderZero : public DataParallel, public ::testing::WithParamInterface<int> {};

TEST_P(DataParallelMethodsUnderZero, EveryMethodGivesZeroZerosRun) {
  const int stage = GetParam();
  for (const std::string method : {"--set methods.freeze.alpha=0.5 --set methods.freeze.interval=2",
                                   "--set methods.freeze.alpha=0.5 --set methods.freeze.interval=2 "
                                   "--set methods.freeze.adaptive=true",
                                   "--set methods.sparse24.mask_interval=2",
                                   "--set methods.mst.update_interval=2 --set methods.mst.sparsity_initial=0.5 "
                                   "--set methods.mst.warmup_fraction=0.25 --set methods.mst.restore_fraction=0.75 "
                                   "--set methods.mst.attention_window=16 --set methods.mst.attention_stride=16"}) {
    const TrainedRun zero0 = train("method", 2, 6, method);
    const TrainedRun zero = train("method-zero", 2, 6, method + fmt::format(" --set parallel.zero={}", stage));
    expect_identical(zero0.steps, zero.steps);
    EXPECT_TRUE(contains(zero.output, fmt::format("ZeRO-{}", stage))) << zero.output;
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, DataParallelMethodsUnderZero, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& info) { return fmt::format("Zero{}", info.param); });

// The V-cycle under data parallelism: every rank coalesces and de-coalesces its whole model alike,
// the reduction follows the buffer of the level being trained, and ZeRO gathers the moments for
// the reshape and cuts the new buffer's again; 2 steps on level 1, 4 on level 2, 2 on level 1
// again. With the moments mapped through the level changes, np 2 equals one process with twice the
// accumulation to the dense tolerance. With fresh moments (the default) the first AdamW step of a
// level moves every weight by ±lr whatever its gradient's size (m/√v of one gradient is its sign),
// so weights whose gradient is ~0 take the sign of the 1e-7 differences of the ranks' summation
// order: measured 1.5e-5 at step 8, checked against 1e-4. ZeRO-1/2 give ZeRO-0's run bit for bit,
// and a ZeRO-2 checkpoint taken on level 2 (sharded moments of the small model) resumes to it.
TEST_F(DataParallel, MultilevelVcycleEqualsOneProcessAndZeroStagesAndResumesOnTheSmallLevel) {
  const std::string vcycle = "--set methods.multilevel.shares=0.25,0.5,0.25";
  for (auto [moments, tolerance] : {std::pair{"mapped", kTolerance}, {"fresh", 1e-4}}) {
    const std::string settings = vcycle + " --set methods.multilevel.moments=" + moments;
    const TrainedRun parallel = expect_two_ranks_equal_one_process(
        fmt::format("vcycle-{}", moments), fmt::format("V-cycle, {} moments", moments), 8, settings, tolerance);
    ASSERT_EQ(parallel.steps.size(), 8u);
    EXPECT_EQ(parallel.steps[3].at("level"), 2);  // step 4 trains the coalesced model
    for (int stage : {1, 2})
      expect_identical(parallel.steps, train(fmt::format("vcycle-{}-zero{}", moments, stage), 2, 8,
                                             settings + fmt::format(" --set parallel.zero={}", stage)).steps);
  }
  const std::string zero2 = vcycle + " --set parallel.zero=2 --set train.checkpoint_interval=3 --set train.keep_checkpoints=5";
  const TrainedRun straight = train("vcycle-ckpt", 2, 8, zero2);
  const std::string step3 = straight.dir + "/checkpoints/step_00000003";
  ASSERT_TRUE(fs::exists(step3 + "/optimizer.rank00001.safetensors"));
  fs::copy(straight.dir, tmp_.file("copy"), fs::copy_options::recursive);
  const CliResult r = run_shell(mpirun(2) + " " + train_args("copy", 8, zero2) + " --resume " + tmp_.file("copy") +
                                "/checkpoints/step_00000003");
  ASSERT_EQ(r.rc, 0) << r.output;
  expect_identical(straight.steps, logged_records(tmp_.file("copy")));
}

// A mixture of experts with both balancing mechanisms: the ranks' expert load is summed before
// the bias moves, so np = 2 is one process with twice the accumulation (to the dense tolerance),
// and ZeRO-2 (the bias updated on every rank, the parameters gathered) is ZeRO-0 bit for bit.
TEST_F(DataParallel, MixtureOfExpertsEqualsOneProcessAndZeroStages) {
  const std::string moe = "--set model.moe.experts=4 --set model.moe.every=2 --set model.moe.bias_rate=0.001 "
                          "--set model.moe.shared_expert=true";
  const TrainedRun parallel = expect_two_ranks_equal_one_process("moe", "mixture of experts", 8, moe, kTolerance);
  expect_identical(parallel.steps, train("moe-zero2", 2, 8, moe + " --set parallel.zero=2").steps);
}

// A masked-LM encoder: each rank masks its micro-batches from the step's key and the global sample
// ids, so np = 2 masks what one process with twice the accumulation masks and trains the same run
// (to the dense tolerance; the validation masks are fixed); ZeRO-2 gives ZeRO-0's run bit for bit.
TEST_F(DataParallel, MaskedLmEqualsOneProcessAndZeroStages) {
  const std::string mlm = "--set model.objective=mlm --set model.norm=post";
  const TrainedRun parallel = expect_two_ranks_equal_one_process("mlm", "masked LM", 8, mlm, kTolerance);
  expect_identical(parallel.steps, train("mlm-zero2", 2, 8, mlm + " --set parallel.zero=2").steps);
}

// Muon: every rank orthogonalises the same reduced gradients, so np = 2 is one process with twice
// the accumulation (to the dense tolerance); under ZeRO-1/2 each shard holds whole Muon matrices
// (its bounds move to their starts), so ZeRO-1/2 give ZeRO-0's run bit for bit, with 4 ranks too.
// Width 64 and 6 steps: on the reference path the Newton–Schulz iterations are naive loops.
TEST_F(DataParallel, MuonEqualsOneProcessAndZeroStages) {
  const std::string muon = "--set optim.name=muon --set optim.muon.weight_decay=0.01 --set model.n_embd=64";
  const TrainedRun parallel = expect_two_ranks_equal_one_process("muon", "muon", 6, muon, kTolerance);
  for (int stage : {1, 2})
    expect_identical(parallel.steps, train(fmt::format("muon-zero{}", stage), 2, 6,
                                           muon + fmt::format(" --set parallel.zero={}", stage)).steps);
  expect_identical(train("muon-np4", 4, 2, muon).steps, train("muon-np4-zero2", 4, 2, muon + " --set parallel.zero=2").steps);
}

// Muon under the methods it runs with: mst (each rank zeroes the weights outside the shared masks
// after every step) and the V-cycle (the momentum mapped through the level changes with m): np 2
// equals one process with twice the accumulation, and ZeRO-2 gives ZeRO-0's run bit for bit.
TEST_F(DataParallel, MuonUnderMstAndTheVcycleEqualsOneProcessAndZero2) {
  const std::string muon = "--set optim.name=muon --set model.n_embd=64 ";
  for (auto [name, method, tolerance] :
       {std::tuple<std::string, std::string, double>{
            "muon-mst", "--set methods.mst.update_interval=2 --set methods.mst.sparsity_initial=0.5 "
                        "--set methods.mst.attention_window=16 --set methods.mst.attention_stride=16", kMaskTolerance},
        {"muon-vcycle", "--set methods.multilevel.shares=0.25,0.5,0.25 --set methods.multilevel.moments=mapped", kTolerance}}) {
    const TrainedRun parallel = expect_two_ranks_equal_one_process(name, name, 6, muon + method, tolerance);
    expect_identical(parallel.steps, train(name + "-zero2", 2, 6, muon + method + " --set parallel.zero=2").steps);
  }
}

// bf16 with stochastically rounded working copies (train.bf16_rounding): the random bits are a
// hash of each weight's index in the whole model and its value's bf16 interval, so np = 2 is one
// process with twice the accumulation as closely as with the nearest rounding (within the same
// bf16 tolerance; both printed), and
// ZeRO-1/2 — each rank rounding its shard's copies in the update, the others' re-rounded from the
// gathered masters — give ZeRO-0's run bit for bit.
TEST_F(DataParallel, Bf16StochasticRoundingEqualsOneProcessAndZeroStages) {
  const std::string bf16 = "--set train.precision=bf16", sr = bf16 + " --set train.bf16_rounding=stochastic";
  expect_two_ranks_equal_one_process("bf16", "bf16, nearest", 8, bf16, kBf16Tolerance);
  const TrainedRun parallel =
      expect_two_ranks_equal_one_process("bf16-sr", "bf16, stochastic rounding", 8, sr, kBf16Tolerance);
  for (int stage : {1, 2})
    expect_identical(parallel.steps,
                     train(fmt::format("bf16-sr-zero{}", stage), 2, 8, sr + fmt::format(" --set parallel.zero={}", stage))
                         .steps);
}

// Batch-size warm-up: each rank ramps its micro-batches, 1, 2, then 3; one process ramping 2, 4,
// then 6 computes the same steps (to the dense tolerance, over 4 steps: at step 5 of this run a
// gradient-norm spike amplifies the 1e-7 differences to 4e-6).
TEST_F(DataParallel, BatchWarmupEqualsOneProcessWithTwiceTheRamp) {
  const TrainedRun parallel = train("ramp", 2, 4, "--set train.grad_accum=3 --set train.batch_warmup_steps=2");
  const TrainedRun single = train("ramp-ref", 0, 4, "--set train.grad_accum=6 --set train.batch_warmup_steps=2 "
                                  "--set train.batch_warmup_start=2");
  const double diff = max_relative_difference(single.steps, parallel.steps);
  std::printf("batch warm-up: np=2 vs 1 process: max relative difference %.3g\n", diff);
  EXPECT_LE(diff, kTolerance);
}

// A seconds budget re-timed on 2 ranks: the ranks agree on the step of each re-timing (in the
// per-step agreement) and fix the same horizon from their mean times, so they end together (a rank
// that went on alone would hang the job) at the horizon of the last fix, within the budget's
// bounds, and every fix after the probe is a re-timing. A small model, so that the reference path
// too takes enough steps in 3 s for several re-timings.
TEST_F(DataParallel, ATimeBudgetReTimedOnTwoRanksEndsTogetherAtTheLastFix) {
  const TrainedRun run = train("budget", 2, 1000000,
                               "--set train.budget=seconds --set train.max_seconds=3 --set train.budget_retime=0.1 "
                               "--set train.budget_probe_steps=3 --set train.eval_interval=1000000 "
                               "--set model.n_layer=1 --set model.n_embd=32 --set train.seq_len=32 --set model.block_size=32");
  const std::vector<nlohmann::json> fixes = budget_records(run.dir);
  ASSERT_GE(fixes.size(), 3u) << run.output;
  EXPECT_FALSE(fixes.front().at("budget").contains("retimed"));
  for (size_t i = 1; i < fixes.size(); ++i) EXPECT_TRUE(fixes[i].at("budget").contains("retimed")) << fixes[i];
  EXPECT_EQ(run.steps.back().at("step"), fixes.back().at("budget").at("steps"));
  EXPECT_LT(run.steps.back().at("wall_s").get<double>(), 1.5 * 3);
}

TEST_F(DataParallel, OtherCommandsRefuseToRunOnSeveralRanks) {
  const CliResult r = run_shell(mpirun(2) + " prepare --tokenizer char --input " + tmp_.file("text.txt") +
                                " --out " + tmp_.file("prepared"));
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(contains(r.output, "frugal prepare runs in one process: start it without mpirun")) << r.output;
  EXPECT_FALSE(fs::exists(tmp_.file("prepared")));
}

// Only the writer rank looks at the run directory at start-up; the others learn from it whether it
// holds a run. (Under --overwrite another rank that looked could find the writer's deleting half
// done and fail on a directory that vanished: seen under load.) Rank 1 is started with a run
// directory of its own whose checkpoints/ is a file, which fails any look into it; the run must
// not notice.
TEST_F(DataParallel, OnlyTheWriterLooksAtTheRunDirectoryAtStartUp) {
  const std::string trap = tmp_.file("trap");
  fs::create_directories(trap);
  std::ofstream(trap + "/checkpoints") << "not a directory";
  const std::string rank0 = train_args("writer", 2, "");
  const std::string rank1 = train_args("writer", 2, "--set train.out_dir=" + trap);
  const std::string mpmd = mpirun(1) + " " + rank0 + " : -np 1 " + test_paths::binary() + " " + rank1;
  const CliResult r = run_shell(mpmd);
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(logged_records(tmp_.file("writer")).size(), 2u) << r.output;
}

// A job started in the background, its output in a file.
class Job {
 public:
  explicit Job(const std::string& command, const std::string& log) {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      const std::string cmd = "exec " + command + " > " + log + " 2>&1";
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~Job() {
    if (pid_ > 0) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  // The exit code, or -1 if the job is still running after `seconds`.
  int wait(double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
};

// The pid of the `frugal` process that is rank `rank` of a job writing `out_dir`.
pid_t rank_pid(const std::string& out_dir, int rank) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cmdline(e.path() / "cmdline"), environ(e.path() / "environ");
    std::string args((std::istreambuf_iterator<char>(cmdline)), {});
    std::string env((std::istreambuf_iterator<char>(environ)), {});
    if (contains(args, "mpirun") || !contains(args, out_dir)) continue;
    if (contains(env, fmt::format("OMPI_COMM_WORLD_RANK={}", rank) + std::string(1, '\0')))
      return static_cast<pid_t>(std::stoi(name));
  }
  return -1;
}

// Waits until the run in out_dir has written a checkpoint; returns its name.
std::string wait_for_checkpoint(const std::string& out_dir, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    std::ifstream latest(out_dir + "/checkpoints/latest");
    std::string name;
    if (latest >> name) return name;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return "";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

TEST_F(DataParallel, AKilledRankStopsTheJobAndTheLastCheckpointResumes) {
  const std::string out = tmp_.file("killed");
  const std::string args = train_args("killed", 100000, "--set train.checkpoint_interval=3 --set parallel.zero=1");
  Job job(mpirun(2) + " " + args, tmp_.file("killed.log"));
  const std::string checkpoint = wait_for_checkpoint(out, 120);
  ASSERT_FALSE(checkpoint.empty()) << read_file(tmp_.file("killed.log"));
  const pid_t victim = rank_pid(out, 1);
  ASSERT_GT(victim, 0);
  ::kill(victim, SIGKILL);
  const int rc = job.wait(60);
  const std::string log = read_file(tmp_.file("killed.log"));
  EXPECT_NE(rc, -1) << "the other rank did not stop within 60 s";
  EXPECT_NE(rc, 0);
  EXPECT_TRUE(contains(log, "rank 1")) << log;
  // The latest checkpoint is whole: the run resumes from it (two more steps).
  const std::string latest = out + "/checkpoints/" + wait_for_checkpoint(out, 1);
  const int64_t step = std::stoll(latest.substr(latest.size() - 8));
  const CliResult r = run_shell(mpirun(2) + " " + train_args("killed", int(step) + 2, "--set train.checkpoint_interval=3 --set parallel.zero=1") +
                                " --resume " + out);
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_TRUE(contains(r.output, fmt::format("resumed from {} at step {}", latest, step))) << r.output;
}

TEST_F(DataParallel, AHungRankIsNamedAndTheOthersStop) {
  const std::string out = tmp_.file("hung");
  Job job(mpirun(2) + " " + train_args("hung", 100000, "--set train.checkpoint_interval=3 --set parallel.timeout=3"),
          tmp_.file("hung.log"));
  ASSERT_FALSE(wait_for_checkpoint(out, 120).empty()) << read_file(tmp_.file("hung.log"));
  const pid_t victim = rank_pid(out, 1);
  ASSERT_GT(victim, 0);
  ::kill(victim, SIGSTOP);
  const auto start = std::chrono::steady_clock::now();
  const int rc = job.wait(60);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string log = read_file(tmp_.file("hung.log"));
  EXPECT_NE(rc, -1) << "the job did not stop within 60 s";
  EXPECT_NE(rc, 0);
  EXPECT_TRUE(contains(log, "error: rank 0: no progress for 3 s in")) << log;
  EXPECT_TRUE(contains(log, "rank 1 did not answer")) << log;
  std::printf("a hung rank stopped the job after %.1f s (timeout 3 s)\n", seconds);
  ::kill(victim, SIGKILL);
}

// Rank 0 cannot append to metrics.jsonl (swapped for a link to /dev/full mid-run): every rank
// stops within a step, together, with a checkpoint, not after parallel.timeout.
TEST_F(DataParallel, ALogRankZeroCannotWriteStopsEveryRankWithACheckpoint) {
  const std::string out = tmp_.file("full");
  Job job(mpirun(2) + " " + train_args("full", 100000, "--set train.checkpoint_interval=2 --set parallel.timeout=120"),
          tmp_.file("full.log"));
  ASSERT_FALSE(wait_for_checkpoint(out, 120).empty()) << read_file(tmp_.file("full.log"));
  fs::remove(out + "/metrics.jsonl");
  fs::create_symlink("/dev/full", out + "/metrics.jsonl");
  const auto start = std::chrono::steady_clock::now();
  const int rc = job.wait(60);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string log = read_file(tmp_.file("full.log"));
  ASSERT_NE(rc, -1) << "the job did not stop within 60 s\n" << log;
  EXPECT_NE(rc, 0);
  EXPECT_TRUE(contains(log, "/metrics.jsonl: No space left on device; training stopped after step")) << log;
  EXPECT_TRUE(contains(log, "written; once the output works again, continue with --resume " + out)) << log;
  std::printf("the job stopped %.1f s after its log became unwritable\n", seconds);
  // Ranks' stdout is a pty under mpirun, but a log: plain lines with the time, no progress bar.
  EXPECT_FALSE(contains(log, "\033[K")) << log;
  EXPECT_TRUE(contains(log, " elapsed 0:")) << log;
  // The checkpoint it wrote on the way out is whole: the run resumes from it, once the log works.
  fs::remove(out + "/metrics.jsonl");
  const std::string latest = out + "/checkpoints/" + wait_for_checkpoint(out, 1);
  const int64_t step = std::stoll(latest.substr(latest.size() - 8));
  const CliResult r = run_shell(mpirun(2) + " " + train_args("full", int(step) + 1, "") + " --resume " + out);
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_TRUE(contains(r.output, fmt::format("resumed from {} at step {}", latest, step))) << r.output;
}

}  // namespace
}  // namespace frugal
