// Benchmark of the moe kernels (router top-k, permute / unpermute, grouped linear) on each preset's
// rows N = B·T and width C, with E = 8 experts, top 2, H = 2C hidden units per expert (the dense
// MLP's 4C split over the 2 active experts). The router reads and writes N·E values (ms); the
// permutations move rows (GB/s: each of the R = 2N rows of C floats read and written once; the
// combine reads the R rows and writes N; its backward reads dout's N rows and the R rows and
// writes R); the grouped linear's fc product (R rows, C -> H), forward and backward, next to one
// GEMM of the same R rows and shape (the rate the loop of per-expert GEMMs could reach) and on the
// experts' bf16 working copy. The router and permutations are the best wall-clock time of `reps`
// calls; the fc rows are medians of `reps` interleaved rounds (bench/kernel_bench.h).
// Usage: bench_moe [threads=2] [reps=20]
#include <cstdio>
#include <functional>
#include <numeric>
#include <vector>

#include "frugal/bench/kernel_bench.h"
#include "frugal/kernels/ops.h"

namespace {

namespace k = frugal::kernels;
using frugal::bench::best_seconds;
using frugal::bench::print;
using frugal::bench::print_bandwidth;
using frugal::bench::random_floats;

void bench_moe(int N, int C, int reps) {
  const int E = 8, K = 2, R = N * K, H = 2 * C;
  const std::vector<float> logits = random_floats(size_t(N) * E, 0), x = random_floats(size_t(N) * C, 1),
                           w = random_floats(size_t(E) * H * C, 2), dweight = random_floats(size_t(R), 3);
  std::vector<float> probs(size_t(N) * E), lse(N), weight(R), dlogits(size_t(N) * E), xp(size_t(R) * C),
      out(size_t(N) * C), h(size_t(R) * H);
  std::vector<int32_t> expert(R), pos(R), src(R), offsets(E + 1, 0);
  k::moe_router_forward(probs.data(), lse.data(), expert.data(), weight.data(), logits.data(), nullptr, N, E, K);
  for (int32_t e : expert) ++offsets[e + 1];
  std::partial_sum(offsets.begin(), offsets.end(), offsets.begin());
  std::vector<int32_t> next(offsets.begin(), offsets.end() - 1);
  for (int i = 0; i < R; ++i) {
    pos[i] = next[expert[i]]++;
    src[pos[i]] = i / K;
  }
  std::printf("moe N=%d C=%d E=%d k=%d H=%d:", N, C, E, K, H);
  std::printf("  router fwd %.3f ms", 1e3 * best_seconds([&] {
    k::moe_router_forward(probs.data(), lse.data(), expert.data(), weight.data(), logits.data(), nullptr, N, E, K);
  }, reps));
  std::printf("  bwd %.3f ms", 1e3 * best_seconds([&] {
    k::moe_router_backward(dlogits.data(), dweight.data(), probs.data(), lse.data(), expert.data(), weight.data(),
                           nullptr, 0.001f, N, E, K);
  }, reps));
  const double row_bytes = 4.0 * C;
  print_bandwidth(" permute", best_seconds([&] { k::moe_permute(xp.data(), x.data(), src.data(), R, C); }, reps),
                  2 * R * row_bytes);
  print_bandwidth(" unpermute", best_seconds([&] {
    k::moe_unpermute(out.data(), xp.data(), pos.data(), weight.data(), N, K, C, false);
  }, reps), (R + N) * row_bytes);
  std::vector<float> dxp(size_t(R) * C), dgate(R);
  print_bandwidth(" unpermute bwd", best_seconds([&] {
    k::moe_unpermute_backward(dxp.data(), dgate.data(), out.data(), xp.data(), pos.data(), weight.data(), N, K, C);
  }, reps), (N + 2 * R) * row_bytes);
  // The grouped linear's fc against one GEMM of the same rows and shape, fp32 and on the experts'
  // bf16 copy, interleaved (medians): forward 2·R·C·H FLOPs, backward (dinp and dweight) 4·R·C·H.
  std::vector<float> dh = random_floats(size_t(R) * H, 4), dw(w.size()), dx(size_t(R) * C);
  std::vector<k::bf16> w16(w.size());
  k::f32_to_bf16(w16.data(), w.data(), w.size());
  const std::vector<double> f = frugal::bench::interleaved_median_seconds(
      {[&] { k::moe_grouped_forward(h.data(), xp.data(), w.data(), nullptr, offsets.data(), E, C, H); },
       [&] { k::matmul_forward(h.data(), xp.data(), w.data(), nullptr, R, C, H); },
       [&] { k::moe_grouped_forward_bf16(h.data(), xp.data(), w16.data(), nullptr, offsets.data(), E, C, H); }},
      reps);
  const std::vector<double> b = frugal::bench::interleaved_median_seconds(
      {[&] {
         k::moe_grouped_backward(dx.data(), dw.data(), nullptr, dh.data(), xp.data(), w.data(), offsets.data(), E, C,
                                 H, false);
       },
       [&] { k::matmul_backward(dx.data(), dw.data(), nullptr, dh.data(), xp.data(), w.data(), R, C, H, false); },
       [&] {
         k::moe_grouped_backward_bf16(dx.data(), dw.data(), nullptr, dh.data(), xp.data(), w16.data(), offsets.data(),
                                      E, C, H, false);
       }},
      reps);
  const char* names[] = {"grouped", " one GEMM", " grouped bf16"};
  std::printf("\n  fc (R=%d rows, %d -> %d) forward:", R, C, H);
  for (int i = 0; i < 3; ++i) print(names[i], f[i], 2.0 * R * C * H);
  std::printf("\n  fc backward:");
  for (int i = 0; i < 3; ++i) print(names[i], b[i], 4.0 * R * C * H);
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = frugal::bench::start(argc, argv);
  for (const auto& p : frugal::bench::kPresets) bench_moe(p.rows(), p.C, reps);
}
