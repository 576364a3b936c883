#!/bin/sh
# The two Mixed Sparsity Training experiments, experiments/mst-{shakespeare,wikitext}.toml, with their data.
# Usage: experiments/mst.sh [FRUGAL_BINARY=build/frugal] [OUT=runs/mst] [shakespeare|wikitext]
exec "$(dirname "$0")/run-corpora.sh" mst "$@"
