"""PyTorch reference of frugal's GPT model (src/frugal/model/config.h, param_table.h).

The same architecture, parameter names and shapes as frugal's ParamTable, used to make golden
test fixtures (tools/make_fixtures.py) and as the side-by-side speed baseline
(tools/bench_torch.py, tools/bench_ddp.py). Runs with Debian's /usr/bin/python3 and torch 1.13;
GPT(cfg, attention="sdpa") needs torch >= 2.0.
"""
import dataclasses
import json
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

MLP_KINDS = ("gelu", "geglu", "swiglu")
ATTENTION_KINDS = ("manual", "sdpa")


@dataclasses.dataclass
class GPTConfig:
    """Mirrors frugal::ModelConfig field by field (same names, same defaults)."""

    vocab_size: int = 65  # V; embeddings are padded to padded_vocab() rows
    block_size: int = 256  # maximum sequence length T
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    ffn_mult: int = 4
    mlp: str = "gelu"  # "gelu" | "geglu" | "swiglu"
    tied_head: bool = True
    bias: bool = True
    dropout: float = 0.0  # on the attention and MLP outputs (residual branches)
    layernorm_eps: float = 1e-5
    init_std: float = 0.02

    def __post_init__(self):
        if self.mlp not in MLP_KINDS:
            raise ValueError(f"mlp = {self.mlp!r} is not known; use one of {MLP_KINDS}")
        if self.n_embd % self.n_head != 0:
            raise ValueError(f"n_embd = {self.n_embd} must be a multiple of n_head = {self.n_head}")

    def padded_vocab(self):
        return (self.vocab_size + 63) // 64 * 64

    def head_size(self):
        return self.n_embd // self.n_head

    def ffn_hidden(self):
        return self.ffn_mult * self.n_embd

    def gated(self):
        return self.mlp != "gelu"

    def to_json(self):
        return json.dumps(dataclasses.asdict(self), sort_keys=True)


class LayerNorm(nn.Module):
    """LayerNorm over the last dim with an optional bias (torch 1.13's nn.LayerNorm has no bias flag)."""

    def __init__(self, dim, bias, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None
        self.eps = eps

    def forward(self, x):  # x (..., C)
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)


