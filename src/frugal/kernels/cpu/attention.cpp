// Fused self-attention on CPU: the public entry points (kernels/ops.h) and the run-time
// choice between the AVX-512 and AVX2 instantiations of the tile loops (attention_tiles.h).
#include "frugal/kernels/cpu/attention.h"

#include <atomic>

#include "frugal/core/error.h"
#include "frugal/core/profile.h"
#include "frugal/kernels/ops.h"

namespace frugal::kernels {
namespace {

std::atomic<Isa> g_isa{Isa::Auto};

const attention_detail::IsaKernels& active_kernels() {
  return resolve_isa(g_isa.load(std::memory_order_relaxed)) == Isa::Avx512
             ? attention_detail::avx512_kernels()
             : attention_detail::avx2_kernels();
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
                       const AttentionPattern& pattern) {
  FRUGAL_PROFILE("attention fwd");
  active_kernels().forward(out, lse, qkv, B, T, C, NH, pattern);
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int B, int T, int C, int NH,
                        const AttentionPattern& pattern) {
  FRUGAL_PROFILE("attention bwd");
  active_kernels().backward(dqkv, dout, qkv, out, lse, B, T, C, NH, pattern);
}

Isa attention_set_isa(Isa isa) {
  check_isa_available(isa, "attention kernels");
  g_isa.store(isa);
  return resolve_isa(isa);
}

Isa attention_active_isa() { return resolve_isa(g_isa.load()); }

}  // namespace frugal::kernels
