"""A plain-PyTorch LLaMA used as a reference and baseline for loom.

Semantics are Hugging Face's LlamaForCausalLM (eager attention), written
here from the published formulas, not imported:

    x = embed_tokens(tokens)                        (no position table)
    per block:
        h = x + o_proj(attn(rope(q_proj(n1)), rope(k_proj(n1)), v_proj(n1)))
                                                     with n1 = input_layernorm(x)
        x = h + down_proj(silu(gate_proj(n2)) * up_proj(n2))
                                                     with n2 = post_attention_layernorm(h)
    logits = lm_head(norm(x))

RMSNorm: x * rsqrt(mean(x^2) + eps) computed in fp32, then cast back to the
input dtype and multiplied by the weight. Rotary embeddings use HF's
"rotate half" convention: feature i is paired with feature i + hd/2, the
pair's frequency is inv_freq[i] = 1 / theta^(2i/hd), and
q' = q*cos + rotate_half(q)*sin with rotate_half(q) = cat(-q[hd/2:], q[:hd/2]).
Grouped-query attention: kv head j serves query heads j*g .. j*g+g-1
(g = n_head / n_kv_head; HF's repeat_kv, i.e. repeat_interleave on heads).
Scores are scaled by 1/sqrt(hd), causally masked, softmaxed in fp32.

The parameter names (see Llama.named_parameters()) are Hugging Face's:

    model.embed_tokens.weight,
    model.layers.{i}.self_attn.{q,k,v,o}_proj.weight,
    model.layers.{i}.mlp.{gate,up,down}_proj.weight,
    model.layers.{i}.input_layernorm.weight,
    model.layers.{i}.post_attention_layernorm.weight,
    model.norm.weight,
    lm_head.weight                       (absent when tie_embeddings)

Linear weights use nn.Linear's layout [out_features, in_features]:
q_proj [NH*hd, C], k_proj/v_proj [NKV*hd, C], o_proj [C, NH*hd],
gate_proj/up_proj [F, C], down_proj [C, F], lm_head [V, C]. No biases.

forward(tokens, targets) takes targets already aligned with tokens (as
gpt_torch.GPT does); it does not shift labels the way HF's forward does.

Run this file to execute its self-tests:  /usr/bin/python3 tools/llama_torch.py
"""

import math
import os
import sys
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_torch import make_adamw  # noqa: E402,F401  (re-exported: AdamW as for GPT-2)

INIT_STD = 0.02
LOW_PRECISION = (torch.float16, torch.bfloat16)


@dataclass
class LlamaConfig:
    vocab_size: int
    n_layer: int
    n_head: int
    n_kv_head: int
    d_model: int
    ffn_hidden: int
    seq_len: int
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False
    head_dim: Optional[int] = None   # default d_model // n_head, as HF
    # Attention through F.scaled_dot_product_attention (torch >= 2.0) instead
    # of the explicit fp32 softmax; off by default, so references built from
    # this module are unchanged. tools/bench_pytorch.py turns it on (--sdpa).
    sdpa: bool = False

    def __post_init__(self):
        if self.head_dim is None:
            assert self.d_model % self.n_head == 0, "d_model must divide by n_head"
            self.head_dim = self.d_model // self.n_head
        assert self.n_head % self.n_kv_head == 0, "n_head must divide by n_kv_head"
        assert self.head_dim % 2 == 0, "rotary embeddings need an even head_dim"


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        in_dtype = x.dtype
        h = x.to(torch.float32) if in_dtype in LOW_PRECISION else x   # fp32 at least
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(in_dtype)


