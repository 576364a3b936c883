"""Side-by-side data-parallel training speed: frugal's MPI ranks against PyTorch DDP (gloo), same
preset, number of ranks and threads per rank.

Runs `mpirun -np N <frugal> bench --preset P --threads T --json` and
`.venv-torch/bin/python tools/bench_ddp.py --preset P --nproc N --threads T --json` alternately,
--repeats times each, then prints medians and the frugal/DDP ratio of tokens/s per preset:

    /usr/bin/python3 tools/compare_ddp.py --preset S M L --nproc 2 --threads 1 [--repeats 5] [--json]

Each command prints JSON as for tools/compare_torch.py, where tokens_per_s counts all ranks'
tokens, batch is the batch of one rank, peak_rss_bytes is the largest rank's, and nproc (required
on both sides) is the number of ranks: the script stops with an error when the sides differ in
nproc, batch, seq_len, parameters, warmup or steps (a frugal without MPI would run N separate
single-rank benchmarks).
mpirun gets --bind-to none (each rank's threads may use every core), --allow-run-as-root when run
as root and --oversubscribe when N exceeds the cores. --mpirun replaces the launcher, --frugal-cmd
the frugal binary after it (frugal still gets `bench`) and --torch-cmd the DDP program, e.g. to
test this script with fake benchmarks. tools/setup_torch_venv.sh makes .venv-torch.
"""
import os
import shlex

from compare_torch import REPO, REQUIRED, SAME_RUN, TOOLS, compare, make_parser, parse_args, report, set_omp_wait_policy

TORCH_PROGRAM = [os.path.join(REPO, ".venv-torch", "bin", "python"), os.path.join(TOOLS, "bench_ddp.py")]


def mpirun_command(launcher, nproc):
    """The mpirun part of frugal's command line."""
    cmd = shlex.split(launcher) + ["-np", str(nproc), "--bind-to", "none"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    if nproc > os.cpu_count():
        cmd.append("--oversubscribe")
    return cmd


def main():
    ap = make_parser(__doc__, ".venv-torch/bin/python tools/bench_ddp.py", default_threads=1)
    ap.add_argument("--nproc", type=int, default=2, help="ranks on each side (default: 2)")
    ap.add_argument("--mpirun", default="mpirun", help="the MPI launcher (shell-quoted; default: mpirun)")
    args = parse_args(ap)
    if args.nproc < 1:
        ap.error("--nproc must be at least 1")
    if not args.torch_cmd and not os.path.exists(TORCH_PROGRAM[0]):
        ap.error(f"{TORCH_PROGRAM[0]} is missing: run tools/setup_torch_venv.sh first (or pass --torch-cmd)")
    set_omp_wait_policy()
    program = shlex.split(args.frugal_cmd) if args.frugal_cmd else [args.frugal]
    frugal = mpirun_command(args.mpirun, args.nproc) + program + ["bench"]
    ddp = (shlex.split(args.torch_cmd) if args.torch_cmd else TORCH_PROGRAM) + ["--nproc", str(args.nproc)]
    options = ["--threads", str(args.threads), "--json"]
    commands = {
        "frugal": lambda preset: frugal + ["--preset", preset] + options,
        "ddp": lambda preset: ddp + ["--preset", preset] + options,
    }
    rows = [compare(preset, commands, args.repeats, args.timeout,
                    dict(preset=preset, nproc=args.nproc, threads=args.threads),
                    required=REQUIRED + ("nproc",), same_run=SAME_RUN + ("nproc",))
            for preset in args.preset]
    report(rows, args.json, tuple(commands), lead=("preset", "nproc", "threads"))


if __name__ == "__main__":
    main()
