#!/bin/sh
# Prepares the pretraining / fine-tuning split of Tiny Shakespeare (freeze-finetune-data.sh) and
# runs experiments/freeze-finetune.toml in one process.
# Usage: experiments/freeze-finetune.sh [FRUGAL_BINARY=build/frugal] [OUT=runs/freeze-finetune]
set -eu
FRUGAL=${1:-build/frugal}
OUT=${2:-runs/freeze-finetune}
sh "$(dirname "$0")/freeze-finetune-data.sh" "$FRUGAL"
"$FRUGAL" experiment experiments/freeze-finetune.toml --out "$OUT"
