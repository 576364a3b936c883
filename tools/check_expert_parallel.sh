#!/usr/bin/env bash
# Expert parallelism's exactness (docs/parallel.md, "Expert parallelism"): trains the same
# mixture-of-experts model (E 4, top 2, shared expert, Switch and z losses, balancing bias, dropout
# 0.1, clipping at 0.5) for STEPS steps with expert 2 (mpirun -np 2), data parallel (np 2) and in
# one process with the same global batch (grad_accum 2), 1 thread per process, and prints the
# largest relative difference of the loss, gradient norm and validation loss of each against one
# process, and whether the experts' load was identical at every step.
# Usage: tools/check_expert_parallel.sh [BINARY] [DATA_DIR] [STEPS]
#   e.g. tools/check_expert_parallel.sh build/frugal runs/data/shakespeare-char 30
set -euo pipefail
bin=${1:-build/frugal} data=${2:-runs/data/shakespeare-char} steps=${3:-30}
out=$(mktemp -d)
source "$(dirname "$0")/exactness_model.sh"
model="$exactness_model --set model.moe.experts=4 --set model.moe.top_k=2 --set model.moe.bias_rate=0.001
  --set model.moe.aux_loss_coef=0.01 --set model.moe.z_loss_coef=0.001 --set model.moe.shared_expert=true"
mpi="mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -np 2"
$mpi "$bin" train configs/shakespeare-char.toml $model --set parallel.expert=2 --set train.out_dir="$out/expert2" >/dev/null
$mpi "$bin" train configs/shakespeare-char.toml $model --set train.out_dir="$out/data2" >/dev/null
"$bin" train configs/shakespeare-char.toml $model --set train.grad_accum=2 --set train.threads=1 \
  --set train.out_dir="$out/one" >/dev/null
python3 - "$out" <<'PY'
import json, sys
def metrics(name):
    return [json.loads(line) for line in open(f"{sys.argv[1]}/{name}/metrics.jsonl") if line.strip()]
one = metrics("one")
for name in ("expert2", "data2"):
    run = metrics(name)
    diffs = {key: max(abs(a[key] - b[key]) / abs(b[key]) for a, b in zip(run, one) if key in a)
             for key in ("loss", "grad_norm", "val_loss")}
    shares = lambda step: [layer["share"] for layer in step["moe"]["layers"]]
    load = all(shares(a) == shares(b) for a, b in zip(run, one))
    print(f"{name} vs one process, {len(run)} steps: max relative difference " +
          ", ".join(f"{key} {value:.3g}" for key, value in diffs.items()) +
          f"; experts' load identical at every step: {load}")
PY
rm -rf "$out"
