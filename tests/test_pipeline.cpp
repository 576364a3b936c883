// Pipeline parallelism with AutoPipe and AutoDP under mpirun (parallel/pipeline.h), through the
// `frugal` binary: GPipe and 1F1B give one process's run with the same micro-batches (bit for bit
// with an untied head; a tied head's embedding gradient adds in another order), on 2 and 4 ranks,
// each stage's session holding its own blocks only, and with data-parallel replicas; freezing re-partitions mid-run (re-balanced stages, then a
// shorter pipeline whose freed rank becomes a replica) and the run goes on with one process's
// losses; a checkpoint after a re-partition resumes bit-exactly; bad layouts are refused.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>

#include "frugal/model/param_table.h"
#include "frugal/train/checkpoint.h"
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

// Four blocks (four stages at most), dropout on (the micro-batches' dropout keys must match).
const std::string kModel =
    "--set model.n_layer=4 --set model.n_embd=64 --set model.n_head=2 --set model.dropout=0.1 "
    "--set model.tied_head=false --set train.batch_size=2 --set train.seq_len=64 --set model.block_size=64 "
    "--set train.grad_accum=4 --set train.log_interval=1 --set train.eval_interval=4 "
    "--set train.eval_batches=2 --set sample.count=0 --set optim.warmup_steps=2 --set optim.grad_clip=0.5";

// Data-parallel replicas sum their gradients in another order than one process's buffer (see
// test_data_parallel.cpp), and so does a tied head's embedding gradient.
constexpr double kTolerance = 1e-6;

class Pipeline : public testing::MpiRuns {
 protected:
  Pipeline() : MpiRuns(kModel) {}
  // The stages and replicas a step ran with, from its metrics line.
  static std::pair<int, int> layout(const nlohmann::json& step) {
    return {step.at("pipeline").at("stages").get<int>(), step.at("pipeline").at("replicas").get<int>()};
  }
};

TEST_F(Pipeline, GPipeAnd1F1BEqualOneProcessWithTheSameMicroBatches) {
  const TrainedRun single = train("single", 0, 8, "");
  for (const char* schedule : {"gpipe", "1f1b"}) {
    const TrainedRun two = train(fmt::format("{}-k2", schedule), 2, 8,
                                 fmt::format("--set parallel.pipeline_stages=2 --set parallel.schedule={}", schedule));
    expect_identical(single.steps, two.steps);
    EXPECT_EQ(layout(two.steps.back()), std::pair(2, 1));
    EXPECT_TRUE(contains(two.output, "pipeline of 2 stages × 1 replica")) << two.output;
    const TrainedRun four = train(fmt::format("{}-k4", schedule), 4, 8,
                                  fmt::format("--set parallel.pipeline_stages=4 --set parallel.schedule={}", schedule));
    expect_identical(single.steps, four.steps);
    EXPECT_EQ(four.steps.back()["pipeline"]["bounds"], (std::vector<int>{0, 1, 2, 3, 4}));
    // Each stage's session holds its own blocks only: with an untied head the stages' tensors
    // add up to the whole model's, once.
    const size_t whole = ParamTable::build(checkpoint_model_config(resolve_checkpoint(two.dir))).total();
    for (const TrainedRun* run : {&two, &four}) {
      const auto held = run->steps.back()["pipeline"]["held_floats"].get<std::vector<double>>();
      EXPECT_EQ(std::accumulate(held.begin(), held.end(), 0.0), double(whole)) << run->dir;
      for (double floats : held) EXPECT_LT(floats, double(whole)) << run->dir;
    }
  }
  // GPipe with K = 2, M = 4 reports its ideal bubble, (K−1)/(M+K−1) = 0.2, and a measured one above 0
  // (stages idle while the other works); the measured one is not held to the ideal, which assumes
  // stages of equal cost (here the second holds the head).
  const TrainedRun gpipe = train("gpipe-bubble", 2, 4, "--set parallel.pipeline_stages=2 --set parallel.schedule=gpipe");
  EXPECT_DOUBLE_EQ(gpipe.steps.back()["pipeline"]["bubble_ideal"].get<double>(), 0.2);
  EXPECT_GT(gpipe.steps.back()["pipeline"]["bubble"].get<double>(), 0.0);
}

