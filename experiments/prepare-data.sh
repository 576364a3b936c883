#!/bin/sh
# Prepares the two corpora the pretraining experiments share, once: Tiny Shakespeare (char) in
# runs/data/shakespeare-char and WikiText-2 (GPT-2 BPE) in runs/data/wikitext2-gpt2bpe.
# Usage: experiments/prepare-data.sh [FRUGAL_BINARY=build/frugal]
set -eu
FRUGAL=${1:-build/frugal}
if [ ! -f runs/data/shakespeare-char/train.bin ]; then
  "$FRUGAL" prepare --tokenizer char --input data/tinyshakespeare/input.txt --out runs/data/shakespeare-char
fi
if [ ! -f runs/data/wikitext2-gpt2bpe/train.bin ]; then
  "$FRUGAL" prepare --tokenizer gpt2 --input data/wikitext-2/train.txt.xz \
    --val-input data/wikitext-2/valid.txt --out runs/data/wikitext2-gpt2bpe
fi
