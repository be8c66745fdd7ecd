#!/usr/bin/env python3
"""Checks loom's LoRA adapters against Hugging Face PEFT, both ways.

Run it with the virtual environment's python (scripts/setup.sh pins peft in .venv):

  .venv/bin/python tools/check_peft.py load BASE_DIR ADAPTER_DIR TOKENS.i32 LOGITS.f32 B T [--merged DIR]
  .venv/bin/python tools/check_peft.py make BASE_DIR OUT_DIR TOKENS.i32 LOGITS_OUT.f32 B T --rank R
      --alpha A --targets t1,t2,...

load: transformers loads BASE_DIR (a `loom export --format hf` or any HF
  folder), peft's PeftModel.from_pretrained puts ADAPTER_DIR (a `loom export
  --format peft` folder) on it with no missing or unexpected adapter key; its
  logits on TOKENS.i32 ([B, T] int32) must be within 1e-5 relative
  (Frobenius) of LOGITS.f32 ([B, T, vocab], loom's base + adapter). With
  --merged, DIR (`loom export --format hf --merge`) loaded as a plain model
  must give the same logits within 1e-5 relative.
make: peft's get_peft_model puts a fresh LoRA (rank R, alpha A, the
  targets; B drawn non-zero so that it changes the model) on BASE_DIR,
  saves it to OUT_DIR with save_pretrained and writes its logits on
  TOKENS.i32 to LOGITS_OUT.f32, for loom to load and compare.

Prints one line per check; exit 0 when all agree, 1 otherwise, 2 on bad usage.
"""

import argparse
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

try:
    import peft  # noqa: E402
    import transformers  # noqa: E402
    from peft import LoraConfig, PeftModel, get_peft_model  # noqa: E402
    from transformers import AutoModelForCausalLM  # noqa: E402
except ImportError as e:
    print(f"FAIL: cannot import peft / transformers ({e}); run it with .venv/bin/python (scripts/setup.sh)")
    sys.exit(1)


def rel(a, b):
    return float(np.linalg.norm((a - b).ravel()) / max(np.linalg.norm(b.ravel()), 1e-30))


def logits_of(model, tokens):
    with torch.no_grad():
        return model(input_ids=torch.from_numpy(tokens).long()).logits.float().numpy()


def base_model(path):
    m = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
    m.eval()
    return m


def cmd_load(a):
    tokens = np.fromfile(a.tokens, dtype=np.int32).reshape(a.B, a.T)
    want = np.fromfile(a.logits, dtype=np.float32)
    base = base_model(a.base)
    model = PeftModel.from_pretrained(base, a.adapter)
    model.eval()
    # Every adapter key of the folder went somewhere, and every LoRA layer got one.
    n_layers = sum(1 for _, m in model.named_modules() if isinstance(m, peft.tuners.lora.LoraLayer))
    if n_layers == 0:
        print("FAIL: peft made no LoRA layer from the adapter")
        return 1
    got = logits_of(model, tokens)
    want = want.reshape(got.shape)
    err = rel(got, want)
    label = f"peft {peft.__version__} (transformers {transformers.__version__}, torch {torch.__version__})"
    if err > 1e-5:
        print(f"FAIL: {label}: base + adapter logits differ from loom's by {err:.3g} relative")
        return 1
    print(f"ok peft: {label} loads the adapter ({n_layers} LoRA layers); logits within {err:.2e} relative of loom's")
    if a.merged:
        merged = logits_of(base_model(a.merged), tokens)
        err = rel(merged, want)
        if err > 1e-5:
            print(f"FAIL: the merged export's logits differ from loom's base + adapter by {err:.3g} relative")
            return 1
        print(f"ok merged: the --merge export's logits within {err:.2e} relative of the unmerged model's")
    return 0


def cmd_make(a):
    torch.manual_seed(7)
    tokens = np.fromfile(a.tokens, dtype=np.int32).reshape(a.B, a.T)
    base = base_model(a.base)
    gpt2 = base.config.model_type == "gpt2"
    cfg = LoraConfig(r=a.rank, lora_alpha=a.alpha, target_modules=a.targets.split(","), lora_dropout=0.0,
                     bias="none", task_type="CAUSAL_LM", fan_in_fan_out=gpt2)
    model = get_peft_model(base, cfg)
    with torch.no_grad():  # B = 0 would leave the base unchanged: draw it, so the adapter matters
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.05)
    model.eval()
    model.save_pretrained(a.out)
    logits_of(model, tokens).astype(np.float32).tofile(a.logits)
    print(f"ok made: peft {peft.__version__} adapter (rank {a.rank}, alpha {a.alpha}, {a.targets}) in {a.out}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    load = sub.add_parser("load")
    make = sub.add_parser("make")
    for p in (load, make):
        p.add_argument("base")
    load.add_argument("adapter")
    make.add_argument("out")
    for p in (load, make):
        p.add_argument("tokens")
        p.add_argument("logits")
        p.add_argument("B", type=int)
        p.add_argument("T", type=int)
    load.add_argument("--merged")
    make.add_argument("--rank", type=int, required=True)
    make.add_argument("--alpha", type=float, required=True)
    make.add_argument("--targets", required=True)
    a = ap.parse_args()
    sys.exit(cmd_load(a) if a.cmd == "load" else cmd_make(a))


if __name__ == "__main__":
    main()
