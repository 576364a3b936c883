// SGEMM dispatch to oneDNN or OpenBLAS; see gemm.h. The only BLAS/oneDNN call site of frugal.
#include "frugal/kernels/cpu/gemm.h"

#include <cblas.h>
#include <omp.h>
#ifdef FRUGAL_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl.hpp>
#endif

#include <algorithm>
#include <compare>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "frugal/core/error.h"
#include "frugal/core/threading.h"
#include "frugal/kernels/cpu/isa.h"

namespace frugal::kernels::cpu {
namespace {

// OpenBLAS keeps a thread count of its own: from the moment this file is loaded (before main) it
// follows frugal::set_num_threads, which knows nothing of the BLAS.
const bool g_blas_follows_thread_count =
    (set_thread_count_follower(&openblas_set_num_threads), true);

constexpr const char* kNoOneDnn = "this build has no oneDNN; apt-get install libdnnl-dev and rebuild";

GemmBackend default_backend() {
  const char* env = std::getenv("FRUGAL_GEMM");
  const std::string choice = env ? env : "";
  if (choice == "openblas") return GemmBackend::OpenBLAS;
#ifdef FRUGAL_HAVE_ONEDNN
  if (choice.empty() || choice == "onednn") return GemmBackend::OneDNN;
#else
  if (choice.empty()) return GemmBackend::OpenBLAS;
#endif
  fail("FRUGAL_GEMM = \"{}\" is not available; use \"openblas\"{}", choice,
#ifdef FRUGAL_HAVE_ONEDNN
       " or \"onednn\""
#else
       " (this build has no oneDNN: apt-get install libdnnl-dev and rebuild)"
#endif
  );
}

GemmBackend& backend() {
  static GemmBackend b = default_backend();
  return b;
}

#ifdef FRUGAL_HAVE_ONEDNN
// Caps oneDNN's JIT at max_isa() (FRUGAL_ISA), before its first kernel is generated: the two
// entry points below call it first.
void cap_onednn_isa() {
  static const bool capped = [] {
    if (max_isa() == Isa::Avx2) dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2);
    return true;
  }();
  (void)capped;
}

// oneDNN matmul primitives, created (and JIT-compiled) on the first call of a shape and kept.
struct MatmulShape {
  bool trans_a, trans_b, accumulate, bias, bf16;  // bf16: A and B are bf16 (C, bias fp32)
  int M, N, K, lda, ldb, ldc, threads;  // the primitive's parallel split depends on the threads
  auto operator<=>(const MatmulShape&) const = default;
};

class MatmulPrimitives {
 public:
  // Beyond this many shapes (inference over ever-new prompt lengths) the cache starts over.
  static constexpr size_t kMaxShapes = 256;

  void run(const MatmulShape& s, const void* A, const void* B, const float* bias, float* C) {
    using dnnl::memory;
    const std::shared_ptr<const Entry> entry = find(s);  // stays valid if another call clears
    const Entry& e = *entry;
    memory a(e.a, engine_, const_cast<void*>(A)), b(e.b, engine_, const_cast<void*>(B)), c(e.c, engine_, C);
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
    if (s.bias) args.emplace(DNNL_ARG_BIAS, memory(e.bias, engine_, const_cast<float*>(bias)));
    dnnl::stream stream(engine_);
    e.matmul.execute(stream, args);
    stream.wait();
  }

  // The implementation oneDNN chose for shape s ("brg:avx512_core_bf16", ...); throws dnnl::error
  // when it has none.
  std::string implementation(const MatmulShape& s) { return find(s)->implementation; }

 private:
  struct Entry {
    dnnl::memory::desc a, b, c, bias;
    dnnl::matmul matmul;
    std::string implementation;
  };

  std::shared_ptr<const Entry> find(const MatmulShape& s) {
    std::lock_guard lock(mutex_);
    auto it = primitives_.find(s);
    if (it == primitives_.end()) {
      if (primitives_.size() >= kMaxShapes) primitives_.clear();
      it = primitives_.emplace(s, std::make_shared<const Entry>(create(s))).first;
    }
    return it->second;
  }

