"""Check tools/moe_torch.py's load_balancing_loss (the Switch / Mixtral loss
the golden reference of loom's moe_balance = "switch" is built with, and so
loom's) against transformers' own load_balancing_loss_func: the value and
the gradient on every layer's router logits, on random logits of several
shapes (layers, tokens, experts, top-k).

Usage: .venv/bin/python tools/check_switch_loss.py
Prints OK and exits 0, or names the first difference and exits 1.
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from moe_torch import load_balancing_loss  # noqa: E402

import transformers  # noqa: E402
from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func  # noqa: E402


def main():
    torch.manual_seed(7)
    for layers, tokens, experts, top_k in ((1, 24, 8, 2), (2, 64, 4, 2), (3, 40, 8, 1), (4, 32, 16, 4)):
        logits = [torch.randn(tokens, experts, dtype=torch.float64, requires_grad=True) for _ in range(layers)]
        ours = load_balancing_loss(logits, experts, top_k)
        (g_ours,) = [torch.autograd.grad(ours, logits)]
        theirs = load_balancing_loss_func(tuple(logits), experts, top_k)
        (g_theirs,) = [torch.autograd.grad(theirs, logits)]
        what = f"{layers} layers x {tokens} tokens, {experts} experts, top {top_k}"
        # transformers 5.x sums the counts and probabilities in float32 (4.x
        # in the logits' dtype, float64 here): compare at that precision.
        tol = 1e-12 if theirs.dtype == torch.float64 else 2e-6
        if abs(ours.item() - theirs.item()) > tol * abs(theirs.item()):
            sys.exit(f"FAIL: {what}: loss {ours.item()!r} vs transformers' {theirs.item()!r}")
        for i, (a, b) in enumerate(zip(g_ours, g_theirs)):
            if (a - b).abs().max().item() > tol * max(1.0, b.abs().max().item()):
                sys.exit(f"FAIL: {what}: layer {i}'s logit gradients differ from transformers'")
        print(f"{what}: loss {ours.item():.6f} = transformers' (within {tol:g})")
    print(f"OK (transformers {transformers.__version__})")


if __name__ == "__main__":
    main()
