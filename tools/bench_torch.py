"""PyTorch speed baseline: training steps of tools/torch_gpt.py on CPU, in float32 or (--autocast
bf16) under torch.autocast("cpu", dtype=torch.bfloat16), float32 master weights and AdamW.

One step = forward, backward, gradient-norm clipping (to 1.0, as frugal's step), AdamW step,
zero_grad(set_to_none=True) on a fixed random batch.
Presets, warm-up and timed step counts match `frugal bench --preset`, and so does the statistic:
each timed step is timed alone and ms/step and tokens/s come from the median step time.
Run with PyPI's torch 2.x (tools/setup_torch_venv.sh; MKL, oneDNN 3, fused attention and AdamW)
or Debian's torch 1.13 (OpenBLAS, OpenMP variant):

    .venv-torch/bin/python tools/bench_torch.py --preset M --threads 2 [--compile] [--json]
    /usr/bin/python3 tools/bench_torch.py --preset M --threads 2 [--warmup 3 --steps 10] [--json]

By default each torch runs its fastest eager setup: F.scaled_dot_product_attention(is_causal=True)
from torch 2.0 on (written-out attention before) and AdamW(fused=True) from torch 2.4 on (the
default foreach AdamW before); --attention and --adamw choose otherwise. --compile wraps the model
in torch.compile (its compilation happens in the warm-up steps, which are not timed). --autocast
bf16 runs the forward (and so the backward's matching products) under CPU autocast: the linears
and attention in bf16 (oneDNN's bf16 kernels where the CPU has them), the loss in float32.

tools/bench_ddp.py (data-parallel) reuses the presets and the step, timing and counting functions.
torch_gpt (beside this file, on sys.path when run as a script) imports torch, so it is imported
only after import_torch() has set the thread count.
"""
import argparse
import json
import os
import resource
import statistics
import time

# preset -> (model config fields, B, T); block_size = T, tied head, gelu MLP, no dropout.
PRESETS = {
    "S": (dict(vocab_size=65, n_layer=4, n_head=4, n_embd=128), 12, 64),
    "M": (dict(vocab_size=65, n_layer=6, n_head=6, n_embd=384), 8, 256),
    "L": (dict(vocab_size=50257, n_layer=12, n_head=12, n_embd=768), 4, 64),  # GPT-2 small
}
# (warmup, timed steps): those of `frugal bench` (bench/step.cpp), so that
# tools/compare_torch.py compares the same runs.
DEFAULT_STEPS = {"S": (5, 30), "M": (3, 10), "L": (2, 5)}


def make_parser(doc, default_threads=os.cpu_count()):
    """The options every training-step benchmark takes; callers may add their own."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="S")
    ap.add_argument("--threads", type=int, default=default_threads,
                    help=f"intra-op threads per process (default: {default_threads})")
    ap.add_argument("--warmup", type=int, help="untimed steps first (default per preset)")
    ap.add_argument("--steps", type=int, help="timed steps (default per preset)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    ap.add_argument("--attention", choices=["auto", "manual", "sdpa"], default="auto",
                    help="auto: sdpa from torch 2.0 on, else manual")
    ap.add_argument("--adamw", choices=["auto", "foreach", "fused"], default="auto",
                    help="auto: fused from torch 2.4 on, else torch's default (foreach)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (torch >= 2.0)")
    ap.add_argument("--autocast", choices=["none", "bf16"], default="none",
                    help='bf16: the forward under torch.autocast("cpu", dtype=torch.bfloat16)')
    return ap


def parse_args(ap):
    """Parses the command line and fills in the preset's warm-up and timed step counts."""
    args = ap.parse_args()
    warmup, steps = DEFAULT_STEPS[args.preset]
    args.warmup = warmup if args.warmup is None else args.warmup
    args.steps = steps if args.steps is None else args.steps
    if args.threads < 1 or args.steps < 1 or args.warmup < 0:
        ap.error("--threads and --steps must be at least 1, --warmup at least 0")
    return args


