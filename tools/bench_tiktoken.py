#!/usr/bin/env python3
# tiktoken's speed on the same file and thread count as bench/bench_tokenizer.cpp: the text is
# split into lines, encoded with encode_ordinary_batch(num_threads=N) (one thread: encode_ordinary
# on the whole text), timed R times after a warm-up; prints the median MB/s.
# Usage: python3 tools/bench_tiktoken.py FILE [--threads N] [--repeat R]
import argparse
import statistics
import time

from gpt2_reference import gpt2_encoding, read_text


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    text = read_text(args.file)
    nbytes = len(text.encode("utf-8"))
    enc = gpt2_encoding()
    if args.threads == 1:
        def run() -> int:
            return len(enc.encode_ordinary(text))
    else:
        # Batch items: the text cut into about 8 pieces per thread at line ends.
        lines = text.splitlines(keepends=True)
        per = max(1, len(lines) // (8 * args.threads))
        docs = ["".join(lines[i:i + per]) for i in range(0, len(lines), per)]

        def run() -> int:
            return sum(len(ids) for ids in enc.encode_ordinary_batch(docs, num_threads=args.threads))
    tokens = run()  # warm-up
    seconds = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        tokens = run()
        seconds.append(time.perf_counter() - t)
    median = statistics.median(seconds)
    print(f"tiktoken gpt2 threads={args.threads} bytes={nbytes} tokens={tokens} "
          f"median_s={median:.4f} MB/s={nbytes / median / 1e6:.2f}")


if __name__ == "__main__":
    main()
