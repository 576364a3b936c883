"""Writes the golden test fixtures tests/data/fixtures/<name>.safetensors from tools/torch_gpt.py.

For each tiny model variant: float32 initial parameters, one batch of tokens/targets, and the
float64 golden logits, loss, parameter gradients and 10 AdamW steps. frugal's C++ tests load these
files and need no Python. Run with Debian's torch:

    /usr/bin/python3 tools/make_fixtures.py            # (re)write the fixtures
    /usr/bin/python3 tools/make_fixtures.py --check    # recompute and compare with the files

With --bert it writes instead tests/data/fixtures/bert_mlm/: a tiny BertForMaskedLM created and
saved by transformers itself (config.json + model.safetensors, as save_pretrained writes them)
and golden.safetensors, the logits transformers computes from it on fixed input ids. It needs
transformers, e.g. the interpreter of .venv-torch (tools/setup_torch_venv.sh):

    .venv-torch/bin/python tools/make_fixtures.py --bert [--check]

See tests/data/fixtures/README.md for the tensor names.
"""
import argparse
import dataclasses
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402
from torch_gpt import GPT, GPTConfig, init_params, make_adamw  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(REPO, "tests", "data", "fixtures")

TINY = dict(n_layer=2, n_embd=64, n_head=4, vocab_size=100, block_size=16)
VARIANTS = {
    "gelu_tied": GPTConfig(**TINY, mlp="gelu", tied_head=True),
    "gelu_untied": GPTConfig(**TINY, mlp="gelu", tied_head=False),
    "geglu_tied": GPTConfig(**TINY, mlp="geglu", tied_head=True),
    "swiglu_untied": GPTConfig(**TINY, mlp="swiglu", tied_head=False),
}
BATCH, SEQ = 2, 16
SEED = 1234
NOISE = 0.02  # std of the LayerNorm weight/bias and linear bias perturbations
ADAMW = dict(lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8)
ADAMW_STEPS = 10


def make_fixture(cfg, seed):
    """Returns (tensors dict name -> numpy array, metadata dict) for one model config."""
    gen = torch.Generator().manual_seed(seed)
    model = GPT(cfg)  # float32: the initial parameters are exactly float32-representable
    init_params(model, gen, norm_noise=NOISE, bias_std=NOISE)
    tokens = torch.randint(0, cfg.vocab_size, (BATCH, SEQ + 1), generator=gen)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    tensors = {f"param.{n}": p.detach().numpy().copy() for n, p in model.named_parameters()}
    tensors["tokens"] = inputs.to(torch.int32).numpy()
    tensors["targets"] = targets.to(torch.int32).numpy()

    model.double()
    initial = {n: p.detach().clone() for n, p in model.named_parameters()}
    logits, loss = model(inputs, targets)
    loss.backward()
    tensors["logits"] = logits.detach().numpy()
    tensors["loss"] = loss.detach().reshape(1).numpy()
    for n, p in model.named_parameters():
        tensors[f"grad.{n}"] = p.grad.numpy().copy()

    # AdamW from the same initial parameters on the same batch; loss k is taken before update k.
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(initial[n])
            p.grad = None
    opt = make_adamw(model, **ADAMW)
    losses = []
    for _ in range(ADAMW_STEPS):
        _, step_loss = model(inputs, targets)
        step_loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(step_loss.item())
    tensors["adamw_losses"] = np.array(losses, dtype=np.float64)
    for n, p in model.named_parameters():
        tensors[f"adamw_final.{n}"] = p.detach().numpy().copy()

    metadata = {
        "config": cfg.to_json(),
        "batch": json.dumps({"B": BATCH, "T": SEQ}),
        "adamw": json.dumps(dict(ADAMW, steps=ADAMW_STEPS, decay="2-D tensors only", clip=None)),
        "seed": str(seed),
        "param_names": json.dumps([n for n, _ in model.named_parameters()]),
        "made_by": f"tools/make_fixtures.py, torch {torch.__version__}, float64",
    }
    return tensors, metadata


