#!/usr/bin/env bash
# The quickstart: installs dependencies, builds frugal, prepares Tiny Shakespeare at the character
# level, trains a small GPT for about three minutes (replacing the run of an earlier quickstart)
# and prints samples.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
bash tools/build.sh frugal
data=runs/data/shakespeare-char
if [ ! -f "$data/manifest.json" ] && [ ! -f "$data/train.bin" ]; then
  ./build/frugal prepare --tokenizer char --input data/tinyshakespeare/input.txt --out "$data"
fi
./build/frugal train configs/shakespeare-char.toml --overwrite "$@"
