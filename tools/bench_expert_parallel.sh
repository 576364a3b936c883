#!/usr/bin/env bash
# Expert parallelism against one process and data parallelism on a mixture-of-experts model with a
# preset's shapes (docs/parallel.md, "Expert parallelism"): per round, alternated, `frugal bench`
# in one process with 1 thread, under mpirun -np 2 with parallel.expert = 2 (1 thread per rank) and
# under mpirun -np 2 data parallel (1 thread per rank); the machine is shared and noisy, so the
# ratios are taken within each round. Prints each run's tokens/s, peak RSS of the largest rank, the
# share of the step in the experts' all-to-all and the bytes a rank sends in it per step, and the
# gradient bytes reduced per step; then per layout the median tokens/s and RSS ratios against one
# process.
# Usage: tools/bench_expert_parallel.sh [BINARY] [PRESET] [ROUNDS] [EXPERTS] [TOP_K]
#   e.g. tools/bench_expert_parallel.sh build/frugal M 3 8 2
set -euo pipefail
bin=${1:-build/frugal} preset=${2:-M} rounds=${3:-3} experts=${4:-8} top_k=${5:-2}
mpi="mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -np 2"
moe="--set model.moe.experts=$experts --set model.moe.top_k=$top_k"
results=$(mktemp)
for i in $(seq 1 "$rounds"); do
  for layout in one expert2 data2; do
    case $layout in
      one) cmd="env OMP_NUM_THREADS=1 $bin bench --preset $preset --threads 1 --json $moe" ;;
      expert2) cmd="$mpi $bin bench --preset $preset --threads 1 --json $moe --set parallel.expert=2" ;;
      data2) cmd="$mpi $bin bench --preset $preset --threads 1 --json $moe" ;;
    esac
    $cmd 2>/dev/null | tail -1 | python3 -c "
import json, sys
j = json.load(sys.stdin)
print('$i $layout', j['tokens_per_s'], j['peak_rss_bytes'] / 2**20, j.get('exchange_share', 0),
      j.get('exchange_bytes_per_step', 0) / 2**20, j.get('gradient_bytes_per_step', 0) / 2**20)" | tee -a "$results"
  done
done
python3 - "$results" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    i, layout, *values = line.split()
    runs[i][layout] = [float(v) for v in values]
for layout in ("expert2", "data2"):
    speed = [r[layout][0] / r["one"][0] for r in runs.values()]
    memory = [r[layout][1] / r["one"][1] for r in runs.values()]
    exchange = statistics.median(r[layout][2] for r in runs.values())
    sent = statistics.median(r[layout][3] for r in runs.values())
    reduced = statistics.median(r[layout][4] for r in runs.values())
    print(f"{layout}: tokens/s {statistics.median(speed):.2f}x one process ({min(speed):.2f}-{max(speed):.2f}), "
          f"peak RSS {statistics.median(memory):.2f}x, all-to-all {exchange:.1%} of the step, "
          f"{sent:.1f} MiB sent per rank per step, {reduced:.1f} MiB of gradients reduced per step")
PY
