// FFN-block benchmark, dense vs 2:4; see sparse24_ffn.h.
#include "frugal/bench/sparse24_ffn.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "frugal/core/memory.h"
#include "frugal/core/rng.h"
#include "frugal/core/timer.h"
#include "frugal/kernels/ops.h"
#include "frugal/methods/sparse24/mask.h"
#include "frugal/model/formats/dense.h"
#include "frugal/model/formats/sparse24.h"

namespace frugal::sparse24 {
namespace {

void fill_normal(Buffer<float>& b, uint64_t seed, float scale) {
  Rng rng(seed, 0);
  for (size_t i = 0; i < b.size(); ++i) b[i] = scale * static_cast<float>(rng.normal());
}

// One FFN block's tensors: x (N,C) → h = x·W1ᵀ + b1 (N,H) → a = gelu(h) → y = a·W2ᵀ + b2 (N,C).
struct Ffn {
  int N, C, H;
  Buffer<float> x, w1, b1, w2, b2, h, a, y, dy, da, dh, dx, dw1, db1, dw2, db2;
  Ffn(int N_, int C_) : N(N_), C(C_), H(4 * C_) {
    const size_t n = N, c = C, hh = H;
    for (auto [buf, size] : {std::pair{&x, n * c}, {&w1, hh * c}, {&b1, hh}, {&w2, c * hh}, {&b2, c},
                             {&h, n * hh}, {&a, n * hh}, {&y, n * c}, {&dy, n * c}, {&da, n * hh},
                             {&dh, n * hh}, {&dx, n * c}, {&dw1, hh * c}, {&db1, hh}, {&dw2, c * hh},
                             {&db2, c}})
      buf->resize(size);
    fill_normal(x, 1, 1.0f);
    fill_normal(w1, 2, 0.02f);
    fill_normal(w2, 3, 0.02f);
    fill_normal(dy, 4, 1.0f);
  }
  // Forward and backward through the given formats.
  void step(LinearFormat& f1, LinearFormat& f2) {
    f1.forward(h.data(), x.data(), w1.data(), b1.data(), N, C, H);
    kernels::gelu_forward(a.data(), h.data(), h.size());
    f2.forward(y.data(), a.data(), w2.data(), b2.data(), N, H, C);
    f2.backward(da.data(), dw2.data(), db2.data(), dy.data(), a.data(), w2.data(), N, H, C, false);
    kernels::gelu_backward(dh.data(), da.data(), h.data(), h.size());
    f1.backward(dx.data(), dw1.data(), db1.data(), dh.data(), x.data(), w1.data(), N, C, H, false);
  }
};

FfnBenchRow bench_block(int N, int C, const FfnBenchOptions& o) {
  Ffn ffn(N, C);
  const int H = 4 * C;
  std::vector<uint8_t> m1(static_cast<size_t>(H) * C), m2(m1.size());
  // A mask update: the search, then the layout of both packings (the formats do the latter in
  // their next refresh; here it is timed on scratch packings).
  kernels::Sparse24Packed layout1 = kernels::sparse24_new_weight(), layout2 = kernels::sparse24_new_weight();
  auto search = [&] {
    transposable_mask_24(ffn.w1.data(), H, C, m1.data());
    transposable_mask_24(ffn.w2.data(), C, H, m2.data());
    kernels::sparse24_pack(*layout1, ffn.w1.data(), m1.data(), H, C);
    kernels::sparse24_pack(*layout2, ffn.w2.data(), m2.data(), C, H);
  };
  search();
  Sparse24Format f1(H, C, m1, true, false), f2(C, H, m2, true, false);
  auto repack = [&] {
    f1.refresh(ffn.w1.data(), H, C);
    f2.refresh(ffn.w2.data(), C, H);
  };
  auto decay = [&] {
    add_masked_decay(ffn.dw1.data(), ffn.w1.data(), m1.data(), m1.size(), o.decay);
    add_masked_decay(ffn.dw2.data(), ffn.w2.data(), m2.data(), m2.size(), o.decay);
  };
  repack();
  DenseFormat dense_format;
  ffn.step(dense_format, dense_format);
  ffn.step(f1, f2);
  std::vector<double> dense, sparse, pack, decayed, mask;
  for (int r = 0; r < o.repeats; ++r) {
    dense.push_back(time_ms([&] { ffn.step(dense_format, dense_format); }));
    sparse.push_back(time_ms([&] { ffn.step(f1, f2); }));
    pack.push_back(time_ms(repack));
    decayed.push_back(time_ms(decay));
    if (r < std::max(3, o.repeats / 3)) mask.push_back(time_ms(search));
  }
  FfnBenchRow row;
  row.N = N;
  row.C = C;
  row.dense_ms = median(dense);
  row.sparse_ms = median(sparse);
  row.repack_ms = median(pack);
  row.decay_ms = median(decayed);
  row.mask_ms = median(mask);
  row.sparse_step_ms = row.sparse_ms + row.repack_ms + row.decay_ms + row.mask_ms / o.mask_interval;
  row.ratio = row.dense_ms / row.sparse_step_ms;
  return row;
}

}  // namespace

std::vector<FfnBenchRow> run_ffn_benchmark(const FfnBenchOptions& options) {
  std::vector<FfnBenchRow> rows;
  for (int N : options.rows)
    for (int C : options.channels) rows.push_back(bench_block(N, C, options));
  return rows;
}

std::string format_ffn_table(const std::vector<FfnBenchRow>& rows, int mask_interval) {
  std::string s = fmt::format("FFN block fwd+bwd (fc 4CxC, GELU, fc_proj Cx4C); 2:4 step = fwd+bwd + repack + "
                              "masked decay + mask search / {}\n{:>5} {:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>11} {:>6}\n",
                              mask_interval, "N", "C", "dense ms", "2:4 ms", "repack ms", "decay ms",
                              "mask ms", "2:4 step ms", "ratio");
  for (const auto& r : rows)
    s += fmt::format("{:>5} {:>5} {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f} {:>11.3f} {:>6.2f}\n", r.N, r.C,
                     r.dense_ms, r.sparse_ms, r.repack_ms, r.decay_ms, r.mask_ms, r.sparse_step_ms, r.ratio);
  return s;
}

nlohmann::json ffn_rows_to_json(const std::vector<FfnBenchRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows)
    out.push_back({{"N", r.N}, {"C", r.C}, {"dense_ms", r.dense_ms}, {"sparse_ms", r.sparse_ms},
                   {"repack_ms", r.repack_ms}, {"decay_ms", r.decay_ms}, {"mask_ms", r.mask_ms},
                   {"sparse_step_ms", r.sparse_step_ms}, {"ratio", r.ratio}});
  return out;
}

}  // namespace frugal::sparse24
