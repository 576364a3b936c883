// Expert parallelism under mpirun (parallel/expert_parallel.h), through the `frugal` binary: two
// ranks each holding half of every mixture's experts, exchanging the routed rows by all-to-all,
// give one process's losses, gradient norms and validation losses with the same global batch
// within 1e-6 relative over 30 steps with dropout, clipping, both balancing losses, the balancing
// bias and a shared expert; the experts' load is the same every step and so is the balancing bias
// at the end (the bias moves from the global load); data 2 × expert 2 (np 4), where each expert's
// gradient is also summed over the data groups, does the same; a checkpoint holds the whole model
// and resumes bit-exactly at the same layout, and in one process and under data parallelism; bad
// degrees and unsupported layouts are refused at start-up with what to do. Tiny models and few
// steps: the suite's time is spent elsewhere.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "frugal/io/safetensors.h"
#include "mpi_runs.h"
#include "paths.h"
#include "temp_dir.h"
#include "train_data.h"

namespace frugal {
namespace {
namespace fs = std::filesystem;
using testing::CliResult;
using testing::contains;
using testing::expect_identical;
using testing::logged_records;
using testing::max_relative_difference;
using testing::mpirun;
using testing::run_shell;
using testing::TrainedRun;

// Four experts, top 2, every block a mixture, with both balancing losses, the balancing bias and a
// shared expert; dropout on, clipping active (the norms stay above 0.5).
const std::string kModel =
    "--set model.n_layer=2 --set model.n_embd=64 --set model.n_head=2 --set model.dropout=0.1 "
    "--set train.batch_size=2 --set train.seq_len=64 --set model.block_size=64 "
    "--set train.log_interval=1 --set train.eval_interval=5 --set train.eval_batches=2 --set sample.count=0 "
    "--set optim.warmup_steps=2 --set optim.grad_clip=0.5 --set train.checkpoint_interval=1000 "
    "--set model.moe.experts=4 --set model.moe.top_k=2 --set model.moe.bias_rate=0.001 "
    "--set model.moe.aux_loss_coef=0.01 --set model.moe.z_loss_coef=0.001 --set model.moe.shared_expert=true";
const std::string kExpert2 = "--set parallel.expert=2";

constexpr double kTolerance = 1e-6;

class ExpertParallel : public testing::MpiRuns {
 protected:
  ExpertParallel() : MpiRuns(kModel) {}

  // The experts' share of the routed rows, per block, at every step of a run.
  static std::vector<nlohmann::json> shares(const TrainedRun& run) {
    std::vector<nlohmann::json> out;
    for (const nlohmann::json& step : run.steps)
      for (const nlohmann::json& layer : step.at("moe").at("layers")) out.push_back(layer.at("share"));
    return out;
  }
  // Every block's balancing bias in the run's last checkpoint.
  static std::vector<std::vector<float>> balance_biases(const TrainedRun& run, int steps) {
    const io::SafeTensors st =
        io::read_safetensors(fmt::format("{}/checkpoints/step_{:08d}/model.safetensors", run.dir, steps));
    std::vector<std::vector<float>> out;
    for (const auto& [name, tensor] : st.tensors)
      if (name.ends_with("router.balance_bias")) out.push_back(tensor.to_f32(name));
    return out;
  }
  // `extra` over `np` ranks with expert 2 against one process with np × grad_accum micro-batches.
  void compare(const std::string& name, int np, int steps, const std::string& extra, const std::string& layout) {
    const TrainedRun one = train(name + "-one", 0, steps, extra + fmt::format(" --set train.grad_accum={}", np));
    const TrainedRun ep = train(name + "-ep", np, steps, extra + " " + kExpert2);
    EXPECT_TRUE(contains(ep.output, layout)) << ep.output;
    ASSERT_TRUE(ep.steps.back().contains("val_loss"));
    ASSERT_GT(ep.steps.back().at("comm").at("bytes_exchanged").get<double>(), 0);
    const double diff = max_relative_difference(one.steps, ep.steps);
    std::printf("%s: %s vs one process over %d steps: max relative difference %.3g (loss, grad norm, "
                "val loss)\n", name.c_str(), layout.c_str(), steps, diff);
    EXPECT_LE(diff, kTolerance) << name;
    // The routing, hence the load and the bias it moves, is one process's.
    EXPECT_EQ(shares(one), shares(ep)) << name;
    const auto bias = balance_biases(ep, steps);
    ASSERT_EQ(bias.size(), 2u);
    EXPECT_NE(bias[0], std::vector<float>(4, 0.0f)) << "the bias never moved: the test would not see it";
    EXPECT_EQ(balance_biases(one, steps), bias) << name;
  }
};

TEST_F(ExpertParallel, TwoRanksEqualOneProcessWithTheSameGlobalBatch) {
  compare("gelu", 2, 30, "", "expert-parallel over 2 ranks");
  compare("swiglu-recompute", 2, 10, "--set model.mlp=swiglu --set train.recompute=all --set model.moe.shared_expert=false",
          "expert-parallel over 2 ranks");
}

// Data 2 × expert 2 (np 4): each expert's gradient is summed over the two ranks holding it.
TEST_F(ExpertParallel, DataTimesExpertEqualsOneProcessWithTheSameGlobalBatch) {
  compare("data2-expert2", 4, 8, "", "expert-parallel over 2 ranks × 2 data-parallel groups");
}

TEST_F(ExpertParallel, ACheckpointResumesBitExactlyAndAtOtherLayouts) {
  const std::string args = kExpert2 + " --set train.checkpoint_interval=4 --set train.keep_checkpoints=10";
  const TrainedRun straight = train("run", 2, 8, args);
  // The same layout: bit for bit.
  fs::copy(straight.dir, tmp_.file("again"), fs::copy_options::recursive);
  CliResult r = run_shell(mpirun(2) + " " + train_args("again", 8, args) + " --resume " +
                          tmp_.file("again") + "/checkpoints/step_00000004");
  ASSERT_EQ(r.rc, 0) << r.output;
  expect_identical(straight.steps, logged_records(tmp_.file("again")));
  // The checkpoint holds the whole model: data parallelism over the same 2 ranks, and one process
  // with the same global batch, continue it (within the tolerance).
  for (const auto& [name, program, extra] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"data", mpirun(2), ""}, {"one", std::string(test_paths::binary()), "--set train.threads=1 --set train.grad_accum=2"}}) {
    fs::copy(straight.dir, tmp_.file(name), fs::copy_options::recursive);
    r = run_shell(program + " " + train_args(name, 8, extra) + " --resume " + tmp_.file(name) +
                  "/checkpoints/step_00000004");
    ASSERT_EQ(r.rc, 0) << r.output;
    EXPECT_LE(max_relative_difference(straight.steps, logged_records(tmp_.file(name))), kTolerance) << name;
  }
}

