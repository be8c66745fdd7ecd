#!/usr/bin/env python3
"""Checks a `loom export --format hf` folder the way Hugging Face reads it.

Without the transformers library: the safetensors file is parsed by hand,
as strictly as the safetensors library does (header length, JSON, dtypes,
offsets that tile the data, metadata format "pt"), config.json is checked
for what GPT2LMHeadModel needs, and the logits of two models are compared
with the logits loom wrote:

  1. HF's GPT-2 math written out on the exported tensors as they are
     (Conv1D: y = x @ W + b with W [in, out], gelu_new, tied LM head);
  2. tools/gpt_torch.py's GPT with the tensors loaded into nn.Linear
     (transposed back), strict=True so no name may be missing or extra.

usage: check_hf_export.py EXPORT_DIR TOKENS.i32 LOGITS.f32 B T [--atol 1e-4]
Prints one line per check; exit code 0 when all agree, 1 otherwise.
"""

import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_torch import GPT, GPTConfig  # noqa: E402

DTYPES = {"F32": (torch.float32, 4), "BF16": (torch.bfloat16, 2), "F16": (torch.float16, 2)}


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def read_safetensors(path):
    data = open(path, "rb").read()
    if len(data) < 8:
        fail(f"{path}: shorter than a header length")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        fail(f"{path}: header of {n} bytes runs past the end")
    if n % 8 != 0:
        fail(f"{path}: header length {n} is not a multiple of 8 (HF pads it)")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    body = data[8 + n:]
    metadata = header.pop("__metadata__", {})
    spans, tensors = [], {}
    for name, info in header.items():
        dtype, size = DTYPES[info["dtype"]]
        begin, end = info["data_offsets"]
        shape = info["shape"]
        if end - begin != math.prod(shape) * size:
            fail(f"{path}: {name}: {end - begin} bytes for shape {shape}")
        spans.append((begin, end, name))
        raw = bytearray(body[begin:end])
        t = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        tensors[name] = t.reshape(shape).float()
    at = 0
    for begin, end, name in sorted(spans):
        if begin != at:
            fail(f"{path}: {name} starts at {begin}, expected {at} (gap or overlap)")
        at = end
    if at != len(body):
        fail(f"{path}: {len(body) - at} bytes after the last tensor")
    return tensors, metadata


