#!/usr/bin/env bash
# Configures (once) and builds frugal in build/ with Ninja, Release (AVX2/FMA + OpenMP).
# Usage: tools/build.sh [ninja targets...]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
ninja -C build "$@"
