#!/usr/bin/env bash
# Tensor parallelism against one process and data parallelism on a preset's training step
# (docs/parallel.md, "Tensor parallelism"): per round, alternated, `frugal bench` in one process
# with 1 thread, under mpirun -np 2 with parallel.tensor = 2 and the overlap on (1 thread per rank), the same waiting
# for each backward sum instead of overlapping it with the weight gradients (tensor2-waited), with
# sequence parallelism (tensor2-seq), waiting with the row messages in bf16 (tensor2-bf16wire:
# parallel.comm_dtype) and under mpirun -np 2 data parallel (1 thread per rank); the
# machine is shared and noisy, so the ratios are taken within each round. Prints each layout's
# memory plan line (a one-step run), each run's tokens/s, peak RSS of the largest rank, exposed
# communication share and share hidden behind the weight gradients, then per layout the median
# tokens/s and RSS ratios against one process.
# Usage: tools/bench_tensor_parallel.sh [BINARY] [PRESET] [ROUNDS]   e.g. build/frugal L 3
set -euo pipefail
bin=${1:-build/frugal} preset=${2:-L} rounds=${3:-3}
mpi="mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -np 2"
results=$(mktemp)
# the command of `layout` with the extra bench options
command() {
  local layout=$1
  shift
  case $layout in
    one) echo "env OMP_NUM_THREADS=1 $bin bench --preset $preset --threads 1 $*" ;;
    tensor2) echo "$mpi $bin bench --preset $preset --threads 1 $* --set parallel.tensor=2 --set parallel.tensor_overlap=true" ;;
    tensor2-waited) echo "$mpi $bin bench --preset $preset --threads 1 $* --set parallel.tensor=2 --set parallel.tensor_overlap=false" ;;
    tensor2-seq) echo "$mpi $bin bench --preset $preset --threads 1 $* --set parallel.tensor=2 --set parallel.sequence=true" ;;
    tensor2-bf16wire) echo "$mpi $bin bench --preset $preset --threads 1 $* --set parallel.tensor=2 --set parallel.tensor_overlap=false --set parallel.comm_dtype=bf16" ;;
    data2) echo "$mpi $bin bench --preset $preset --threads 1 $*" ;;
  esac
}
layouts=${LAYOUTS:-"one tensor2 tensor2-waited tensor2-seq data2"}  # LAYOUTS=... runs a subset ("one" first)
for layout in $layouts; do  # each layout's memory plan line (one step)
  echo "$layout: $($(command "$layout" --steps 1 --warmup 0) 2>&1 | grep -m1 'memory plan')"
done
for i in $(seq 1 "$rounds"); do
  for layout in $layouts; do
    $(command "$layout" --json) 2>/dev/null | tail -1 | python3 -c "
import json, sys
j = json.load(sys.stdin)
print('$i $layout', j['tokens_per_s'], j['peak_rss_bytes'] / 2**20, j.get('comm_wait_share', 0), j.get('comm_hidden_share', 0))" | tee -a "$results"
  done
done
python3 - "$results" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    i, layout, tokens, rss, comm, hidden = line.split()
    runs[i][layout] = (float(tokens), float(rss), float(comm), float(hidden))
for layout in [l for l in ("tensor2", "tensor2-waited", "tensor2-seq", "data2") if l in runs["1"]]:
    speed = [r[layout][0] / r["one"][0] for r in runs.values()]
    memory = [r[layout][1] / r["one"][1] for r in runs.values()]
    comm = [r[layout][2] for r in runs.values()]
    hidden = [r[layout][3] for r in runs.values()]
    print(f"{layout}: tokens/s {statistics.median(speed):.2f}x one process ({min(speed):.2f}-{max(speed):.2f}), "
          f"peak RSS {statistics.median(memory):.2f}x, exposed communication {statistics.median(comm):.1%} of the "
          f"step, {statistics.median(hidden):.1%} hidden")
PY
rm -f "$results"
