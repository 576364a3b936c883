"""PyTorch DistributedDataParallel baseline: data-parallel training steps of tools/torch_gpt.py in
float32 on CPU, the peer of frugal's MPI data parallelism (`mpirun -np N frugal bench`).

Starts --nproc processes itself (torch.multiprocessing.spawn; gloo over the loopback interface,
meeting through a file in a temporary directory). Each rank runs --threads intra-op threads on the
preset's batch B of its own random tokens (seed + rank), so the global batch is nproc * B. The
model is wrapped in DDP with its defaults (25 MiB buckets, each bucket's all-reduce started during
backward), attention is F.scaled_dot_product_attention(is_causal=True) and AdamW is fused=True.
Presets, warm-up and timed step counts, the step (forward, backward, AdamW, zero_grad) and the
statistic are tools/bench_torch.py's: every timed step starts after a barrier, its time is the
slowest rank's, ms/step is the median of those and tokens/s = nproc * B * T / that median.
Afterwards a gradient-sized buffer is all-reduced alone, in the same 25 MiB pieces (median of
--steps times): comm_ms_per_step, what a step would spend communicating if DDP overlapped none of
it, for the ring's 2 (N-1)/N * 4 bytes * parameters sent per rank.

Needs torch >= 2.4 (fused AdamW on CPU); tools/setup_torch_venv.sh installs PyPI's torch in
.venv-torch:

    .venv-torch/bin/python tools/bench_ddp.py --preset M --nproc 2 --threads 1 [--warmup 3 --steps 10] [--json]
"""
import json
import os
import re
import statistics
import tempfile

from bench_torch import (build_model, import_torch, make_parser, parameter_counts, parse_args, peak_rss_bytes,
                         random_batch, time_steps, train_step)

BUCKET_CAP_MB = 25  # DDP's default bucket_cap_mb (MiB), also the pieces of the timed all-reduce


def parse_ddp_args():
    ap = make_parser(__doc__, default_threads=1)
    ap.add_argument("--nproc", type=int, default=2, help="processes (ranks), each on the preset's batch (default: 2)")
    args = parse_args(ap)
    if args.nproc < 1:
        ap.error("--nproc must be at least 1")
    return args


