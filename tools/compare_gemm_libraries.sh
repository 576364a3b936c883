#!/usr/bin/env bash
# SGEMM libraries side by side on every GEMM shape of the `frugal bench` presets' training steps:
# the candidates for frugal's dense GEMM (kernels/cpu/gemm.cpp), each through its plain sgemm call.
#
#   tools/compare_gemm_libraries.sh [ROUNDS=3] [THREADS=2]
#
# Builds bench/gemm_library_rate.cpp once per library and runs the builds alternately ROUNDS times
# (so all see the same machine load), then prints each shape's median GFLOP/s per library and each
# preset's GEMM milliseconds per step. The libraries:
#   - oneDNN 2.6, Debian's libdnnl-dev (what frugal links; its other path, the matmul primitive, is
#     timed by build/bench/bench_matmul);
#   - OpenBLAS 0.3.21, Debian's OpenMP variant (libopenblas-openmp-dev);
#   - oneDNN 3.2 from PyPI (onednn-cpu-gomp 2023.2.0: the newest GNU OpenMP build there; the newer
#     `onednn` 2026.x wheels are SYCL/TBB builds that need Intel's SYCL and OpenCL runtimes);
#   - MKL 2026.2 from PyPI (mkl, mkl-include), with its GNU OpenMP threading layer.
# The PyPI wheels are downloaded once (pip download, ~230 MB) into .cache/gemm-libraries, which git
# ignores; nothing is installed. A benchmark tool: frugal neither builds nor runs with these wheels.
set -euo pipefail

rounds=${1:-3}
threads=${2:-2}
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=$repo/.cache/gemm-libraries
mkdir -p "$cache/wheels" "$cache/bin"

wheels=(onednn-cpu-gomp==2023.2.0 onednn-devel-cpu-gomp==2023.2.0 mkl==2026.2.0 mkl-include==2026.2.0)
if [ ! -d "$cache/unpacked/mkl-2026.2.0.data" ]; then
  python3 -m pip download --no-deps --quiet --dest "$cache/wheels" "${wheels[@]}"
  mkdir -p "$cache/unpacked"
  for w in "$cache"/wheels/*.whl; do python3 -m zipfile -e "$w" "$cache/unpacked"; done
fi
dnnl3=$cache/unpacked/onednn_cpu_gomp-2023.2.0.data/data/lib
dnnl3_inc=$cache/unpacked/onednn_devel_cpu_gomp-2023.2.0.data/data/include
mkl=$cache/unpacked/mkl-2026.2.0.data/data/lib
mkl_inc=$cache/unpacked/mkl_include-2026.2.0.data/data/include
# pip's wheels carry versioned names only (libdnnl.so.3, libmkl_core.so.3): link them by name.
src=$repo/bench/gemm_library_rate.cpp
cxx=(g++ -O2 -std=c++20 -fopenmp -I"$repo/bench" -I"$repo/src" "$src")
"${cxx[@]}" -o "$cache/bin/onednn-2.6-debian" -ldnnl
"${cxx[@]}" -o "$cache/bin/openblas-0.3.21-debian" -DGEMM_CBLAS -I/usr/include/x86_64-linux-gnu/openblas-openmp \
  -L/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas
"${cxx[@]}" -o "$cache/bin/onednn-3.2-pypi" -I"$dnnl3_inc" "$dnnl3/libdnnl.so.3" -Wl,-rpath,"$dnnl3"
"${cxx[@]}" -o "$cache/bin/mkl-2026.2-pypi" -DGEMM_CBLAS -I"$mkl_inc" "$mkl/libmkl_intel_lp64.so.3" \
  "$mkl/libmkl_gnu_thread.so.3" "$mkl/libmkl_core.so.3" -Wl,-rpath,"$mkl"

libraries=(onednn-2.6-debian openblas-0.3.21-debian onednn-3.2-pypi mkl-2026.2-pypi)
for r in $(seq "$rounds"); do
  for lib in "${libraries[@]}"; do "$cache/bin/$lib" "$threads" > "$cache/$lib.$r.txt"; done
done

python3 - "$cache" "$rounds" "${libraries[@]}" <<'PY'
import statistics, sys
cache, rounds, libs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rows, seconds = [], {}
for lib in libs:
    for r in range(1, rounds + 1):
        for line in open(f"{cache}/{lib}.{r}.txt"):
            preset, layer, pass_, M, N, K, per_step, sec = line.split()
            key = (preset, layer, pass_, int(M), int(N), int(K), int(per_step))
            if key not in seconds:
                rows.append(key)
                seconds[key] = {}
            seconds[key].setdefault(lib, []).append(float(sec))
print(f"{'shape':<20} {'M':>5} {'N':>5} {'K':>5}" + "".join(f" {l:>22}" for l in libs) + "  (GFLOP/s, median of rounds)")
step_ms = {}
for key in rows:
    preset, layer, pass_, M, N, K, per_step = key
    line = f"{preset} {layer:<9} {pass_:<8} {M:>5} {N:>5} {K:>5}"
    for lib in libs:
        med = statistics.median(seconds[key][lib])
        line += f" {2 * M * N * K / med / 1e9:>22.1f}"
        step_ms.setdefault(preset, {}).setdefault(lib, 0.0)
        step_ms[preset][lib] += med * 1e3 * per_step
    print(line)
for preset, per_lib in step_ms.items():
    print(f"{preset}: GEMM ms per training step " + "  ".join(f"{lib} {ms:.1f}" for lib, ms in per_lib.items()))
PY
