"""Write a golden reference file for loom's tests.

Usage: /usr/bin/python3 tools/make_reference.py [--family gpt2|llama|mixtral] [--kv-heads N] [--masked] [--lora] [--switch] [--shared] OUT_PATH

Builds a tiny GPT-2 (tools/gpt_torch.py; the default family) or a tiny LLaMA
(tools/llama_torch.py, Hugging Face LlamaForCausalLM semantics, untied
lm_head), runs one forward/backward on a random batch and records the
initial parameters, logits, loss and gradients; then, from the same initial
weights, runs ADAM_STEPS AdamW steps on that batch (with grad-norm clipping)
and records each step's loss, the pre-clip grad norm and the final parameters.

LLaMA: --kv-heads N (default 2) is n_kv_head; with n_head 4, N = 2 is
grouped-query attention and N = 4 plain multi-head attention. Its file adds
the ints n_kv_head and ffn_hidden and the floats rope_theta and norm_eps;
the parameter names are Hugging Face's (model.embed_tokens.weight, ...,
lm_head.weight; see tools/llama_torch.py). The GPT-2 file is unchanged by
these options.

--masked: supervised fine-tuning's targets: each row's first part (a prompt
of 3 to T/2 tokens) and a few scattered targets are -1 (not learned from);
the loss is the mean over the remaining targets (cross_entropy's
ignore_index), as loom normalises over the valid targets of the batch.

--lora: LoRA fine-tuning (tools/lora_torch.py): rank LORA_RANK, alpha
LORA_ALPHA adapters on every linear layer of the blocks (GPT-2: c_attn,
c_proj, c_fc; LLaMA: q/k/v/o_proj, gate/up/down_proj), B drawn N(0, 0.02)
instead of zero so that both factors have gradients from the first step;
the base frozen. grad/ and final/ then hold the trained factors only, and
the ints lora_rank, the floats lora_alpha are added.

--switch (mixtral): the router losses added to the loss differentiated and
stepped: 0.1 x the Switch loss over every layer's logits (transformers'
load_balancing_loss_func; tools/moe_torch.py) and 0.01 x the z-loss (mean
logsumexp^2 per layer, summed); floats switch_coef, z_coef; tensors
aux/switch and aux/z (unweighted, first step); loss stays the LM loss.

--shared (mixtral): every MoE MLP with Qwen2-MoE's shared expert of width
MOE_SHARED_FFN, scaled by sigmoid(x . shared_expert_gate); int moe_shared_ffn.

Records (tensors): param/<name>, inputs, targets, logits, loss, grad/<name>,
adam/losses, adam/grad_norms, final/<name>.

File format (little-endian), version 1:
  magic     8 bytes  b"LOOMREF\\0"
  version   uint32
  ints      uint32 count, then {uint32 name_len, name (utf-8), int64 value}
  floats    uint32 count, then {uint32 name_len, name (utf-8), float64 value}
  tensors   uint32 count, then {uint32 name_len, name (utf-8),
                               uint8 dtype (0 = float32, 1 = int32),
                               uint32 ndim, int64 dims[ndim],
                               raw data, row-major}
"""

import argparse
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_torch import GPT, GPTConfig, make_adamw  # noqa: E402
from llama_torch import Llama, LlamaConfig  # noqa: E402
from lora_torch import add_lora, loom_name  # noqa: E402
from moe_torch import SparseMoe, load_balancing_loss  # noqa: E402

# mixtral: LLaMA with every block's MLP a SparseMoe (tools/moe_torch.py) of
# MOE_EXPERTS experts of width MOE_FFN, top MOE_TOP_K; the routers drawn
# with std MOE_ROUTER_STD so that routing margins stay far above rounding.
MOE_EXPERTS, MOE_TOP_K, MOE_FFN, MOE_ROUTER_STD = 4, 2, 48, 1.0
MOE_SHARED_FFN = 40  # --shared: Qwen2-MoE's shared expert (its gate drawn with std 0.3)


class MoeMlp(SparseMoe):
    """SparseMoe on [B, T, C] activations (a DecoderLayer's mlp)."""

    def forward(self, x):
        y, self.logits = super().forward(x.reshape(-1, x.shape[-1]))  # logits kept for the router losses
        return y.reshape(x.shape)


def router_losses(model, aux):
    """The Switch loss over every layer's router logits (moe_torch's
    load_balancing_loss, transformers') and the z-loss, mean over tokens of
    logsumexp^2 summed over layers: (weighted total, switch, z)."""
    logits = [layer.mlp.logits for layer in model.model.layers]
    switch = load_balancing_loss(logits, MOE_EXPERTS, MOE_TOP_K)
    z = sum((torch.logsumexp(l, dim=-1) ** 2).mean() for l in logits)
    return aux["switch_coef"] * switch + aux["z_coef"] * z, switch, z