def import_torch(threads):
    """Imports torch running `threads` intra-op threads and returns the module."""
    # OpenMP (torch and OpenBLAS's OpenMP variant) reads this at start-up: set it before import.
    os.environ["OMP_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)
    return torch


def build_model(preset, generator, attention="manual"):
    """The preset's model in training mode, initialised from `generator`; returns (cfg, model, B, T)."""
    from torch_gpt import GPT, GPTConfig, init_params

    fields, B, T = PRESETS[preset]
    cfg = GPTConfig(**fields, block_size=T, mlp="gelu", tied_head=True, dropout=0.0)
    model = GPT(cfg, attention=attention)
    init_params(model, generator)
    model.train()
    return cfg, model, B, T


def random_batch(cfg, B, T, generator):
    """B random sequences of T tokens: (inputs, targets), the targets shifted by one."""
    import torch

    tokens = torch.randint(0, cfg.vocab_size, (B, T + 1), generator=generator)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


# The global gradient-norm clip of frugal's training step (optim.grad_clip's default), so that
# both sides do the same work: frugal bench clips at every step.
GRAD_CLIP = 1.0


def train_step(model, opt, inputs, targets, autocast="none"):
    """Forward (under CPU bf16 autocast when autocast == "bf16"), backward, gradient-norm clipping
    to GRAD_CLIP, AdamW step, zero_grad(set_to_none=True); returns the loss."""
    import torch

    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast == "bf16"):
        _, loss = model(inputs, targets)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


def time_steps(step, warmup, steps, before_each=lambda: None):
    """Runs `warmup` untimed steps, then times `steps` steps one by one (before_each() runs
    untimed ahead of each); returns (the step times in seconds, the last step's result)."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        before_each()
        start = time.perf_counter()
        result = step()
        times.append(time.perf_counter() - start)
    return times, result


def parameter_counts(model, cfg):
    """(all parameters with the vocabulary padding rows, parameters counted as frugal bench counts
    them: without the padding rows V..Vp-1)."""
    n_params = sum(p.numel() for p in model.parameters())
    vocab_matrices = 1 if cfg.tied_head else 2
    return n_params, n_params - vocab_matrices * (cfg.padded_vocab() - cfg.vocab_size) * cfg.n_embd


def peak_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def blas_library():
    """The BLAS shared object torch really loaded in this process (from /proc/self/maps)."""
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "blas" in line.lower() and "/" in line}
    return ", ".join(sorted(os.path.realpath(p) for p in paths)) or "none found"


def main():
    args = parse_args(make_parser(__doc__))
    torch = import_torch(args.threads)
    from torch_gpt import make_adamw

    version = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    attention = args.attention if args.attention != "auto" else ("sdpa" if version >= (2, 0) else "manual")
    adamw = args.adamw if args.adamw != "auto" else ("fused" if version >= (2, 4) else "foreach")
    gen = torch.Generator().manual_seed(args.seed)
    cfg, model, B, T = build_model(args.preset, gen, attention=attention)
    opt = make_adamw(model, lr=3e-4, **({"fused": True} if adamw == "fused" else {}))
    inputs, targets = random_batch(cfg, B, T, gen)
    if args.compile:
        model = torch.compile(model)

    load_before = os.getloadavg()[0]  # the machine may be shared: record how busy it was
    times, loss = time_steps(lambda: train_step(model, opt, inputs, targets, args.autocast), args.warmup,
                             args.steps)

    # The median step time, as frugal bench reports it: robust to steps slowed by other load.
    ms_per_step = 1000.0 * statistics.median(times)
    n_params, parameters = parameter_counts(model, cfg)
    result = dict(
        impl="pytorch",
        preset=args.preset,
        threads=args.threads,
        tokens_per_s=B * T / (ms_per_step / 1000.0),
        ms_per_step=ms_per_step,
        ms_min=1000.0 * min(times),
        ms_mean=1000.0 * statistics.mean(times),
        peak_rss_bytes=peak_rss_bytes(),
        steps=args.steps,
        warmup=args.warmup,
        batch=B,
        seq_len=T,
        n_params=n_params,  # with the vocabulary padding rows
        parameters=parameters,  # without them, as frugal bench counts
        final_loss=loss,
        torch_version=torch.__version__,
        attention=attention,
        adamw=adamw,
        compiled=args.compile,
        autocast=args.autocast,
        blas=blas_library(),
        omp_wait_policy=os.environ.get("OMP_WAIT_POLICY", "default"),
        load_avg_1m=[load_before, os.getloadavg()[0]],  # before warmup, after the timed steps
    )
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"pytorch {torch.__version__} ({attention} attention, {adamw} AdamW{', compiled' if args.compile else ''}) "
            f"preset {args.preset} (B={B}, T={T}, {result['n_params'] / 1e6:.2f}M params), "
            f"{args.threads} threads: {ms_per_step:.1f} ms/step (median), {result['tokens_per_s']:.0f} tokens/s, "
            f"peak RSS {result['peak_rss_bytes'] / 2**20:.0f} MiB, loss {loss:.4f}\n"
            f"BLAS: {result['blas']}; load average {load_before:.1f} -> {os.getloadavg()[0]:.1f}"
        )


if __name__ == "__main__":
    main()
