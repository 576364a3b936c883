#!/usr/bin/env python3
"""Runs experiments/sparse24.toml without `frugal experiment`: prepares the char-level Tiny
Shakespeare data, trains every [[run]] (base overrides, then the run's `set`) into
runs/sparse24/<name>, and writes `frugal report` for all runs (dense first) to runs/sparse24/report.

Usage: python3 experiments/sparse24.py [--frugal build/frugal] [--only NAME ...] [--threads N]
"""
import argparse
import os
import subprocess
import sys
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def flatten(table, prefix=""):
    """{'train': {'max_steps': 300}} -> ['train.max_steps=300'] (TOML scalars as --set values)."""
    out = []
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out += flatten(value, name + ".")
        elif isinstance(value, bool):
            out.append(f"{name}={'true' if value else 'false'}")
        else:
            out.append(f"{name}={value}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frugal", default=os.path.join(ROOT, "build", "frugal"))
    ap.add_argument("--only", nargs="*", help="run only these names (the report still covers all finished runs)")
    ap.add_argument("--out", default=os.path.join(ROOT, "runs", "sparse24"))
    ap.add_argument("--threads", type=int, help="train.threads for every run (default: the spec's, 0 = all cores)")
    args = ap.parse_args()
    if args.threads is not None and args.threads < 0:
        ap.error("--threads must be at least 0")
    with open(os.path.join(ROOT, "experiments", "sparse24.toml"), "rb") as f:
        spec = tomllib.load(f)
    base = flatten(spec["base"])
    data_dir = spec["base"]["data"]["dir"]
    if not os.path.isabs(data_dir):
        data_dir = os.path.join(ROOT, data_dir)
    if not any(os.path.exists(os.path.join(data_dir, f)) for f in ("manifest.json", "train.bin")):
        subprocess.run([args.frugal, "prepare", "--tokenizer", "char", "--input",
                        os.path.join(ROOT, "data", "tinyshakespeare", "input.txt"), "--out", data_dir],
                       check=True)
    names = []
    for run in spec["run"]:
        name = run["name"]
        names.append(name)
        if args.only and name not in args.only:
            continue
        out_dir = os.path.join(args.out, name)
        sets = base + [f"data.dir={data_dir}", f"train.out_dir={out_dir}"] + run.get("set", [])
        if args.threads is not None:  # same for every run, so the wall-clock columns compare
            sets.append(f"train.threads={args.threads}")
        # the experiment owns its run directories: a rerun replaces them
        cmd = [args.frugal, "train", os.path.join(ROOT, "configs", "shakespeare-char.toml"), "--overwrite"]
        for s in sets:
            cmd += ["--set", s]
        print("==>", name, flush=True)
        subprocess.run(cmd, check=True)
    done = [n for n in names if os.path.exists(os.path.join(args.out, n, "metrics.jsonl"))]
    subprocess.run([args.frugal, "report", *[os.path.join(args.out, n) for n in done], "--names", ",".join(done),
                    "--out", os.path.join(args.out, "report")], check=True)


if __name__ == "__main__":
    sys.exit(main())
