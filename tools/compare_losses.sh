#!/usr/bin/env bash
# Checks that a change left training numerically identical: runs the same short trainings with two
# frugal binaries (e.g. the previous commit's and this one's) and compares the loss and val_loss
# of every step exactly. Runs: the quickstart config dense, with progressive freezing (AutoCache
# auto), with 2:4 sparsity (transposable; and MVUE with row-only masks), with recomputation
# and dropout, the multilevel V-cycle and Mixed Sparsity Training; then under mpirun -np 2 (1 thread per rank): data parallel with ZeRO 0, 1 and 2,
# and pipelines of 2 stages, GPipe, and 1F1B with progressive freezing (AutoPipe re-balances the
# stages, then AutoDP turns them into 2 replicas: blocks move between the ranks). About 10
# minutes on 2 cores. Needs the quickstart's prepared data (runs/data/shakespeare-char, made by
# tools/quickstart.sh) and, for the mpirun runs, a frugal built with MPI.
# Usage: tools/compare_losses.sh OLD_BINARY NEW_BINARY [WORK_DIR]
set -euo pipefail
old=$1 new=$2 work=${3:-$(mktemp -d)}
mkdir -p "$work"
cd "$(dirname "$0")/.."
common=(--set train.max_seconds=0 --set train.log_interval=1 --set train.eval_interval=25
        --set train.eval_batches=4 --set sample.count=0 --set train.threads=2 --overwrite)
runs=(
  "dense|--set train.max_steps=50"
  "freeze|--set train.max_steps=80 --set methods.freeze.alpha=0.3 --set methods.freeze.interval=10"
  "sparse24|--set train.max_steps=60 --set methods.sparse24.mask_interval=10"
  "sparse24-mvue-rows|--set train.max_steps=40 --set methods.sparse24.mask_interval=10 --set methods.sparse24.mvue=true --set methods.sparse24.transposable=false"
  "recompute-dropout|--set train.max_steps=20 --set train.recompute=all --set model.dropout=0.1"
  "multilevel|--set train.max_steps=60 --set methods.multilevel.levels=2"
  "mst|--set train.max_steps=60 --set methods.mst.update_interval=10"
)
# name|settings, run by mpirun -np 2
mpi_runs=(
  "np2-zero0|--set train.max_steps=30 --set parallel.zero=0"
  "np2-zero1|--set train.max_steps=30 --set parallel.zero=1"
  "np2-zero2|--set train.max_steps=30 --set parallel.zero=2"
  "np2-pipeline-gpipe|--set train.max_steps=30 --set parallel.pipeline_stages=2 --set parallel.schedule=gpipe --set train.grad_accum=4"
  "np2-pipeline-1f1b-freeze|--set train.max_steps=60 --set parallel.pipeline_stages=2 --set parallel.schedule=1f1b --set train.grad_accum=4 --set methods.freeze.alpha=0.5 --set methods.freeze.interval=10 --set methods.freeze.autocache=off"
)
mpirun_np2=(mpirun -np 2 --allow-run-as-root --oversubscribe --bind-to none)
status=0
for run in "${runs[@]}" "${mpi_runs[@]/#/mpi:}"; do
  launch=()
  if [[ $run == mpi:* ]]; then
    run=${run#mpi:}
    launch=("${mpirun_np2[@]}")
  fi
  name=${run%%|*}
  read -r -a settings <<< "${run#*|}"
  [ ${#launch[@]} -gt 0 ] && settings+=(--set train.threads=1)
  for which in old new; do
    bin=$old; [ "$which" = new ] && bin=$new
    "${launch[@]}" "$bin" train configs/shakespeare-char.toml "${common[@]}" "${settings[@]}" \
      --set train.out_dir="$work/$which-$name" > "$work/$which-$name.out"
    python3 -c "import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line); print(j['step'], repr(j['loss']), repr(j.get('val_loss')))" \
      "$work/$which-$name/metrics.jsonl" > "$work/$which-$name.losses"
  done
  if cmp -s "$work/old-$name.losses" "$work/new-$name.losses"; then
    echo "$name: $(wc -l < "$work/new-$name.losses") steps, losses identical"
    grep -h '^pipeline: ' "$work/new-$name.out" | sed 's/^/  /' || true  # the layouts it ran
  else
    echo "$name: losses DIFFER (first difference: $(diff "$work/old-$name.losses" "$work/new-$name.losses" | sed -n 2p))"
    status=1
  fi
done
exit $status