// Progressive freezing as in one process; AutoCache serves a micro-batch's frozen prefix only
// where every rank serves its own (TrainContext::replicas_in_lockstep: the frozen mixtures still
// exchange rows between the ranks), and the run is the one without the cache: every loss bit for
// bit. The gradient norm is too on AVX-512; on the AVX2 path it differs in its last float bit at
// some steps (measured up to 1.9e-7 relative, with every loss still identical while the clip is
// inactive; not explained yet), so it is checked to 1e-6.
TEST_F(ExpertParallel, FreezingAndAutoCacheRunAsInOneProcess) {
  compare("freeze", 2, 8, "--set methods.freeze.alpha=0.5 --set methods.freeze.interval=2 "
          "--set methods.freeze.autocache=off", "expert-parallel over 2 ranks");
  testing::TempDir small_dir;
  const std::string small = testing::make_shakespeare_data(small_dir, 6000);  // ~90 samples
  // 10 sequences a step over ~84 samples: epochs end inside a step, where one rank's micro-batch
  // is cached and the other's is not.
  const std::string frozen = kExpert2 + " --set model.dropout=0 --set methods.freeze.frozen_layers=1 "
                             "--set train.batch_size=5 --set data.dir=" + small;
  const TrainedRun cached = train("cached", 2, 40, frozen + " --set methods.freeze.autocache=on");
  const TrainedRun plain = train("plain", 2, 40, frozen + " --set methods.freeze.autocache=off");
  EXPECT_EQ(plain.steps.size(), cached.steps.size());
  for (size_t i = 0; i < std::min(plain.steps.size(), cached.steps.size()); ++i)
    for (const char* key : {"loss", "val_loss"})
      EXPECT_EQ(plain.steps[i].value(key, -1.0), cached.steps[i].value(key, -1.0)) << key << " at step " << i + 1;
  EXPECT_LE(max_relative_difference(plain.steps, cached.steps, {"grad_norm"}), kTolerance);
  const int served = cached.steps.back()["autocache_hits"].get<int>();
  std::printf("expert parallel: %d of rank 0's 40 micro-batches served from the cache\n", served);
  EXPECT_GT(served, 10);
}

// Adaptive freezing reads each block's gradient norm: each rank adds its experts' squares and,
// on the expert group's first rank, the replicated tensors', summed over the group
// (TrainContext::sum_over_parts): the norms the decision reads are one process's (each rank's own
// experts alone were 4% off).
TEST_F(ExpertParallel, AdaptiveFreezingSumsEachBlocksPartsOverTheGroup) {
  const std::string adaptive = "--set model.n_layer=4 --set methods.freeze.alpha=0.5 --set methods.freeze.interval=2 "
                               "--set methods.freeze.autocache=off --set methods.freeze.adaptive=true";
  const TrainedRun one = train("one", 0, 10, adaptive + " --set train.grad_accum=2");
  const TrainedRun ep = train("ep", 2, 10, adaptive + " " + kExpert2);
  EXPECT_LE(max_relative_difference(one.steps, ep.steps), kTolerance);
  int compared = 0;
  for (size_t i = 0; i < std::min(one.steps.size(), ep.steps.size()); ++i) {
    if (!one.steps[i].contains("freeze_block_grad_norm")) continue;
    const auto a = one.steps[i]["freeze_block_grad_norm"].get<std::vector<double>>();
    const auto b = ep.steps[i].at("freeze_block_grad_norm").get<std::vector<double>>();
    ASSERT_EQ(a.size(), b.size());
    for (size_t l = 0; l < a.size(); ++l, ++compared)
      EXPECT_NEAR(a[l], b[l], kTolerance * std::max(1.0, std::abs(a[l]))) << "block " << l << " at step " << i + 1;
  }
  EXPECT_GT(compared, 0);
  EXPECT_GT(ep.steps.back()["frozen_layers"].get<int>(), 0) << "nothing froze: the test would not see a decision";
}

