#!/bin/sh
# Prepares the pretraining / fine-tuning split of Tiny Shakespeare that the freeze-finetune
# experiments share, in runs/freeze-finetune-data/{pretrain,finetune}. The first 85% of the text is
# the pretraining corpus; the held-out last 15% is the fine-tuning corpus (its first 90% for
# training, last 10% validation). Both data directories must share one character vocabulary, and
# the held-out part lacks three characters ($ & 3): the fine-tuning directory's validation inputs
# are its own 10% followed by the pretraining text, so the vocabulary covers both; evaluation reads
# only the first eval_batches·batch_size·seq_len = 8192 tokens, which lie inside the held-out 10%
# (16731 tokens).
# Usage: experiments/freeze-finetune-data.sh [FRUGAL_BINARY=build/frugal]
set -eu
FRUGAL=${1:-build/frugal}
TEXT=data/tinyshakespeare/input.txt
WORK=runs/freeze-finetune-data
mkdir -p "$WORK"
SIZE=$(wc -c < "$TEXT")
PRE=$((SIZE * 85 / 100))
head -c "$PRE" "$TEXT" > "$WORK/pretrain.txt"
tail -c +$((PRE + 1)) "$TEXT" > "$WORK/heldout.txt"
HELD=$((SIZE - PRE))
FT=$((HELD * 9 / 10))
head -c "$FT" "$WORK/heldout.txt" > "$WORK/finetune-train.txt"
tail -c +$((FT + 1)) "$WORK/heldout.txt" > "$WORK/finetune-val.txt"
"$FRUGAL" prepare --tokenizer char --input "$WORK/pretrain.txt" --val-input "$WORK/finetune-val.txt" \
  --out "$WORK/pretrain"
"$FRUGAL" prepare --tokenizer char --input "$WORK/finetune-train.txt" \
  --val-input "$WORK/finetune-val.txt" --val-input "$WORK/pretrain.txt" --out "$WORK/finetune"
cmp "$WORK/pretrain/frugal_tokenizer.json" "$WORK/finetune/frugal_tokenizer.json"
