#!/usr/bin/env bash
# Signal soak (not part of CTest; see docs/testing.md): RUNS short `frugal train` runs, each sent
# SIGINT or SIGTERM (chosen at random) at a random moment 0.2-3 s after it starts, while one busy
# loop per core loads the CPU. Every run must exit 0, say it stopped by the signal, and leave a
# checkpoint that `frugal eval` loads. Prints one line per failing run (its log is kept) and a
# final summary line; exits 1 if any run failed.
#   tools/signal_soak.sh [RUNS=300] [FRUGAL=build/frugal]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-300}
frugal=${2:-build/frugal}
data=runs/data/shakespeare-char
[ -f "$data/manifest.json" ] || [ -f "$data/train.bin" ] || "$frugal" prepare --tokenizer char --input data/tinyshakespeare/input.txt --out "$data" > /dev/null
work=$(mktemp -d "${TMPDIR:-/tmp}/frugal-signal-soak.XXXXXX")
# Job control: background jobs get their own process group and keep SIGINT (a shell without it
# starts them with SIGINT ignored, as if no user could interrupt them).
set -m
load=() pid=
stop_load() { kill "${load[@]}" $pid 2> /dev/null || true; }
trap stop_load EXIT
for _ in $(seq "$(nproc)"); do
  bash -c 'while :; do :; done' &
  load+=($!)
  disown  # no "Terminated" notice when it is killed at the end
done

aborts=0 nonzero=0 loadable=0 stopped=0
stop_steps=()
start=$SECONDS
for i in $(seq "$runs"); do
  run=$work/run$i log=$work/run$i.log
  delay_ms=$((200 + RANDOM % 2801))
  if ((RANDOM % 2)); then sig=INT; else sig=TERM; fi
  # A tiny model keeps the runs short: under the load, a third to a half of the signals land during
  # start-up or the first step, the rest during later steps. max_seconds only ends a run whose
  # signal was lost.
  "$frugal" train configs/shakespeare-char.toml --overwrite --set "train.out_dir=$run" \
    --set model.n_layer=2 --set model.n_embd=64 --set train.max_steps=1000000 \
    --set train.max_seconds=60 --set train.eval_batches=2 --set train.log_interval=1 \
    --set sample.count=0 > "$log" 2>&1 &
  pid=$!
  sleep "$((delay_ms / 1000)).$(printf '%03d' $((delay_ms % 1000)))"
  kill -s "$sig" "$pid" 2> /dev/null || true
  rc=0
  wait "$pid" || rc=$?
  pid=
  problems=()
  if [ "$rc" -ne 0 ]; then
    nonzero=$((nonzero + 1))
    problems+=("exit $rc")
    if [ "$rc" -eq 134 ] || [ "$rc" -eq 139 ]; then aborts=$((aborts + 1)); fi  # SIGABRT, SIGSEGV
  fi
  if step=$(grep -o 'stopped by signal after step [0-9]*' "$log" | grep -o '[0-9]*$'); then
    stopped=$((stopped + 1))
    stop_steps+=("$step")
  else
    problems+=("no 'stopped by signal' line")
  fi
  if "$frugal" eval "$run" --max-batches 1 >> "$log" 2>&1; then
    loadable=$((loadable + 1))
  else
    problems+=("no loadable checkpoint")
  fi
  if [ ${#problems[@]} -gt 0 ]; then
    echo "run $i (SIG$sig after $delay_ms ms): $(printf '%s; ' "${problems[@]}")log $log"
  else
    rm -rf "$run" "$log"
  fi
done
stop_load
load=()
echo "wall time $((SECONDS - start)) s"
if [ ${#stop_steps[@]} -gt 0 ]; then
  printf '%s\n' "${stop_steps[@]}" | sort -n | awk '$1 == 1 {first++; next} {s[++n] = $1} END {
    printf "stopped after step 1 (signal during start-up or step 1): %d runs; later: %d runs", first, n
    if (n) printf " (steps %d-%d, median %d)", s[1], s[n], s[int((n + 1) / 2)]
    print ""}'
fi
echo "signal soak: $runs runs, $aborts aborts, $nonzero non-zero exits, $loadable loadable checkpoints"
if [ "$nonzero" -eq 0 ] && [ "$stopped" -eq "$runs" ] && [ "$loadable" -eq "$runs" ]; then
  rm -rf "$work"
  exit 0
fi
exit 1
