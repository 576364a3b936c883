// Training-step benchmark; see bench.h.
#include "frugal/train/bench.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "frugal/core/error.h"
#include "frugal/core/rng.h"
#include "frugal/core/timer.h"
#include "frugal/train/flops.h"
#include "frugal/train/run_config.h"

namespace frugal {

BenchSetup bench_preset(const std::string& name, const std::vector<std::string>& overrides) {
  BenchSetup s;
  ModelConfig& m = s.model;
  if (name == "S") {
    m.vocab_size = 65, m.n_layer = 4, m.n_head = 4, m.n_embd = 128, s.seq_len = 64, s.batch = 12;
    s.steps = 30;
  } else if (name == "M") {
    m.vocab_size = 65, m.n_layer = 6, m.n_head = 6, m.n_embd = 384, s.seq_len = 256, s.batch = 8;
  } else if (name == "L") {
    m.vocab_size = 50257, m.n_layer = 12, m.n_head = 12, m.n_embd = 768, s.seq_len = 64, s.batch = 4;
    s.warmup = 2, s.steps = 5;
  } else {
    fail("unknown bench preset '{}'; use S, M or L", name);
  }
  m.block_size = s.seq_len;
  if (overrides.empty()) return s;
  // Express the preset as run-config values, apply the overrides, read the result back.
  io::Config c(run_schema());
  for (auto [key, value] : {std::pair{"model.vocab_size", m.vocab_size}, {"model.n_layer", m.n_layer},
                            {"model.n_head", m.n_head}, {"model.n_embd", m.n_embd},
                            {"model.block_size", m.block_size}, {"train.batch_size", s.batch},
                            {"train.seq_len", s.seq_len}})
    c.set(key, std::to_string(value));
  c.apply_overrides(overrides);
  const RunSettings r = run_settings(c);
  s.model = r.model;
  s.optim = r.optim;
  s.batch = r.train.batch_size;
  s.seq_len = r.train.seq_len;
  s.seed = r.train.seed;
  s.recompute.assign(s.model.n_layer, r.train.recompute == "all");
  FRUGAL_CHECK(s.seq_len <= s.model.block_size, "train.seq_len = {} exceeds model.block_size = {}",
               s.seq_len, s.model.block_size);
  return s;
}

std::string BenchResult::to_json(const std::string& preset, int threads) const {
  nlohmann::json j{{"impl", "frugal"},          {"preset", preset},
                   {"threads", threads},        {"tokens_per_s", tokens_per_s},
                   {"ms_per_step", ms_per_step}, {"ms_min", ms_min},
                   {"mfu", mfu},                {"model_flops_per_step", model_flops_per_step},
                   {"peak_gemm_flops", peak_flops}, {"peak_rss_bytes", peak_rss_bytes},
                   {"parameters", parameters}};
  return j.dump();
}

BenchResult run_train_bench(const BenchSetup& s) {
  FRUGAL_CHECK(s.steps >= 1 && s.warmup >= 0, "bench needs steps >= 1 and warmup >= 0");
  GPT model(s.model);
  model.init_weights(s.seed);
  model.plan(s.batch, s.seq_len, s.recompute);
  model.set_frozen_prefix(s.frozen_layers);
  AdamW optim(model.table(), s.optim);

  const size_t N = size_t(s.batch) * s.seq_len;
  std::vector<int32_t> inputs(N), targets(N);
  Rng rng(s.seed, 7);
  for (size_t i = 0; i < N; ++i) {
    inputs[i] = static_cast<int32_t>(rng.below(s.model.vocab_size));
    targets[i] = static_cast<int32_t>(rng.below(s.model.vocab_size));
  }
  std::vector<double> times;
  for (int step = 0; step < s.warmup + s.steps; ++step) {
    Timer t;
    model.zero_grad();
    model.forward(inputs.data(), targets.data(), 1.0f, static_cast<uint64_t>(step));
    model.backward();
    optim.step(model.params(), model.grads(), model.trainable_begin(), s.optim.lr);
    if (step >= s.warmup) times.push_back(t.seconds());
  }
  std::sort(times.begin(), times.end());
  BenchResult r;
  const double median = times[times.size() / 2];
  r.ms_per_step = median * 1e3;
  r.ms_min = times.front() * 1e3;
  r.tokens_per_s = double(N) / median;
  r.model_flops_per_step = dense_step_flops(s.model, s.batch, s.seq_len).model();
  r.peak_flops = measure_gemm_peak_flops();
  r.mfu = r.model_flops_per_step / median / r.peak_flops;
  r.peak_rss_bytes = peak_rss_bytes();
  r.parameters = model.table().num_parameters(s.model);
  r.memory_plan = model.memory_plan().describe(optim.state_bytes());
  return r;
}

}  // namespace frugal
