// 2:4 sparse linear products on CPU: packing of W and Wᵀ, the panel driver (OpenMP), the
// transposes around the micro-kernel, and the instruction-set dispatch.
#include "frugal/kernels/cpu/sparse24.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>

#include "frugal/core/error.h"
#include "frugal/kernels/cpu/sparse24_microkernel.h"

namespace frugal::kernels {
namespace {

using sparse24_detail::IsaKernel;
using sparse24_detail::kPanelRowBytes;
using sparse24_detail::kPanelWidth;

// ---- instruction-set selection ----

bool cpu_has_avx512() { return __builtin_cpu_supports("avx512f"); }

std::atomic<Sparse24Isa> g_isa{Sparse24Isa::Auto};

Sparse24Isa resolve(Sparse24Isa isa) {
  if (isa == Sparse24Isa::Auto) return cpu_has_avx512() ? Sparse24Isa::Avx512 : Sparse24Isa::Avx2;
  return isa;
}

const IsaKernel& active_kernel() {
  return resolve(g_isa.load()) == Sparse24Isa::Avx512 ? sparse24_detail::avx512_kernel()
                                                      : sparse24_detail::avx2_kernel();
}

// ---- packing ----

void resize_matrix(Sparse24Matrix& m, int rows, int cols) {
  const size_t units = static_cast<size_t>(rows / 4) * (cols / 4);
  if (m.rows != rows || m.cols != cols || m.offsets.size() != units * 8) {
    m.values.resize(units * 8);
    m.offsets.resize(units * 8);
  }
  m.rows = rows;
  m.cols = cols;
}

// Packs one unit (8 values, 8 offsets) from a 4x4 block: row r of the unit keeps the entries
// at(r, c) whose bit c of keep[r] is set. Branch-free (mask bits are unpredictable); returns
// false when some keep[r] does not have exactly two bits.
template <class At>
bool pack_unit(float* values, uint16_t* offsets, const uint32_t keep[4], const At& at) {
  bool ok = true;
  for (int r = 0; r < 4; ++r) {
    const uint32_t k = keep[r] | 0x30u;  // guard bits keep both ctz defined for bad masks
    const int c0 = __builtin_ctz(k), c1 = __builtin_ctz(k & (k - 1)) & 3;
    ok &= __builtin_popcount(keep[r]) == 2;
    values[2 * r] = at(r, c0 & 3);
    values[2 * r + 1] = at(r, c1);
    offsets[2 * r] = static_cast<uint16_t>((c0 & 3) * kPanelRowBytes);
    offsets[2 * r + 1] = static_cast<uint16_t>(c1 * kPanelRowBytes);
  }
  return ok;
}

// ---- transposes (8x8 AVX blocks, scalar edges) ----

// Transposes the 8x8 block in v in place: v[j][i] <- v[i][j].
inline void transpose8x8(__m256 v[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i)
    for (int h = 0; h < 2; ++h) {
      const __m256 a = t[4 * i + h], b = t[4 * i + 2 + h];
      u[4 * i + 2 * h] = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0));
      u[4 * i + 2 * h + 1] = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2));
    }
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x20);
    v[4 + i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x31);
  }
}