// bf16 with stochastically rounded working copies (train.bf16_rounding): each weight's random bits
// are keyed by its index in the whole model (ParamInfo::global_offset), not in its stage's buffer,
// so two stages give one process's run bit for bit, as with the nearest rounding.
TEST_F(Pipeline, Bf16StochasticRoundingEqualsOneProcess) {
  for (const std::string rounding : {"nearest", "stochastic"}) {
    const std::string bf16 = "--set train.precision=bf16 --set train.bf16_rounding=" + rounding;
    expect_identical(train("bf16-" + rounding, 0, 6, bf16).steps,
                     train("bf16-" + rounding + "-k2", 2, 6, bf16 + " --set parallel.pipeline_stages=2").steps);
  }
}

TEST_F(Pipeline, ReplicasAndATiedHeadAgreeWithinTheTolerance) {
  const TrainedRun single = train("single", 0, 8, "");
  const TrainedRun replicas = train("k2d2", 4, 8, "--set parallel.pipeline_stages=2");
  EXPECT_EQ(layout(replicas.steps.back()), std::pair(2, 2));
  EXPECT_LE(max_relative_difference(single.steps, replicas.steps), kTolerance);
  const TrainedRun tied_single = train("tied-single", 0, 8, "--set model.tied_head=true");
  const TrainedRun tied = train("tied", 2, 8, "--set model.tied_head=true --set parallel.pipeline_stages=2");
  const double diff = max_relative_difference(tied_single.steps, tied.steps);
  std::printf("tied head, K = 2 vs one process: max relative difference %.3g\n", diff);
  EXPECT_LE(diff, kTolerance);
}

// parallel.comm_dtype = bf16: the stages send their activations and input gradients rounded to
// bf16, half the bytes of fp32, and the run trains close to the fp32 wire's (within 1e-2 relative
// over 8 steps; the measured difference is printed); GPipe and 1F1B round the same messages, so
// they still give the same run bit for bit. Where the messages are rounded depends on the cut, so
// the cut balances parameters: cut by measured times, a loaded machine once cut one run elsewhere.
TEST_F(Pipeline, ABf16WireHalvesTheStagesMessagesAndTrainsCloseToFp32) {
  const std::string k2 = "--set parallel.pipeline_stages=2 --set parallel.autopipe_cost=parameters --set parallel.schedule=";
  const TrainedRun fp32 = train("wire-fp32", 2, 8, k2 + "1f1b");
  const TrainedRun bf16 = train("wire-bf16", 2, 8, k2 + "1f1b --set parallel.comm_dtype=bf16");
  ASSERT_EQ(fp32.steps.size(), bf16.steps.size());
  for (size_t i = 0; i < fp32.steps.size(); ++i) {
    const double sent = fp32.steps[i]["pipeline"]["bytes_sent"].get<double>();
    // 4 micro-batches' activations (B·T·C floats) forward and their gradients back
    EXPECT_EQ(sent, 2.0 * 4 * 2 * 64 * 64 * sizeof(float)) << "step " << i + 1;
    EXPECT_EQ(2 * bf16.steps[i]["pipeline"]["bytes_sent"].get<double>(), sent) << "step " << i + 1;
  }
  const double diff = max_relative_difference(fp32.steps, bf16.steps);
  std::printf("K = 2, a bf16 wire vs fp32: max relative difference %.3g\n", diff);
  EXPECT_GT(diff, 0.0) << "the messages were not rounded";
  EXPECT_LE(diff, 1e-2);
  const TrainedRun gpipe = train("wire-bf16-gpipe", 2, 8, k2 + "gpipe --set parallel.comm_dtype=bf16");
  for (const TrainedRun* run : {&bf16, &gpipe})
    EXPECT_EQ(run->steps.front()["pipeline"]["bounds"], fp32.steps.front()["pipeline"]["bounds"]);
  expect_identical(bf16.steps, gpipe.steps);
}

// A masked-LM encoder (tied head: its decoder is the first stage's embedding): the stages mask
// nothing themselves, they run the micro-batches the step drew and masked, so K = 2 trains one
// process's run (within the tied head's tolerance).
TEST_F(Pipeline, MaskedLmEqualsOneProcess) {
  const std::string mlm = "--set model.objective=mlm --set model.norm=post --set model.tied_head=true";
  const TrainedRun single = train("mlm-single", 0, 8, mlm);
  const TrainedRun two = train("mlm-k2", 2, 8, mlm + " --set parallel.pipeline_stages=2");
  const double diff = max_relative_difference(single.steps, two.steps);
  std::printf("masked LM, K = 2 vs one process: max relative difference %.3g\n", diff);
  EXPECT_LE(diff, kTolerance);
  EXPECT_TRUE(contains(two.output, "pipeline of 2 stages")) << two.output;
}

