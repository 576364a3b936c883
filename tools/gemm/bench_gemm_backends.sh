#!/usr/bin/env bash
# Measures OpenBLAS vs oneDNN sgemm side by side on the training step's GEMM shapes.
# Usage: tools/gemm/bench_gemm_backends.sh [threads=2] [repetitions=15]
set -euo pipefail
cd "$(dirname "$0")"
if ! dpkg-query -W -f='${Status}' libdnnl-dev 2>/dev/null | grep -q "install ok installed"; then
  echo "installing libdnnl-dev (only for this comparison)"
  if [ "$(id -u)" -eq 0 ]; then apt-get install -y -qq libdnnl-dev; else sudo apt-get install -y -qq libdnnl-dev; fi
fi
out=$(mktemp -d)
g++ -O2 -std=c++20 -fopenmp bench_gemm_backends.cpp -I/usr/include/x86_64-linux-gnu/openblas-openmp \
  -L/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas -ldnnl -o "$out/bench_gemm_backends"
"$out/bench_gemm_backends" "${1:-2}" "${2:-15}"