// dst (cols, rows) = (or += when Accumulate) src (rows, cols)ᵀ + col_bias (rows) or null.
// The outer loop runs over bands of 8 dst rows, so the dst rows are written as streams: dst
// strides are often multiples of 4 KiB, and scattering across many dst rows at once would thrash
// one L1 set.
template <bool Accumulate>
void transpose_into(float* dst, size_t dst_ld, const float* src, size_t src_ld, int rows, int cols,
                    const float* col_bias) {
  const int rows8 = rows / 8 * 8, cols8 = cols / 8 * 8;
  for (int j = 0; j < cols8; j += 8) {
    for (int i = 0; i < rows8; i += 8) {
      __m256 v[8];
      for (int r = 0; r < 8; ++r) v[r] = _mm256_loadu_ps(src + (i + r) * src_ld + j);
      transpose8x8(v);
      const __m256 bias = col_bias ? _mm256_loadu_ps(col_bias + i) : _mm256_setzero_ps();
      for (int c = 0; c < 8; ++c) {
        float* d = dst + (j + c) * dst_ld + i;
        __m256 x = _mm256_add_ps(v[c], bias);
        if constexpr (Accumulate) x = _mm256_add_ps(x, _mm256_loadu_ps(d));
        _mm256_storeu_ps(d, x);
      }
    }
  }
  auto scalar = [&](int i, int j) {
    float x = src[i * src_ld + j] + (col_bias ? col_bias[i] : 0.0f);
    float& d = dst[j * dst_ld + i];
    d = Accumulate ? d + x : x;
  };
  for (int j = cols8; j < cols; ++j)
    for (int i = 0; i < rows; ++i) scalar(i, j);
  for (int j = 0; j < cols8; ++j)
    for (int i = rows8; i < rows; ++i) scalar(i, j);
}

// ---- driver ----

// Scratch of one thread, grown on demand and kept between calls: its input panel P (K, NR) and
// the outᵀ tile C (R, NR) it accumulates.
struct Scratch {
  Buffer<float> panel, c;
  static float* ensure(Buffer<float>& b, size_t n) {
    if (b.size() < n) b.resize(n);
    return b.data();
  }
};

// out (N,R) = (or += when accumulate) inp (N,K) · S(A)ᵀ + bias (R) or null.
// Threads take whole panels of NR input rows dynamically: no barriers, and a thread slowed down
// by other load on a shared machine simply takes fewer panels. Each output element is computed
// by one thread in a fixed order, so results do not depend on the thread count.
void sparse24_product(float* out, const float* inp, const Sparse24Matrix& A, const float* bias,
                      int N, bool accumulate) {
  const IsaKernel& kernel = active_kernel();
  const int R = A.rows, K = A.cols, G = K / 4, tiles = R / 4;
  constexpr int NR = kPanelWidth;
  const int panels = (N + NR - 1) / NR;
  if (N <= 0 || R == 0) return;

#pragma omp parallel
  {
    static thread_local Scratch scratch;
    float* P = Scratch::ensure(scratch.panel, static_cast<size_t>(K) * NR);
    float* C = Scratch::ensure(scratch.c, static_cast<size_t>(R) * NR);
#pragma omp for schedule(dynamic, 1)
    for (int p = 0; p < panels; ++p) {
      const int n0 = p * NR, rows = std::min(NR, N - n0);
      transpose_into<false>(P, NR, inp + static_cast<size_t>(n0) * K, K, rows, K, nullptr);
      if (rows < NR)
        for (int k = 0; k < K; ++k)
          std::fill(P + static_cast<size_t>(k) * NR + rows, P + static_cast<size_t>(k + 1) * NR, 0.0f);
      for (int g0 = 0; g0 < G; g0 += kernel.chunk_groups) {
        const int g1 = std::min(G, g0 + kernel.chunk_groups);
        kernel.chunk(C, P + static_cast<size_t>(4) * g0 * NR, A.values.data(), A.offsets.data(),
                     G, 0, tiles, g0, g1, g0 == 0);
      }
      float* dst = out + static_cast<size_t>(n0) * R;
      if (accumulate)
        transpose_into<true>(dst, R, C, NR, R, rows, bias);
      else
        transpose_into<false>(dst, R, C, NR, R, rows, bias);
    }
  }
}

void check_packed(const Sparse24Weight& w, const char* what) {
  FRUGAL_CHECK(w.OC > 0 && w.w.rows == w.OC, "{}: the Sparse24Weight is not packed; call "
               "sparse24_pack first", what);
}

}  // namespace

