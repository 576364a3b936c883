#!/usr/bin/env python3
# Writes a JSONL corpus of about TARGET_BYTES to stdout from the bundled texts: WikiText-2's train,
# valid and test files cut into articles (at " = Title = " headings) and Tiny Shakespeare cut into
# paragraphs, one {"id", "text"} object per line, the documents repeated in a new shuffled order
# (seed 0) until the size is reached. The corpus of docs/data.md "Measured" (2 GiB, 7,975
# documents); compress it on the way out:
#   python3 tools/make_corpus_jsonl.py 2147483648 | zstd -3 -o /tmp/corpus.jsonl.zst
import json
import lzma
import os
import random
import re
import sys


def main() -> None:
    target = int(sys.argv[1])
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")
    texts = [lzma.open(os.path.join(root, "wikitext-2", "train.txt.xz"), "rt", encoding="utf-8").read()]
    for name in ("valid.txt", "test.txt"):
        with open(os.path.join(root, "wikitext-2", name), encoding="utf-8") as f:
            texts.append(f.read())
    docs = [d for text in texts for d in re.split(r"\n(?= = [^=])", text) if d.strip()]
    with open(os.path.join(root, "tinyshakespeare", "input.txt"), encoding="utf-8") as f:
        docs += [p for p in f.read().split("\n\n") if p.strip()]
    lines = [json.dumps({"id": i, "text": d}, ensure_ascii=False) + "\n" for i, d in enumerate(docs)]
    rng = random.Random(0)
    written = 0
    while written < target:
        rng.shuffle(lines)
        for line in lines:
            sys.stdout.write(line)
            written += len(line.encode("utf-8"))
            if written >= target:
                break
    print(f"{len(docs)} documents, {written} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
