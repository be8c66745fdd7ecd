#!/usr/bin/env python3
"""A small Hugging Face checkpoint built by transformers itself, with its logits.

    make_hf_checkpoint.py --arch gpt2|llama|llama31|mistral|qwen2 OUT_DIR [--dtype float32|bfloat16]
                          [--shard-kb N] [--tied] [--no-prefix] [--seed S]

Builds GPT2LMHeadModel, LlamaForCausalLM (llama31: with Llama 3.1's llama3
rope scaling, its bands placed so each branch acts on this small head),
MistralForCausalLM or Qwen2ForCausalLM (its q/k/v biases made random: Qwen2
starts them at zero) from a config (random weights,
nothing downloaded; initializer_range 0.2 so that greedy decoding is not a
tie-break), saves it with save_pretrained (safetensors; --shard-kb splits it
into shards with model.safetensors.index.json; --dtype bfloat16 stores bf16),
and writes OUT_DIR/reference.bin: int32 B, T, V, the B x T token ids, then
the float32 logits of the saved weights (computed in float32 on those same
values) and int32 G plus the G greedy tokens generated from row 0's first 4
tokens, then the logits of the same model run in bfloat16 (as float32). --no-prefix saves GPT-2's tensors without "transformer." (as
GPT2Model's checkpoints are). Run by tests/checkpoint/hf_import_test.cpp
with the project's .venv python.
"""
import argparse
import copy
import struct

import torch
import transformers


def build(arch, tied):
    if arch == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=300, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                                      initializer_range=0.2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        return transformers.GPT2LMHeadModel(cfg)
    if arch == "mistral":
        cfg = transformers.MistralConfig(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                         rms_norm_eps=1e-5, sliding_window=32, initializer_range=0.2)
        return transformers.MistralForCausalLM(cfg)
    if arch == "qwen2":
        cfg = transformers.Qwen2Config(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                       rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=tied,
                                       use_sliding_window=False, initializer_range=0.2)
        model = transformers.Qwen2ForCausalLM(cfg)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("_proj.bias"):
                    p.normal_(0.0, 0.2)
        return model
    # head_dim 16, theta 1e4: wavelengths 6.3, 20, 63, ...; with an original
    # context of 32 the first pair is kept, the second blended, the rest stretched.
    scaling = None
    if arch == "llama31":
        scaling = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 32}
    cfg = transformers.LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=tied,
                                   rope_scaling=scaling, initializer_range=0.2)
    return transformers.LlamaForCausalLM(cfg)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", choices=["gpt2", "llama", "llama31", "mistral", "qwen2"], required=True)
    ap.add_argument("out")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--shard-kb", type=int, default=0)
    ap.add_argument("--tied", action="store_true")
    ap.add_argument("--no-prefix", action="store_true")
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    model = build(a.arch, a.tied).eval()
    dtype = getattr(torch, a.dtype)
    model = model.to(dtype)
    kwargs = {"safe_serialization": True}
    if a.shard_kb:
        kwargs["max_shard_size"] = f"{a.shard_kb}KB"
    model.save_pretrained(a.out, **kwargs)
    if a.no_prefix:
        from safetensors.torch import load_file, save_file
        path = a.out + "/model.safetensors"
        tensors = load_file(path)
        save_file({k[len("transformer."):] if k.startswith("transformer.") else k: v for k, v in tensors.items()},
                  path, metadata={"format": "pt"})
    # The reference runs in float32 on the saved values: a fresh float32
    # model with them loaded (model.float() would keep buffers such as
    # LLaMA's rotary inv_freq rounded to the saved dtype).
    ref = build(a.arch, a.tied).eval()
    ref.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
    model = ref
    B, T = 2, 16
    g = torch.Generator().manual_seed(a.seed + 1)
    tokens = torch.randint(0, model.config.vocab_size, (B, T), generator=g)
    with torch.no_grad():
        logits = model(tokens).logits.float()
        out = model.generate(tokens[:1, :4], max_new_tokens=8, do_sample=False, pad_token_id=0)
        # The same weights run in bfloat16 by PyTorch: how far bf16 compute
        # alone moves the logits (the yardstick for loom's bf16 run).
        logits_bf16 = copy.deepcopy(model).to(torch.bfloat16)(tokens).logits.float()
    generated = out[0, 4:].tolist()
    V = logits.shape[-1]
    with open(a.out + "/reference.bin", "wb") as f:
        f.write(struct.pack("<3i", B, T, V))
        f.write(struct.pack(f"<{B * T}i", *tokens.flatten().tolist()))
        f.write(logits.numpy().astype("<f4").tobytes())
        f.write(struct.pack("<i", len(generated)))
        f.write(struct.pack(f"<{len(generated)}i", *generated))
        f.write(logits_bf16.numpy().astype("<f4").tobytes())


if __name__ == "__main__":
    main()