def make_mixtral(make_llama, shared_ffn=0):
    model = make_llama()
    torch.manual_seed(99)
    for layer in model.model.layers:
        layer.mlp = MoeMlp(model.cfg.d_model, MOE_FFN, MOE_EXPERTS, MOE_TOP_K, shared_ffn=shared_ffn)
        with torch.no_grad():
            layer.mlp.gate.weight.normal_(0.0, MOE_ROUTER_STD)
            for p in layer.mlp.experts.parameters():
                p.normal_(0.0, 0.02)
            if shared_ffn:
                for p in layer.mlp.shared_expert.parameters():
                    p.normal_(0.0, 0.02)
                layer.mlp.shared_expert_gate.weight.normal_(0.0, 0.3)
    return model

MAGIC = b"LOOMREF\0"
VERSION = 1
DTYPE_CODES = {torch.float32: 0, torch.int32: 1}

INTS = {
    "vocab_size": 96,
    "n_layer": 2,
    "n_head": 4,
    "d_model": 32,
    "seq_len": 16,
    "batch_size": 4,
    "adam_steps": 10,
}
FLOATS = {
    "lr": 1e-3,
    "beta1": 0.9,
    "beta2": 0.95,
    "eps": 1e-8,
    "weight_decay": 0.1,
    "grad_clip": 1.0,
}

# LLaMA: the same sizes and optimiser plus these (ffn_hidden deliberately not
# 4 * d_model, so that a wrong MLP width cannot pass).
LLAMA_EXTRA_INTS = {
    "n_kv_head": 2,      # replaced by --kv-heads
    "ffn_hidden": 64,
}
LLAMA_EXTRA_FLOATS = {
    "rope_theta": 10000.0,
    "norm_eps": 1e-5,
}


LORA_RANK, LORA_ALPHA = 4, 8.0  # scale 2: a missing alpha / rank cannot pass
LORA_TARGETS = {
    "gpt2": ["c_attn", "c_proj", "c_fc"],
    "llama": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
}


def family_config(family, kv_heads):
    """Returns (ints, floats, model factory) for a family."""
    if family == "gpt2":
        return INTS, FLOATS, lambda: GPT(GPTConfig(
            vocab_size=INTS["vocab_size"],
            n_layer=INTS["n_layer"],
            n_head=INTS["n_head"],
            d_model=INTS["d_model"],
            seq_len=INTS["seq_len"],
        ))
    ints = {**INTS, **LLAMA_EXTRA_INTS, "n_kv_head": kv_heads}
    floats = {**FLOATS, **LLAMA_EXTRA_FLOATS}
    if kv_heads < 1 or ints["n_head"] % kv_heads != 0:
        sys.exit(f"--kv-heads {kv_heads} must divide n_head {ints['n_head']}")
    return ints, floats, lambda: Llama(LlamaConfig(
        vocab_size=ints["vocab_size"],
        n_layer=ints["n_layer"],
        n_head=ints["n_head"],
        n_kv_head=ints["n_kv_head"],
        d_model=ints["d_model"],
        ffn_hidden=ints["ffn_hidden"],
        seq_len=ints["seq_len"],
        rope_theta=floats["rope_theta"],
        norm_eps=floats["norm_eps"],
        tie_embeddings=False,
    ))


def pack_name(name):
    b = name.encode("utf-8")
    return struct.pack("<I", len(b)) + b


def pack_tensor(name, t):
    t = t.detach().contiguous().cpu()
    if t.dtype not in DTYPE_CODES:
        raise TypeError(f"{name}: unsupported dtype {t.dtype}")
    out = pack_name(name)
    out += struct.pack("<BI", DTYPE_CODES[t.dtype], t.dim())
    out += struct.pack(f"<{t.dim()}q", *t.shape)
    # numpy's tobytes() is native order; every platform we run on is little-endian.
    assert sys.byteorder == "little"
    out += t.numpy().tobytes()
    return out


