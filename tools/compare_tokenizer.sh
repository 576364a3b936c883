#!/usr/bin/env bash
# GPT-2 encoding speed, frugal vs tiktoken, on WikiText-2 train (10.8 MB) with the same thread
# counts: prints both MB/s (median of R runs after a warm-up) and the ratio frugal / tiktoken.
# Usage: tools/compare_tokenizer.sh [BUILD_DIR=build] [THREADS="1 2"] [REPEAT=5]
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$repo/build}"
threads="${2:-1 2}"
repeat="${3:-5}"
ninja -C "$build" bench_tokenizer >/dev/null
text="$(mktemp --suffix=.txt)"
trap 'rm -f "$text"' EXIT
xz -dc "$repo/data/wikitext-2/train.txt.xz" > "$text"
printf '%-8s %14s %14s %8s\n' threads frugal_MB/s tiktoken_MB/s ratio
for t in $threads; do
  f=$("$build/bench/bench_tokenizer" "$text" --threads "$t" --repeat "$repeat")
  p=$(python3 "$repo/tools/bench_tiktoken.py" "$text" --threads "$t" --repeat "$repeat")
  ftok=$(sed -n 's/.*tokens=\([0-9]*\).*/\1/p' <<<"$f"); ptok=$(sed -n 's/.*tokens=\([0-9]*\).*/\1/p' <<<"$p")
  if [[ "$ftok" != "$ptok" ]]; then echo "token counts differ: frugal $ftok, tiktoken $ptok" >&2; exit 1; fi
  fm=$(sed -n 's/.*MB\/s=\([0-9.]*\).*/\1/p' <<<"$f"); pm=$(sed -n 's/.*MB\/s=\([0-9.]*\).*/\1/p' <<<"$p")
  printf '%-8s %14s %14s %8s\n' "$t" "$fm" "$pm" "$(python3 -c "print(f'{$fm/$pm:.2f}x')")"
done
