"""Side-by-side training speed: frugal against the PyTorch reference, same preset and threads.

Runs `<frugal> bench --preset P --threads N --json` and
`/usr/bin/python3 tools/bench_torch.py --preset P --threads N --json` alternately, --repeats times
each (alternating spreads the load of a shared machine over both), then prints medians:

    /usr/bin/python3 tools/compare_torch.py --preset S M L --threads 2 [--repeats 5] [--json]

Each command must print one JSON object (its last JSON line is used) with at least tokens_per_s
and ms_per_step (both from the median step time on both sides), peak_rss_bytes, and the run's
batch, seq_len, parameters (without vocabulary padding rows), warmup and steps: the script stops
with an error when the two sides did not run the same model, batch and step counts.
--frugal-cmd / --torch-cmd replace the program part of a command (frugal still gets `bench`, both
get the options), e.g. to test this script with a fake benchmark.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys

TOOLS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TOOLS)
MEASURED = ("tokens_per_s", "ms_per_step", "peak_rss_bytes")
SAME_RUN = ("batch", "seq_len", "parameters", "warmup", "steps")  # must agree between the sides
REQUIRED = MEASURED + SAME_RUN


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", nargs="+", default=["S"], help="one or more presets (S, M, L)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5, help="runs of each side per preset")
    ap.add_argument("--frugal", default=os.path.join(REPO, "build", "frugal"), help="frugal binary")
    ap.add_argument("--frugal-cmd", help="command line replacing the frugal binary (shell-quoted)")
    ap.add_argument("--torch-cmd", help="command line replacing /usr/bin/python3 tools/bench_torch.py")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds allowed for one run")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = ap.parse_args()
    if args.repeats < 1 or args.threads < 1:
        ap.error("--repeats and --threads must be at least 1")
    return args


def run_bench(name, program, preset, threads, timeout):
    """Runs one benchmark command and returns its JSON result (a dict); exits with a clear error."""
    cmd = program + ["--preset", preset, "--threads", str(threads), "--json"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        sys.exit(f"error: cannot run {cmd[0]!r} for {name}; build it or pass its path (--frugal / --{name}-cmd)")
    except subprocess.TimeoutExpired:
        sys.exit(f"error: {name} ran longer than {timeout:.0f} s: {shlex.join(cmd)}; raise --timeout")
    if proc.returncode != 0:
        sys.exit(f"error: {name} failed (exit {proc.returncode}): {shlex.join(cmd)}\n{proc.stderr.strip()}")
    for line in reversed(proc.stdout.splitlines()):
        try:
            result = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(result, dict):
            missing = [k for k in REQUIRED if k not in result]
            if missing:
                sys.exit(f"error: {name}'s JSON lacks {missing}: {shlex.join(cmd)}")
            return result
    sys.exit(f"error: {name} printed no JSON object: {shlex.join(cmd)}\nstdout: {proc.stdout.strip()[-500:]}")


def check_same_run(preset, frugal, pytorch):
    """Exits with an error unless both results describe the same model, batch and step counts."""
    differ = [f"{key} {frugal[key]} vs {pytorch[key]}" for key in SAME_RUN if frugal[key] != pytorch[key]]
    if differ:
        sys.exit(f"error: preset {preset}: frugal and pytorch did not run the same benchmark "
                 f"(frugal vs pytorch: {', '.join(differ)}); align the presets in "
                 f"bench/step.cpp and tools/bench_torch.py")


def compare(preset, args, programs):
    """Alternates the two benchmarks; returns the medians of one preset as a dict."""
    runs = {name: [] for name in programs}
    for _ in range(args.repeats):
        for name, program in programs.items():
            runs[name].append(run_bench(name, program, preset, args.threads, args.timeout))
            print(f"  {preset} {name}: {runs[name][-1]['tokens_per_s']:.0f} tokens/s", file=sys.stderr)
        check_same_run(preset, runs["frugal"][-1], runs["pytorch"][-1])
    ratios = [f["tokens_per_s"] / t["tokens_per_s"] for f, t in zip(runs["frugal"], runs["pytorch"])]
    summary = dict(preset=preset, threads=args.threads, repeats=args.repeats, ratio_median=statistics.median(ratios))
    for name, results in runs.items():
        for key in MEASURED:
            summary[f"{name}_{key}_median"] = statistics.median(r[key] for r in results)
        summary[f"{name}_tokens_per_s_all"] = [r["tokens_per_s"] for r in results]
    if all("mfu" in r for r in runs["frugal"]):
        summary["frugal_mfu_median"] = statistics.median(r["mfu"] for r in runs["frugal"])
    return summary


def print_table(rows):
    header = ("preset", "threads", "frugal tok/s", "pytorch tok/s", "frugal/pytorch", "frugal MiB", "pytorch MiB")
    lines = [header]
    for r in rows:
        lines.append((
            r["preset"],
            str(r["threads"]),
            f"{r['frugal_tokens_per_s_median']:.0f}",
            f"{r['pytorch_tokens_per_s_median']:.0f}",
            f"{r['ratio_median']:.2f}x",
            f"{r['frugal_peak_rss_bytes_median'] / 2**20:.0f}",
            f"{r['pytorch_peak_rss_bytes_median'] / 2**20:.0f}",
        ))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for line in lines:
        print("  ".join(cell.rjust(w) for cell, w in zip(line, widths)))
    print(f"medians of {rows[0]['repeats']} alternating runs each; ratio = median of per-pair tokens/s ratios")


def main():
    args = parse_args()
    # Both sides wait in OpenMP barriers the same way: the frugal binary's default wait policy
    # (GOMP_SPINCOUNT=1000, core/threading.h) unless the user chose one for both.
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = "1000"
    programs = {
        "frugal": (shlex.split(args.frugal_cmd) if args.frugal_cmd else [args.frugal]) + ["bench"],
        "pytorch": shlex.split(args.torch_cmd) if args.torch_cmd
        else ["/usr/bin/python3", os.path.join(TOOLS, "bench_torch.py")],
    }
    rows = [compare(preset, args, programs) for preset in args.preset]
    if args.json:
        print(json.dumps(rows))  # one object per preset
    else:
        print_table(rows)


if __name__ == "__main__":
    main()
