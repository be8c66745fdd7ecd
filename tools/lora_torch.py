"""LoRA (Hu et al. 2021) on PyTorch nn.Linear modules, written from the paper
and PEFT's documented semantics, independent of loom, for the golden
reference (tools/make_reference.py --lora).

add_lora(model, targets, rank, alpha) gives every nn.Linear whose module
path equals a target or ends in "." + target (PEFT's target_modules rule)
two factors, lora_A [rank, in] and lora_B [out, rank] (nn.Linear layouts,
no bias), and makes its forward

    y = x W^T + b + (alpha / rank) * (x A^T) B^T

The base model's parameters are frozen (requires_grad False), the factors
trained; with train_biases every parameter named "*.bias" is trained too
(PEFT's bias="all"). Parameter names are the module path plus
".lora_A.weight" / ".lora_B.weight", as loom and PEFT name them.

A is drawn N(0, 1/(3 in)) (the variance of PEFT's kaiming_uniform(a=sqrt 5));
B is zero unless b_std > 0 (a reference wants both factors' gradients
non-zero from the first step).
"""

import math

import torch
from torch import nn


class LoraLinear(nn.Module):
    def __init__(self, base: nn.Linear, rank: int, alpha: float, b_std: float):
        super().__init__()
        self.base = base
        self.scale = alpha / rank
        self.lora_A = nn.Linear(base.in_features, rank, bias=False)
        self.lora_B = nn.Linear(rank, base.out_features, bias=False)
        with torch.no_grad():
            self.lora_A.weight.normal_(0.0, 1.0 / math.sqrt(3.0 * base.in_features))
            if b_std > 0:
                self.lora_B.weight.normal_(0.0, b_std)
            else:
                self.lora_B.weight.zero_()

    def forward(self, x):
        return self.base(x) + self.scale * self.lora_B(self.lora_A(x))


def matches(path, targets):
    return any(path == t or path.endswith("." + t) for t in targets)


def add_lora(model, targets, rank, alpha, b_std=0.0, train_biases=False):
    """Wraps the target linears in place; returns the wrapped paths."""
    for p in model.parameters():
        p.requires_grad_(False)
    wrapped = []
    for path, module in list(model.named_modules()):
        if not isinstance(module, nn.Linear) or not matches(path, targets):
            continue
        parent_path, _, child = path.rpartition(".")
        parent = model.get_submodule(parent_path) if parent_path else model
        setattr(parent, child, LoraLinear(module, rank, alpha, b_std))
        wrapped.append(path)
    if train_biases:
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.requires_grad_(True)
    return wrapped


def loom_name(name):
    """A wrapped model's parameter name as loom (and PEFT) spell it: the
    base's tensors lose the ".base" the wrapper adds."""
    return name.replace(".base.", ".")
