// Training-step benchmark; see step.h.
#include "frugal/bench/step.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iterator>
#include <numeric>

#include "frugal/bench/step_shapes.h"
#include "frugal/core/error.h"
#include "frugal/core/memory.h"
#include "frugal/core/profile.h"
#include "frugal/core/rng.h"
#include "frugal/core/threading.h"
#include "frugal/core/timer.h"
#include "frugal/data/masking.h"
#include "frugal/kernels/cpu/blas_peak.h"
#include "frugal/kernels/cpu/gemm.h"
#include "frugal/kernels/dispatch.h"
#include "frugal/methods/method_set.h"
#include "frugal/model/flops.h"
#include "frugal/train/run_config.h"
#include "frugal/train/step.h"

namespace frugal {

namespace {
constexpr const char* kStepScope = "step (total)";  // the profiler's whole: every other scope nests in it

double max_over_ranks(ProcessGroup& group, double value) {
  std::vector<double> all(group.size());
  group.allgather(&value, 1, all.data());
  return *std::max_element(all.begin(), all.end());
}
}  // namespace

BenchPreset bench_preset(const std::string& name, const std::vector<std::string>& overrides,
                         std::optional<int> warmup, std::optional<int> steps) {
  const auto* found = std::find_if(std::begin(bench::kPresets), std::end(bench::kPresets),
                                   [&](const bench::PresetShape& preset) { return name == preset.name; });
  if (found == std::end(bench::kPresets)) fail("unknown bench preset '{}'; use S, M or L", name);
  const bench::PresetShape& p = *found;
  BenchPreset b{io::Config(run_schema()), warmup.value_or(p.warmup), steps.value_or(p.steps)};
  for (auto [key, value] : {std::pair{"model.vocab_size", p.V}, {"model.n_layer", p.layers},
                            {"model.n_head", p.heads}, {"model.n_embd", p.C},
                            {"model.block_size", p.T}, {"train.seq_len", p.T},
                            {"train.batch_size", p.B}, {"optim.warmup_steps", 0}})
    b.config.set(key, std::to_string(value));
  const int64_t default_max_steps = b.config.get_int("train.max_steps");
  b.config.apply_overrides(overrides);
  const int max_steps = b.warmup + b.steps;
  if (const int64_t asked = b.config.get_int("train.max_steps"); asked != default_max_steps)
    b.notes.push_back(fmt::format("train.max_steps = {} replaced by {} (warmup + steps): the bench "
                                  "runs that many steps", asked, max_steps));
  b.config.set("train.max_steps", std::to_string(max_steps));
  const std::string finetune = "methods.sparse24.dense_finetune_fraction";
  if (b.config.section_present("methods.sparse24") && b.config.get_float(finetune) > 0) {
    b.notes.push_back(fmt::format("{} = {:g} replaced by 0: the bench times 2:4 steps, and the dense "
                                  "fine-tuning phase would fall inside them", finetune,
                                  b.config.get_float(finetune)));
    b.config.set(finetune, "0");
  }
  return b;
}

std::string BenchResult::to_json(const std::string& preset, int threads) const {
  nlohmann::json j{{"impl", "frugal"},          {"preset", preset},
                   {"dense_gemm", kernels::cpu::gemm_backend_name(kernels::cpu::gemm_backend())},
                   {"kernels", kernels::kernel_backend_name()},
                   {"precision", precision},
                   {"threads", threads},        {"omp_wait_policy", omp_wait_policy()},
                   {"tokens_per_s", tokens_per_s},
                   {"ms_per_step", ms_per_step}, {"ms_min", ms_min}, {"ms_mean", ms_mean},
                   {"mfu", mfu},                {"model_flops_per_step", model_flops_per_step},
                   {"dense_flops_per_step", dense_flops_per_step},
                   {"peak_gemm_flops", peak_flops}, {"peak_rss_bytes", peak_rss_bytes},
                   {"peak_fma_flops", fma_peak_flops}, {"mfu_fma", mfu_fma},
                   {"fma_isa", fma_isa},
                   {"parameters", parameters},  {"batch", batch}, {"seq_len", seq_len},
                   {"warmup", warmup},          {"steps", steps},
                   {"nproc", ranks},            {"strategy", strategy}};
  if (ranks > 1)
    j.update({{"comm_wait_share", comm_wait_share}, {"comm_hidden_share", comm_hidden_share}, {"gradient_bytes_per_step", gradient_bytes},
              {"ring_bytes_per_step", ring_bytes}, {"buckets", buckets},
              {"exchange_share", exchange_share}, {"exchange_bytes_per_step", exchange_bytes}});
  return j.dump();
}

BenchResult run_train_bench(const BenchPreset& preset, const StepStrategyFactory& strategy,
                            ProcessGroup& group) {
  FRUGAL_CHECK(preset.steps >= 1 && preset.warmup >= 0, "bench needs steps >= 1 and warmup >= 0");
  const RunSettings s = run_settings(preset.config);
  const TrainSettings& t = s.train;
  FRUGAL_CHECK(s.model.vocab_size > 0, "bench needs model.vocab_size > 0");
  check_memory_available(s);
  Session session(session_options(s));
  session.set_lr_schedule([lr = s.optim.lr](int64_t) { return lr; });  // every step alike
  MethodSet methods = MethodSet::from_config(preset.config);
  const std::unique_ptr<StepStrategy> runner = strategy(session, methods, s);
  runner->enter_parts();  // as the trainer starts: no rank holds the whole model
  session.model().init_weights(t.seed);
  // The data set is B random sequences (ids 0..B-1), and every micro-batch is all of them: each
  // step is like a step of a later epoch, so methods that depend on samples coming back work as
  // in training (AutoCache serves the frozen prefix from memory once the first step filled it).
  const size_t N = size_t(t.batch_size) * t.seq_len;
  std::vector<int32_t> data_inputs(N), data_targets(N);
  Rng rng(t.seed, 7);
  for (size_t i = 0; i < N; ++i) {
    data_inputs[i] = static_cast<int32_t>(rng.below(s.model.vocab_size));
    data_targets[i] = static_cast<int32_t>(rng.below(s.model.vocab_size));
  }
  if (s.model.encoder()) {  // masked as in training: the head runs on the ~15% selected rows only
    data::MaskingSpec masking;
    masking.mask_id = s.model.vocab_size - 1;
    masking.vocab_size = s.model.vocab_size;
    masking.specials = {masking.mask_id};
    std::vector<int64_t> ids(size_t(t.batch_size));
    std::iota(ids.begin(), ids.end(), int64_t{0});
    data::mask_batch(masking, t.seed, 0, data_inputs.data(), data_targets.data(), ids.data(), t.batch_size, t.seq_len);
  }
  runner->set_num_samples(t.batch_size);
  const BatchSource whole_data_set = [&](int32_t* inputs, int32_t* targets, int64_t* ids) {
    std::copy(data_inputs.begin(), data_inputs.end(), inputs);
    std::copy(data_targets.begin(), data_targets.end(), targets);
    std::iota(ids, ids + t.batch_size, int64_t{0});
  };
  {
    TrainContext ctx = runner->context(0);
    methods.fire(Event::Init, ctx);
    methods.fire(Event::FitStart, ctx);
  }
  std::vector<double> times;  // of the timed steps
  PhaseFlops executed, dense;  // summed over the timed steps (they change with the methods' state)
  double comm_wait = 0, comm_hidden = 0, gradient_bytes = 0, exchange = 0, exchange_bytes = 0;
  int buckets = 0;
  for (int step = 0; step < preset.warmup + preset.steps; ++step) {
    nlohmann::json record;
    if (step == preset.warmup && preset.profile) {
      profile::reset();
      profile::enable(true);
    }
    Timer timer;
    StepResult result;
    {
      FRUGAL_PROFILE(kStepScope);
      result = runner->run(step, whole_data_set, &record);
    }
    const double seconds = timer.seconds();
    if (step < preset.warmup) continue;
    times.push_back(group.size() > 1 ? max_over_ranks(group, seconds) : seconds);
    executed += result.executed;
    dense += result.dense;
    if (record.contains("comm")) {
      comm_wait += record["comm"]["wait_s"].get<double>();
      comm_hidden += record["comm"].value("hidden_s", 0.0);
      gradient_bytes += record["comm"]["bytes_reduced"].get<double>();
      buckets = record["comm"]["buckets"].get<int>();
      if (record["comm"].contains("exchange_s")) {
        exchange += record["comm"]["exchange_s"].get<double>();
        exchange_bytes += record["comm"]["bytes_exchanged"].get<double>();
      }
    }
  }
  std::string kernel_profile;
  if (preset.profile) {
    profile::enable(false);
    kernel_profile = profile::report(kStepScope);
  }
  const double seconds = std::accumulate(times.begin(), times.end(), 0.0);
  std::sort(times.begin(), times.end());
  BenchResult r;
  const size_t n = times.size();  // the median as Python's statistics.median (tools/bench_torch.py)
  const double median = n % 2 ? times[n / 2] : (times[n / 2 - 1] + times[n / 2]) / 2;
  r.warmup = preset.warmup;
  r.steps = preset.steps;
  r.batch = t.batch_size;
  r.seq_len = t.seq_len;
  r.ms_per_step = median * 1e3;
  r.ms_min = times.front() * 1e3;
  r.ms_mean = seconds / preset.steps * 1e3;
  r.ranks = group.size();
  r.strategy = runner->name();
  r.tokens_per_s = runner->tokens_per_step(preset.warmup + preset.steps - 1) / median;
  r.comm_wait_share = comm_wait / seconds;
  r.comm_hidden_share = comm_hidden / seconds;
  r.gradient_bytes = gradient_bytes / preset.steps;
  r.ring_bytes = 2.0 * (r.ranks - 1) / r.ranks * r.gradient_bytes;
  r.buckets = buckets;
  r.exchange_share = exchange / seconds;
  r.exchange_bytes = exchange_bytes / preset.steps;
  r.model_flops_per_step = executed.model() / preset.steps;
  r.dense_flops_per_step = dense.model() / preset.steps;
  // Before the GEMM peak measurement allocates its matrices.
  r.peak_rss_bytes = static_cast<uint64_t>(max_over_ranks(group, static_cast<double>(peak_rss_bytes())));
  // With bf16 GEMMs on bf16 hardware, MFU is of the bf16 peaks.
  const bool bf16 = s.train.precision == "bf16" && kernels::bf16_matmul_native();
  r.peak_flops = group.sum({kernels::cpu::measure_gemm_peak_flops(bf16)})[0];
  r.mfu = executed.model() / seconds / r.peak_flops;
  r.fma_peak_flops = group.sum({kernels::cpu::measure_fma_peak_flops(bf16)})[0];
  r.mfu_fma = executed.model() / seconds / r.fma_peak_flops;
  r.fma_isa = kernels::cpu::fma_peak_isa(bf16);
  r.parameters = ParamTable::build(session.model().config()).num_parameters();  // the whole model's, on any rank
  r.memory_plan = session.model().memory_plan().describe(session.optim().state_bytes());
  r.precision = describe_precision(s.train);
  r.profile = kernel_profile;
  return r;
}

}  // namespace frugal