  Entry create(const MatmulShape& s) const {
    using dnnl::memory;
    // Row-major operands by strides: X (R,C) is strides {ld, 1}, its transpose view {1, ld}.
    const auto view = [](int rows, int cols, bool transposed, int ld, memory::data_type type) {
      return memory::desc({rows, cols}, type, transposed ? memory::dims{1, ld} : memory::dims{ld, 1});
    };
    const auto f32 = memory::data_type::f32, operands = s.bf16 ? memory::data_type::bf16 : f32;
    Entry e{view(s.M, s.K, s.trans_a, s.lda, operands), view(s.K, s.N, s.trans_b, s.ldb, operands),
            view(s.M, s.N, false, s.ldc, f32), s.bias ? view(1, s.N, false, s.N, f32) : memory::desc(), {}};
    dnnl::post_ops ops;
    if (s.accumulate) ops.append_sum(1.0f);
    dnnl::primitive_attr attr;
    attr.set_post_ops(ops);
#if DNNL_VERSION_MAJOR >= 3
    const dnnl::matmul::primitive_desc pd(engine_, e.a, e.b, e.bias, e.c, attr);
#else
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(e.a, e.b, e.bias, e.c), attr, engine_);
#endif
    e.matmul = dnnl::matmul(pd);
    e.implementation = pd.impl_info_str();
    return e;
  }

  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  std::mutex mutex_;
  std::map<MatmulShape, std::shared_ptr<const Entry>> primitives_;
};

MatmulPrimitives& primitives() {
  static MatmulPrimitives cache;
  return cache;
}

// sgemm's choice between oneDNN's two paths, from bench_matmul on the training step's shapes
// (docs/performance.md): dnnl_sgemm is slow on C = A·Bᵀ when the inner dimension is the longer
// one (the forward of fc_proj: 139-189 GFLOP/s against 213-223 for the matmul primitive on
// the S, M and L steps), and as fast or faster everywhere else. Few rows (decoding) stay on
// dnnl_sgemm, which needs no primitive per row count.
bool prefers_matmul_primitive(bool trans_a, bool trans_b, int M, int N, int K, float alpha, float beta) {
  // Inside a parallel region (a call per thread) dnnl_sgemm, which keeps nothing between calls: a
  // primitive's library-managed scratchpad is not made for concurrent executions.
  return !trans_a && trans_b && K >= N && M >= 128 && alpha == 1.0f && (beta == 0.0f || beta == 1.0f) &&
         !omp_in_parallel();
}
#endif

}  // namespace

bool onednn_available() {
#ifdef FRUGAL_HAVE_ONEDNN
  return true;
#else
  return false;
#endif
}

void onednn_sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                  const float* B, int ldb, float beta, float* C, int ldc) {
#ifdef FRUGAL_HAVE_ONEDNN
  cap_onednn_isa();
  const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda,
                                          B, ldb, beta, C, ldc);
  FRUGAL_CHECK(status == dnnl_success, "internal: oneDNN sgemm failed with status {} for M={} N={} K={}",
               static_cast<int>(status), M, N, K);
#else
  (void)trans_a, (void)trans_b, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B, (void)ldb,
      (void)beta, (void)C, (void)ldc;
  fail("{}", kNoOneDnn);
#endif
}

void onednn_matmul(bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B,
                   int ldb, const float* bias, bool accumulate, float* C, int ldc) {
#ifdef FRUGAL_HAVE_ONEDNN
  cap_onednn_isa();
  primitives().run({trans_a, trans_b, accumulate, bias != nullptr, false, M, N, K, lda, ldb, ldc, omp_get_max_threads()},
                   A, B, bias, C);
#else
  (void)trans_a, (void)trans_b, (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)ldb, (void)bias,
      (void)accumulate, (void)C, (void)ldc;
  fail("{}", kNoOneDnn);
#endif
}

