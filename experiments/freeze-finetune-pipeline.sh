#!/bin/sh
# PipeTransformer's headline on this machine: fine-tuning wall-clock of progressive freezing with
# AutoCache, AutoPipe and AutoDP against a static GPipe pipeline of 2 stages (the paper's
# baseline), both under `mpirun -np 2` with one thread per rank. Pretrains the freeze-finetune
# model once in one process (3000 steps, as experiments/freeze-finetune.toml), then fine-tunes it
# 450 steps: the static and the elastic pipeline alternately REPEATS times (the machine is shared:
# the ratio of medians is the result), the same two with 1F1B, the elastic one on 4 oversubscribed
# ranks (a correctness check, not timed), plain data parallelism, and one process with the same
# micro-batches. Ends with
# `frugal report` (table, validation loss vs seconds, tokens/s over time with the re-partitions).
# Usage: experiments/freeze-finetune-pipeline.sh [FRUGAL=build/frugal] [OUT=runs/freeze-finetune-pipeline] [REPEATS=3]
set -eu
FRUGAL=${1:-build/frugal}
OUT=${2:-runs/freeze-finetune-pipeline}
REPEATS=${3:-3}
CONFIG=experiments/freeze-finetune-pipeline.toml
MPIRUN="mpirun --allow-run-as-root --bind-to none -x OMP_NUM_THREADS=1"
sh "$(dirname "$0")/freeze-finetune-data.sh" "$FRUGAL"
mkdir -p "$OUT"
PRE="$OUT/pretrain"
if [ ! -e "$PRE/checkpoints/latest" ]; then
  "$FRUGAL" train "$CONFIG" --overwrite --set train.out_dir="$PRE" --set data.dir=runs/freeze-finetune-data/pretrain \
    --set train.max_steps=3000 --set train.batch_size=16 --set train.grad_accum=1 --set train.eval_batches=8 \
    --set optim.lr=1e-3 --set optim.min_lr=1e-4 --set optim.warmup_steps=50 --set parallel.pipeline_stages=1
fi
FREEZE="--set methods.freeze.alpha=0.3333 --set methods.freeze.interval=30"
# run NAME NP [mpirun options --] [frugal --set ...]
run() {
  name=$1; np=$2; shift 2
  opts=""
  if [ "${1:-}" = "--oversubscribe" ]; then opts=$1; shift; fi
  $MPIRUN $opts -np "$np" "$FRUGAL" train "$CONFIG" --overwrite --set train.out_dir="$OUT/$name" \
    --init-from "$PRE" "$@" > "$OUT/$name.log" 2>&1
  tail -n 1 "$OUT/$name.log"
}
i=1
while [ "$i" -le "$REPEATS" ]; do
  run "gpipe-$i" 2 --set parallel.elastic=false
  run "pipetransformer-$i" 2 $FREEZE
  i=$((i + 1))
done
run gpipe-1f1b 2 --set parallel.elastic=false --set parallel.schedule=1f1b
run pipetransformer-1f1b 2 $FREEZE --set parallel.schedule=1f1b
run pipetransformer-np4 4 --oversubscribe $FREEZE --set parallel.pipeline_stages=4
# For context: plain data parallelism on the 2 ranks (the model fits one rank), 2 micro-batches each.
run data-parallel 2 --set parallel.pipeline_stages=1 --set train.grad_accum=2
"$FRUGAL" train "$CONFIG" --overwrite --set train.out_dir="$OUT/one-process" --init-from "$PRE" \
  --set parallel.pipeline_stages=1 > "$OUT/one-process.log" 2>&1
"$FRUGAL" report "$OUT/gpipe-1" "$OUT/pipetransformer-1" "$OUT/gpipe-1f1b" "$OUT/pipetransformer-1f1b" \
  "$OUT/pipetransformer-np4" "$OUT/data-parallel" "$OUT/one-process" --out "$OUT/report"
# Every timed pair (the ratio of medians is the result; the first pair is in the report above).
"$FRUGAL" report "$OUT"/gpipe-[0-9] "$OUT"/pipetransformer-[0-9] --out "$OUT/report-pairs" --no-plots
