"""Side-by-side training speed: frugal against PyTorch, same preset and threads.

Runs `<frugal> bench --preset P --threads N --json` and tools/bench_torch.py for each PyTorch
alternately, --repeats times each (alternating spreads the load of a shared machine over all),
then prints medians:

    /usr/bin/python3 tools/compare_torch.py --preset S M L --threads 2 [--repeats 3] [--json]
        [--precision bf16]

The PyTorch sides: the current PyPI wheel (torch 2.x in .venv-torch, made by
tools/setup_torch_venv.sh; --torch-python chooses another interpreter), run eager and under
torch.compile, both with F.scaled_dot_product_attention and AdamW(fused=True); the ratio is frugal
against the faster of the two in each round. Debian's torch 1.13 (/usr/bin/python3, OpenBLAS) is
the history column, when installed; --no-debian-torch leaves it out.
--precision bf16 compares mixed precision on both sides: frugal with train.precision = "bf16",
every torch with its forward under torch.autocast("cpu", dtype=torch.bfloat16) (bench_torch.py
--autocast bf16).

Each command must print one JSON object (its last JSON line is used) with at least tokens_per_s
and ms_per_step (both from the median step time on both sides), peak_rss_bytes, and the run's
batch, seq_len, parameters (without vocabulary padding rows), warmup and steps: the script stops
with an error when the sides did not run the same model, batch and step counts.
--frugal-cmd / --torch-cmd replace the program part of a command (frugal still gets `bench`, both
get the options), e.g. to test this script with a fake benchmark.
tools/compare_ddp.py (data-parallel: MPI ranks against PyTorch DDP) reuses these functions.
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


def make_parser(doc, torch_program, default_threads):
    """The options of a side-by-side comparison; torch_program names the default PyTorch command."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", nargs="+", default=["S"], help="one or more presets (S, M, L)")
    ap.add_argument("--threads", type=int, default=default_threads)
    ap.add_argument("--repeats", type=int, default=5, help="runs of each side per preset")
    ap.add_argument("--frugal", default=os.path.join(REPO, "build", "frugal"), help="frugal binary")
    ap.add_argument("--frugal-cmd", help="command line replacing the frugal binary (shell-quoted)")
    ap.add_argument("--torch-cmd", help=f"command line replacing {torch_program}")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds allowed for one run")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    return ap


def parse_args(ap):
    args = ap.parse_args()
    if args.repeats < 1 or args.threads < 1:
        ap.error("--repeats and --threads must be at least 1")
    return args


def run_bench(name, cmd, timeout, required=REQUIRED):
    """Runs one benchmark command line and returns its JSON result (a dict); exits with a clear error."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        sys.exit(f"error: cannot run {cmd[0]!r} for {name}; build or install it, or pass another command (see --help)")
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
            missing = [k for k in required if k not in result]
            if missing:
                sys.exit(f"error: {name}'s JSON lacks {missing}: {shlex.join(cmd)}")
            return result
    sys.exit(f"error: {name} printed no JSON object: {shlex.join(cmd)}\nstdout: {proc.stdout.strip()[-500:]}")


def check_same_run(preset, results, same_run=SAME_RUN):
    """Exits with an error unless the two sides' results ({side: result}) describe the same model,
    batch and step counts."""
    (a, ra), (b, rb) = results.items()
    differ = [key for key in same_run if ra[key] != rb[key]]
    if differ:
        advice = "; align the presets in bench/step.cpp and tools/bench_torch.py" if set(differ) & set(SAME_RUN) else ""
        sys.exit(f"error: preset {preset}: {a} and {b} did not run the same benchmark "
                 f"({a} vs {b}: {', '.join(f'{key} {ra[key]} vs {rb[key]}' for key in differ)}){advice}")


def run_alternating(preset, commands, repeats, timeout, required=REQUIRED, same_run=SAME_RUN):
    """Runs every side's command ({side: preset -> command line}) in turn, `repeats` rounds; returns
    {side: [result per round]}. Every round's sides must have run the same benchmark as the first."""
    runs = {name: [] for name in commands}
    for _ in range(repeats):
        for name, command in commands.items():
            runs[name].append(run_bench(name, command(preset), timeout, required))
            print(f"  {preset} {name}: {runs[name][-1]['tokens_per_s']:.0f} tokens/s", file=sys.stderr)
        first = next(iter(runs))
        for name in list(runs)[1:]:
            check_same_run(preset, {first: runs[first][-1], name: runs[name][-1]}, same_run)
    return runs


def medians(summary, runs):
    """Adds every side's medians (and all its tokens/s) to summary."""
    for name, results in runs.items():
        for key in MEASURED:
            summary[f"{name}_{key}_median"] = statistics.median(r[key] for r in results)
        summary[f"{name}_tokens_per_s_all"] = [r["tokens_per_s"] for r in results]
        for key in ("mfu", "mfu_fma"):
            if all(key in r for r in results):
                summary[f"{name}_{key}_median"] = statistics.median(r[key] for r in results)
    return summary


def compare(preset, commands, repeats, timeout, head, required=REQUIRED, same_run=SAME_RUN):
    """Alternates the two sides' commands ({side: preset -> command line}) `repeats` times; returns
    head followed by the medians of one preset, the ratio being the first side's tokens/s over the
    second's (median of the per-pair ratios)."""
    runs = run_alternating(preset, commands, repeats, timeout, required, same_run)
    (_, first), (_, second) = runs.items()
    ratios = [f["tokens_per_s"] / t["tokens_per_s"] for f, t in zip(first, second)]
    return medians(dict(head, repeats=repeats, ratio_median=statistics.median(ratios)), runs)