std::string onednn_bf16_matmul_isa() {
#ifdef FRUGAL_HAVE_ONEDNN
  static const std::string isa = [] {
    cap_onednn_isa();
    try {
      const std::string impl = primitives().implementation({false, true, false, false, true, 64, 64, 64, 64, 64, 64, 1});
      // "brg:avx512_core_bf16": a JIT kernel; oneDNN's reference loops ("ref:any") are no path.
      return impl.starts_with("ref") ? std::string() : impl.substr(impl.find(':') + 1);
    } catch (const dnnl::error&) {
      return std::string();
    }
  }();
  return backend() == GemmBackend::OneDNN ? isa : std::string();
#else
  return {};
#endif
}

void onednn_matmul_bf16(bool trans_a, bool trans_b, int M, int N, int K, const bf16* A, int lda, const bf16* B,
                        int ldb, const float* bias, bool accumulate, float* C, int ldc) {
  FRUGAL_CHECK(!onednn_bf16_matmul_isa().empty(), "internal: oneDNN has no bf16 matmul here");
#ifdef FRUGAL_HAVE_ONEDNN
  primitives().run({trans_a, trans_b, accumulate, bias != nullptr, true, M, N, K, lda, ldb, ldc, omp_get_max_threads()},
                   A, B, bias, C);
#else
  (void)trans_a, (void)trans_b, (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)ldb, (void)bias,
      (void)accumulate, (void)C, (void)ldc;
#endif
}

void sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
           const float* B, int ldb, float beta, float* C, int ldc) {
#ifdef FRUGAL_HAVE_ONEDNN
  if (backend() == GemmBackend::OneDNN) {
    if (prefers_matmul_primitive(trans_a, trans_b, M, N, K, alpha, beta))
      onednn_matmul(trans_a, trans_b, M, N, K, A, lda, B, ldb, nullptr, beta == 1.0f, C, ldc);
    else
      onednn_sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
#endif
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void ssyrk(bool trans, int N, int K, float alpha, const float* A, int lda, float beta, float* C, int ldc) {
  cblas_ssyrk(CblasRowMajor, CblasUpper, trans ? CblasTrans : CblasNoTrans, N, K, alpha, A, lda, beta, C, ldc);
  constexpr int kTile = 32;  // the lower triangle from the upper, tile by tile (a column walk would miss the cache)
  for (int ib = 0; ib < N; ib += kTile)
    for (int jb = 0; jb <= ib; jb += kTile)
      for (int i = ib; i < std::min(ib + kTile, N); ++i)
        for (int j = jb; j < std::min(jb + kTile, i); ++j) C[size_t(i) * ldc + j] = C[size_t(j) * ldc + i];
}

void gemm_nt_bias(int M, int N, int K, const float* A, const float* B, const float* bias, float* C) {
#ifdef FRUGAL_HAVE_ONEDNN
  if (backend() == GemmBackend::OneDNN && prefers_matmul_primitive(false, true, M, N, K, 1.0f, 0.0f)) {
    onednn_matmul(false, true, M, N, K, A, K, B, K, bias, false, C, N);
    return;
  }
#endif
  float beta = 0.0f;
  if (bias) {  // broadcast first, the GEMM adds
#pragma omp parallel for schedule(static) if (static_cast<long>(M) * N >= (1 << 16))
    for (int i = 0; i < M; ++i) std::memcpy(C + static_cast<size_t>(i) * N, bias, sizeof(float) * N);
    beta = 1.0f;
  }
  sgemm(false, true, M, N, K, 1.0f, A, K, B, K, beta, C, N);
}

GemmBackend gemm_backend() { return backend(); }

void set_gemm_backend(GemmBackend b) {
  FRUGAL_CHECK(b == GemmBackend::OpenBLAS || onednn_available(), "{}", kNoOneDnn);
  backend() = b;
}

const char* gemm_backend_name(GemmBackend b) { return b == GemmBackend::OneDNN ? "oneDNN" : "OpenBLAS"; }

}  // namespace frugal::kernels::cpu
