// SGEMM dispatch to oneDNN or OpenBLAS; see gemm.h. The only BLAS/oneDNN call site of frugal.
#include "frugal/kernels/cpu/gemm.h"

#include <cblas.h>
#ifdef FRUGAL_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

#include <cstdlib>
#include <string>

#include "frugal/core/error.h"

namespace frugal::kernels::cpu {
namespace {

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

}  // namespace

void sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
           const float* B, int ldb, float beta, float* C, int ldc) {
#ifdef FRUGAL_HAVE_ONEDNN
  if (backend() == GemmBackend::OneDNN) {
    const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha,
                                            A, lda, B, ldb, beta, C, ldc);
    FRUGAL_CHECK(status == dnnl_success, "internal: oneDNN sgemm failed with status {} for M={} N={} K={}",
                 static_cast<int>(status), M, N, K);
    return;
  }
#endif
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

GemmBackend gemm_backend() { return backend(); }

void set_gemm_backend(GemmBackend b) {
#ifndef FRUGAL_HAVE_ONEDNN
  FRUGAL_CHECK(b == GemmBackend::OpenBLAS, "this build has no oneDNN; apt-get install libdnnl-dev and rebuild");
#endif
  backend() = b;
}

const char* gemm_backend_name(GemmBackend b) { return b == GemmBackend::OneDNN ? "oneDNN" : "OpenBLAS"; }

}  // namespace frugal::kernels::cpu
