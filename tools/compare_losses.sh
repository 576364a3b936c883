#!/usr/bin/env bash
# Checks that a change left training numerically identical: runs the same short trainings with two
# frugal binaries (e.g. the previous commit's and this one's) and compares the loss and val_loss
# of every step exactly. Runs: the quickstart config dense, with progressive freezing (AutoCache
# auto), with 2:4 sparsity (transposable; and MVUE with row-only masks), and with recomputation
# and dropout. About 5 minutes on 2 cores. Needs the quickstart's prepared data
# (runs/data/shakespeare-char, made by tools/quickstart.sh).
# Usage: tools/compare_losses.sh OLD_BINARY NEW_BINARY [WORK_DIR]
set -euo pipefail
old=$1 new=$2 work=${3:-$(mktemp -d)}
cd "$(dirname "$0")/.."
common=(--set train.max_seconds=0 --set train.log_interval=1 --set train.eval_interval=25
        --set train.eval_batches=4 --set sample.count=0 --set train.threads=2 --overwrite)
runs=(
  "dense|--set train.max_steps=50"
  "freeze|--set train.max_steps=80 --set methods.freeze.alpha=0.3 --set methods.freeze.interval=10"
  "sparse24|--set train.max_steps=60 --set methods.sparse24.mask_interval=10"
  "sparse24-mvue-rows|--set train.max_steps=40 --set methods.sparse24.mask_interval=10 --set methods.sparse24.mvue=true --set methods.sparse24.transposable=false"
  "recompute-dropout|--set train.max_steps=20 --set train.recompute=all --set model.dropout=0.1"
)
status=0
for run in "${runs[@]}"; do
  name=${run%%|*}
  read -r -a settings <<< "${run#*|}"
  for which in old new; do
    bin=$old; [ "$which" = new ] && bin=$new
    "$bin" train configs/shakespeare-char.toml "${common[@]}" "${settings[@]}" \
      --set train.out_dir="$work/$which-$name" > /dev/null
    python3 -c "import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line); print(j['step'], repr(j['loss']), repr(j.get('val_loss')))" \
      "$work/$which-$name/metrics.jsonl" > "$work/$which-$name.losses"
  done
  if cmp -s "$work/old-$name.losses" "$work/new-$name.losses"; then
    echo "$name: $(wc -l < "$work/new-$name.losses") steps, losses identical"
  else
    echo "$name: losses DIFFER (first difference: $(diff "$work/old-$name.losses" "$work/new-$name.losses" | sed -n 2p))"
    status=1
  fi
done
exit $status
