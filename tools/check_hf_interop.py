#!/usr/bin/env python3
"""Loads a `loom export --format hf` folder with the real Hugging Face
transformers library and checks it computes what loom computes.

Run it with the virtual environment's python (scripts/setup.sh makes .venv
with a pinned transformers that works with Debian's torch 1.13):

  .venv/bin/python tools/check_hf_interop.py EXPORT_DIR [--logits TOKENS.i32 LOGITS.f32 B T]
      [--greedy PROMPT.txt LOOM_OUTPUT N] [--tokenizer TOKENIZER.model] [--atol 1e-4]

  1. AutoModelForCausalLM.from_pretrained(EXPORT_DIR) must build the class
     config.json names (GPT2LMHeadModel or LlamaForCausalLM) with no
     missing, unexpected or mismatched weight;
  2. with --logits: its logits on TOKENS.i32 ([B, T] int32) must be within
     --atol of LOGITS.f32 ([B, T, vocab] float32, loom's on the same tokens);
  3. with --greedy: LOOM_OUTPUT is what `loom generate --temperature 0
     --max-tokens N --prompt "$(cat PROMPT.txt)"` printed (the prompt, the
     continuation, a newline); HF's model.generate(do_sample=False,
     max_new_tokens=N) on the prompt's ids must continue with exactly the
     same tokens (loom stops before end-of-text, HF after it: a final
     eos_token_id is dropped). Ids are bytes (byte-level data) or, with
     --tokenizer, the run's SentencePiece model (encoded line by line with
     the newline piece between, as loom does).

Prints one line per check; exit code 0 when all agree, 1 otherwise, 2 on bad
usage.
"""

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local; never ask the hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

try:
    import transformers  # noqa: E402
    from transformers import AutoModelForCausalLM  # noqa: E402
except ImportError as e:
    print(f"FAIL: cannot import transformers ({e}); run it with .venv/bin/python (scripts/setup.sh makes .venv)")
    sys.exit(1)

CLASSES = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
           "qwen2_moe": "Qwen2MoeForCausalLM",
           "mixtral": "MixtralForCausalLM"}


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def usage():
    print(__doc__)
    sys.exit(2)


def take(args, flag, n):
    """Removes `flag` and its n values from args; returns the values (None if absent)."""
    if flag not in args:
        return None
    i = args.index(flag)
    if i + n >= len(args):
        usage()
    values = args[i + 1:i + 1 + n]
    del args[i:i + 1 + n]
    return values


class Codec:
    """Text <-> ids as loom's TextCodec: one id per byte, or a SentencePiece model."""

    def __init__(self, tokenizer_path):
        self.sp = None
        if tokenizer_path:
            try:
                import sentencepiece
            except ImportError:
                fail("--tokenizer needs the sentencepiece package (scripts/setup.sh installs it in .venv)")
            self.sp = sentencepiece.SentencePieceProcessor(model_file=tokenizer_path)
            self.newline = self.sp.piece_to_id("\n")

    def encode(self, text):
        if self.sp is None:
            return list(text.encode("utf-8"))
        if "\u2581" in text:
            fail("the prompt holds U+2581, which loom spells as bytes; use another prompt")
        ids = []
        for i, line in enumerate(text.split("\n")):
            if i:
                ids.append(self.newline)
            ids += self.sp.encode(line)
        return ids

    def decode(self, ids):
        return bytes(ids) if self.sp is None else self.sp.decode(ids).encode("utf-8")


def version_tuple(text):
    parts = []
    for piece in text.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def rope_scaling(config):
    """The rotary scaling transformers built (4.x rope_scaling; 5.x rope_parameters), or None."""
    r = getattr(config, "rope_scaling", None) or getattr(config, "rope_parameters", None) or {}
    kind = r.get("rope_type", r.get("type", "default"))
    return None if kind == "default" else r


def rope_theta(config):
    """transformers 5.x keeps rope_theta in config.rope_parameters; 4.x on the config itself."""
    theta = getattr(config, "rope_theta", None)
    if theta is None:
        theta = (getattr(config, "rope_parameters", None) or {}).get("rope_theta")
    return theta


