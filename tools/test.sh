#!/usr/bin/env bash
# The whole test suite: installs dependencies, builds everything, runs every test through CTest,
# on each instruction-set path this CPU can take: its widest (AVX-512 where it has it), then, on
# an AVX-512 CPU, again with the AVX2 path forced (FRUGAL_ISA=avx2 for frugal's kernels and
# oneDNN's JIT, OPENBLAS_CORETYPE=Haswell for OpenBLAS), the path of AVX2-only laptops.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
bash tools/build.sh
run_suite() {
  echo "== the test suite on the $1 path"
  ctest --test-dir build --output-on-failure -j 2 --timeout 600
}
FRUGAL_ISA=auto run_suite "widest (auto)"
if grep -qw avx512f /proc/cpuinfo; then
  FRUGAL_ISA=avx2 OPENBLAS_CORETYPE=Haswell run_suite "AVX2 (forced)"
fi