def print_table(rows, sides, lead=("preset", "threads")):
    """One line per preset: the `lead` fields of the rows, then both sides' medians and the ratio."""
    a, b = sides
    header = lead + (f"{a} tok/s", f"{b} tok/s", f"{a}/{b}", f"{a} MiB", f"{b} MiB")
    lines = [header]
    for r in rows:
        lines.append(tuple(str(r[key]) for key in lead) + (
            f"{r[f'{a}_tokens_per_s_median']:.0f}",
            f"{r[f'{b}_tokens_per_s_median']:.0f}",
            f"{r['ratio_median']:.2f}x",
            f"{r[f'{a}_peak_rss_bytes_median'] / 2**20:.0f}",
            f"{r[f'{b}_peak_rss_bytes_median'] / 2**20:.0f}",
        ))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for line in lines:
        print("  ".join(cell.rjust(w) for cell, w in zip(line, widths)))
    print(f"medians of {rows[0]['repeats']} alternating runs each; ratio = median of per-pair tokens/s ratios")


def report(rows, as_json, sides, lead=("preset", "threads")):
    if as_json:
        print(json.dumps(rows))  # one object per preset
    else:
        print_table(rows, sides, lead)


def set_omp_wait_policy():
    """Both sides wait in OpenMP barriers the same way: the frugal binary's default wait policy
    (GOMP_SPINCOUNT=1000, core/threading.h) unless the user chose one for both."""
    if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = "1000"


def main():
    ap = make_parser(__doc__, "the PyTorch interpreter + tools/bench_torch.py", default_threads=2)
    ap.add_argument("--torch-python", default=os.path.join(REPO, ".venv-torch", "bin", "python"),
                    help="the interpreter with PyPI's torch 2.x (default: .venv-torch, tools/setup_torch_venv.sh)")
    ap.add_argument("--no-debian-torch", action="store_true", help="leave out Debian's torch 1.13 column")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: frugal's train.precision = bf16 against torch's CPU bf16 autocast")
    args = parse_args(ap)
    set_omp_wait_policy()
    frugal = (shlex.split(args.frugal_cmd) if args.frugal_cmd else [args.frugal]) + ["bench"]
    bench_torch = os.path.join(TOOLS, "bench_torch.py")
    torch2 = shlex.split(args.torch_cmd) if args.torch_cmd else [args.torch_python, bench_torch]
    options = ["--threads", str(args.threads), "--json"]
    frugal_options = options + (["--set", "train.precision=bf16"] if args.precision == "bf16" else [])
    torch_options = options + ["--autocast", "bf16" if args.precision == "bf16" else "none"]
    commands = {
        "frugal": lambda preset: frugal + ["--preset", preset] + frugal_options,
        "torch2": lambda preset: torch2 + ["--preset", preset] + torch_options,
        "torch2-compiled": lambda preset: torch2 + ["--preset", preset, "--compile"] + torch_options,
    }
    if not args.no_debian_torch:
        if subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode == 0:
            commands["torch1.13"] = lambda preset: ["/usr/bin/python3", bench_torch, "--preset", preset] + torch_options
        else:
            print("note: Debian's torch 1.13 is not installed (apt-get install python3-torch): its column is "
                  "left out", file=sys.stderr)
    rows = []
    for preset in args.preset:
        runs = run_alternating(preset, commands, args.repeats, args.timeout)
        frugal_runs = runs["frugal"]
        # Per round, the faster of eager and compiled torch 2.x.
        best = [max(e, c, key=lambda r: r["tokens_per_s"]) for e, c in zip(runs["torch2"], runs["torch2-compiled"])]
        row = dict(preset=preset, threads=args.threads, repeats=args.repeats,
                   ratio_torch2=statistics.median(f["tokens_per_s"] / b["tokens_per_s"] for f, b in zip(frugal_runs, best)),
                   torch2_best_modes=["compiled" if b["compiled"] else "eager" for b in best],
                   torch2_best_peak_rss_bytes_median=statistics.median(b["peak_rss_bytes"] for b in best))
        if "torch1.13" in runs:
            row["ratio_torch1.13"] = statistics.median(
                f["tokens_per_s"] / t["tokens_per_s"] for f, t in zip(frugal_runs, runs["torch1.13"]))
        rows.append(medians(row, runs))
    if args.json:
        print(json.dumps(rows))
        return
    for r in rows:
        print(f"preset {r['preset']}, {args.precision}, {r['threads']} threads, {r['repeats']} rounds: frugal "
              f"{r['frugal_tokens_per_s_median']:.0f} tok/s (MFU {100 * r.get('frugal_mfu_median', 0):.1f}% of the GEMM "
              f"peak, {100 * r.get('frugal_mfu_fma_median', 0):.1f}% of the FMA peak), peak RSS "
              f"{r['frugal_peak_rss_bytes_median'] / 2**20:.0f} MiB")
        print(f"  torch 2.x eager {r['torch2_tokens_per_s_median']:.0f}, compiled "
              f"{r['torch2-compiled_tokens_per_s_median']:.0f} tok/s (faster: {', '.join(r['torch2_best_modes'])}), "
              f"peak RSS of the faster {r['torch2_best_peak_rss_bytes_median'] / 2**20:.0f} MiB; "
              f"frugal / torch 2.x = {r['ratio_torch2']:.2f}x")
        if "ratio_torch1.13" in r:
            print(f"  torch 1.13 {r['torch1.13_tokens_per_s_median']:.0f} tok/s, peak RSS "
                  f"{r['torch1.13_peak_rss_bytes_median'] / 2**20:.0f} MiB; frugal / torch 1.13 = {r['ratio_torch1.13']:.2f}x")
    print("ratios: medians over the rounds of frugal's tokens/s over the other's in the same round")


if __name__ == "__main__":
    main()
