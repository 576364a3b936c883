#!/usr/bin/env python3
"""Checks a `frugal export --format hf` of an encoder against transformers' BertForMaskedLM.

Loads HF_DIR with BertForMaskedLM, runs it on the input ids of FRUGAL_LOGITS (a safetensors file
with "input_ids" I32 (B, T) and frugal's "logits" F32 (B, T, V) of the same model) and prints the
largest logit difference relative to the largest |logit|. With --mask-id it also checks the
tokenizer files: AutoTokenizer loads them, its mask token is "<mask>" with that id, it encodes
--text to the ids the file's "text_ids" holds (frugal's), "<mask>" inside a text becomes the mask
id, and pipeline("fill-mask") fills it. Prints one line per check and "OK" or "FAILED"; exits 1
when a check fails. Used by tests/test_hf_bert.cpp with the interpreter of .venv-torch
(tools/setup_torch_venv.sh).

Usage: check_hf_bert.py HF_DIR FRUGAL_LOGITS [--tol 1e-4] [--mask-id N --text TEXT]
"""
import argparse
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer, BertForMaskedLM, pipeline


def check_logits(hf_dir, logits_path, tol):
    saved = load_file(logits_path)
    ids, frugal = saved["input_ids"].long(), saved["logits"].double()
    model = BertForMaskedLM.from_pretrained(hf_dir, attn_implementation="eager").eval()
    with torch.no_grad():
        hf = model(input_ids=ids).logits.double()
    if hf.shape != frugal.shape:
        print(f"logits shape: transformers {tuple(hf.shape)}, frugal {tuple(frugal.shape)}")
        return False
    rel = ((hf - frugal).abs().max() / frugal.abs().max()).item()
    print(f"max |frugal - transformers| / max |logit| = {rel:.3e} (tolerance {tol:g}; largest |logit| "
          f"{frugal.abs().max().item():.3f}, {ids.numel()} positions, {(ids == ids.max()).sum().item()} "
          f"with the largest id)")
    return rel <= tol


def check_tokenizer(hf_dir, logits_path, mask_id, text):
    tok = AutoTokenizer.from_pretrained(hf_dir)
    ok = tok.mask_token == "<mask>" and tok.mask_token_id == mask_id
    print(f"AutoTokenizer mask token {tok.mask_token!r} id {tok.mask_token_id} (expected '<mask>' {mask_id}): {ok}")
    expected = load_file(logits_path)["text_ids"].tolist()
    same = tok(text)["input_ids"] == expected
    print(f"AutoTokenizer ids == frugal's ids of the text: {same}")
    masked = tok("Hello <mask> world")["input_ids"]
    has_mask = mask_id in masked
    print(f"'Hello <mask> world' -> {masked}: the mask id among them: {has_mask}")
    model = BertForMaskedLM.from_pretrained(hf_dir).eval()
    filled = pipeline("fill-mask", model=model, tokenizer=tok, top_k=3)("Hello <mask> world")
    print(f"fill-mask: {[(f['token'], round(f['score'], 4)) for f in filled]}")
    return ok and same and has_mask and len(filled) == 3


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("hf_dir")
    ap.add_argument("logits", help="safetensors with input_ids and frugal's logits (and text_ids)")
    ap.add_argument("--tol", type=float, default=1e-4, help="largest acceptable relative logit difference")
    ap.add_argument("--mask-id", type=int, help="check the tokenizer files: the mask token's id")
    ap.add_argument("--text", default="", help="a text whose ids the logits file holds as text_ids")
    args = ap.parse_args()
    torch.set_num_threads(1)
    ok = check_logits(args.hf_dir, args.logits, args.tol)
    if args.mask_id is not None:
        ok = check_tokenizer(args.hf_dir, args.logits, args.mask_id, args.text) and ok
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