def compute(tensors, ints, floats, make_model, masked=False, lora_targets=None, aux=None):
    """Fill `tensors` (an ordered dict name -> tensor) with the reference data.
    aux (mixtral): the router losses' coefficients, added to the loss that is
    differentiated; `loss` and adam/losses stay the language-model loss."""
    B, T, V = ints["batch_size"], ints["seq_len"], ints["vocab_size"]

    model = make_model()
    if lora_targets:
        add_lora(model, lora_targets, LORA_RANK, LORA_ALPHA, b_std=0.02)
    inputs = torch.randint(0, V, (B, T))
    targets = torch.randint(0, V, (B, T))
    if masked:
        for b in range(B):
            targets[b, :int(torch.randint(3, T // 2 + 1, (1,)))] = -1
        targets[torch.rand(B, T) < 0.1] = -1
    initial = {n: p.detach().clone() for n, p in model.named_parameters()}

    for n, p in initial.items():
        tensors[f"param/{loom_name(n)}"] = p
    tensors["inputs"] = inputs.to(torch.int32)
    tensors["targets"] = targets.to(torch.int32)

    # First forward/backward: logits, loss and raw (unclipped) gradients.
    logits, loss = model(inputs, targets)
    if aux:
        total, switch, z = router_losses(model, aux)
        (loss + total).backward()
        tensors["aux/switch"] = switch.detach().reshape(1).clone()
        tensors["aux/z"] = z.detach().reshape(1).clone()
    else:
        loss.backward()
    tensors["logits"] = logits.detach().clone()
    tensors["loss"] = loss.detach().reshape(1).clone()
    for n, p in model.named_parameters():
        if p.requires_grad:
            tensors[f"grad/{loom_name(n)}"] = p.grad.detach().clone()

    # Training run, restarting from the initial weights.
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(initial[n])
    model.zero_grad(set_to_none=True)
    opt = make_adamw(model, lr=floats["lr"], betas=(floats["beta1"], floats["beta2"]),
                     eps=floats["eps"], weight_decay=floats["weight_decay"])
    params = [p for p in model.parameters() if p.requires_grad]
    losses, norms = [], []
    for _ in range(ints["adam_steps"]):
        _, loss = model(inputs, targets)
        (loss + router_losses(model, aux)[0] if aux else loss).backward()
        # clip_grad_norm_ returns the total norm before clipping.
        norm = torch.nn.utils.clip_grad_norm_(params, floats["grad_clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        norms.append(norm.item())
    tensors["adam/losses"] = torch.tensor(losses, dtype=torch.float32)
    tensors["adam/grad_norms"] = torch.tensor(norms, dtype=torch.float32)
    for n, p in model.named_parameters():
        if p.requires_grad:
            tensors[f"final/{loom_name(n)}"] = p.detach().clone()


def main():
    usage = __doc__.strip().splitlines()[2].removeprefix("Usage: ")
    ap = argparse.ArgumentParser(usage=usage, description="Write a golden reference file.")
    ap.add_argument("--family", choices=("gpt2", "llama", "mixtral"), default="gpt2")
    ap.add_argument("--kv-heads", type=int, default=None,
                    help="LLaMA n_kv_head (default 2; n_head is 4)")
    ap.add_argument("--masked", action="store_true", help="targets masked as supervised fine-tuning's")
    ap.add_argument("--lora", action="store_true", help="LoRA adapters on every block linear, base frozen")
    ap.add_argument("--shared", action="store_true",
                    help="mixtral: a shared expert of width MOE_SHARED_FFN with its sigmoid gate (Qwen2-MoE's)")
    ap.add_argument("--switch", action="store_true",
                    help="mixtral: the Switch balancing loss (coef 0.1) and the router z-loss (coef 0.01) added")
    ap.add_argument("out_path")
    args = ap.parse_args()
    if args.family == "gpt2" and args.kv_heads is not None:
        ap.error("--kv-heads is for --family llama")
    out_path = args.out_path
    ints, floats, make_model = family_config(
        "llama" if args.family == "mixtral" else args.family,
        args.kv_heads if args.kv_heads is not None else LLAMA_EXTRA_INTS["n_kv_head"])
    if args.family == "mixtral":
        make_llama = make_model
        shared = MOE_SHARED_FFN if args.shared else 0
        make_model = lambda: make_mixtral(make_llama, shared)  # noqa: E731
        ints = {**ints, "n_experts": MOE_EXPERTS, "top_k": MOE_TOP_K, "moe_ffn_hidden": MOE_FFN}
        if shared:
            ints["moe_shared_ffn"] = shared
    elif args.shared:
        ap.error("--shared is for --family mixtral")

    torch.manual_seed(1234)
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)

    tensors = {}
    lora_targets = LORA_TARGETS[args.family] if args.lora else None
    if args.lora:
        ints = {**ints, "lora_rank": LORA_RANK}
        floats = {**floats, "lora_alpha": LORA_ALPHA}
    aux = None
    if args.switch:
        if args.family != "mixtral":
            ap.error("--switch is for --family mixtral")
        aux = {"switch_coef": 0.1, "z_coef": 0.01}
        floats = {**floats, **aux}
    compute(tensors, ints, floats, make_model, masked=args.masked, lora_targets=lora_targets, aux=aux)

    blob = bytearray(MAGIC)
    blob += struct.pack("<I", VERSION)
    blob += struct.pack("<I", len(ints))
    for k, v in ints.items():
        blob += pack_name(k) + struct.pack("<q", v)
    blob += struct.pack("<I", len(floats))
    for k, v in floats.items():
        blob += pack_name(k) + struct.pack("<d", v)
    blob += struct.pack("<I", len(tensors))
    for k, t in tensors.items():
        blob += pack_tensor(k, t)

    # Write to a temp file in the same directory, then rename over the target,
    # so a reader never sees a half-written file.
    out_dir = os.path.dirname(os.path.abspath(out_path))
    os.makedirs(out_dir, exist_ok=True)
    tmp = f"{out_path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(blob)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, out_path)
    print(f"wrote {out_path}: {len(blob)} bytes, {len(tensors)} tensors, "
          f"loss {tensors['loss'].item():.6f}")


if __name__ == "__main__":
    main()
