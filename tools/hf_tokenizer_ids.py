#!/usr/bin/env python3
"""Token ids of a text under a tokenizer directory written by frugal, as Hugging Face reads it.

Usage: hf_tokenizer_ids.py DIR TEXT_FILE
Prints two lines of space-separated ids: tokenizers.Tokenizer.from_file(DIR/tokenizer.json), then
transformers.AutoTokenizer.from_pretrained(DIR) when DIR has a tokenizer_config.json (what
`frugal export --format hf` writes), else the first line again. Used by tests/test_bpe_trainer.cpp
with the interpreter of .venv-torch (tools/setup_torch_venv.sh).
"""
import os
import sys

import tokenizers


def main() -> None:
    directory, text_path = sys.argv[1], sys.argv[2]
    with open(text_path, encoding="utf-8", newline="") as f:
        text = f.read()
    ids = tokenizers.Tokenizer.from_file(os.path.join(directory, "tokenizer.json")).encode(text).ids
    print(" ".join(map(str, ids)))
    if os.path.exists(os.path.join(directory, "tokenizer_config.json")):
        import transformers

        auto = transformers.AutoTokenizer.from_pretrained(directory)
        ids = auto(text)["input_ids"]
    print(" ".join(map(str, ids)))


if __name__ == "__main__":
    main()