def explicit_logits(cfg, params, tokens):
    """The model written out formula by formula in float64 numpy, independent of torch_gpt.py:
    params name -> array, tokens (B, T) -> logits (B, T, V)."""
    P = {n[len("param.") :]: a.astype(np.float64) for n, a in params.items()}
    C, NH, V = cfg.n_embd, cfg.n_head, cfg.vocab_size
    HS = C // NH

    def layernorm(x, prefix):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + cfg.layernorm_eps) * P[prefix + ".weight"] + P[prefix + ".bias"]

    def linear(x, prefix):
        return x @ P[prefix + ".weight"].T + P[prefix + ".bias"]

    def gelu_tanh(x):
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))

    T = tokens.shape[1]
    x = P["transformer.wte.weight"][tokens] + P["transformer.wpe.weight"][:T]
    causal = np.tril(np.ones((T, T), dtype=bool))
    for layer in range(cfg.n_layer):
        h = f"transformer.h.{layer}."
        qkv = linear(layernorm(x, h + "ln_1"), h + "attn.c_attn")
        y = np.empty_like(x)
        for head in range(NH):
            q, k, v = (qkv[..., part * C + head * HS : part * C + (head + 1) * HS] for part in range(3))
            scores = np.where(causal, q @ k.transpose(0, 2, 1) / np.sqrt(HS), -np.inf)
            weights = np.exp(scores - scores.max(-1, keepdims=True))
            y[..., head * HS : (head + 1) * HS] = weights / weights.sum(-1, keepdims=True) @ v
        x = x + linear(y, h + "attn.c_proj")
        z = layernorm(x, h + "ln_2")
        if cfg.mlp == "gelu":
            hidden = gelu_tanh(linear(z, h + "mlp.c_fc"))
        else:
            gate = linear(z, h + "mlp.c_gate")
            act = gelu_tanh(gate) if cfg.mlp == "geglu" else gate / (1 + np.exp(-gate))
            hidden = act * linear(z, h + "mlp.c_fc")
        x = x + linear(hidden, h + "mlp.c_proj")
    head_weight = P["transformer.wte.weight" if cfg.tied_head else "lm_head.weight"]
    return layernorm(x, "transformer.ln_f") @ head_weight[:V].T


def self_check(name, cfg, tensors, metadata):
    """Internal consistency a wrong fixture would break; raises AssertionError."""
    V = cfg.vocab_size
    params = {k: v for k, v in tensors.items() if k.startswith("param.")}
    logits = explicit_logits(cfg, params, tensors["tokens"])
    err = np.abs(logits - tensors["logits"]).max()
    assert err < 1e-12, f"{name}: torch_gpt logits differ from the explicit formulas by {err}"
    rows = logits.reshape(-1, V)
    log_probs = rows - rows.max(-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    loss = -log_probs[np.arange(rows.shape[0]), tensors["targets"].reshape(-1)].mean()
    assert abs(loss - tensors["loss"][0]) < 1e-12, f"{name}: loss {tensors['loss'][0]} vs explicit {loss}"
    assert json.loads(metadata["config"]) == dataclasses.asdict(cfg), name
    assert tensors["loss"][0] == tensors["adamw_losses"][0], f"{name}: step-1 loss differs"
    assert tensors["adamw_losses"][-1] < tensors["adamw_losses"][0], f"{name}: AdamW did not learn"
    for head in ("transformer.wte.weight", "lm_head.weight"):
        if f"param.{head}" in tensors:
            for prefix in ("param.", "grad.", "adamw_final."):
                assert not tensors[prefix + head][V:].any(), f"{name}: {prefix}{head} padding rows not zero"
    for key, array in tensors.items():
        assert np.isfinite(array).all(), f"{name}: {key} has non-finite values"


BERT_DIR = "bert_mlm"
# 2 layers, width 32, 2 heads, MLP 64 (ffn_mult 2), T 16; vocab 66: a 65-token tokenizer (Tiny
# Shakespeare's characters) and <mask> at id 65, frugal's encoder vocabulary. Two token types with
# a non-zero row 0 (frugal folds it into the positions), hidden_act gelu_new (frugal's tanh GELU),
# initializer_range 0.2 so that attention is far from uniform (a swapped query and key shows).
BERT = dict(vocab_size=66, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=16, type_vocab_size=2, hidden_act="gelu_new", layer_norm_eps=1e-5,
            initializer_range=0.2, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
BERT_MASK = 65


def make_bert_fixture(out_dir, seed):
    """Writes out_dir/{config.json, model.safetensors} (float16, by save_pretrained) and
    out_dir/golden.safetensors: input_ids (I32 (2, 16), mask ids among them) and logits (F64 (2, 16,
    66)), BertForMaskedLM's in float64 from the float16 weights."""
    import transformers

    torch.manual_seed(seed)
    model = transformers.BertForMaskedLM(transformers.BertConfig(**BERT)).eval()
    with torch.no_grad():  # non-trivial LayerNorms and biases (transformers starts them at 1 and 0)
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn(p.shape) * 0.1)
    model = model.half()  # half the bytes; frugal's import widens F16 exactly
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir)
    ids = torch.randint(0, BERT_MASK, (2, 16), generator=torch.Generator().manual_seed(seed))
    ids[0, [1, 5, 6, 15]] = BERT_MASK
    ids[1, [0, 9]] = BERT_MASK
    reloaded = transformers.BertForMaskedLM.from_pretrained(out_dir, attn_implementation="eager")
    reloaded = reloaded.double().eval()
    with torch.no_grad():
        logits = reloaded(input_ids=ids.long()).logits
    tensors = {"input_ids": ids.to(torch.int32).numpy(), "logits": logits.numpy()}
    metadata = {"made_by": f"tools/make_fixtures.py --bert, transformers {transformers.__version__}, "
                           f"torch {torch.__version__}, float64 from the float16 weights"}
    return tensors, metadata


