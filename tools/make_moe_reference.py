"""Write the golden reference of loom's MoE layer (src/model/moe/).

Usage: /usr/bin/python3 tools/make_moe_reference.py OUT_PATH

One SparseMoe (tools/moe_torch.py: 8 experts, top-2, d_model 32, expert
width 48) on 24 random tokens: the weights, the input, the output and the
router logits, and after (y * g).sum() with a random g the gradients of the
input and of every weight. Written in make_reference.py's LOOMREF format:
ints d_model, ffn, n_experts, top_k, tokens; tensors param/<name>, x, g, y,
logits, grad/x, grad/<name> (names: gate.weight, experts.E.gate_proj.weight,
.up_proj.weight, .down_proj.weight). Then the router losses added, with the
tokens as sequences of seq_len: loss + z_weight x sum lse^2 + seq_weight x
sum over sequences of sum_e f_e sum_t p_te (f_e = E / (k seq_len) x the
sequence's pairs routed to e, a constant): zgrad/x and zgrad/gate.weight
(floats z_weight, seq_weight in ints x 1e-3). Then with sigmoid scores (the
same weights): sig/y, sig/x (the input's gradient), sig/grad/<name>, and with
the per-sequence loss on the scores normalised to sum 1: sigzgrad/x,
sigzgrad/gate.weight; with the chosen probabilities not renormalised
(Qwen2-MoE's norm_topk_prob false): raw/y, raw/x, raw/gate.weight.
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_reference import MAGIC, VERSION, pack_name, pack_tensor  # noqa: E402
from moe_torch import SparseMoe  # noqa: E402
import struct  # noqa: E402

INTS = {"d_model": 32, "ffn": 48, "n_experts": 8, "top_k": 2, "tokens": 24, "seq_len": 8,
        "z_weight_milli": 50, "seq_weight_milli": 300}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[2])
    torch.manual_seed(4321)
    torch.set_num_threads(1)
    m = SparseMoe(INTS["d_model"], INTS["ffn"], INTS["n_experts"], INTS["top_k"])
    with torch.no_grad():  # a router with margins: routing decided well above rounding
        m.gate.weight.normal_(0.0, 0.5)
    x = torch.randn(INTS["tokens"], INTS["d_model"], requires_grad=True)
    g = torch.randn(INTS["tokens"], INTS["d_model"])
    tensors = {}
    for n, p in m.named_parameters():
        tensors[f"param/{n}"] = p.detach().clone()
    y, logits = m(x)
    (y * g).sum().backward()
    tensors["x"] = x.detach().clone()
    tensors["g"] = g
    tensors["y"] = y.detach().clone()
    tensors["logits"] = logits.detach().clone()
    tensors["grad/x"] = x.grad.detach().clone()
    for n, p in m.named_parameters():
        tensors[f"grad/{n}"] = p.grad.detach().clone()
    # The router losses (z-loss, per-sequence balancing) on top.
    m.zero_grad()
    x2 = x.detach().clone().requires_grad_(True)
    y2, logits2 = m(x2)
    E, k, T = INTS["n_experts"], INTS["top_k"], INTS["seq_len"]
    p = torch.softmax(logits2, dim=-1)
    lse = torch.logsumexp(logits2, dim=-1)
    chosen = torch.topk(p.detach(), k, dim=-1).indices
    counts = torch.nn.functional.one_hot(chosen, E).sum(1).view(-1, T, E).sum(1).to(p.dtype)  # [S, E]
    f = counts * E / (k * T)
    balance = (f[:, None, :] * p.view(-1, T, E)).sum()
    loss = (y2 * g).sum() + INTS["z_weight_milli"] * 1e-3 * (lse ** 2).sum() + INTS["seq_weight_milli"] * 1e-3 * balance
    loss.backward()
    tensors["zgrad/x"] = x2.grad.detach().clone()
    tensors["zgrad/gate.weight"] = m.gate.weight.grad.detach().clone()
    # The chosen probabilities as they are (Qwen2-MoE's norm_topk_prob false).
    m.zero_grad()
    m.renormalize = False
    x4 = x.detach().clone().requires_grad_(True)
    y4, _ = m(x4)
    (y4 * g).sum().backward()
    tensors["raw/y"] = y4.detach().clone()
    tensors["raw/x"] = x4.grad.detach().clone()
    tensors["raw/gate.weight"] = m.gate.weight.grad.detach().clone()
    m.renormalize = True
    # Sigmoid scores (DeepSeek-V3's router), the same weights: the output, every
    # gradient, and with the per-sequence loss on the scores normalised to sum 1.
    m.sigmoid = True
    for losses in (False, True):
        m.zero_grad()
        x3 = x.detach().clone().requires_grad_(True)
        y3, logits3 = m(x3)
        loss = (y3 * g).sum()
        if losses:
            s = torch.sigmoid(logits3)
            q = s / s.sum(dim=-1, keepdim=True)
            chosen = torch.topk(s.detach(), k, dim=-1).indices
            counts = torch.nn.functional.one_hot(chosen, E).sum(1).view(-1, T, E).sum(1).to(q.dtype)
            f = counts * E / (k * T)
            loss = loss + INTS["seq_weight_milli"] * 1e-3 * (f[:, None, :] * q.view(-1, T, E)).sum()
        loss.backward()
        pre = "sigzgrad/" if losses else "sig/"
        if not losses:
            tensors["sig/y"] = y3.detach().clone()
            for n, p in m.named_parameters():
                tensors[f"sig/grad/{n}"] = p.grad.detach().clone()
        tensors[pre + "x"] = x3.grad.detach().clone()
        tensors[pre + "gate.weight"] = m.gate.weight.grad.detach().clone()
    blob = bytearray(MAGIC) + struct.pack("<I", VERSION) + struct.pack("<I", len(INTS))
    for k, v in INTS.items():
        blob += pack_name(k) + struct.pack("<q", v)
    blob += struct.pack("<I", 0)
    blob += struct.pack("<I", len(tensors))
    for k, t in tensors.items():
        blob += pack_tensor(k, t)
    out = sys.argv[1]
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    tmp = f"{out}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(blob)
    os.replace(tmp, out)
    print(f"wrote {out}: {len(tensors)} tensors")


if __name__ == "__main__":
    main()