def rope_cos_sin(T, head_dim, theta, device=None):
    """cos, sin: fp32 [T, head_dim]; each half repeats the hd/2 frequencies."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device=device)
                                .float() / head_dim))
    pos = torch.arange(T, dtype=torch.int64, device=device).float()
    freqs = pos[:, None] * inv_freq[None, :]            # [T, hd/2]
    emb = torch.cat((freqs, freqs), dim=-1)             # [T, hd]
    return emb.cos(), emb.sin()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def apply_rope(x, cos, sin):
    """x: [B, heads, T, hd]; cos/sin: [T, hd]."""
    cos = cos.to(x.dtype)
    sin = sin.to(x.dtype)
    return x * cos + rotate_half(x) * sin


def repeat_kv(x, n_rep):
    """[B, NKV, T, hd] -> [B, NKV*n_rep, T, hd]; kv head j becomes heads j*n_rep .. j*n_rep+n_rep-1."""
    if n_rep == 1:
        return x
    B, NKV, T, hd = x.shape
    return x[:, :, None, :, :].expand(B, NKV, n_rep, T, hd).reshape(B, NKV * n_rep, T, hd)


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = cfg.n_head, cfg.n_kv_head, cfg.head_dim
        self.sdpa = cfg.sdpa
        self.q_proj = nn.Linear(cfg.d_model, cfg.n_head * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.d_model, cfg.n_kv_head * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.d_model, cfg.n_kv_head * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.n_head * cfg.head_dim, cfg.d_model, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        hd = self.head_dim
        # [B, T, heads*hd] -> [B, heads, T, hd]: features are head-major.
        q = self.q_proj(x).view(B, T, self.n_head, hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_kv_head, hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv_head, hd).transpose(1, 2)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        rep = self.n_head // self.n_kv_head
        k = repeat_kv(k, rep)
        v = repeat_kv(v, rep)

        if self.sdpa:   # same maths (scale 1/sqrt(hd), causal), one fused op
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            scores = scores.masked_fill(~causal, float("-inf"))
            # Softmax in fp32 at least (HF: dtype=float32, then back to q's dtype).
            sm_dtype = torch.float32 if scores.dtype in LOW_PRECISION else scores.dtype
            att = F.softmax(scores, dim=-1, dtype=sm_dtype).to(q.dtype)
            y = att @ v                                      # [B, NH, T, hd]
        y = y.transpose(1, 2).reshape(B, T, self.n_head * hd)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.d_model, cfg.ffn_hidden, bias=False)
        self.up_proj = nn.Linear(cfg.d_model, cfg.ffn_hidden, bias=False)
        self.down_proj = nn.Linear(cfg.ffn_hidden, cfg.d_model, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        # Registration order as HF's LlamaDecoderLayer (sets named_parameters()' order).
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.d_model, cfg.norm_eps)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        x = x + self.mlp(self.post_attention_layernorm(x))
        return x


class LlamaModel(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList([DecoderLayer(cfg) for _ in range(cfg.n_layer)])
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)


class Llama(nn.Module):
    """LlamaForCausalLM: .model (embed_tokens, layers, norm) and .lm_head."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.cfg = cfg
        self.model = LlamaModel(cfg)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        cos, sin = rope_cos_sin(cfg.seq_len, cfg.head_dim, cfg.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.init_weights()

    @torch.no_grad()
    def init_weights(self):
        """HF's LLaMA init: every matrix ~ N(0, 0.02), RMSNorm weights 1.

        Drawn in named_parameters() order (a tied lm_head is drawn once,
        as the embedding)."""
        for _, p in self.named_parameters():
            if p.dim() == 1:
                p.fill_(1.0)
            else:
                p.normal_(0.0, INIT_STD)

    def forward(self, tokens, targets=None):
        """tokens, targets: int64 [B, T]. Returns (logits [B,T,V], mean CE loss or None)."""
        B, T = tokens.shape
        assert T <= self.cfg.seq_len
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]
        x = self.model.embed_tokens(tokens)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        x = self.model.norm(x)
        logits = self.lm_head(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T), ignore_index=-1)
        return logits, loss

    def num_params(self):
        return sum(p.numel() for p in self.parameters())