// ZeRO-1 and ZeRO-2 over the data groups of data 2 × expert 2 (np 4): each rank's shard (the
// replicated tensors and its experts) has its moments (and gradients) in two parts, one per data
// group; the same bits as ZeRO-0, and a ZeRO-2 checkpoint (gathered whole) resumes bit for bit.
TEST_F(ExpertParallel, ZeroOverTheDataGroupsGivesZeroZerosRunBitForBitAndResumes) {
  const std::string args = kExpert2 + " --set train.checkpoint_interval=3 --set train.keep_checkpoints=10";
  const TrainedRun zero0 = train("zero0", 4, 6, args);
  for (int zero : {1, 2}) {
    const std::string stage = fmt::format(" --set parallel.zero={}", zero);
    const TrainedRun run = train(fmt::format("zero{}", zero), 4, 6, args + stage);
    EXPECT_TRUE(contains(run.output, fmt::format("2 data-parallel groups, ZeRO-{}", zero))) << run.output;
    expect_identical(zero0.steps, run.steps);
    if (zero < 2) continue;
    const std::string again = tmp_.file("zero2-again");
    fs::copy(run.dir, again, fs::copy_options::recursive);
    const CliResult r = run_shell(mpirun(4) + " " + train_args("zero2-again", 6, args + stage) + " --resume " + again +
                                  "/checkpoints/step_00000003");
    ASSERT_EQ(r.rc, 0) << r.output;
    expect_identical(run.steps, logged_records(again));
  }
}

// parallel.comm_dtype = bf16: the routed rows travel as bf16 both ways, forward and backward: each
// step sends half the bytes of fp32's (within 2%, measured up to 1.8%: the rounded rows route some
// rows of the next block elsewhere), and the run trains close to the fp32 wire's (within 1e-2
// relative over 8 steps; the measured difference is printed).
TEST_F(ExpertParallel, ABf16WireHalvesTheRoutedRowsAndTrainsCloseToFp32) {
  const TrainedRun fp32 = train("wire-fp32", 2, 8, kExpert2);
  const TrainedRun bf16 = train("wire-bf16", 2, 8, kExpert2 + " --set parallel.comm_dtype=bf16");
  ASSERT_EQ(fp32.steps.size(), bf16.steps.size());
  for (size_t i = 0; i < fp32.steps.size(); ++i)
    EXPECT_NEAR(bf16.steps[i]["comm"]["bytes_exchanged"].get<double>() /
                    fp32.steps[i]["comm"]["bytes_exchanged"].get<double>(), 0.5, 0.02) << "step " << i + 1;
  const double diff = max_relative_difference(fp32.steps, bf16.steps);
  std::printf("expert 2, a bf16 wire vs fp32: max relative difference %.3g\n", diff);
  EXPECT_GT(diff, 0.0) << "the rows were not rounded";
  EXPECT_LE(diff, 1e-2);
}

TEST_F(ExpertParallel, BadDegreesAndUnsupportedLayoutsAreRefusedWithWhatToDo) {
  struct Case {
    std::string program, extra, message;
  };
  for (const Case& c : std::vector<Case>{
           {test_paths::binary(), kExpert2, "parallel.expert = 2 needs that many processes: run under mpirun -np 2"},
           {mpirun(2), "--set parallel.expert=3 --set model.moe.experts=3", "parallel.expert = 3 does not divide the 2 ranks"},
           {mpirun(2), "--set parallel.expert=2 --set model.moe.experts=3", "set parallel.expert to a divisor of model.moe.experts"},
           {mpirun(2), "--set parallel.expert=2 --set model.moe.experts=0", "parallel.expert = 2 needs a mixture of experts"},
           {mpirun(2), kExpert2 + " --set parallel.tensor=2", "tensor × expert parallelism is not built yet"},
           {mpirun(2), kExpert2 + " --set parallel.pipeline_stages=2", "parallel.pipeline_stages = 2 does not run a mixture of experts"},
           {mpirun(2), kExpert2 + " --set methods.mst.update_interval=2", "methods.mst does not run with a mixture of experts"}}) {
    const CliResult r = run_shell(c.program + " " + train_args("bad", 20, c.extra));
    EXPECT_NE(r.rc, 0) << c.extra;
    EXPECT_TRUE(contains(r.output, c.message)) << c.extra << "\n" << r.output;
  }
}

}  // namespace
}  // namespace frugal