def slowest(values):
    """The element-wise maximum over ranks of a list of numbers."""
    import torch
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def time_gradient_allreduce(n_params, repeats):
    """Seconds of all-reducing n_params float32 in DDP-sized buckets, alone (warm-up 1, then each
    of `repeats` after a barrier)."""
    import torch
    import torch.distributed as dist

    buckets = torch.zeros(n_params).split(BUCKET_CAP_MB * 2**20 // 4)

    def allreduce():
        for bucket in buckets:
            dist.all_reduce(bucket)

    times, _ = time_steps(allreduce, 1, repeats, before_each=dist.barrier)
    return times


def measure(rank, args, rss_after_import):
    """This rank's part of the benchmark; returns the result, the same on every rank."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from torch_gpt import make_adamw

    # Same initial parameters on every rank (DDP also broadcasts rank 0's), different tokens.
    cfg, model, B, T = build_model(args.preset, torch.Generator().manual_seed(args.seed), attention="sdpa")
    ddp = DistributedDataParallel(model, bucket_cap_mb=BUCKET_CAP_MB)
    opt = make_adamw(model, lr=3e-4, fused=True)
    inputs, targets = random_batch(cfg, B, T, torch.Generator().manual_seed(args.seed + rank))

    load_before = os.getloadavg()[0]  # the machine may be shared: record how busy it was
    times, loss = time_steps(lambda: train_step(ddp, opt, inputs, targets), args.warmup, args.steps,
                             before_each=dist.barrier)
    peak_rss = peak_rss_bytes()  # before the all-reduce buffer below
    load_after = os.getloadavg()[0]
    n_params, parameters = parameter_counts(model, cfg)
    comm_times = time_gradient_allreduce(n_params, args.steps)

    step_times = slowest(times)
    comm_s = statistics.median(slowest(comm_times))
    peak_rss, rss_after_import = slowest([peak_rss, rss_after_import])
    mean_loss = torch.tensor(loss)
    dist.all_reduce(mean_loss)
    ms_per_step = 1000.0 * statistics.median(step_times)
    allreduce_bytes = 2 * (args.nproc - 1) / args.nproc * 4 * n_params  # DDP reduces the padding rows too
    return dict(
        impl="pytorch-ddp",
        preset=args.preset,
        nproc=args.nproc,
        threads=args.threads,
        tokens_per_s=args.nproc * B * T / (ms_per_step / 1000.0),  # global: all ranks' tokens
        ms_per_step=ms_per_step,
        ms_min=1000.0 * min(step_times),
        ms_mean=1000.0 * statistics.mean(step_times),
        peak_rss_bytes=int(peak_rss),  # of the largest rank
        rss_after_import_bytes=int(rss_after_import),  # of that, torch's libraries (CUDA's too)
        steps=args.steps,
        warmup=args.warmup,
        batch=B,  # per rank
        seq_len=T,
        n_params=n_params,  # with the vocabulary padding rows
        parameters=parameters,  # without them, as frugal bench counts
        final_loss=mean_loss.item() / args.nproc,  # mean over ranks
        comm_ms_per_step=1000.0 * comm_s,
        comm_share=comm_s / (ms_per_step / 1000.0),  # an upper bound of the exposed share
        allreduce_bytes_per_rank=int(allreduce_bytes),
        allreduce_gbytes_per_s=allreduce_bytes / comm_s / 1e9 if comm_s > 0 else 0.0,
        bucket_cap_mb=BUCKET_CAP_MB,
        attention="sdpa",
        adamw="fused",
        torch_version=torch.__version__,
        blas=", ".join(re.findall(r"BLAS_INFO=(\w+)", torch.__config__.show())) or "unknown",
        omp_wait_policy=os.environ.get("OMP_WAIT_POLICY", "default"),
        load_avg_1m=[load_before, load_after],  # rank 0's, before warmup and after the timed steps
    )


def worker(rank, args, rendezvous_file):
    import_torch(args.threads)
    import torch.distributed as dist

    rss_after_import = peak_rss_bytes()
    dist.init_process_group("gloo", init_method=f"file://{rendezvous_file}", rank=rank, world_size=args.nproc)
    result = measure(rank, args, rss_after_import)
    dist.destroy_process_group()
    if rank == 0:
        report(args, result)
    # gloo's worker threads outlive destroy_process_group, and one that drops its last reference
    # to a Python-owned tensor while the interpreter finalises aborts the process (SIGABRT in a
    # few percent of runs here; pytorch/pytorch#190489): leave without finalising.
    os._exit(0)


def report(args, r):
    if args.json:
        print(json.dumps(r), flush=True)
        return
    print(
        f"pytorch-ddp {r['torch_version']} preset {r['preset']} ({r['nproc']} ranks x B={r['batch']}, "
        f"T={r['seq_len']}, {r['n_params'] / 1e6:.2f}M params), {r['threads']} threads each: "
        f"{r['ms_per_step']:.1f} ms/step (median of the slowest rank), {r['tokens_per_s']:.0f} tokens/s, "
        f"peak RSS {r['peak_rss_bytes'] / 2**20:.0f} MiB per rank "
        f"({r['rss_after_import_bytes'] / 2**20:.0f} after import torch), loss {r['final_loss']:.4f}\n"
        f"gradient all-reduce alone: {r['comm_ms_per_step']:.1f} ms ({100 * r['comm_share']:.0f}% of the step), "
        f"{r['allreduce_bytes_per_rank'] / 1e6:.1f} MB sent per rank; BLAS: {r['blas']}; "
        f"load average {r['load_avg_1m'][0]:.1f} -> {r['load_avg_1m'][1]:.1f}",
        flush=True,
    )


def main():
    args = parse_ddp_args()
    # The ranks inherit this environment; torch.multiprocessing imports torch in each before
    # worker() runs, so the thread count must be set here, before spawning.
    import_torch(args.threads)
    import torch.multiprocessing

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # all ranks are on this machine
    with tempfile.TemporaryDirectory(prefix="bench_ddp.") as tmp:
        torch.multiprocessing.spawn(worker, args=(args, os.path.join(tmp, "rendezvous")), nprocs=args.nproc)


if __name__ == "__main__":
    main()
