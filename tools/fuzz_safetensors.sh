#!/usr/bin/env bash
# Builds fuzz/fuzz_safetensors.cpp with clang++ -fsanitize=fuzzer,address,undefined against the
# safetensors sources only, writes a small seed corpus, and fuzzes for a bounded time.
# Usage: tools/fuzz_safetensors.sh [seconds=60] [jobs=1]   (needs: apt-get install clang)
# Crashing inputs are saved as build-fuzz/crash-*; rerun one with: build-fuzz/fuzz_safetensors FILE
set -euo pipefail
seconds="${1:-60}"
jobs="${2:-1}"
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/build-fuzz"
mkdir -p "$out/corpus"
command -v clang++ >/dev/null || { echo "clang++ not found; apt-get install clang" >&2; exit 1; }

clang++ -std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
  -fno-sanitize-recover=undefined -I "$root/src" \
  "$root/fuzz/fuzz_safetensors.cpp" "$root/src/frugal/io/safetensors.cpp" \
  "$root/src/frugal/io/atomic_file.cpp" -lfmt -o "$out/fuzz_safetensors"

# Seed corpus: valid files of a few shapes and dtypes, plus near-misses.
seed() {  # seed NAME HEADER DATA_BYTES
  local header="$2"
  python3 - "$out/corpus/$1" "$header" "$3" <<'PY'
import struct, sys
path, header, n = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3])
open(path, "wb").write(struct.pack("<Q", len(header)) + header + bytes(range(256)) * (n // 256) + bytes(n % 256))
PY
}
seed empty '{}' 0
seed one_f32 '{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}' 16
seed two '{"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]},"b":{"dtype":"I64","shape":[],"data_offsets":[6,14]}}' 14
seed zero_size '{"e":{"dtype":"U8","shape":[0,5],"data_offsets":[0,0]},"f":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}' 8
seed overlap '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}' 8

parallel=()
if [ "$jobs" -gt 1 ]; then parallel=(-fork="$jobs"); fi
cd "$out"  # libFuzzer writes its logs to the working directory
./fuzz_safetensors -max_total_time="$seconds" "${parallel[@]}" -max_len=4096 \
  -print_final_stats=1 -artifact_prefix="$out/" "$out/corpus"
