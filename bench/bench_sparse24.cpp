// bench_sparse24: 2:4 sparse FFN products vs the dense SGEMM (kernels/cpu/gemm.h: oneDNN, or OpenBLAS), side by side;
// then the MVUE gradient estimate (mvue24_rows) in GB/s (not in --json).
// Usage: bench_sparse24 [--threads 2] [--repeats 9] [--isa auto|avx2|avx512] [--rows 1024,4096]
//                       [--channels 384,768] [--json]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "frugal/bench/kernel_bench.h"
#include "frugal/bench/sparse24_kernel.h"

int main(int argc, char** argv) {
  using namespace frugal::kernels;
  Sparse24BenchOptions o;
  bool json = false;
  std::string isa = "auto";
  CLI::App app{"2:4 sparse FFN products vs the dense SGEMM library"};
  app.add_option("--threads", o.threads, "threads for OpenMP and OpenBLAS");
  app.add_option("--repeats", o.repeats, "interleaved repetitions per product (median taken)");
  app.add_option("--isa", isa, "micro-kernel: auto, avx2 or avx512")
      ->check(CLI::IsMember({"auto", "avx2", "avx512"}));
  app.add_option("--rows", o.rows, "N = B*T values")->delimiter(',');
  app.add_option("--channels", o.channels, "C values (fc1: 4C x C, fc2: C x 4C)")->delimiter(',');
  app.add_flag("--json", json, "print JSON instead of a table");
  CLI11_PARSE(app, argc, argv);
  o.isa = frugal::kernels::parse_isa(isa);
  try {
    const auto rows = run_sparse24_benchmark(o);
    if (json)
      std::printf("%s\n", sparse24_rows_to_json(rows).dump(2).c_str());
    else {
      std::printf("micro-kernel %s, %d threads\n%s", isa_name(sparse24_active_isa()),
                  o.threads, format_sparse24_table(rows).c_str());
      // The MVUE estimate of fc1's output gradient (N, 4C) (methods.sparse24.mvue): read and written
      // once, 8·N·4C bytes; best of the repetitions.
      for (const int N : o.rows)
        for (const int C : o.channels) {
          const int OC = 4 * C;
          const std::vector<float> dout = frugal::bench::random_floats(size_t(N) * OC, 6);
          std::vector<float> sparse(dout.size());
          frugal::bench::print_bandwidth(("mvue24_rows N=" + std::to_string(N) + " OC=" + std::to_string(OC)).c_str(),
                                         frugal::bench::best_seconds([&] {
                                           mvue24_rows(sparse.data(), dout.data(), N, OC, 7);
                                         }, o.repeats), 8.0 * N * OC);
          std::printf("\n");
        }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
