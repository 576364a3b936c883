#!/bin/sh
# experiments/tokenizer-wikitext.toml with its data: trains the 8192-token BPE on WikiText-2's
# training split (timed, with peak RSS), prepares WikiText-2 with it and with GPT-2's BPE, then
# runs the two models back to back for the same wall-clock, then for the same steps.
# Usage: experiments/tokenizer-wikitext.sh [FRUGAL_BINARY=build/frugal] [OUT=runs/tokenizer]
set -eu
cd "$(dirname "$0")/.."
FRUGAL=${1:-build/frugal}
OUT=${2:-runs/tokenizer}
TOK=runs/tokenizers/wikitext2-bpe8192
if [ ! -f "$TOK/merges.txt" ]; then
  /usr/bin/time -f "tokenizer train: %e s wall-clock, %M KiB peak RSS" \
    "$FRUGAL" tokenizer train --input data/wikitext-2/train.txt.xz --vocab-size 8192 --out "$TOK"
fi
if [ ! -f runs/data/wikitext2-gpt2bpe/manifest.json ] && [ ! -f runs/data/wikitext2-gpt2bpe/train.bin ]; then
  "$FRUGAL" prepare --tokenizer gpt2 --input data/wikitext-2/train.txt.xz \
    --val-input data/wikitext-2/valid.txt --out runs/data/wikitext2-gpt2bpe
fi
if [ ! -f runs/data/wikitext2-bpe8192/manifest.json ]; then
  "$FRUGAL" prepare --tokenizer "gpt2:$TOK" --input data/wikitext-2/train.txt.xz \
    --val-input data/wikitext-2/valid.txt --out runs/data/wikitext2-bpe8192
fi
"$FRUGAL" experiment experiments/tokenizer-wikitext.toml --out "$OUT"
# The same two runs at equal steps (the 500 of docs/results.md's GPT-2 run), the schedule over steps.
"$FRUGAL" experiment experiments/tokenizer-wikitext.toml --set train.budget=steps --set train.max_steps=500 \
  --set train.max_seconds=0 --out "$OUT-steps"