def main():
    args = sys.argv[1:]
    atol = float((take(args, "--atol", 1) or ["1e-4"])[0])
    logits_args = take(args, "--logits", 4)
    greedy = take(args, "--greedy", 3)
    tokenizer = (take(args, "--tokenizer", 1) or [None])[0]
    if len(args) != 1 or (logits_args is None and greedy is None):
        usage()
    out_dir = args[0]

    cfg = json.load(open(os.path.join(out_dir, "config.json")))
    family = cfg.get("model_type")
    if family not in CLASSES:
        fail(f"config.json: model_type {family!r} is not one of {sorted(CLASSES)}")
    # transformers 4.56 renamed from_pretrained's torch_dtype to dtype (5.x drops the old name).
    dtype_arg = "dtype" if version_tuple(transformers.__version__) >= (4, 56) else "torch_dtype"
    model, info = AutoModelForCausalLM.from_pretrained(out_dir, output_loading_info=True,
                                                       **{dtype_arg: torch.float32})
    model.eval()
    if type(model).__name__ != CLASSES[family]:
        fail(f"transformers built {type(model).__name__}, expected {CLASSES[family]}")
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(kind):
            fail(f"{CLASSES[family]} from {out_dir}: {kind} {info[kind]}")
    c = model.config
    V = c.vocab_size
    tied = model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    if tied != bool(c.tie_word_embeddings):
        fail(f"lm_head tied: {tied}, config.json tie_word_embeddings: {c.tie_word_embeddings}")
    shape = (f"n_layer={c.n_layer} n_head={c.n_head} n_embd={c.n_embd} n_positions={c.n_positions}"
             if family == "gpt2" else
             f"layers={c.num_hidden_layers} heads={c.num_attention_heads} kv_heads={c.num_key_value_heads} "
             f"hidden={c.hidden_size} intermediate={c.intermediate_size} rope_theta={rope_theta(c)} "
             f"rms_norm_eps={c.rms_norm_eps} rope_scaling={rope_scaling(c)}")
    print(f"ok transformers {transformers.__version__} (torch {torch.__version__}) loads {type(model).__name__}: "
          f"{shape} vocab={V} tied={tied} bos={c.bos_token_id} eos={c.eos_token_id}, "
          f"every weight present, none unexpected")

    if logits_args is not None:
        check_logits(model, *logits_args, atol)
    if greedy is not None:
        check_greedy(model, family, Codec(tokenizer), *greedy)


def check_logits(model, tokens_path, logits_path, B, T, atol):
    B, T, V = int(B), int(T), model.config.vocab_size
    tokens = torch.frombuffer(bytearray(open(tokens_path, "rb").read()), dtype=torch.int32).view(B, T).long()
    ref = torch.frombuffer(bytearray(open(logits_path, "rb").read()), dtype=torch.float32).view(B, T, V)
    with torch.no_grad():
        logits = model(input_ids=tokens).logits.float()
    diff = (logits - ref).abs().max().item()
    if not diff <= atol:
        fail(f"{type(model).__name__} logits differ from loom's by {diff:.3g} (atol {atol:g})")
    print(f"ok logits: {type(model).__name__} on [{B}, {T}] tokens matches loom's, max abs diff {diff:.3g} "
          f"(atol {atol:g})")


def check_greedy(model, family, codec, prompt_path, output_path, n):
    c, n = model.config, int(n)
    prompt = open(prompt_path, "rb").read().decode("utf-8")
    printed = open(output_path, "rb").read()
    want_prefix = prompt.encode("utf-8")
    if not printed.startswith(want_prefix) or not printed.endswith(b"\n"):
        fail(f"{output_path} does not hold the prompt, a continuation and a newline as `loom generate` prints")
    loom_text = printed[len(want_prefix):-1]
    prompt_ids = codec.encode(prompt)
    positions = c.n_positions if family == "gpt2" else c.max_position_embeddings
    if len(prompt_ids) + n > positions:
        fail(f"{len(prompt_ids)} prompt ids + {n} new tokens exceed the model's {positions} positions "
             f"(past them loom slides its window; HF does not)")
    ids = torch.tensor([prompt_ids])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n,
                             pad_token_id=c.eos_token_id if c.eos_token_id is not None else 0)
    new = out[0, len(prompt_ids):].tolist()
    if c.eos_token_id is not None and new and new[-1] == c.eos_token_id:
        new = new[:-1]  # loom stops before end-of-text
    hf_text = codec.decode(new)
    if hf_text != loom_text:
        fail(f"greedy continuations differ: HF {hf_text!r} ({len(new)} tokens), loom {loom_text!r}")
    if codec.sp is None and len(new) != len(loom_text):
        fail(f"greedy: HF gave {len(new)} tokens, loom {len(loom_text)}")
    try:
        shown = repr(hf_text.decode("utf-8"))
    except UnicodeDecodeError:
        shown = repr(hf_text)
    print(f"ok greedy: HF generate(do_sample=False) continues {prompt!r} with the same {len(new)} tokens as "
          f"loom generate: {shown}")


if __name__ == "__main__":
    main()
