#!/bin/sh
# train.budget_retime on a machine that slows down mid-run: the quickstart (configs/shakespeare-char.toml)
# under a wall-clock budget, once with the number of steps fixed from the first probe alone
# (train.budget_retime = 0) and once re-timed every 5% of the budget (the default), each while a
# busy loop takes one of the machine's cores from a quarter of the budget on. Prints each run's
# steps, its training wall-clock (metrics.jsonl's last wall_s) and its final validation loss.
# Usage: experiments/budget-drift.sh [SECONDS=120] [OUT=runs/budget-drift] [FRUGAL_BINARY=build/frugal]
# Needs runs/data/shakespeare-char (the README's quickstart prepares it); 2 cores, nothing else running.
set -eu
seconds=${1:-120}
out=${2:-runs/budget-drift}
frugal=${3:-build/frugal}
mkdir -p "$out"
for retime in 0 0.05; do
  run="$out/retime-$retime"
  (sleep "$(awk "BEGIN { print $seconds / 4 }")"; exec sh -c 'while :; do :; done') &
  load=$!
  "$frugal" train configs/shakespeare-char.toml --overwrite --set train.out_dir="$run" --set train.budget=seconds \
    --set train.max_seconds="$seconds" --set train.max_steps=1000000 --set train.budget_retime="$retime" \
    --set sample.count=0 > "$run.log" 2>&1 || { kill "$load"; cat "$run.log"; exit 1; }
  kill "$load"
  wall=$(grep -o '"wall_s":[0-9.]*' "$run/metrics.jsonl" | tail -1 | cut -d: -f2)
  steps=$(grep -o '"step":[0-9]*' "$run/metrics.jsonl" | tail -1 | cut -d: -f2)
  val=$(grep -o '"val_loss":[0-9.]*' "$run/metrics.jsonl" | tail -1 | cut -d: -f2)
  echo "train.budget_retime=$retime: $steps steps, $wall s of training (budget $seconds s), final val loss $val"
done
