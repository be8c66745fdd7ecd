#!/usr/bin/env python3
"""Byte-level BPE tokenizers trained by Hugging Face's `tokenizers`, with their encodings.

    make_hf_tokenizer.py --style gpt2|llama3|qwen2 --corpus FILE --lines FILE OUT_DIR

Trains a byte-level BPE model in the style of a family (GPT-2: the ByteLevel
pre-tokenizer's own regex; Llama 3: a Split regex with digits in threes and
ignore_merges; Qwen2: NFC normalization and Qwen2's Split regex, digits one
by one) on --corpus, with special tokens, and writes OUT_DIR/tokenizer.json
and tokenizer_config.json (each family's eos_token and
clean_up_tokenization_spaces: true for Llama 3, as Meta's is; Llama 3's
post-processor puts <|begin_of_text|> first), and OUT_DIR/expected.jsonl: for
each line of --lines, {"ids": [...], "decoded": "..."} as the library
encodes it (no special tokens added: those in the text are cut out) and
decodes it back, and, from transformers' AutoTokenizer on the folder,
"with_special" (the ids tokenizer(line) gives, BOS included) and
"hf_decoded" (its decode() of the ids, clean-up included). Run by
tests/data/hf_tokenizer_test.cpp with the project's .venv python.
"""
import argparse
import json
import os

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
         r"\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = {"gpt2": ["<|endoftext|>"], "llama3": ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"],
            "qwen2": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]}


def build(style):
    if style == "gpt2":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tok = Tokenizer(models.BPE(ignore_merges=style == "llama3"))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3 if style == "llama3" else QWEN2), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        if style == "qwen2":
            tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    return tok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--style", choices=sorted(SPECIALS), required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--lines", required=True)
    ap.add_argument("out")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    tok = build(a.style)
    trainer = trainers.BpeTrainer(vocab_size=2000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=SPECIALS[a.style], show_progress=False)
    with open(a.corpus, encoding="utf-8") as f:
        text = f.read()
    tok.train_from_iterator(text.splitlines(), trainer)
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>",
              "clean_up_tokenization_spaces": a.style == "llama3"}
    if a.style == "llama3":
        bos = "<|begin_of_text|>"
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                           special_tokens=[(bos, tok.token_to_id(bos))])
        config.update(bos_token=bos, eos_token="<|end_of_text|>")
    tok.save(os.path.join(a.out, "tokenizer.json"))
    with open(os.path.join(a.out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f)
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(a.out)
    with open(a.lines, encoding="utf-8") as f, open(os.path.join(a.out, "expected.jsonl"), "w") as out:
        for line in f.read().split("\n"):
            ids = tok.encode(line, add_special_tokens=False).ids
            out.write(json.dumps({"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
                                  "with_special": hf(line)["input_ids"],
                                  "hf_decoded": hf.decode(ids)}) + "\n")


if __name__ == "__main__":
    main()