// α = 0.5 every 2 steps on 4 blocks: 2 frozen after step 2 (the stages are re-balanced), 3 after
// step 4 (too few trainable blocks for 2 stages: one stage, 2 replicas).
const std::string kFreeze = "--set methods.freeze.alpha=0.5 --set methods.freeze.interval=2 "
                            "--set methods.freeze.autocache=off";

TEST_F(Pipeline, FreezingRepartitionsAndTheRunContinuesAsOneProcess) {
  const TrainedRun single = train("single", 0, 8, kFreeze);
  // AutoPipe balances bytes here, not measured times, so that its choices do not depend on the
  // machine's load (with times, a loaded machine once kept 1 stage at step 2).
  const TrainedRun elastic =
      train("elastic", 2, 8, kFreeze + " --set parallel.pipeline_stages=2 --set parallel.autopipe_cost=parameters");
  EXPECT_LE(max_relative_difference(single.steps, elastic.steps), kTolerance);
  // Bit for bit until the replicas start summing gradients (steps 1-4).
  for (int i = 0; i < 4; ++i) EXPECT_EQ(single.steps[i]["loss"], elastic.steps[i]["loss"]) << "step " << i + 1;
  ASSERT_TRUE(elastic.steps[1].contains("repartition"));
  EXPECT_EQ(elastic.steps[1]["repartition"]["frozen"], 2);
  EXPECT_EQ(elastic.steps[1]["repartition"]["stages"], 2);
  EXPECT_GT(elastic.steps[1]["repartition"]["bounds"][1].get<int>(), 2) << "the frozen prefix stays in stage 0";
  ASSERT_TRUE(elastic.steps[3].contains("repartition"));
  EXPECT_EQ(elastic.steps[3]["repartition"]["stages"], 1);
  EXPECT_EQ(elastic.steps[3]["repartition"]["replicas"], 2);
  EXPECT_EQ(layout(elastic.steps[4]), std::pair(1, 2));
  EXPECT_TRUE(contains(elastic.output, "AutoDP")) << elastic.output;
  // The whole model on every rank after the transfer: evaluation (over both ranks) and the
  // checkpoint rank 0 wrote give one process's validation loss.
  EXPECT_TRUE(elastic.steps.back().contains("val_loss"));
  // Not elastic: the pipeline keeps 2 stages, re-balanced (at most 2 frozen).
  const std::string capped = kFreeze + " --set methods.freeze.max_frozen=2";
  const TrainedRun fixed = train("fixed", 2, 8, capped + " --set parallel.pipeline_stages=2 --set parallel.elastic=false");
  expect_identical(train("single-capped", 0, 8, capped).steps, fixed.steps);
  EXPECT_EQ(layout(fixed.steps.back()), std::pair(2, 1));
  // Freezing past what 2 stages can hold is refused at start-up when the pipeline may not shorten.
  const CliResult refused = run_shell(mpirun(2) + " " + train_args("refused", 8, kFreeze +
                                      " --set parallel.pipeline_stages=2 --set parallel.elastic=false"));
  EXPECT_NE(refused.rc, 0);
  EXPECT_TRUE(contains(refused.output, "methods.freeze may freeze 3 of the 4 blocks, which leaves fewer trainable "
                       "blocks than the 2 stages")) << refused.output;
  EXPECT_TRUE(contains(refused.output, "set methods.freeze.max_frozen <= 2 or parallel.elastic = true")) << refused.output;
  EXPECT_FALSE(contains(refused.output, "step 1/")) << "refused after training began";
}

