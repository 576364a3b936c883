// `frugal bench`: times training steps of a preset model (see train/bench.h).
#include <fmt/format.h>

#include <memory>

#include "frugal/cli/commands.h"
#include "frugal/core/threading.h"
#include "frugal/train/bench.h"

namespace frugal::cli {

namespace {
struct BenchArgs {
  std::string preset = "S";
  int threads = 0;
  int steps = 0, warmup = -1;
  bool json = false;
  bool profile = false;
  std::vector<std::string> overrides;
};
}  // namespace

void add_bench_command(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand("bench", "time full training steps of a preset model");
  cmd->add_option("--preset", args->preset, "model preset: S, M or L (GPT-2 small)")
      ->check(CLI::IsMember({"S", "M", "L"}));
  cmd->add_option("--threads", args->threads, "threads (default: all cores)");
  cmd->add_option("--steps", args->steps, "timed steps (default: per preset)");
  cmd->add_option("--warmup", args->warmup, "untimed warm-up steps (default: per preset)");
  cmd->add_flag("--json", args->json, "print one JSON object");
  cmd->add_flag("--profile", args->profile, "print time per kernel over the timed steps");
  cmd->add_option("--set", args->overrides, "override a run-config key, e.g. --set model.n_layer=8 (repeatable)");
  cmd->callback([args] {
    set_num_threads(args->threads);
    BenchPreset setup = bench_preset(args->preset, args->overrides);
    if (args->steps > 0) setup.steps = args->steps;
    if (args->warmup >= 0) setup.warmup = args->warmup;
    setup.profile = args->profile;
    BenchResult r = run_train_bench(setup);
    if (args->json) {
      fmt::print("{}\n", r.to_json(args->preset, num_threads()));
      return;
    }
    fmt::print("preset {} ({:.2f}M parameters, B={} T={}), {} threads\n", args->preset,
               r.parameters / 1e6, r.batch, r.seq_len, num_threads());
    fmt::print("{}\n", r.memory_plan);
    fmt::print("{:.2f} ms/step (min {:.2f}), {:.0f} tokens/s, MFU {:.1f}% of measured GEMM peak "
               "{:.1f} GFLOP/s, peak RSS {:.1f} MiB\n",
               r.ms_per_step, r.ms_min, r.tokens_per_s, 100 * r.mfu, r.peak_flops / 1e9,
               r.peak_rss_bytes / 1048576.0);
    if (!r.profile.empty()) fmt::print("{}", r.profile);
    if (r.model_flops_per_step < r.dense_flops_per_step)
      fmt::print("executes {:.1f}% of the dense model's FLOPs per step\n",
                 100 * r.model_flops_per_step / r.dense_flops_per_step);
  });
}

}  // namespace frugal::cli
