#!/bin/sh
# Prepares Tiny Shakespeare (char) and WikiText-2 (GPT-2 BPE) and runs the two multi-level
# experiments: experiments/multilevel-shakespeare.toml and experiments/multilevel-wikitext.toml.
# Usage: experiments/multilevel.sh [FRUGAL_BINARY=build/frugal] [OUT=runs/multilevel] [shakespeare|wikitext]
set -eu
FRUGAL=${1:-build/frugal}
OUT=${2:-runs/multilevel}
ONLY=${3:-}
"$(dirname "$0")/prepare-data.sh" "$FRUGAL"
for corpus in shakespeare wikitext; do
  if [ -z "$ONLY" ] || [ "$ONLY" = "$corpus" ]; then
    "$FRUGAL" experiment "experiments/multilevel-$corpus.toml" --out "$OUT/$corpus"
  fi
done
