#!/usr/bin/env bash
# Tensor parallelism's exactness in every layout (docs/parallel.md, "Exactness" under "Tensor
# parallelism"): trains the tests' model (2 blocks, n_embd 64, dropout 0.1, clipping at 0.5, tied
# head unless HEAD=untied) for STEPS steps, 1 thread per process, in one process and as data
# parallel np 2, tensor 2 (np 2), data 2 × tensor 2 (np 4), pipeline 2 × tensor 2 (np 4) and
# data 2 × tensor 2 with ZeRO-1 and ZeRO-2, each with the same global batch (4 micro-batches
# with data 2, else 2); tensor 2, data 2 × tensor 2 and pipeline 2 × tensor 2 again with sequence
# parallelism (parallel.sequence = true, the "-seq" rows); and, as the yardstick of what rounding alone does to this trajectory, one
# process on the avx2 and the reference kernels (FRUGAL_ISA). Prints the largest relative
# difference of the loss, gradient norm and validation loss of each against one process on the
# default kernels, and ZeRO's against ZeRO-0's (0 is bit for bit).
# EXTRA adds --set arguments to every run (another trajectory: EXTRA="--set optim.lr=1e-3").
# Usage: [HEAD=untied] [EXTRA=...] tools/check_tensor_parallel.sh [BINARY] [DATA_DIR] [STEPS]
#   e.g. tools/check_tensor_parallel.sh build/frugal runs/data/shakespeare-char 30
set -euo pipefail
bin=${1:-build/frugal} data=${2:-runs/data/shakespeare-char} steps=${3:-30}
out=$(mktemp -d)
source "$(dirname "$0")/exactness_model.sh"
model="$exactness_model --set model.tied_head=$([ "${HEAD:-tied}" = untied ] && echo false || echo true) ${EXTRA:-}"
train() {  # NAME NP ARGS...: NP 0 is one process
  local name=$1 np=$2
  shift 2
  if [ "$np" = 0 ]; then
    "$bin" train configs/shakespeare-char.toml $model --set train.threads=1 --set train.out_dir="$out/$name" "$@"
  else
    mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -np "$np" \
      "$bin" train configs/shakespeare-char.toml $model --set train.out_dir="$out/$name" "$@"
  fi >/dev/null
}
train one 0 --set train.grad_accum=2
train one-a4 0 --set train.grad_accum=4
FRUGAL_ISA=avx2 OPENBLAS_CORETYPE=Haswell train one-avx2 0 --set train.grad_accum=2
FRUGAL_ISA=ref train one-ref 0 --set train.grad_accum=2
train data2 2 --set train.grad_accum=1
train tensor2 2 --set parallel.tensor=2 --set train.grad_accum=2
train pipeline2-tensor2 4 --set parallel.tensor=2 --set parallel.pipeline_stages=2 --set train.grad_accum=2
seq="--set parallel.sequence=true"
train tensor2-seq 2 --set parallel.tensor=2 --set train.grad_accum=2 $seq
train data2-tensor2-seq 4 --set parallel.tensor=2 --set train.grad_accum=2 $seq
train pipeline2-tensor2-seq 4 --set parallel.tensor=2 --set parallel.pipeline_stages=2 --set train.grad_accum=2 $seq
for zero in 0 1 2; do
  train data2-tensor2-zero$zero 4 --set parallel.tensor=2 --set train.grad_accum=2 --set parallel.zero=$zero
done
python3 - "$out" <<'PY'
import json, sys
def metrics(name):
    return [json.loads(line) for line in open(f"{sys.argv[1]}/{name}/metrics.jsonl") if line.strip()]
def compare(name, reference):
    run, ref = metrics(name), metrics(reference)
    diffs = [max(abs(a[key] - b[key]) / abs(b[key]) for a, b in zip(run, ref) if key in a)
             for key in ("loss", "grad_norm", "val_loss")]
    print(f"| {name} | {reference} | " + " | ".join(f"{d:.3g}" for d in diffs) + " |")
print("| run | against | loss | grad norm | val loss |\n|---|---|---|---|---|")
for name in ("one-avx2", "one-ref", "data2", "tensor2", "pipeline2-tensor2", "tensor2-seq", "pipeline2-tensor2-seq"):
    compare(name, "one")
compare("data2-tensor2-zero0", "one-a4")
compare("data2-tensor2-seq", "one-a4")
compare("tensor2-seq", "tensor2")
for zero in (1, 2):
    compare(f"data2-tensor2-zero{zero}", "data2-tensor2-zero0")
PY
rm -rf "$out"