def expected_param_shapes(cfg: LlamaConfig):
    """HF names -> shapes, in named_parameters() order."""
    C, F_, hd = cfg.d_model, cfg.ffn_hidden, cfg.head_dim
    out = {"model.embed_tokens.weight": (cfg.vocab_size, C)}
    for i in range(cfg.n_layer):
        p = f"model.layers.{i}."
        out[p + "self_attn.q_proj.weight"] = (cfg.n_head * hd, C)
        out[p + "self_attn.k_proj.weight"] = (cfg.n_kv_head * hd, C)
        out[p + "self_attn.v_proj.weight"] = (cfg.n_kv_head * hd, C)
        out[p + "self_attn.o_proj.weight"] = (C, cfg.n_head * hd)
        out[p + "mlp.gate_proj.weight"] = (F_, C)
        out[p + "mlp.up_proj.weight"] = (F_, C)
        out[p + "mlp.down_proj.weight"] = (C, F_)
        out[p + "input_layernorm.weight"] = (C,)
        out[p + "post_attention_layernorm.weight"] = (C,)
    out["model.norm.weight"] = (C,)
    if not cfg.tie_embeddings:
        out["lm_head.weight"] = (cfg.vocab_size, C)
    return out


# ---------------------------------------------------------------------------
# Self-tests: independent float64 formulations with explicit loops.
# ---------------------------------------------------------------------------

def _rope_complex(x, theta, pos0=0):
    """RoPE via complex numbers with HF's pairing (i, i + hd/2), in float64.

    x: [..., T, hd]. z_i = x_i + 1j*x_{i+hd/2}, multiplied by
    exp(1j * t * theta^(-2i/hd)); the real parts go back to feature i and the
    imaginary parts to i + hd/2."""
    x = x.double()
    T, hd = x.shape[-2], x.shape[-1]
    h = hd // 2
    z = torch.complex(x[..., :h], x[..., h:])
    i = torch.arange(h, dtype=torch.float64)
    t = torch.arange(pos0, pos0 + T, dtype=torch.float64)
    ang = t[:, None] * theta ** (-2.0 * i / hd)[None, :]
    z = z * torch.polar(torch.ones_like(ang), ang)
    return torch.cat((z.real, z.imag), dim=-1)


def _rope_pairs_loop(x, theta):
    """RoPE as explicit 2-D rotations of (x_i, x_{i+hd/2}) pairs, float64, loops."""
    x = x.double()
    out = torch.empty_like(x)
    T, hd = x.shape[-2], x.shape[-1]
    h = hd // 2
    for t in range(T):
        for i in range(h):
            a = t * theta ** (-2.0 * i / hd)
            c, s = math.cos(a), math.sin(a)
            x0, x1 = x[..., t, i], x[..., t, i + h]
            out[..., t, i] = x0 * c - x1 * s
            out[..., t, i + h] = x0 * s + x1 * c
    return out


def _reference_forward(sd, cfg: LlamaConfig, tokens):
    """Logits from a state dict, float64, written independently with per-head,
    per-position loops (no repeat_kv, no rotate_half, no fused masking)."""
    d = {k: v.double() for k, v in sd.items()}
    B, T = tokens.shape
    NH, NKV, hd = cfg.n_head, cfg.n_kv_head, cfg.head_dim
    g = NH // NKV

    def rms(x, w):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + cfg.norm_eps) * w

    x = d["model.embed_tokens.weight"][tokens]              # [B, T, C]
    for l in range(cfg.n_layer):
        p = f"model.layers.{l}."
        n1 = rms(x, d[p + "input_layernorm.weight"])
        q = n1 @ d[p + "self_attn.q_proj.weight"].t()        # [B, T, NH*hd]
        k = n1 @ d[p + "self_attn.k_proj.weight"].t()        # [B, T, NKV*hd]
        v = n1 @ d[p + "self_attn.v_proj.weight"].t()
        y = torch.zeros(B, T, NH * hd, dtype=torch.float64)
        for b in range(B):
            for h in range(NH):
                kvh = h // g                                 # query head h reads kv head h // g
                qh = _rope_pairs_loop(q[b, :, h * hd:(h + 1) * hd], cfg.rope_theta)
                kh = _rope_pairs_loop(k[b, :, kvh * hd:(kvh + 1) * hd], cfg.rope_theta)
                vh = v[b, :, kvh * hd:(kvh + 1) * hd]
                for t in range(T):
                    s = torch.stack([(qh[t] * kh[u]).sum() / math.sqrt(hd) for u in range(t + 1)])
                    w = torch.exp(s - s.max())
                    w = w / w.sum()
                    y[b, t, h * hd:(h + 1) * hd] = (w[:, None] * vh[:t + 1]).sum(0)
        x = x + y @ d[p + "self_attn.o_proj.weight"].t()
        n2 = rms(x, d[p + "post_attention_layernorm.weight"])
        gate = n2 @ d[p + "mlp.gate_proj.weight"].t()
        up = n2 @ d[p + "mlp.up_proj.weight"].t()
        x = x + (gate * torch.sigmoid(gate) * up) @ d[p + "mlp.down_proj.weight"].t()
    x = rms(x, d["model.norm.weight"])
    head = d["lm_head.weight"] if "lm_head.weight" in d else d["model.embed_tokens.weight"]
    return x @ head.t()


