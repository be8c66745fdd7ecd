"""A Mixtral-style sparse MoE MLP in PyTorch, written from transformers'
MixtralSparseMoeBlock semantics (independent of loom), for the golden
reference of loom's MoE layer (tools/make_moe_reference.py).

  logits = x Wr^T; p = softmax(logits) in fp32 (sigmoid=True: sigmoid(logits),
  DeepSeek-V3's scores); the top-k of p (torch.topk:
  ties to the lower index); weights = the chosen p / their sum;
  y = sum over the chosen experts of weight * down(silu(gate(x)) * up(x)).
  shared_ffn > 0 (Qwen2-MoE): y += sigmoid(x w_gate^T) * shared_expert(x).

load_balancing_loss: the Switch / Mixtral auxiliary loss over every layer's
router logits together, as transformers' load_balancing_loss_func computes
it without an attention mask (tools/check_switch_loss.py compares the two).
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
    def __init__(self, d_model, ffn, n_experts, top_k, sigmoid=False, shared_ffn=0, renormalize=True):
        super().__init__()
        self.top_k = top_k
        self.renormalize = renormalize  # Qwen2-MoE's norm_topk_prob
        self.sigmoid = sigmoid  # DeepSeek-V3's router: each expert's sigmoid score
        if shared_ffn:  # Qwen2-MoE's shared expert and its gate
            self.shared_expert = Expert(d_model, shared_ffn)
            self.shared_expert_gate = nn.Linear(d_model, 1, bias=False)
        self.gate = nn.Linear(d_model, n_experts, bias=False)  # the router
        self.experts = nn.ModuleList([Expert(d_model, ffn) for _ in range(n_experts)])

    def forward(self, x):
        """x: [N, d_model] -> ([N, d_model], router logits [N, E])"""
        logits = self.gate(x)
        p = torch.sigmoid(logits) if self.sigmoid else F.softmax(logits, dim=-1, dtype=torch.float)
        weights, chosen = torch.topk(p, self.top_k, dim=-1)
        if self.renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        y = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            token, slot = torch.where(chosen == e)
            if token.numel() == 0:
                continue
            y.index_add_(0, token, expert(x[token]) * weights[token, slot, None])
        if hasattr(self, "shared_expert"):
            y = y + torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        return y, logits


def load_balancing_loss(gate_logits, num_experts, top_k):
    """gate_logits: a sequence of [N, E] router logits, one per MoE layer.
    E x sum over (slot j, expert e) of the share of rows whose j-th choice is e
    times e's mean probability, rows of every layer together."""
    logits = torch.cat(list(gate_logits), dim=0)
    p = F.softmax(logits, dim=-1)
    _, chosen = torch.topk(p, top_k, dim=-1)
    mask = F.one_hot(chosen, num_experts).float()  # [rows, k, E]
    tokens_per_expert = mask.mean(dim=0)           # [k, E]
    prob_per_expert = p.mean(dim=0)                # [E]
    return (tokens_per_expert * prob_per_expert.unsqueeze(0)).sum() * num_experts
