#!/usr/bin/env bash
# The whole test suite: installs dependencies, builds everything, runs every test through CTest,
# on each kernel path this CPU can take (kernels/dispatch.h): its widest (AVX-512 where it has it);
# then, on an AVX-512 CPU, again with the AVX2 path forced (FRUGAL_ISA=avx2 for frugal's kernels and
# oneDNN's JIT, OPENBLAS_CORETYPE=Haswell for OpenBLAS), the path of AVX2-only laptops; then on the
# reference path (FRUGAL_ISA=ref: every family runs its naive kernels/ref/ template in float).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
bash tools/build.sh
run_suite() {
  echo "== the test suite on the $1 path"
  local start=$SECONDS
  ctest --test-dir build --output-on-failure -j 2 --timeout 600
  echo "== the $1 path: $((SECONDS - start)) s"
}
FRUGAL_ISA=auto run_suite "widest (auto)"
if grep -qw avx512f /proc/cpuinfo; then
  FRUGAL_ISA=avx2 OPENBLAS_CORETYPE=Haswell run_suite "AVX2 (forced)"
fi
FRUGAL_ISA=ref run_suite "reference (ref)"