void sparse24_pack(Sparse24Weight& out, const float* W, const uint8_t* mask, int OC, int IC,
                   bool transposable) {
  FRUGAL_CHECK(OC > 0 && IC > 0 && OC % 4 == 0 && IC % 4 == 0,
               "2:4 packing needs a weight with both dimensions positive and divisible by 4, got "
               "({}, {}); keep this layer dense",
               OC, IC);
  out.OC = OC;
  out.IC = IC;
  resize_matrix(out.w, OC, IC);
  if (transposable)
    resize_matrix(out.wt, IC, OC);
  else
    out.wt = Sparse24Matrix{};
  const int GO = OC / 4, GI = IC / 4;
  long long bad_unit = -1;
#pragma omp parallel for schedule(static) reduction(max : bad_unit)
  for (int bo = 0; bo < GO; ++bo) {
    for (int bi = 0; bi < GI; ++bi) {
      const size_t origin = static_cast<size_t>(4 * bo) * IC + 4 * bi;
      auto w_at = [&](int r, int c) { return W[origin + static_cast<size_t>(r) * IC + c]; };
      auto wt_at = [&](int r, int c) { return w_at(c, r); };
      uint32_t rows[4], cols[4] = {0, 0, 0, 0};  // kept bits of each block row and column
      for (int r = 0; r < 4; ++r) {
        const uint8_t* m = mask + origin + static_cast<size_t>(r) * IC;
        rows[r] = (m[0] != 0) | (m[1] != 0) << 1 | (m[2] != 0) << 2 | (m[3] != 0) << 3;
        for (int c = 0; c < 4; ++c) cols[c] |= ((rows[r] >> c) & 1u) << r;
      }
      const size_t unit_w = static_cast<size_t>(bo) * GI + bi, unit_t = static_cast<size_t>(bi) * GO + bo;
      const bool ok_w = pack_unit(out.w.values.data() + unit_w * 8, out.w.offsets.data() + unit_w * 8, rows, w_at);
      const bool ok = ok_w && (!transposable || pack_unit(out.wt.values.data() + unit_t * 8,
                                                           out.wt.offsets.data() + unit_t * 8, cols, wt_at));
      if (!ok) bad_unit = std::max(bad_unit, static_cast<long long>(unit_w));
    }
  }
  if (bad_unit >= 0) {
    out.OC = 0;
    fail("2:4 packing: the mask block at rows {}.., columns {}.. does not keep exactly two entries "
         "in every row{}; build the mask with sparse24::{}", 4 * (bad_unit / GI), 4 * (bad_unit % GI),
         transposable ? " and column" : "", transposable ? "transposable_mask_24" : "row_mask_24");
  }
}

void sparse24_matmul_forward(float* out, const float* inp, const Sparse24Weight& weight,
                             const float* bias, int N) {
  check_packed(weight, "sparse24_matmul_forward");
  sparse24_product(out, inp, weight.w, bias, N, false);
}

void sparse24_matmul_backward_input(float* dinp, const float* dout, const Sparse24Weight& weight,
                                    int N, bool accumulate) {
  check_packed(weight, "sparse24_matmul_backward_input");
  FRUGAL_CHECK(weight.wt.rows == weight.IC, "sparse24_matmul_backward_input: the weight was packed "
               "row-only (transposable = false); use a transposable mask or a dense input gradient");
  sparse24_product(dinp, dout, weight.wt, nullptr, N, accumulate);
}

Sparse24Isa sparse24_set_isa(Sparse24Isa isa) {
  FRUGAL_CHECK(isa != Sparse24Isa::Avx512 || cpu_has_avx512(),
               "the AVX-512 2:4 kernel was requested but this CPU has no AVX-512F; use Auto or Avx2");
  g_isa.store(isa);
  return resolve(isa);
}

Sparse24Isa sparse24_active_isa() { return resolve(g_isa.load()); }

const char* sparse24_isa_name(Sparse24Isa isa) {
  switch (isa) {
    case Sparse24Isa::Avx2: return "avx2";
    case Sparse24Isa::Avx512: return "avx512";
    default: return "auto";
  }
}

}  // namespace frugal::kernels
