// Fused self-attention on CPU: the public entry points (kernels/ops.h) and the run-time
// choice between the AVX-512 and AVX2 instantiations of the tile loops (attention_tiles.h).
#include "frugal/kernels/cpu/attention.h"

#include <atomic>

#include "frugal/core/error.h"
#include "frugal/core/profile.h"
#include "frugal/kernels/ops.h"

namespace frugal::kernels {
namespace {

bool cpu_has_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

std::atomic<AttentionIsa> g_isa{AttentionIsa::Auto};

AttentionIsa resolve(AttentionIsa isa) {
  if (isa != AttentionIsa::Auto) return isa;
  return cpu_has_avx512() ? AttentionIsa::Avx512 : AttentionIsa::Avx2;
}

const attention_detail::IsaKernels& active_kernels() {
  return resolve(g_isa.load(std::memory_order_relaxed)) == AttentionIsa::Avx512
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

AttentionIsa attention_set_isa(AttentionIsa isa) {
  FRUGAL_CHECK(isa != AttentionIsa::Avx512 || cpu_has_avx512(),
               "the AVX-512 attention kernels were requested but this CPU has no AVX-512F; use "
               "Auto or Avx2");
  g_isa.store(isa);
  return resolve(isa);
}

AttentionIsa attention_active_isa() { return resolve(g_isa.load()); }

const char* attention_isa_name(AttentionIsa isa) {
  switch (isa) {
    case AttentionIsa::Avx2: return "avx2";
    case AttentionIsa::Avx512: return "avx512";
    default: return "auto";
  }
}

}  // namespace frugal::kernels
