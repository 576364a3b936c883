#!/bin/sh
# Runs one experiment on the two corpora the pretraining experiments share: prepares Tiny
# Shakespeare (char) in runs/data/shakespeare-char and WikiText-2 (GPT-2 BPE) in
# runs/data/wikitext2-gpt2bpe once, then `frugal experiment` on experiments/NAME-shakespeare.toml
# and experiments/NAME-wikitext.toml (or only the corpus named).
# Usage: experiments/run-corpora.sh NAME [FRUGAL_BINARY=build/frugal] [OUT=runs/NAME] [shakespeare|wikitext]
set -eu
NAME=$1
FRUGAL=${2:-build/frugal}
OUT=${3:-runs/$NAME}
ONLY=${4:-}
if [ ! -f runs/data/shakespeare-char/manifest.json ] && [ ! -f runs/data/shakespeare-char/train.bin ]; then
  "$FRUGAL" prepare --tokenizer char --input data/tinyshakespeare/input.txt --out runs/data/shakespeare-char
fi
if [ ! -f runs/data/wikitext2-gpt2bpe/manifest.json ] && [ ! -f runs/data/wikitext2-gpt2bpe/train.bin ]; then
  "$FRUGAL" prepare --tokenizer gpt2 --input data/wikitext-2/train.txt.xz \
    --val-input data/wikitext-2/valid.txt --out runs/data/wikitext2-gpt2bpe
fi
for corpus in shakespeare wikitext; do
  if [ -z "$ONLY" ] || [ "$ONLY" = "$corpus" ]; then
    "$FRUGAL" experiment "experiments/$NAME-$corpus.toml" --out "$OUT/$corpus"
  fi
done
