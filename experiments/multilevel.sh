#!/bin/sh
# The two multi-level experiments, experiments/multilevel-{shakespeare,wikitext}.toml, with their data.
# Usage: experiments/multilevel.sh [FRUGAL_BINARY=build/frugal] [OUT=runs/multilevel] [shakespeare|wikitext]
exec "$(dirname "$0")/run-corpora.sh" multilevel "$@"
