"""PyTorch CPU training-throughput baseline for loom.

Usage:
  /usr/bin/python3 tools/bench_pytorch.py --shape tiny|small|gpt2-124M --threads N
      [--steps S] [--warmup W] [--json] [--autocast bf16|fp16|none]
      [--compile] [--sdpa auto|on|off] [--fused-adamw auto|on|off]
      [--vocab V] [--layers L] [--d-model C] [--heads H] [--seq-len T] [--batch B]
  /usr/bin/python3 tools/bench_pytorch.py --model llama [--shape tiny|small|llama-124M]
      --threads N [...as above...] [--kv-heads K] [--ffn-hidden F]

Builds the model from tools/gpt_torch.py (--model gpt2, the default) or
tools/llama_torch.py (--model llama: RMSNorm, rotary embeddings, grouped-query
attention, SwiGLU MLP, untied lm_head) and times full training steps on a
fixed random batch: forward + loss, backward, clip_grad_norm_(1.0), AdamW
step, zero_grad(set_to_none=True). W warmup steps are run first and not
timed. The explicit size flags override the chosen --shape (default tiny for
gpt2, llama-124M for llama; --shape llama-124M alone implies --model llama).

LLaMA shapes: (vocab, layers, d_model, heads, kv_heads, ffn_hidden, seq_len, batch)
  tiny       512   4 128  4 2  352 128 8
  small      4096  6 384  6 2 1024 256 4
  llama-124M 50304 12 768 12 4 2048 256 4   (GPT-2 124M's sizes with LLaMA
             blocks: 152.8M parameters, of which 38.6M are the untied
             lm_head; 114.2M if it were tied)

--autocast bf16 runs the forward and the loss under
torch.autocast(device_type="cpu", dtype=torch.bfloat16) (matmuls in bf16,
the loss and norms in fp32, as autocast's op lists decide); backward runs
outside it, and parameters, gradients and AdamW stay fp32. fp16 is refused
when this torch's CPU autocast does not support it (torch 1.13 does not).

The script runs under Debian's torch 1.13 (/usr/bin/python3) and under
PyTorch 2.x (e.g. .venv-latest/bin/python). Three switches use what 2.x adds;
each is reported in the JSON line as the bool that was in effect:
  --compile          model = torch.compile(model) (default backend, inductor):
                     forward and, through AOTAutograd, backward are compiled;
                     clipping and AdamW stay eager. The first calls compile,
                     so warmup is raised to at least 2 (the JSON's "warmup"
                     is the count actually run). torch < 2.0 has no
                     torch.compile: exit status 2 with a message on stderr.
                     "compiled": true/false.
  --sdpa auto|on|off attention through F.scaled_dot_product_attention(q, k,
                     v, is_causal=True) instead of the explicit masked
                     softmax (GPTConfig/LlamaConfig sdpa=True). auto (the
                     default) uses it where this torch has it (>= 2.0), so
                     torch 1.13 keeps the explicit path; on requires it (exit
                     status 2 without it); off forces the explicit path.
                     "sdpa": true/false.
  --fused-adamw auto|on|off
                     torch.optim.AdamW(fused=True). auto (the default) uses
                     it where this torch's fused AdamW runs on CPU tensors
                     (probed by building one and stepping it; torch >= 2.4);
                     on requires it (exit status 2 without it); off leaves
                     AdamW's default (fused not passed), as before.
                     "fused_adamw": true/false.
Under torch 1.13 the defaults therefore time exactly what they always did
(sdpa false, fused_adamw false, compiled false); under 2.x the defaults use
SDPA and fused AdamW, and --sdpa off --fused-adamw off is the 1.13-like eager
baseline. --compile combines with --autocast bf16 (autocast is entered
around the compiled model's call).

Output: with --json, exactly one JSON line on stdout; otherwise a readable
per-step listing (with --compile also the warmup steps, the first of which
includes compiling) followed by the same JSON line.
"""

import argparse
import contextlib
import json
import os
import resource
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_torch import GPT, GPTConfig, make_adamw  # noqa: E402
from llama_torch import Llama, LlamaConfig  # noqa: E402