def _check(name, got, want, tol):
    err = (got.double() - want.double()).abs().max().item()
    status = "ok" if err <= tol else "FAIL"
    print(f"  {status:4s} {name}: max abs err {err:.3e} (tol {tol:.0e})")
    if err > tol:
        raise SystemExit(f"self-test failed: {name}")


def _self_test():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    print("llama_torch self-tests")

    # 1. rotate-half RoPE against the complex and the pairwise-rotation forms.
    hd, T, theta = 8, 12, 10000.0
    x = torch.randn(2, 3, T, hd, dtype=torch.float64)
    cos, sin = rope_cos_sin(T, hd, theta)
    got = apply_rope(x, cos.double(), sin.double())
    _check("rope rotate-half vs complex (i, i+hd/2)", got, _rope_complex(x, theta), 1e-6)
    _check("rope rotate-half vs pair rotations", got, _rope_pairs_loop(x, theta), 1e-6)
    # fp32 tables as used by the model (HF also builds them in fp32).
    got32 = apply_rope(x.float(), cos, sin)
    _check("rope fp32 vs complex", got32, _rope_complex(x, theta), 1e-5)
    # Relative-position property: <rope(q,t), rope(k,u)> depends on t-u only.
    q1, k1 = torch.randn(hd, dtype=torch.float64), torch.randn(hd, dtype=torch.float64)
    qs = _rope_complex(q1.expand(T, hd), theta)
    ks = _rope_complex(k1.expand(T, hd), theta)
    dots = qs @ ks.t()
    _check("rope relative position", dots[5, 2] - dots[9, 6], torch.zeros(()), 1e-9)
    # HF's inv_freq definition and the pairing: feature 0 pairs with hd/2 at frequency 1.
    _check("rope position 0 is identity", got[..., 0, :], x[..., 0, :], 1e-12)
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2).float() / hd))
    _check("rope cos table", cos[3], torch.cat((3 * inv, 3 * inv)).cos(), 1e-6)

    # 2. RMSNorm against the formula in float64.
    norm = RMSNorm(16, 1e-5)
    with torch.no_grad():
        norm.weight.normal_()
    xr = torch.randn(4, 5, 16)
    want = xr.double() / torch.sqrt(xr.double().pow(2).mean(-1, keepdim=True) + 1e-5) \
        * norm.weight.double()
    _check("rmsnorm", norm(xr), want, 1e-5)

    # 3. repeat_kv is repeat_interleave over heads.
    kv = torch.randn(2, 3, 5, 4)
    _check("repeat_kv == repeat_interleave", repeat_kv(kv, 4), kv.repeat_interleave(4, dim=1), 0)
    assert torch.equal(repeat_kv(kv, 4)[:, 7], kv[:, 1])   # head 7 reads kv head 7 // 4 = 1

    # 4. Whole model (GQA, MHA, MQA, tied) against the float64 loop reference.
    base = dict(vocab_size=50, n_layer=2, n_head=4, d_model=32, ffn_hidden=48, seq_len=10)
    for label, extra in [("GQA nkv=2", dict(n_kv_head=2)), ("MHA nkv=4", dict(n_kv_head=4)),
                         ("MQA nkv=1", dict(n_kv_head=1)),
                         ("GQA tied", dict(n_kv_head=2, tie_embeddings=True)),
                         ("theta=500", dict(n_kv_head=2, rope_theta=500.0))]:
        cfg = LlamaConfig(**base, **extra)
        model = Llama(cfg)
        shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
        want_shapes = expected_param_shapes(cfg)
        assert shapes == want_shapes and list(shapes) == list(want_shapes), \
            f"{label}: parameter names/shapes {shapes} != {want_shapes}"
        if cfg.tie_embeddings:
            assert model.lm_head.weight is model.model.embed_tokens.weight
        with torch.no_grad():   # random norm weights so that they are exercised
            for n, p in model.named_parameters():
                if p.dim() == 1:
                    p.normal_(1.0, 0.3)
                else:
                    p.normal_(0.0, 0.15)
        tokens = torch.randint(0, cfg.vocab_size, (2, cfg.seq_len))
        targets = torch.randint(0, cfg.vocab_size, (2, cfg.seq_len))
        logits, loss = model(tokens, targets)
        sd = {n: p.detach() for n, p in model.named_parameters()}
        if cfg.tie_embeddings:
            sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
        want = _reference_forward(sd, cfg, tokens)
        _check(f"{label} logits vs loop reference", logits, want, 2e-4)
        want_loss = -torch.log_softmax(want, -1).gather(-1, targets[..., None]).mean()
        _check(f"{label} loss vs log-softmax", loss, want_loss, 2e-5)
        # Causality: changing a later token leaves earlier logits alone.
        t2 = tokens.clone()
        t2[:, 7] = (t2[:, 7] + 1) % cfg.vocab_size
        l2, _ = model(t2)
        _check(f"{label} causal prefix", l2[:, :7], logits[:, :7], 0)
        # A shorter sequence uses the first rows of the rope tables.
        l3, _ = model(tokens[:, :6])
        _check(f"{label} shorter T", l3, logits[:, :6], 1e-5)

    # 5. Gradients of the float64 model by finite differences (tiny).
    cfg = LlamaConfig(vocab_size=11, n_layer=1, n_head=4, n_kv_head=2, d_model=8,
                      ffn_hidden=6, seq_len=5)
    model = Llama(cfg).double()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.5 if p.dim() == 1 else 0.0, 0.3)
    tokens = torch.randint(0, 11, (2, 5))
    targets = torch.randint(0, 11, (2, 5))
    params = list(model.parameters())

    _, loss = model(tokens, targets)
    grads = torch.autograd.grad(loss, params)
    worst = 0.0
    for i, p in enumerate(params):
        flat = p.detach().reshape(-1)
        for j in range(0, flat.numel(), max(1, flat.numel() // 7)):
            old = flat[j].item()
            with torch.no_grad():
                flat[j] = old + 1e-6
                lp = model(tokens, targets)[1].item()
                flat[j] = old - 1e-6
                lm = model(tokens, targets)[1].item()
                flat[j] = old
            worst = max(worst, abs((lp - lm) / 2e-6 - grads[i].reshape(-1)[j].item()))
    _check("float64 grads vs finite differences", torch.tensor(worst), torch.zeros(()), 1e-6)

    # 6. AdamW groups: decay on matrices only.
    cfg = LlamaConfig(**base, n_kv_head=2)
    opt = make_adamw(Llama(cfg), lr=1e-3)
    assert all(p.dim() >= 2 for p in opt.param_groups[0]["params"])
    assert all(p.dim() == 1 for p in opt.param_groups[1]["params"])
    assert opt.param_groups[1]["weight_decay"] == 0.0
    print("all self-tests passed")


if __name__ == "__main__":
    _self_test()