class CausalSelfAttention(nn.Module):
    """attention="manual": scores, mask and softmax written out (any torch); "sdpa":
    F.scaled_dot_product_attention(is_causal=True), torch's fused kernel (torch >= 2.0)."""

    def __init__(self, cfg, attention="manual"):
        super().__init__()
        if attention not in ATTENTION_KINDS:
            raise ValueError(f"attention = {attention!r} is not known; use one of {ATTENTION_KINDS}")
        if attention == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
            raise ValueError(f"attention = 'sdpa' needs torch >= 2.0 (this is {torch.__version__})")
        C = cfg.n_embd
        self.n_head = cfg.n_head
        self.attention = attention
        self.c_attn = nn.Linear(C, 3 * C, bias=cfg.bias)  # weight (3C, C) -> [q | k | v]
        self.c_proj = nn.Linear(C, C, bias=cfg.bias)
        if attention == "manual":
            # Additive causal mask (T, T): 0 on and below the diagonal, -inf above. Not a parameter,
            # not saved; baddbmm adds it while computing the scaled scores.
            future = torch.ones(cfg.block_size, cfg.block_size, dtype=torch.bool).triu(1)
            mask = torch.zeros(cfg.block_size, cfg.block_size).masked_fill(future, float("-inf"))
            self.register_buffer("mask", mask, persistent=False)

    def forward(self, x):  # x (B, T, C) -> (B, T, C)
        B, T, C = x.shape
        NH, HS = self.n_head, C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)
        if self.attention == "sdpa":
            q, k, v = (t.view(B, T, NH, HS).transpose(1, 2) for t in (q, k, v))  # (B, NH, T, HS)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).reshape(B, T, C))

        def heads(t):  # (B, T, C) -> (B*NH, T, HS)
            return t.view(B, T, NH, HS).transpose(1, 2).reshape(B * NH, T, HS)

        q, k, v = heads(q), heads(k), heads(v)
        scores = torch.baddbmm(self.mask[:T, :T], q, k.transpose(1, 2), alpha=1.0 / math.sqrt(HS))
        y = torch.bmm(F.softmax(scores, dim=-1), v)  # (B*NH, T, HS)
        y = y.view(B, NH, T, HS).transpose(1, 2).reshape(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, H = cfg.n_embd, cfg.ffn_hidden()
        self.kind = cfg.mlp
        self.c_fc = nn.Linear(C, H, bias=cfg.bias)  # weight (H, C)
        if cfg.gated():
            self.c_gate = nn.Linear(C, H, bias=cfg.bias)  # weight (H, C)
        self.c_proj = nn.Linear(H, C, bias=cfg.bias)  # weight (C, H)

    def forward(self, x):  # x (B, T, C) -> (B, T, C)
        if self.kind == "gelu":
            h = F.gelu(self.c_fc(x), approximate="tanh")
        elif self.kind == "geglu":
            h = F.gelu(self.c_gate(x), approximate="tanh") * self.c_fc(x)
        else:  # swiglu
            h = F.silu(self.c_gate(x)) * self.c_fc(x)
        return self.c_proj(h)


class Block(nn.Module):
    def __init__(self, cfg, attention="manual"):
        super().__init__()
        self.ln_1 = LayerNorm(cfg.n_embd, cfg.bias, cfg.layernorm_eps)
        self.attn = CausalSelfAttention(cfg, attention)
        self.ln_2 = LayerNorm(cfg.n_embd, cfg.bias, cfg.layernorm_eps)
        self.mlp = MLP(cfg)
        self.dropout = cfg.dropout

    def forward(self, x):  # x (B, T, C)
        x = x + F.dropout(self.attn(self.ln_1(x)), self.dropout, self.training)
        return x + F.dropout(self.mlp(self.ln_2(x)), self.dropout, self.training)


class GPT(nn.Module):
    """Parameters are registered in frugal's ParamTable order with the same names and shapes.
    attention ("manual" or "sdpa", see CausalSelfAttention) changes how, not what, is computed."""

    def __init__(self, cfg, attention="manual"):
        super().__init__()
        self.cfg = cfg
        Vp, C = cfg.padded_vocab(), cfg.n_embd
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(Vp, C),  # (Vp, C); rows V..Vp-1 are padding, kept at zero
                wpe=nn.Embedding(cfg.block_size, C),
                h=nn.ModuleList(Block(cfg, attention) for _ in range(cfg.n_layer)),
                ln_f=LayerNorm(C, cfg.bias, cfg.layernorm_eps),
            )
        )
        if not cfg.tied_head:
            self.lm_head = nn.Linear(C, Vp, bias=False)  # weight (Vp, C)

    def head_weight(self):  # (Vp, C)
        return self.transformer.wte.weight if self.cfg.tied_head else self.lm_head.weight

    def forward(self, tokens, targets=None):
        """tokens (B, T) int64 -> logits (B, T, V), and the mean cross-entropy if targets given."""
        T = tokens.shape[1]
        if T > self.cfg.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.cfg.block_size}")
        tr = self.transformer
        x = tr.wte(tokens) + tr.wpe.weight[:T]
        for block in tr.h:
            x = block(x)
        # Only the first V rows of the head take part; padding rows get no gradient from here.
        logits = F.linear(tr.ln_f(x), self.head_weight()[: self.cfg.vocab_size])
        if targets is None:
            return logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        return logits, loss


def init_params(model, generator, norm_noise=0.0, bias_std=0.0):
    """Weights and embeddings ~ N(0, init_std), wte/lm_head padding rows zero; LayerNorm weights
    1 + N(0, norm_noise), LayerNorm biases N(0, norm_noise), linear biases N(0, bias_std)
    (zero noise gives the usual GPT-2 init)."""
    std = model.cfg.init_std
    V = model.cfg.vocab_size
    with torch.no_grad():
        for name, p in model.named_parameters():
            is_norm = ".ln_" in name or name.startswith("transformer.ln_f")
            if p.dim() == 2:
                mean, sd = 0.0, std
            elif is_norm:
                mean, sd = (1.0 if name.endswith(".weight") else 0.0), norm_noise
            else:
                mean, sd = 0.0, bias_std
            if sd > 0:
                p.normal_(mean, sd, generator=generator)
            else:
                p.fill_(mean)
        model.transformer.wte.weight[V:].zero_()
        if not model.cfg.tied_head:
            model.lm_head.weight[V:].zero_()


def make_adamw(model, lr, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8, **kwargs):
    """torch.optim.AdamW with decoupled weight decay on 2-D tensors only (frugal's
    ParamInfo::decays(): weights and embeddings), none on biases and LayerNorm parameters."""
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() != 2]
    groups = [
        dict(params=decay, weight_decay=weight_decay),
        dict(params=no_decay, weight_decay=0.0),
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, **kwargs)
