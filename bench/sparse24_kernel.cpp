// 2:4 kernel benchmark: the dense SGEMM (kernels/cpu/gemm.h) vs the 2:4 kernels, interleaved, medians.
#include "frugal/bench/sparse24_kernel.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "frugal/core/memory.h"
#include "frugal/core/rng.h"
#include "frugal/core/threading.h"
#include "frugal/core/timer.h"
#include "frugal/kernels/cpu/gemm.h"
#include "frugal/methods/sparse24/mask.h"

namespace frugal::kernels {
namespace {

void fill_normal(Buffer<float>& b, uint64_t seed) {
  Rng rng(seed, 0);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(rng.normal());
}

// Times a and b alternately (after one warm-up each); returns their median times in ms.
std::pair<double, double> interleaved(const std::function<void()>& a,
                                      const std::function<void()>& b, int repeats) {
  a();
  b();
  std::vector<double> ta, tb;
  for (int r = 0; r < repeats; ++r) {
    ta.push_back(time_ms(a));
    tb.push_back(time_ms(b));
  }
  return {median(ta), median(tb)};
}

void bench_layer(std::vector<Sparse24BenchRow>& rows, const char* layer, int N, int IC, int OC,
                 const Sparse24BenchOptions& o) {
  Buffer<float> W(static_cast<size_t>(OC) * IC), X(static_cast<size_t>(N) * IC),
      dY(static_cast<size_t>(N) * OC), Y(static_cast<size_t>(N) * OC), dX(static_cast<size_t>(N) * IC);
  fill_normal(W, 1);
  fill_normal(X, 2);
  fill_normal(dY, 3);
  Buffer<uint8_t> mask(W.size());
  Sparse24Weight packed;
  std::vector<double> mask_t, pack_t;
  for (int r = 0; r < std::max(3, o.repeats / 2); ++r) {
    mask_t.push_back(time_ms([&] { sparse24::transposable_mask_24(W.data(), OC, IC, mask.data()); }));
    pack_t.push_back(time_ms([&] { sparse24_pack(packed, W.data(), mask.data(), OC, IC); }));
  }

  auto dense_fwd = [&] {
    cpu::sgemm(false, true, N, OC, IC, 1.0f, X.data(), IC, W.data(), IC, 0.0f, Y.data(), OC);
  };
  auto sparse_fwd = [&] { sparse24_matmul_forward(Y.data(), X.data(), packed, nullptr, N); };
  auto dense_bwd = [&] {
    cpu::sgemm(false, false, N, IC, OC, 1.0f, dY.data(), OC, W.data(), IC, 0.0f, dX.data(), IC);
  };
  auto sparse_bwd = [&] { sparse24_matmul_backward_input(dX.data(), dY.data(), packed, N, false); };

  const double flop = 2.0 * N * IC * OC;
  for (int which = 0; which < 2; ++which) {
    const auto [dense_ms, sparse_ms] = which == 0 ? interleaved(dense_fwd, sparse_fwd, o.repeats)
                                                  : interleaved(dense_bwd, sparse_bwd, o.repeats);
    Sparse24BenchRow row;
    row.layer = layer;
    row.product = which == 0 ? "forward" : "backward_input";
    row.N = N;
    row.IC = IC;
    row.OC = OC;
    row.dense_ms = dense_ms;
    row.sparse_ms = sparse_ms;
    row.dense_gflops = flop / (dense_ms * 1e6);
    row.sparse_gflops = flop / (sparse_ms * 1e6);
    row.ratio = dense_ms / sparse_ms;
    row.pack_ms = median(pack_t);
    row.mask_ms = median(mask_t);
    rows.push_back(row);
  }
}

}  // namespace

std::vector<Sparse24BenchRow> run_sparse24_benchmark(const Sparse24BenchOptions& options) {
  set_num_threads(options.threads);
  sparse24_set_isa(options.isa);
  std::vector<Sparse24BenchRow> rows;
  for (int N : options.rows)
    for (int C : options.channels) {
      bench_layer(rows, "fc1", N, C, 4 * C, options);
      bench_layer(rows, "fc2", N, 4 * C, C, options);
    }
  return rows;
}

std::string format_sparse24_table(const std::vector<Sparse24BenchRow>& rows) {
  std::string s = fmt::format("{:<4} {:<15} {:>5} {:>5} {:>5} {:>9} {:>9} {:>10} {:>10} {:>6} {:>8} {:>8}\n",
                              "layer", "product", "N", "IC", "OC", "dense ms", "2:4 ms",
                              "dense GF/s", "2:4 GF/s", "ratio", "pack ms", "mask ms");
  for (const auto& r : rows)
    s += fmt::format("{:<5} {:<15} {:>5} {:>5} {:>5} {:>9.3f} {:>9.3f} {:>10.1f} {:>10.1f} {:>6.2f} {:>8.3f} {:>8.3f}\n",
                     r.layer, r.product, r.N, r.IC, r.OC, r.dense_ms, r.sparse_ms, r.dense_gflops,
                     r.sparse_gflops, r.ratio, r.pack_ms, r.mask_ms);
  return s;
}

nlohmann::json sparse24_rows_to_json(const std::vector<Sparse24BenchRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows)
    out.push_back({{"layer", r.layer}, {"product", r.product}, {"N", r.N}, {"IC", r.IC},
                   {"OC", r.OC}, {"dense_ms", r.dense_ms}, {"sparse_ms", r.sparse_ms},
                   {"dense_gflops", r.dense_gflops}, {"sparse_gflops", r.sparse_gflops},
                   {"ratio", r.ratio}, {"pack_ms", r.pack_ms}, {"mask_ms", r.mask_ms}});
  return out;
}

}  // namespace frugal::kernels
