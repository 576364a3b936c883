#!/bin/sh
# The V-cycle under data parallelism (issue 31): dense against the V-cycle with the longer small
# level (5/65/30, alpha 0.5, at dense's training FLOPs: 2271 steps; docs/results.md, "Multi-level
# training") on Tiny Shakespeare, each run by `mpirun -np 2` with one thread per rank
# (experiments/multilevel-dp-shakespeare.toml), then `frugal report` on the two.
# Usage: experiments/multilevel-dp.sh [FRUGAL_BINARY=build/frugal] [OUT=runs/multilevel-dp]
set -eu
FRUGAL=${1:-build/frugal}
OUT=${2:-runs/multilevel-dp}
MPIRUN="mpirun --oversubscribe -np 2"
if [ "$(id -u)" = 0 ]; then MPIRUN="$MPIRUN --allow-run-as-root"; fi
if [ ! -f runs/data/shakespeare-char/manifest.json ] && [ ! -f runs/data/shakespeare-char/train.bin ]; then
  "$FRUGAL" prepare --tokenizer char --input data/tinyshakespeare/input.txt --out runs/data/shakespeare-char
fi
CONFIG=experiments/multilevel-dp-shakespeare.toml
$MPIRUN "$FRUGAL" train $CONFIG --set train.out_dir="$OUT/dense" --overwrite
$MPIRUN "$FRUGAL" train $CONFIG --set train.out_dir="$OUT/vcycle-long-small" --overwrite \
  --set methods.multilevel.shares=0.05,0.65,0.3 --set methods.multilevel.alpha=0.5 --set train.max_steps=2271 \
  --set methods.multilevel.moments=fresh --set methods.multilevel.lr_schedule=segment
"$FRUGAL" report "$OUT/dense" "$OUT/vcycle-long-small" --out "$OUT/report"
