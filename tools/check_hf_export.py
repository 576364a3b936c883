#!/usr/bin/env python3
"""Checks `frugal export --format hf` against transformers itself.

Exports a frugal checkpoint, loads the result with transformers' GPT2LMHeadModel, runs it on the
same random tokens as frugal (bench_logits writes frugal's tokens and logits) and prints the
maximum absolute logit difference; for GPT-2 BPE models it also checks that AutoTokenizer encodes
a text exactly as `frugal tokenize` does. Then the other direction: the model as transformers'
save_pretrained writes it goes through `frugal import`, and frugal's logits of the imported
checkpoint must equal those of the original bit for bit. Exits 1 when a check fails.

Needs transformers with Debian's torch 1.13, e.g. a virtualenv:
  /usr/bin/python3 -m venv --system-site-packages /opt/frugal-hf
  /opt/frugal-hf/bin/pip install 'transformers<4.40'
Usage:
  /opt/frugal-hf/bin/python tools/check_hf_export.py RUN_OR_CHECKPOINT_DIR [--build build]
"""
import argparse
import pathlib
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer, GPT2LMHeadModel

SAMPLE_TEXT = "Hello world! It's 2024, and naïve tokenizers split 'words' oddly.\n"


def run(cmd):
    print("$", " ".join(str(c) for c in cmd))
    subprocess.run([str(c) for c in cmd], check=True)


def compare_logits(model, logits_path):
    """Max |frugal - transformers| over all logits, and the fraction of equal argmax tokens."""
    saved = load_file(str(logits_path))
    tokens, frugal_logits = saved["tokens"].long(), saved["logits"]
    with torch.no_grad():
        hf_logits = model(tokens).logits
    assert hf_logits.shape == frugal_logits.shape, (hf_logits.shape, frugal_logits.shape)
    diff = (hf_logits - frugal_logits).abs().max().item()
    agree = (hf_logits.argmax(-1) == frugal_logits.argmax(-1)).float().mean().item()
    scale = frugal_logits.abs().max().item()
    return diff, agree, scale


def compare_tokenizer(hf_dir, frugal_bin, work):
    """True when AutoTokenizer and `frugal tokenize` give the same ids for SAMPLE_TEXT."""
    text_path = work / "sample.txt"
    text_path.write_text(SAMPLE_TEXT, encoding="utf-8")
    out = subprocess.run([str(frugal_bin), "tokenize", str(text_path)], check=True,
                         capture_output=True, text=True).stdout
    frugal_ids = [int(t) for t in out.split()]
    hf_ids = AutoTokenizer.from_pretrained(str(hf_dir)).encode(SAMPLE_TEXT)
    return frugal_ids == hf_ids


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint", help="frugal run directory or checkpoint directory")
    ap.add_argument("--build", default="build", help="build directory with frugal and bench/bench_logits")
    ap.add_argument("--out", help="export directory (default: a temporary one)")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=0, help="tokens per sequence (0: block_size)")
    ap.add_argument("--tol", type=float, default=1e-3, help="largest acceptable max abs difference")
    args = ap.parse_args()

    build = pathlib.Path(args.build)
    frugal_bin, bench_logits = build / "frugal", build / "bench" / "bench_logits"
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        hf_dir = pathlib.Path(args.out) if args.out else work / "hf"
        run([frugal_bin, "export", "--format", "hf", args.checkpoint, hf_dir])
        seq_len = [args.seq_len] if args.seq_len else []
        run([bench_logits, args.checkpoint, work / "logits.safetensors", args.batch] + seq_len)
        model = GPT2LMHeadModel.from_pretrained(str(hf_dir)).eval()
        diff, agree, scale = compare_logits(model, work / "logits.safetensors")
        print(f"max abs logit difference frugal vs transformers: {diff:.3e} "
              f"(largest |logit| {scale:.2f}; argmax agreement {agree:.4f})")
        ok = diff <= args.tol
        if (hf_dir / "vocab.json").exists():
            same = compare_tokenizer(hf_dir, frugal_bin, work)
            print(f"AutoTokenizer ids == frugal tokenize ids: {same}")
            ok = ok and same

        model.save_pretrained(str(work / "resaved"))
        run([frugal_bin, "import", work / "resaved", work / "imported", "--tokenizer",
             hf_dir / "frugal_tokenizer.json"])
        run([bench_logits, work / "imported", work / "imported_logits.safetensors", args.batch] + seq_len)
        original = load_file(str(work / "logits.safetensors"))["logits"]
        imported = load_file(str(work / "imported_logits.safetensors"))["logits"]
        identical = torch.equal(original, imported)
        print(f"frugal logits after save_pretrained -> frugal import identical to the original: {identical}")
        ok = ok and identical
    print("OK" if ok else f"FAILED (tolerance {args.tol:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