# name: (vocab, layers, d_model, heads, seq_len, batch)
SHAPES = {
    "tiny": (512, 4, 128, 4, 128, 8),
    "small": (4096, 6, 384, 6, 256, 4),
    "gpt2-124M": (50304, 12, 768, 12, 256, 4),
}
DIM_FLAGS = ("vocab", "layers", "d_model", "heads", "seq_len", "batch")

# name: (vocab, layers, d_model, heads, kv_heads, ffn_hidden, seq_len, batch);
# ffn_hidden is about 8/3 * d_model, as LLaMA sizes its SwiGLU MLP.
LLAMA_SHAPES = {
    "tiny": (512, 4, 128, 4, 2, 352, 128, 8),
    "small": (4096, 6, 384, 6, 2, 1024, 256, 4),
    "llama-124M": (50304, 12, 768, 12, 4, 2048, 256, 4),
}
LLAMA_DIM_FLAGS = ("vocab", "layers", "d_model", "heads", "kv_heads", "ffn_hidden",
                   "seq_len", "batch")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument("--model", choices=("gpt2", "llama"), default=None,
                   help="gpt2 (default) or llama (default shape llama-124M)")
    p.add_argument("--shape", choices=sorted(set(SHAPES) | set(LLAMA_SHAPES)), default=None,
                   help="preset shape (default tiny; llama: llama-124M)")
    p.add_argument("--threads", type=int, required=True, help="torch intra-op threads")
    p.add_argument("--steps", type=int, default=5, help="timed steps (default 5)")
    p.add_argument("--warmup", type=int, default=1, help="untimed warmup steps (default 1)")
    p.add_argument("--json", action="store_true", help="print only the JSON result line")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--autocast", choices=("bf16", "fp16", "none"), default="none",
                   help="CPU autocast dtype for forward + loss (default none: fp32)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the model (torch >= 2.0; warmup raised to >= 2)")
    p.add_argument("--sdpa", choices=("auto", "on", "off"), default="auto",
                   help="attention via F.scaled_dot_product_attention (auto: if this torch has it)")
    p.add_argument("--fused-adamw", choices=("auto", "on", "off"), default="auto",
                   help="AdamW(fused=True) (auto: if this torch supports it on CPU)")
    p.add_argument("--vocab", type=int)
    p.add_argument("--layers", type=int)
    p.add_argument("--d-model", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--seq-len", type=int)
    p.add_argument("--batch", type=int)
    p.add_argument("--kv-heads", type=int, help="llama only: key/value heads")
    p.add_argument("--ffn-hidden", type=int, help="llama only: SwiGLU hidden width")
    args = p.parse_args()
    if args.model is None:
        args.model = "llama" if args.shape in LLAMA_SHAPES and args.shape not in SHAPES else "gpt2"
    if args.model == "gpt2":
        if args.shape is not None and args.shape not in SHAPES:
            p.error(f"--shape {args.shape} is a llama shape (use --model llama)")
        if args.kv_heads is not None or args.ffn_hidden is not None:
            p.error("--kv-heads and --ffn-hidden are for --model llama")
    elif args.shape is not None and args.shape not in LLAMA_SHAPES:
        p.error(f"--shape {args.shape} is not a llama shape ({', '.join(LLAMA_SHAPES)})")
    if args.steps < 1 or args.warmup < 0 or args.threads < 1:
        p.error("need --steps >= 1, --warmup >= 0, --threads >= 1")
    if args.autocast != "none" and not cpu_autocast_supported(AUTOCAST_DTYPES[args.autocast]):
        p.error(f"--autocast {args.autocast}: CPU autocast in torch {torch.__version__} "
                "does not support this dtype (torch 1.13 supports only bf16)")
    if args.compile and not hasattr(torch, "compile"):
        refuse(f"--compile needs torch.compile (PyTorch >= 2.0); this is torch {torch.__version__}")
    if args.compile:
        args.warmup = max(args.warmup, 2)   # the first calls compile
    has_sdpa = hasattr(torch.nn.functional, "scaled_dot_product_attention")
    if args.sdpa == "on" and not has_sdpa:
        refuse("--sdpa on needs torch.nn.functional.scaled_dot_product_attention "
               f"(PyTorch >= 2.0); this is torch {torch.__version__}")
    args.use_sdpa = has_sdpa and args.sdpa != "off"
    has_fused = args.fused_adamw != "off" and cpu_fused_adamw_supported()
    if args.fused_adamw == "on" and not has_fused:
        refuse("--fused-adamw on needs AdamW(fused=True) on CPU tensors "
               f"(PyTorch >= 2.4); this is torch {torch.__version__}")
    args.use_fused_adamw = has_fused
    return args


def refuse(message):
    """One line on stderr, exit status 2 (as argparse's usage errors)."""
    print(f"{os.path.basename(sys.argv[0])}: error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def cpu_fused_adamw_supported():
    """True if torch.optim.AdamW(fused=True) builds and steps on a CPU tensor.

    Probed rather than looked up by version: torch 1.13 has no `fused`
    argument (TypeError), 2.0-2.3 accept it for CUDA tensors only
    (RuntimeError when built on CPU tensors).
    """
    import warnings
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            p = torch.nn.Parameter(torch.ones(4))
            opt = torch.optim.AdamW([p], lr=1e-3, fused=True)
            p.grad = torch.ones(4)
            opt.step()
            return bool(torch.isfinite(p).all()) and not torch.equal(p.detach(), torch.ones(4))
    except (TypeError, RuntimeError, ValueError, NotImplementedError):
        return False


AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def cpu_autocast_supported(dtype):
    """True if torch.autocast on the CPU really runs matmuls in `dtype`.

    Probed rather than looked up by version: torch 1.13 raises on fp16,
    other versions warn and silently disable autocast instead.
    """
    import warnings
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.autocast(device_type="cpu", dtype=dtype):
                a = torch.ones(2, 2)
                return (a @ a).dtype == dtype
    except (RuntimeError, ValueError):
        return False


def resolve_shape(args):
    """Returns (label, dims dict) from --shape plus any explicit overrides."""
    base_name = args.shape or "tiny"
    dims = dict(zip(DIM_FLAGS, SHAPES[base_name]))
    overridden = False
    for flag in DIM_FLAGS:
        v = getattr(args, flag)
        if v is not None and v != dims[flag]:
            dims[flag] = v
            overridden = True
    label = base_name if not overridden else "custom"
    if dims["d_model"] % dims["heads"] != 0:
        sys.exit(f"d_model {dims['d_model']} is not divisible by heads {dims['heads']}")
    return label, dims


def resolve_llama_shape(args):
    """As resolve_shape, for --model llama."""
    base_name = args.shape or "llama-124M"
    dims = dict(zip(LLAMA_DIM_FLAGS, LLAMA_SHAPES[base_name]))
    overridden = False
    for flag in LLAMA_DIM_FLAGS:
        v = getattr(args, flag)
        if v is not None and v != dims[flag]:
            dims[flag] = v
            overridden = True
    label = base_name if not overridden else "custom"
    if dims["d_model"] % dims["heads"] != 0:
        sys.exit(f"d_model {dims['d_model']} is not divisible by heads {dims['heads']}")
    if dims["kv_heads"] < 1 or dims["heads"] % dims["kv_heads"] != 0:
        sys.exit(f"heads {dims['heads']} is not divisible by kv_heads {dims['kv_heads']}")
    if (dims["d_model"] // dims["heads"]) % 2 != 0:
        sys.exit("rotary embeddings need an even head size (d_model / heads)")
    return label, dims


def llama_flops_per_token(model, dims):
    """Training FLOPs per token for the LLaMA, counted as for GPT-2:
    6*N + 12*L*(NH*hd)*T, N without model.embed_tokens (a lookup, no
    matmul; the untied lm_head stays in). The attention term uses the query
    width NH*hd (= d_model): grouped-query attention shares k/v heads but
    computes as many score and value products as there are query heads."""
    n = model.num_params()
    if not model.cfg.tie_embeddings:
        n -= model.model.embed_tokens.weight.numel()
    L, T = dims["layers"], dims["seq_len"]
    return 6 * n + 12 * L * (model.cfg.n_head * model.cfg.head_dim) * T


def flops_per_token(model, dims):
    """Training FLOPs per token, using nanoGPT's estimate: 6*N + 12*L*C*T.

    N is the parameter count without wpe (the position lookup does no
    matmul; wte stays in because it is also the LM head). 6*N covers the
    forward (2N) and backward (4N) matmuls. 12*L*C*T is the attention
    score/value matmuls (QK^T and att@V, forward and backward) over the full
    TxT matrix; it ignores causality, as nanoGPT and the PaLM paper do, so it
    slightly overstates the work a causal kernel has to do.
    """
    n = model.num_params() - model.wpe.weight.numel()
    L, C, T = dims["layers"], dims["d_model"], dims["seq_len"]
    return 6 * n + 12 * L * C * T


def main():
    args = parse_args()
    llama = args.model == "llama"
    label, dims = resolve_llama_shape(args) if llama else resolve_shape(args)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    if llama:
        cfg = LlamaConfig(vocab_size=dims["vocab"], n_layer=dims["layers"], n_head=dims["heads"],
                          n_kv_head=dims["kv_heads"], d_model=dims["d_model"],
                          ffn_hidden=dims["ffn_hidden"], seq_len=dims["seq_len"],
                          sdpa=args.use_sdpa)
        model = Llama(cfg)
    else:
        cfg = GPTConfig(vocab_size=dims["vocab"], n_layer=dims["layers"], n_head=dims["heads"],
                        d_model=dims["d_model"], seq_len=dims["seq_len"], sdpa=args.use_sdpa)
        model = GPT(cfg)
    model.train()
    # fused=None keeps make_adamw's (and AdamW's) default, as before.
    opt = make_adamw(model, lr=1e-4, fused=True if args.use_fused_adamw else None)
    params = list(model.parameters())
    # The compiled wrapper shares model's parameters; model itself stays the
    # plain module for num_params() and the FLOP count.
    run_model = torch.compile(model) if args.compile else model

    B, T = dims["batch"], dims["seq_len"]
    tokens = torch.randint(0, cfg.vocab_size, (B, T))
    targets = torch.randint(0, cfg.vocab_size, (B, T))

    # Forward + loss under autocast, backward outside it (as PyTorch's AMP
    # recipe does); nullcontext keeps the fp32 path identical to before.
    if args.autocast == "none":
        autocast = contextlib.nullcontext
    else:
        def autocast():
            return torch.autocast(device_type="cpu", dtype=AUTOCAST_DTYPES[args.autocast])

    def step():
        with autocast():
            _, loss = run_model(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        # .item() forces the step to finish (CPU ops are synchronous anyway).
        return loss.item()

    for i in range(args.warmup):
        t0 = time.perf_counter()
        loss = step()
        dt = time.perf_counter() - t0
        if args.compile and not args.json:
            print(f"warmup {i}: {dt * 1e3:9.1f} ms  loss {loss:.4f}"
                  + ("  (includes compiling)" if i == 0 else ""), flush=True)

    times = []
    for i in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        dt = time.perf_counter() - t0
        times.append(dt)
        if not args.json:
            print(f"step {i}: {dt * 1e3:9.1f} ms  loss {loss:.4f}  "
                  f"{B * T / dt:10.1f} tok/s", flush=True)

    fpt = llama_flops_per_token(model, dims) if llama else flops_per_token(model, dims)
    step_s = statistics.median(times)
    tok_s = statistics.median(B * T / t for t in times)
    result = {
        "shape": label,
        # The GPT-2 line stays as it was: "model" appears only for llama.
        **({"model": "llama"} if llama else {}),
        **dims,
        "threads": args.threads,
        "autocast": args.autocast,
        "steps": args.steps,
        "warmup": args.warmup,
        "params": model.num_params(),
        "tokens_per_s": round(tok_s, 1),
        "step_ms": round(step_s * 1e3, 2),
        # achieved GFLOP/s = flops_per_token * tokens/s (median step)
        "flops_per_token": fpt,
        "gflops": round(fpt * tok_s / 1e9, 2),
        # ru_maxrss is in KiB on Linux
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "torch": torch.__version__,
        "compiled": args.compile,
        "sdpa": args.use_sdpa,
        "fused_adamw": args.use_fused_adamw,
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"),
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
