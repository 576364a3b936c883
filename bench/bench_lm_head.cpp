// Benchmark of the lm_head kernels (the fused LM head + softmax cross-entropy, chunked over rows,
// and the logits alone): GFLOP/s on the final rows of a training step (N = B·T rows of C, a
// vocabulary of V real columns in Vp padded rows), next to the dense SGEMM rate of the logits'
// shape measured in the same run.
// FLOPs counted (the three GEMM-like products; exp, log and the softmax are not counted):
//   logits                 = inp · weight[:V]ᵀ                  = 2·N·C·V
//   forward (loss only)    = the logits                        = 2·N·C·V
//   forward + backward     = logits, dinp = g · W, dW += gᵀ · inp = 6·N·C·V
//   bf16 forward + backward: the same on the bf16 working copy of the weight (ops.h)
//   with a soft cap (model.logit_softcap = 30): the same FLOPs (the tanh not counted)
//   one rank's half of a vocabulary split over two (lm_head_cross_entropy_split, reductions the
//   identity)            = 6·N·C·V/2
// and the soft cap alone over the (N,V) logits in GB/s (read and written: 8·N·V bytes).
// Each rate is the best wall-clock time of `reps` calls (bench/kernel_bench.h).
// Usage: bench_lm_head [threads=2] [reps=5]
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "frugal/bench/kernel_bench.h"
#include "frugal/core/rng.h"
#include "frugal/core/threading.h"
#include "frugal/kernels/ops.h"

namespace {

namespace k = frugal::kernels;
using frugal::bench::best_seconds;
using frugal::bench::print;
using frugal::bench::random_floats;

void bench_lm_head(int N, int C, int V, int reps) {
  const int Vp = (V + 63) / 64 * 64;
  const std::vector<float> inp = random_floats(static_cast<size_t>(N) * C, 0),
                           weight = random_floats(static_cast<size_t>(Vp) * C, 1);
  frugal::Rng rng(7, 2);
  std::vector<int32_t> targets(N);
  for (int32_t& t : targets) t = static_cast<int32_t>(rng.below(V));
  std::vector<float> losses(N), dinp(static_cast<size_t>(N) * C), dweight(weight.size()),
      logits(static_cast<size_t>(N) * V);
  const double flops = 2.0 * N * C * V;
  std::printf("lm_head N=%d C=%d V=%d:", N, C, V);
  print("logits:", best_seconds([&] { k::lm_head_logits(logits.data(), inp.data(), weight.data(), N, C, V); }, reps),
        flops);
  print(" loss:", best_seconds([&] {
    k::lm_head_cross_entropy(losses.data(), nullptr, nullptr, inp.data(), weight.data(), targets.data(), N, C, V, 0.0f);
  }, reps), flops);
  print(" loss+backward:", best_seconds([&] {
    k::lm_head_cross_entropy(losses.data(), dinp.data(), dweight.data(), inp.data(), weight.data(), targets.data(),
                             N, C, V, 1.0f / N);
  }, reps), 3 * flops);
  std::vector<k::bf16> weight_bf16(weight.size());
  k::f32_to_bf16(weight_bf16.data(), weight.data(), weight.size());
  print(" bf16 loss+backward:", best_seconds([&] {
    k::lm_head_cross_entropy_bf16(losses.data(), dinp.data(), dweight.data(), inp.data(), weight_bf16.data(),
                                  targets.data(), N, C, V, 1.0f / N);
  }, reps), 3 * flops);
  print(" loss+backward softcap 30:", best_seconds([&] {
    k::lm_head_cross_entropy(losses.data(), dinp.data(), dweight.data(), inp.data(), weight.data(), targets.data(),
                             N, C, V, 1.0f / N, 30.0f);
  }, reps), 3 * flops);
  // One rank's half of a vocabulary split over two (tensor parallelism), the group's reductions
  // the identity: what a rank computes, without the communication.
  const int half = V / 2;
  const k::VocabSplit split{.first = 0, .whole = V, .all_reduce_max = [](float*, size_t) {},
                            .all_reduce_sum = [](float*, size_t) {}};
  print(" half-vocabulary split loss+backward:", best_seconds([&] {
    k::lm_head_cross_entropy_split(losses.data(), dinp.data(), dweight.data(), inp.data(), weight.data(),
                                   targets.data(), N, C, half, 1.0f / N, split);
  }, reps), 3 * flops * half / V);
  std::printf("\n");
  frugal::bench::print_bandwidth("lm_head_softcap 30 on the logits", best_seconds([&] {
    k::lm_head_softcap(logits.data(), logits.size(), 30.0f);
  }, reps), 8.0 * logits.size());
  std::printf("\n");
  frugal::bench::bench_sgemm(N, V, C, reps);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = frugal::bench::start(argc, argv, 5);
  for (const auto& p : frugal::bench::kPresets)
    if (p.rows() * p.C > 12 * 64 * 128) bench_lm_head(p.rows(), p.C, p.V, reps);  // M and L
}