def hf_gpt2_logits(t, cfg, tokens):
    """GPT-2 as transformers' modeling_gpt2 computes it, on HF-named tensors."""
    C, H, L = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    eps = cfg["layer_norm_epsilon"]
    B, T = tokens.shape

    def conv1d(x, prefix):  # transformers.pytorch_utils.Conv1D
        return torch.addmm(t[prefix + ".bias"], x.reshape(-1, x.shape[-1]), t[prefix + ".weight"]).view(*x.shape[:-1], -1)

    def ln(x, prefix):
        return F.layer_norm(x, (C,), t[prefix + ".weight"], t[prefix + ".bias"], eps)

    x = t["transformer.wte.weight"][tokens] + t["transformer.wpe.weight"][torch.arange(T)]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(L):
        p = f"transformer.h.{i}."
        q, k, v = conv1d(ln(x, p + "ln_1"), p + "attn.c_attn").split(C, dim=2)
        q, k, v = (z.view(B, T, H, C // H).transpose(1, 2) for z in (q, k, v))
        w = (q @ k.transpose(-1, -2)) / math.sqrt(C // H)
        w = torch.where(mask, w, torch.tensor(torch.finfo(w.dtype).min))
        y = (w.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + conv1d(y, p + "attn.c_proj")
        h = conv1d(ln(x, p + "ln_2"), p + "mlp.c_fc")
        gelu_new = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
        x = x + conv1d(gelu_new, p + "mlp.c_proj")
    x = ln(x, "transformer.ln_f")
    return x @ t["transformer.wte.weight"].t()  # lm_head tied to wte


def gpt_torch_logits(t, cfg, tokens):
    model = GPT(GPTConfig(vocab_size=cfg["vocab_size"], n_layer=cfg["n_layer"], n_head=cfg["n_head"],
                          d_model=cfg["n_embd"], seq_len=cfg["n_positions"]))
    state = {}
    for name, value in t.items():
        short = name[len("transformer."):]
        conv1d = any(short.endswith(s) for s in ("attn.c_attn.weight", "attn.c_proj.weight",
                                                  "mlp.c_fc.weight", "mlp.c_proj.weight"))
        state[short] = value.t().contiguous() if conv1d else value
    model.load_state_dict(state, strict=True)
    with torch.no_grad():
        logits, _ = model(tokens)
    return logits


def main():
    args = sys.argv[1:]
    atol = 1e-4
    if "--atol" in args:
        i = args.index("--atol")
        atol = float(args[i + 1])
        del args[i:i + 2]
    if len(args) != 5:
        print(__doc__)
        sys.exit(2)
    out_dir, tokens_path, logits_path, B, T = args[0], args[1], args[2], int(args[3]), int(args[4])

    cfg = json.load(open(os.path.join(out_dir, "config.json")))
    for key, want in (("model_type", "gpt2"), ("architectures", ["GPT2LMHeadModel"]),
                      ("activation_function", "gelu_new"), ("layer_norm_epsilon", 1e-5),
                      ("tie_word_embeddings", True)):
        if cfg.get(key) != want:
            fail(f"config.json: {key} is {cfg.get(key)!r}, expected {want!r}")
    C, L, V = cfg["n_embd"], cfg["n_layer"], cfg["vocab_size"]
    print(f"ok config.json: GPT2LMHeadModel n_layer={L} n_head={cfg['n_head']} n_embd={C} vocab_size={V} "
          f"n_positions={cfg['n_positions']}")

    t, meta = read_safetensors(os.path.join(out_dir, "model.safetensors"))
    if meta.get("format") != "pt":
        fail(f"model.safetensors: metadata format is {meta.get('format')!r}; transformers needs 'pt'")
    want = {"transformer.wte.weight": [V, C], "transformer.wpe.weight": [cfg["n_positions"], C],
            "transformer.ln_f.weight": [C], "transformer.ln_f.bias": [C]}
    for i in range(L):
        p = f"transformer.h.{i}."
        want.update({p + "ln_1.weight": [C], p + "ln_1.bias": [C], p + "ln_2.weight": [C], p + "ln_2.bias": [C],
                     p + "attn.c_attn.weight": [C, 3 * C], p + "attn.c_attn.bias": [3 * C],
                     p + "attn.c_proj.weight": [C, C], p + "attn.c_proj.bias": [C],
                     p + "mlp.c_fc.weight": [C, 4 * C], p + "mlp.c_fc.bias": [4 * C],
                     p + "mlp.c_proj.weight": [4 * C, C], p + "mlp.c_proj.bias": [C]})
    if set(t) != set(want):
        fail(f"model.safetensors: missing {sorted(set(want) - set(t))}, unexpected {sorted(set(t) - set(want))}")
    for name, shape in want.items():
        if list(t[name].shape) != shape:
            fail(f"model.safetensors: {name} has shape {list(t[name].shape)}, HF GPT-2 needs {shape}")
    print(f"ok model.safetensors: {len(t)} tensors with HF GPT-2 names and Conv1D shapes, metadata format pt")

    tokens = torch.frombuffer(bytearray(open(tokens_path, "rb").read()), dtype=torch.int32).view(B, T).long()
    ref = torch.frombuffer(bytearray(open(logits_path, "rb").read()), dtype=torch.float32).view(B, T, V)
    with torch.no_grad():
        for label, logits in (("HF GPT-2 math", hf_gpt2_logits(t, cfg, tokens)),
                              ("gpt_torch.GPT", gpt_torch_logits(t, cfg, tokens))):
            diff = (logits - ref).abs().max().item()
            if not diff <= atol:
                fail(f"{label}: logits differ from loom's by {diff:.3g} (atol {atol:g})")
            print(f"ok {label}: logits match loom's, max abs diff {diff:.3g} (atol {atol:g})")


if __name__ == "__main__":
    main()
