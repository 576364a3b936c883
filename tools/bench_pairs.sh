#!/usr/bin/env bash
# Compares two frugal binaries' `frugal bench --preset P` side by side: N alternating old/new
# pairs per preset (the machine is shared and noisy: alternate, never time two things at once),
# then per preset the median ms/step of each and the median of the per-pair new/old ratios.
# Usage: tools/bench_pairs.sh OLD_BINARY NEW_BINARY PAIRS PRESET...   e.g. ... 5 S M L
set -euo pipefail
old=$1 new=$2 pairs=$3; shift 3
results=$(mktemp)
for preset in "$@"; do
  for i in $(seq 1 "$pairs"); do
    for which in old new; do
      bin=$old; [ "$which" = new ] && bin=$new
      ms=$("$bin" bench --preset "$preset" --json 2>/dev/null | tail -1 |
           python3 -c "import json, sys; print(json.load(sys.stdin)['ms_per_step'])")
      echo "$preset $i $which $ms" | tee -a "$results"
    done
  done
done
python3 - "$results" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    preset, _, which, ms = line.split()
    runs[preset][which].append(float(ms))
for preset, r in runs.items():
    ratios = [n / o for o, n in zip(r["old"], r["new"])]
    print(f"preset {preset}: old {statistics.median(r['old']):.1f} ms, new {statistics.median(r['new']):.1f} ms, "
          f"new/old median {statistics.median(ratios):.3f} (pairs {min(ratios):.3f}-{max(ratios):.3f})")
PY
