"""A plain-PyTorch GPT-2 used as the reference and baseline for loom.

The parameter names (see GPT.named_parameters()) are the ones loom's
reference files use:

    wte.weight, wpe.weight,
    h.{i}.ln_1.{weight,bias}, h.{i}.attn.c_attn.{weight,bias},
    h.{i}.attn.c_proj.{weight,bias}, h.{i}.ln_2.{weight,bias},
    h.{i}.mlp.c_fc.{weight,bias}, h.{i}.mlp.c_proj.{weight,bias},
    ln_f.{weight,bias}

Linear weights use nn.Linear's layout: [out_features, in_features].
The LM head is tied to wte and has no bias.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

LN_EPS = 1e-5
INIT_STD = 0.02


@dataclass
class GPTConfig:
    vocab_size: int
    n_layer: int
    n_head: int
    d_model: int
    seq_len: int
    # Attention through F.scaled_dot_product_attention (torch >= 2.0) instead
    # of the explicit masked softmax; off by default, so references built from
    # this module are unchanged. tools/bench_pytorch.py turns it on (--sdpa).
    sdpa: bool = False


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        assert cfg.d_model % cfg.n_head == 0
        self.n_head = cfg.n_head
        self.sdpa = cfg.sdpa
        # One projection produces q, k, v in that order, each C wide; within
        # each, the C features are laid out head-major as [n_head, head_size].
        self.c_attn = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.c_proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)
        # [B, T, C] -> [B, NH, T, hs]
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)

        if self.sdpa:   # same maths (scale 1/sqrt(hs), causal), one fused op
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            scores = scores.masked_fill(~causal, float("-inf"))
            att = F.softmax(scores, dim=-1)
            y = att @ v                                # [B, NH, T, hs]
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.c_proj = nn.Linear(4 * cfg.d_model, cfg.d_model)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model, eps=LN_EPS)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.d_model, eps=LN_EPS)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.h = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.d_model, eps=LN_EPS)
        self.init_weights()

    @torch.no_grad()
    def init_weights(self):
        """GPT-2 initialisation.

        Weights and embeddings ~ N(0, 0.02), biases zero, LayerNorm 1/0.
        The two projections that write into the residual stream get
        std 0.02/sqrt(2*n_layer): each block adds two of them, so this keeps
        the residual's variance from growing with depth.
        """
        resid_std = INIT_STD / math.sqrt(2 * self.cfg.n_layer)
        for name, p in self.named_parameters():
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") \
                    or name == "ln_f.weight":
                p.fill_(1.0)
            elif name.endswith(".bias"):
                p.zero_()
            elif name.endswith("attn.c_proj.weight") or name.endswith("mlp.c_proj.weight"):
                p.normal_(0.0, resid_std)
            else:
                p.normal_(0.0, INIT_STD)

    def forward(self, tokens, targets=None):
        """tokens, targets: int64 [B, T]. Returns (logits [B,T,V], loss or None)."""
        B, T = tokens.shape
        assert T <= self.cfg.seq_len
        pos = torch.arange(T, device=tokens.device)
        x = self.wte(tokens) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        logits = x @ self.wte.weight.t()   # tied LM head, no bias
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T), ignore_index=-1)
        return logits, loss

    def num_params(self):
        return sum(p.numel() for p in self.parameters())


def make_adamw(model, lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=None):
    """AdamW with two groups: decay on every parameter with dim >= 2
    (matmul weights and both embeddings), none on biases and LayerNorm.

    fused: None (default) leaves AdamW's own choice, as before; True/False is
    passed on as AdamW(fused=...) (fused CPU kernels need torch >= 2.4)."""
    decay, no_decay = [], []
    for _, p in model.named_parameters():
        if p.requires_grad:  # frozen parameters (a LoRA base) take no step
            (decay if p.dim() >= 2 else no_decay).append(p)
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    extra = {} if fused is None else {"fused": fused}
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, **extra)
