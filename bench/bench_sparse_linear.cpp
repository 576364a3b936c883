// bench_sparse_linear: the unstructured sparse linear kernels vs the dense linear (kernels/ops.h
// matmul on the dense GEMM backend), the three training products side by side.
// Usage: bench_sparse_linear [--threads 2] [--repeats 5] [--isa auto|avx2|avx512]
//                            [--rows 2048,8192] [--channels 256,384,768]
//                            [--densities 0.5,0.2,0.1,0.05] [--json]
#include <CLI/CLI.hpp>
#include <cstdio>

#include "frugal/bench/sparse_linear_kernel.h"

int main(int argc, char** argv) {
  using namespace frugal::kernels;
  SparseLinearBenchOptions o;
  bool json = false;
  std::string isa = "auto";
  CLI::App app{"unstructured sparse linear products vs the dense linear"};
  app.add_option("--threads", o.threads, "threads for OpenMP and the dense GEMM");
  app.add_option("--repeats", o.repeats, "interleaved repetitions per product (median taken)");
  app.add_option("--isa", isa, "inner loops: auto, avx2 or avx512")
      ->check(CLI::IsMember({"auto", "avx2", "avx512"}));
  app.add_option("--rows", o.rows, "N = B*T values")->delimiter(',');
  app.add_option("--channels", o.channels, "C values (fc1: 4C x C, fc2: C x 4C, qkv: 3C x C)")
      ->delimiter(',');
  app.add_option("--densities", o.densities, "mask densities")->delimiter(',');
  app.add_flag("--json", json, "print JSON instead of a table");
  CLI11_PARSE(app, argc, argv);
  o.isa = frugal::kernels::parse_isa(isa);
  try {
    const auto rows = run_sparse_linear_benchmark(o);
    if (json)
      std::printf("%s\n", sparse_linear_rows_to_json(rows).dump(2).c_str());
    else
      std::printf("inner loops %s, %d threads\n%s", isa_name(sparse_linear_active_isa()),
                  o.threads, format_sparse_linear_table(rows).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
