#!/bin/sh
# Prepares Tiny Shakespeare (char) and WikiText-2 (GPT-2 BPE) and runs the two multi-level
# experiments: experiments/multilevel-shakespeare.toml and experiments/multilevel-wikitext.toml.
# Usage: experiments/multilevel.sh [FRUGAL_BINARY=build/frugal] [OUT=runs/multilevel] [shakespeare|wikitext]
set -eu
FRUGAL=${1:-build/frugal}
OUT=${2:-runs/multilevel}
ONLY=${3:-}
if [ ! -f runs/data/shakespeare-char/train.bin ]; then
  "$FRUGAL" prepare --tokenizer char --input data/tinyshakespeare/input.txt --out runs/data/shakespeare-char
fi
if [ ! -f runs/data/wikitext2-gpt2bpe/train.bin ]; then
  "$FRUGAL" prepare --tokenizer gpt2 --input data/wikitext-2/train.txt.xz \
    --val-input data/wikitext-2/valid.txt --out runs/data/wikitext2-gpt2bpe
fi
for corpus in shakespeare wikitext; do
  if [ -z "$ONLY" ] || [ "$ONLY" = "$corpus" ]; then
    "$FRUGAL" experiment "experiments/multilevel-$corpus.toml" --out "$OUT/$corpus"
  fi
done