def main_bert(args):
    out_dir = os.path.join(args.out, BERT_DIR)
    if args.check:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            tensors, metadata = make_bert_fixture(tmp, SEED)
            failed = False
            for name in ("config.json", "model.safetensors"):
                same = open(os.path.join(tmp, name), "rb").read() == open(os.path.join(out_dir, name), "rb").read()
                print(f"{os.path.join(out_dir, name)}: {'identical' if same else 'DIFFERS'}")
                failed |= not same
            golden, _ = safetensors_io.read(os.path.join(out_dir, "golden.safetensors"))
            err = np.abs(golden["logits"] - tensors["logits"]).max()
            same_ids = np.array_equal(golden["input_ids"], tensors["input_ids"])
            print(f"golden.safetensors: input ids {'identical' if same_ids else 'DIFFER'}, logits differ by {err:.3g}")
            sys.exit(1 if failed or not same_ids or err > 1e-12 else 0)
    tensors, metadata = make_bert_fixture(out_dir, SEED)
    path = os.path.join(out_dir, "golden.safetensors")
    safetensors_io.write(path, tensors, metadata)
    sizes = sum(os.path.getsize(os.path.join(out_dir, f)) for f in os.listdir(out_dir))
    print(f"wrote {out_dir} ({sizes} bytes): largest |logit| {np.abs(tensors['logits']).max():.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=OUT_DIR, help="output directory (default tests/data/fixtures)")
    ap.add_argument("--check", action="store_true", help="recompute and compare with the existing files")
    ap.add_argument("--bert", action="store_true", help="the BertForMaskedLM fixture (needs transformers)")
    args = ap.parse_args()
    torch.set_num_threads(1)  # fixed reduction order: the files are reproducible byte for byte
    if args.bert:
        main_bert(args)
        return
    os.makedirs(args.out, exist_ok=True)
    failed = False
    for i, (name, cfg) in enumerate(VARIANTS.items()):
        tensors, metadata = make_fixture(cfg, SEED + i)
        self_check(name, cfg, tensors, metadata)
        data = safetensors_io.encode(tensors, metadata)
        path = os.path.join(args.out, f"{name}.safetensors")
        if args.check:
            same = os.path.exists(path) and open(path, "rb").read() == data
            print(f"{path}: {'identical' if same else 'DIFFERS'}")
            failed |= not same
            continue
        safetensors_io.write(path, tensors, metadata)
        back, back_meta = safetensors_io.read(path)  # the writer must round-trip exactly
        assert back_meta == metadata and list(back) == list(tensors)
        for key, array in tensors.items():
            assert back[key].dtype == array.dtype and np.array_equal(back[key], array), key
        print(f"wrote {path} ({len(data)} bytes, {len(tensors)} tensors, loss {tensors['loss'][0]:.6f}, "
              f"after {ADAMW_STEPS} AdamW steps {tensors['adamw_losses'][-1]:.6f})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
