// `frugal bench`: times training steps of a preset model (see bench/step.h), or with
// `--kernel sparse24` the 2:4 kernels against dense GEMM per FFN product and per FFN block, with
// `--kernel sparse` the unstructured sparse linear kernels against the dense linear per product, or
// with `--kernel moe` a mixture-of-experts MLP against the dense MLP of the same active FLOPs.
#include <fmt/format.h>

#include <memory>
#include <optional>

#include "frugal/bench/sparse24_ffn.h"
#include "frugal/bench/moe_ffn.h"
#include "frugal/bench/sparse24_kernel.h"
#include "frugal/bench/sparse_linear_kernel.h"
#include "frugal/bench/step.h"
#include "frugal/cli/commands.h"
#include "frugal/core/threading.h"
#include "frugal/io/stdout.h"
#include "frugal/kernels/cpu/gemm.h"
#include "frugal/kernels/dispatch.h"
#include "frugal/parallel/world.h"
#include "frugal/train/run_config.h"

namespace frugal::cli {

namespace {
struct BenchArgs {
  std::string preset = "S";
  int threads = 0;
  int steps = 0, warmup = -1;
  bool json = false;
  bool profile = false;
  std::vector<std::string> overrides;
  std::string kernel;
  int repeats = 9;
};

// `--kernel sparse24`: both 2:4 products per FFN shape, then the whole FFN block.
void bench_sparse24_kernels(const BenchArgs& args) {
  kernels::Sparse24BenchOptions o;
  o.threads = num_threads();
  o.repeats = args.repeats;
  const auto products = kernels::run_sparse24_benchmark(o);
  sparse24::FfnBenchOptions f;
  f.repeats = args.repeats;
  const auto blocks = sparse24::run_ffn_benchmark(f);
  const char* isa = kernels::isa_name(kernels::sparse24_active_isa());
  if (args.json) {
    const nlohmann::json j = {{"kernel", "sparse24"}, {"isa", isa},
                              {"dense_gemm", kernels::cpu::gemm_backend_name(kernels::cpu::gemm_backend())}, {"threads", num_threads()},
                              {"repeats", args.repeats}, {"products", kernels::sparse24_rows_to_json(products)},
                              {"ffn_block", sparse24::ffn_rows_to_json(blocks)}, {"mask_interval", f.mask_interval}};
    io::print("{}\n", j.dump(2));
    return;
  }
  io::print("2:4 kernels ({}) vs dense SGEMM ({}), {} threads, medians of {} interleaved runs; GFLOP/s "
            "counted as 2*N*IC*OC for both\n{}\n{}", isa,
            kernels::cpu::gemm_backend_name(kernels::cpu::gemm_backend()), num_threads(), args.repeats,
            kernels::format_sparse24_table(products), sparse24::format_ffn_table(blocks, f.mask_interval));
}

// `--kernel moe`: a mixture-of-experts MLP against the dense MLP of the same active FLOPs.
void bench_moe_kernels(const BenchArgs& args) {
  bench::MoeBenchOptions o;
  o.repeats = args.repeats;
  const auto rows = bench::run_moe_benchmark(o);
  const char* gemm = kernels::cpu::gemm_backend_name(kernels::cpu::gemm_backend());
  if (args.json) {
    const nlohmann::json j = {{"kernel", "moe"}, {"isa", kernels::isa_name(kernels::moe_active_isa())},
                              {"dense_gemm", gemm}, {"threads", num_threads()}, {"repeats", args.repeats},
                              {"rows", bench::moe_rows_to_json(rows)}};
    io::print("{}\n", j.dump());
    return;
  }
  io::print("mixture of experts ({}) vs dense MLP ({}), {} threads, medians of {} interleaved runs\n{}",
            kernels::kernel_backend_name(), gemm, num_threads(), args.repeats, bench::format_moe_table(rows));
}

// `--kernel sparse`: the three products of an unstructured sparse linear per shape and density.
void bench_sparse_linear_kernels(const BenchArgs& args) {
  kernels::SparseLinearBenchOptions o;
  o.threads = num_threads();
  o.repeats = args.repeats;
  const auto rows = kernels::run_sparse_linear_benchmark(o);
  const char* isa = kernels::isa_name(kernels::sparse_linear_active_isa());
  const char* gemm = kernels::cpu::gemm_backend_name(kernels::cpu::gemm_backend());
  if (args.json) {
    const nlohmann::json j = {{"kernel", "sparse"}, {"isa", isa}, {"dense_gemm", gemm},
                              {"threads", num_threads()}, {"repeats", args.repeats},
                              {"rows", kernels::sparse_linear_rows_to_json(rows)}};
    io::print("{}\n", j.dump(2));
    return;
  }
  io::print("sparse linear kernels ({}) vs dense linear ({}), {} threads, medians of {} interleaved "
            "runs; x = dense ms / sparse ms, all x = the three products together\n{}",
            isa, gemm, num_threads(), args.repeats, kernels::format_sparse_linear_table(rows));
}
}  // namespace

void add_bench_command(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand("bench", "time full training steps of a preset model");
  CLI::Option* preset = cmd->add_option("--preset", args->preset, "model preset: S, M or L (GPT-2 small)")
      ->check(CLI::IsMember({"S", "M", "L"}));
  CLI::Option* threads = cmd->add_option("--threads", args->threads, "threads (default: all cores; 2 with --kernel sparse)");
  CLI::Option* steps = cmd->add_option("--steps", args->steps, "timed steps (default: per preset)")->check(CLI::Range(1, 100000));
  CLI::Option* warmup = cmd->add_option("--warmup", args->warmup, "untimed warm-up steps (default: per preset)")
      ->check(CLI::Range(0, 100000));
  cmd->add_flag("--json", args->json, "print one JSON object");
  CLI::Option* profile = cmd->add_flag("--profile", args->profile, "print time per kernel over the timed steps");
  CLI::Option* set = cmd->add_option("--set", args->overrides, "override a run-config key, e.g. --set model.n_layer=8 (repeatable)");
  cmd->footer("The bench runs warmup + steps steps and sets train.max_steps to that, so schedules see "
              "its horizon. It times the methods' steady state: with methods.sparse24, "
              "dense_finetune_fraction is set to 0 (its dense phase would fall inside the timed "
              "steps; a note on stderr says so). To time dense steps, leave methods.sparse24 out. "
              "The same B random samples make up every step, as in a later epoch: with "
              "methods.freeze, AutoCache serves the frozen prefix as in training; "
              "methods.freeze.autocache=off times freezing alone.");
  CLI::Option* kernel = cmd->add_option("--kernel", args->kernel, "benchmark kernels instead of training steps: sparse24 "
                  "(2:4 vs dense GEMM on FFN shapes, and a whole FFN block) or sparse (unstructured "
                  "sparse linear vs dense, three products, densities 0.5-0.05) or moe (a mixture-of-experts "
                  "MLP, 8 experts, top 2, vs the dense MLP of the same active FLOPs on presets S and M)")
      ->check(CLI::IsMember({"sparse24", "sparse", "moe"}));
  CLI::Option* repeats = cmd->add_option("--repeats", args->repeats, "interleaved repetitions per kernel measurement (median taken)")
      ->check(CLI::Range(1, 1000));
  // The kernel benchmarks have fixed shapes and no training step: refuse what they would ignore.
  kernel->excludes(preset)->excludes(steps)->excludes(warmup)->excludes(profile)->excludes(set);
  repeats->needs(kernel);
  cmd->callback([args, threads] {
    if (args->kernel == "sparse" && threads->count() == 0) args->threads = 2;
    set_num_threads(args->threads);
    if (args->kernel == "sparse") {
      bench_sparse_linear_kernels(*args);
      return;
    }
    if (args->kernel == "moe") {
      bench_moe_kernels(*args);
      return;
    }
    if (!args->kernel.empty()) {
      bench_sparse24_kernels(*args);
      return;
    }
    BenchPreset setup = bench_preset(args->preset, args->overrides,
                                     args->warmup >= 0 ? std::optional(args->warmup) : std::nullopt,
                                     args->steps > 0 ? std::optional(args->steps) : std::nullopt);
    setup.profile = args->profile;
    parallel::World& world = parallel::World::current();
    const bool writer = world.group().is_writer();
    if (writer)
      for (const std::string& note : setup.notes) fmt::print(stderr, "note: {}\n", note);
    world.set_timeout(run_settings(setup.config).parallel.timeout);
    BenchResult r = run_train_bench(setup, world.step_strategy(), world.group());
    if (!writer) return;
    if (args->json) {
      io::print("{}\n", r.to_json(args->preset, num_threads()));
      return;
    }
    io::print("preset {} ({:.2f}M parameters, B={} T={}), {} threads{}, kernels {}, dense GEMM {}, precision {}\n",
              args->preset, r.parameters / 1e6, r.batch, r.seq_len, num_threads(),
              r.ranks > 1 ? fmt::format(" per rank, {} ranks ({})", r.ranks, r.strategy) : "",
              kernels::kernel_backend_name(), kernels::cpu::gemm_backend_name(kernels::cpu::gemm_backend()),
              r.precision);
    io::print("{}\n", r.memory_plan);
    io::print("{:.2f} ms/step (median; min {:.2f}, mean {:.2f}), {:.0f} tokens/s, MFU {:.1f}% of "
              "measured GEMM peak {:.1f} GFLOP/s ({:.1f}% of the {} FMA peak {:.1f} GFLOP/s), peak RSS "
              "{:.1f} MiB\n",
              r.ms_per_step, r.ms_min, r.ms_mean, r.tokens_per_s, 100 * r.mfu, r.peak_flops / 1e9,
              100 * r.mfu_fma, r.fma_isa, r.fma_peak_flops / 1e9, r.peak_rss_bytes / 1048576.0);
    if (r.ranks > 1)
      io::print("communication: {:.1f}% of the step waiting for gradients after the backward; {} "
                "bucket{}, {:.1f} MiB of gradients per step ({:.1f} MiB per rank on a ring)\n",
                100 * r.comm_wait_share, r.buckets, r.buckets == 1 ? "" : "s", r.gradient_bytes / 1048576.0,
                r.ring_bytes / 1048576.0);
    if (r.comm_hidden_share > 0)
      io::print("tensor-parallel exchanges: {:.1f}% of the step waited for, {:.1f}% ran hidden behind the "
                "weight gradients\n", 100 * r.comm_wait_share, 100 * r.comm_hidden_share);
    if (r.exchange_bytes > 0)
      io::print("expert exchange: {:.1f}% of the step in the all-to-all; {:.1f} MiB sent per rank per step\n",
                100 * r.exchange_share, r.exchange_bytes / 1048576.0);
    if (!r.profile.empty()) io::print("{}", r.profile);
    if (r.model_flops_per_step < r.dense_flops_per_step)
      io::print("executes {:.1f}% of the dense model's FLOPs per step\n",
                100 * r.model_flops_per_step / r.dense_flops_per_step);
  });
}

}  // namespace frugal::cli
