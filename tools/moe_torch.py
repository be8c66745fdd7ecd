"""A Mixtral-style sparse MoE MLP in PyTorch, written from transformers'
MixtralSparseMoeBlock semantics (independent of loom), for the golden
reference of loom's MoE layer (tools/make_moe_reference.py).

  logits = x Wr^T; p = softmax(logits) in fp32; the top-k of p (torch.topk:
  ties to the lower index); weights = the chosen p / their sum;
  y = sum over the chosen experts of weight * down(silu(gate(x)) * up(x)).
"""

import torch
from torch import nn
import torch.nn.functional as F


class Expert(nn.Module):
    def __init__(self, d_model, ffn):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, ffn, bias=False)
        self.up_proj = nn.Linear(d_model, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, d_model, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class SparseMoe(nn.Module):
    def __init__(self, d_model, ffn, n_experts, top_k):
        super().__init__()
        self.top_k = top_k
        self.gate = nn.Linear(d_model, n_experts, bias=False)  # the router
        self.experts = nn.ModuleList([Expert(d_model, ffn) for _ in range(n_experts)])

    def forward(self, x):
        """x: [N, d_model] -> ([N, d_model], router logits [N, E])"""
        logits = self.gate(x)
        p = F.softmax(logits, dim=-1, dtype=torch.float)
        weights, chosen = torch.topk(p, self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        y = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            token, slot = torch.where(chosen == e)
            if token.numel() == 0:
                continue
            y.index_add_(0, token, expert(x[token]) * weights[token, slot, None])
        return y, logits
