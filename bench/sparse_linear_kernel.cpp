// Unstructured sparse linear benchmark: the dense linear (kernels/ops.h matmul) vs the
// sparse_linear kernels, interleaved, medians.
#include "frugal/bench/sparse_linear_kernel.h"

#include <fmt/format.h>

#include <functional>

#include "frugal/core/memory.h"
#include "frugal/core/rng.h"
#include "frugal/core/threading.h"
#include "frugal/core/timer.h"

namespace frugal::kernels {
namespace {

void fill_normal(Buffer<float>& b, uint64_t seed) {
  Rng rng(seed, 0);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(rng.normal());
}

void bench_layer(std::vector<SparseLinearBenchRow>& rows, const char* layer, int N, int IC, int OC,
                 const SparseLinearBenchOptions& o) {
  const size_t wsize = static_cast<size_t>(OC) * IC;
  Buffer<float> W(wsize), dW(wsize), X(static_cast<size_t>(N) * IC), dY(static_cast<size_t>(N) * OC),
      Y(static_cast<size_t>(N) * OC), dX(static_cast<size_t>(N) * IC);
  fill_normal(W, 1);
  fill_normal(X, 2);
  fill_normal(dY, 3);
  Buffer<uint8_t> mask(wsize);
  SparseLinearWeight packed;
  const std::function<void()> dense[3] = {
      [&] { matmul_forward(Y.data(), X.data(), W.data(), nullptr, N, IC, OC); },
      [&] { matmul_backward(dX.data(), nullptr, nullptr, dY.data(), X.data(), W.data(), N, IC, OC, false); },
      [&] { matmul_backward(nullptr, dW.data(), nullptr, dY.data(), X.data(), W.data(), N, IC, OC, false); }};
  const std::function<void()> sparse[3] = {
      [&] { sparse_linear_forward(Y.data(), X.data(), packed, nullptr, N); },
      [&] { sparse_linear_backward_input(dX.data(), dY.data(), packed, N, false); },
      [&] { sparse_linear_backward_weight(dW.data(), dY.data(), X.data(), packed, N); }};
  for (double density : o.densities) {
    Rng rng(4, static_cast<uint64_t>(density * 1e6));
    for (size_t i = 0; i < wsize; ++i) mask[i] = rng.uniform() < density;
    std::vector<double> pack_t, refresh_t;
    for (int r = 0; r < std::max(3, o.repeats); ++r) {
      pack_t.push_back(time_ms([&] { sparse_linear_pack(packed, W.data(), mask.data(), OC, IC); }));
      refresh_t.push_back(time_ms([&] { sparse_linear_refresh_values(packed, W.data()); }));
    }
    std::vector<double> td[3], ts[3];
    for (int p = 0; p < 3; ++p) {  // warm-up
      dense[p]();
      sparse[p]();
    }
    for (int r = 0; r < o.repeats; ++r)
      for (int p = 0; p < 3; ++p) {
        td[p].push_back(time_ms(dense[p]));
        ts[p].push_back(time_ms(sparse[p]));
      }
    SparseLinearBenchRow row;
    row.layer = layer;
    row.N = N;
    row.IC = IC;
    row.OC = OC;
    row.density = sparse_linear_density(packed);
    double dense_sum = 0, sparse_sum = 0;
    for (int p = 0; p < 3; ++p) {
      row.dense_ms[p] = median(td[p]);
      row.sparse_ms[p] = median(ts[p]);
      row.ratio[p] = row.dense_ms[p] / row.sparse_ms[p];
      dense_sum += row.dense_ms[p];
      sparse_sum += row.sparse_ms[p];
    }
    row.total_ratio = dense_sum / sparse_sum;
    row.pack_ms = median(pack_t);
    row.refresh_ms = median(refresh_t);
    rows.push_back(row);
  }
}

}  // namespace

std::vector<SparseLinearBenchRow> run_sparse_linear_benchmark(const SparseLinearBenchOptions& options) {
  set_num_threads(options.threads);
  sparse_linear_set_isa(options.isa);
  std::vector<SparseLinearBenchRow> rows;
  for (int N : options.rows)
    for (int C : options.channels) {
      bench_layer(rows, "fc1", N, C, 4 * C, options);
      bench_layer(rows, "fc2", N, 4 * C, C, options);
      bench_layer(rows, "qkv", N, C, 3 * C, options);
    }
  return rows;
}

std::string format_sparse_linear_table(const std::vector<SparseLinearBenchRow>& rows) {
  std::string s = fmt::format(
      "{:<5} {:>5} {:>5} {:>5} {:>7} | {:>8} {:>8} {:>5} | {:>8} {:>8} {:>5} | {:>8} {:>8} {:>5} | "
      "{:>5} | {:>7} {:>7}\n",
      "layer", "N", "IC", "OC", "density", "fwd ms", "sparse", "x", "dX ms", "sparse", "x", "dW ms",
      "sparse", "x", "all x", "pack ms", "refr ms");
  for (const auto& r : rows)
    s += fmt::format(
        "{:<5} {:>5} {:>5} {:>5} {:>7.3f} | {:>8.3f} {:>8.3f} {:>5.2f} | {:>8.3f} {:>8.3f} {:>5.2f} | "
        "{:>8.3f} {:>8.3f} {:>5.2f} | {:>5.2f} | {:>7.2f} {:>7.3f}\n",
        r.layer, r.N, r.IC, r.OC, r.density, r.dense_ms[0], r.sparse_ms[0], r.ratio[0], r.dense_ms[1],
        r.sparse_ms[1], r.ratio[1], r.dense_ms[2], r.sparse_ms[2], r.ratio[2], r.total_ratio,
        r.pack_ms, r.refresh_ms);
  return s;
}

nlohmann::json sparse_linear_rows_to_json(const std::vector<SparseLinearBenchRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  const char* products[3] = {"forward", "backward_input", "backward_weight"};
  for (const auto& r : rows) {
    nlohmann::json row = {{"layer", r.layer}, {"N", r.N}, {"IC", r.IC}, {"OC", r.OC},
                          {"density", r.density}, {"total_ratio", r.total_ratio},
                          {"pack_ms", r.pack_ms}, {"refresh_ms", r.refresh_ms}};
    for (int p = 0; p < 3; ++p)
      row[products[p]] = {{"dense_ms", r.dense_ms[p]}, {"sparse_ms", r.sparse_ms[p]},
                          {"ratio", r.ratio[p]}};
    out.push_back(row);
  }
  return out;
}

}  // namespace frugal::kernels
