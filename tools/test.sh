#!/usr/bin/env bash
# The whole test suite: installs dependencies, builds everything, runs every test through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
bash tools/build.sh
ctest --test-dir build --output-on-failure -j 2 --timeout 600