// AutoCache under data-parallel replicas: every replica stores every replica's prefix outputs
// (TrainContext::allgather_replicas), so from the second epoch on every micro-batch is served on
// every rank, as in one process (a rank caching only its own samples would serve a micro-batch
// of 2 only when both of its samples had come to it before: about a quarter). Exact: the run is
// the one without the cache, bit for bit.
TEST_F(Pipeline, AutoCacheIsSharedByTheReplicas) {
  testing::TempDir small_dir;
  const std::string small = testing::make_shakespeare_data(small_dir, 20000);  // ~280 samples
  const std::string frozen = "--set model.dropout=0 --set methods.freeze.frozen_layers=2 --set data.dir=" + small;
  const int steps = 80;
  // The third layout keeps no entry in memory: every rank spills to its own file on disk, in the
  // same run directory.
  int run = 0;
  for (auto [np, layout] : {std::pair{2, "--set parallel.pipeline_stages=1 --set train.grad_accum=2"},
                            {4, "--set parallel.pipeline_stages=2"},
                            {2, "--set parallel.pipeline_stages=1 --set train.grad_accum=2 "
                                "--set methods.freeze.cache_memory_mb=0"}}) {
    const std::string args = frozen + " " + layout;
    const TrainedRun cached = train(fmt::format("cache{}", ++run), np, steps, args + " --set methods.freeze.autocache=on");
    const TrainedRun plain = train(fmt::format("plain{}", run), np, steps, args + " --set methods.freeze.autocache=off");
    expect_identical(plain.steps, cached.steps);
    if (std::string(layout).find("cache_memory_mb=0") != std::string::npos) {
      EXPECT_GT(cached.steps.back()["autocache_on_disk"].get<int>(), 0);
    }
    const int samples = cached.steps.back()["autocache_samples"].get<int>();
    const int served = cached.steps.back()["autocache_hits"].get<int>();
    // Rank 0's micro-batches after the first epoch (8 sequences per step), all served.
    const int after_first_epoch = (steps - (samples + 7) / 8 - 1) * 2;
    std::printf("np %d: %d samples cached, %d micro-batches served (%d after the first epoch)\n", np,
                samples, served, after_first_epoch);
    EXPECT_GE(served, after_first_epoch) << layout;
  }
}

TEST_F(Pipeline, ACheckpointAfterARepartitionResumesBitExactly) {
  const std::string args = kFreeze + " --set parallel.pipeline_stages=2 --set train.checkpoint_interval=1 "
                                     "--set train.keep_checkpoints=10";
  const TrainedRun straight = train("run", 2, 8, args);
  // Step 3: two stages re-balanced around 2 frozen blocks; step 6: one stage, two replicas.
  for (int at : {3, 6}) {
    const std::string copy = fmt::format("copy{}", at);
    fs::copy(straight.dir, tmp_.file(copy), fs::copy_options::recursive);
    const CliResult r = run_shell(mpirun(2) + " " + train_args(copy, 8, args) + " --resume " +
                                  tmp_.file(copy) + fmt::format("/checkpoints/step_{:08}", at));
    ASSERT_EQ(r.rc, 0) << r.output;
    expect_identical(straight.steps, logged_records(tmp_.file(copy)));
  }
}

// Methods that choose per block (2:4 and mst masks from the weights and gradients, adaptive
// freezing's gradient norms) decide on the stage that holds the block and hand the result to the
// other stages: one process's run bit for bit (one replica, an untied head).
TEST_F(Pipeline, BlockDecisionsAreMadeWhereTheBlockLivesAndGiveOneProcesssRun) {
  const std::string sparse24 = "--set methods.sparse24.mask_interval=2 --set methods.sparse24.dense_finetune_fraction=0.25";
  const std::string mst = "--set methods.mst.update_interval=2 --set methods.mst.attention_window=8 "
                          "--set methods.mst.attention_stride=8 --set methods.mst.warmup_fraction=0.25";
  const std::string adaptive = kFreeze + " --set methods.freeze.adaptive=true";
  const std::string stages = " --set parallel.pipeline_stages=2 --set parallel.autopipe_cost=parameters";
  const TrainedRun dense = train("dense", 0, 8, "");
  for (const auto& [name, args] : std::vector<std::pair<std::string, std::string>>{
           {"sparse24", sparse24}, {"mst", mst}, {"sparse24+mst", sparse24 + " " + mst}, {"adaptive", adaptive}}) {
    SCOPED_TRACE(name);
    const TrainedRun single = train(name + "-single", 0, 8, args);
    const TrainedRun two = train(name + "-k2", 2, 8, args + stages);
    EXPECT_TRUE(contains(two.output, "pipeline: 2 stages")) << two.output;
    expect_identical(single.steps, two.steps);
    EXPECT_NE(single.steps.back()["loss"], dense.steps.back()["loss"]) << "the method changed nothing";
  }
}

