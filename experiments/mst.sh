#!/bin/sh
# Prepares Tiny Shakespeare (char) and WikiText-2 (GPT-2 BPE) and runs the Mixed Sparsity Training
# experiments: experiments/mst-shakespeare.toml and experiments/mst-wikitext.toml.
# Usage: experiments/mst.sh [FRUGAL_BINARY=build/frugal] [OUT=runs/mst] [shakespeare|wikitext]
set -eu
FRUGAL=${1:-build/frugal}
OUT=${2:-runs/mst}
ONLY=${3:-}
"$(dirname "$0")/prepare-data.sh" "$FRUGAL"
for corpus in shakespeare wikitext; do
  if [ -z "$ONLY" ] || [ "$ONLY" = "$corpus" ]; then
    "$FRUGAL" experiment "experiments/mst-$corpus.toml" --out "$OUT/$corpus"
  fi
done