// A V-cycle of three levels (4, 2, 1 blocks) under 2 stages, with mst masks following each
// reshape: the whole model is gathered for the Reconfigure, each level gets its own pipeline (the
// 1-block level as 1 stage × 2 replicas), and checkpoints inside each layout resume bit-exactly.
TEST_F(Pipeline, TheVCycleGetsAPipelinePerLevelAndResumesBitExactly) {
  const std::string args =
      "--set methods.multilevel.levels=3 --set methods.multilevel.shares=0.1,0.2,0.2,0.2,0.3 "
      "--set methods.multilevel.width_factor=1 --set methods.multilevel.moments=mapped "
      "--set methods.mst.update_interval=3 --set methods.mst.attention=dense";
  const std::string stages = " --set parallel.pipeline_stages=2 --set parallel.autopipe_cost=parameters "
                             "--set train.checkpoint_interval=1 --set train.keep_checkpoints=12";
  const TrainedRun single = train("single", 0, 12, args);
  const TrainedRun two = train("k2", 2, 12, args + stages);
  EXPECT_LE(max_relative_difference(single.steps, two.steps), kTolerance);
  // Bit for bit until the 1-block level's replicas sum gradients (steps 1-4).
  for (int i = 0; i < 4; ++i) EXPECT_EQ(single.steps[i]["loss"], two.steps[i]["loss"]) << "step " << i + 1;
  std::vector<std::pair<int, int>> layouts;  // of the steps after each reshape
  for (const nlohmann::json& step : two.steps)
    if (step.contains("repartition")) layouts.emplace_back(step["repartition"]["stages"], step["repartition"]["replicas"]);
  EXPECT_EQ(layouts, (std::vector<std::pair<int, int>>{{2, 1}, {1, 2}, {2, 1}, {2, 1}}));
  for (int at : {3, 6, 9}) {  // level 2 on 2 stages, level 3 on 2 replicas, level 2 again
    const std::string copy = fmt::format("copy{}", at);
    fs::copy(two.dir, tmp_.file(copy), fs::copy_options::recursive);
    const CliResult r = run_shell(mpirun(2) + " " + train_args(copy, 12, args + stages) + " --resume " +
                                  tmp_.file(copy) + fmt::format("/checkpoints/step_{:08}", at));
    ASSERT_EQ(r.rc, 0) << r.output;
    expect_identical(two.steps, logged_records(tmp_.file(copy)));
  }
}

TEST_F(Pipeline, BadLayoutsAreRefusedWithWhatToDo) {
  struct Case {
    std::string program, extra, message;
  };
  for (const Case& c : std::vector<Case>{
           {test_paths::binary(), "--set parallel.pipeline_stages=2", "needs that many processes or a multiple: run under mpirun -np 2"},
           {mpirun(2), "--set parallel.pipeline_stages=3", "does not divide the 2 ranks"},
           {mpirun(2), "--set parallel.pipeline_stages=2 --set train.grad_accum=3", "train.grad_accum = 3 must be a multiple of 2"},
           {mpirun(2), "--set parallel.pipeline_stages=2 --set parallel.zero=1", "parallel.zero = 1 is not supported"},
           {mpirun(4), "--set parallel.pipeline_stages=4 --set train.grad_accum=6 --set parallel.elastic=false --set methods.multilevel.levels=2 --set train.max_steps=20",
            "with a V-cycle level of fewer blocks than stages"},
           // One micro-batch of the whole model fits; GPipe's 8192 of a stage in flight (~330 GB) do not.
           {mpirun(2), "--set parallel.pipeline_stages=2 --set parallel.schedule=gpipe --set train.batch_size=64 "
                       "--set train.grad_accum=8192", "needs more memory than the machine has available"}}) {
    const CliResult r = run_shell(c.program + " " + train_args("bad", 2, c.extra));
    EXPECT_NE(r.rc, 0) << c.extra;
    EXPECT_TRUE(contains(r.output, c.message)) << c.extra << "\n" << r.output;
  }
}

}  // namespace
}  // namespace frugal
