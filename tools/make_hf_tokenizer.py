#!/usr/bin/env python3
"""Byte-level BPE tokenizers trained by Hugging Face's `tokenizers`, with their encodings.

    make_hf_tokenizer.py --style gpt2|llama3|qwen2|llama2|llama2-legacy --corpus FILE --lines FILE OUT_DIR

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
SPECIALS = {"gpt2": ["<|endoftext|>"], "llama3": ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>",
                                                  "<|end_header_id|>"],
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


def sentencepiece_folder(a):
    import sentencepiece as spm
    from transformers import LlamaTokenizer, LlamaTokenizerFast
    with open(a.corpus, encoding="utf-8") as f:
        lines = [line for line in f.read().split("\n") if line.strip()]
    prefix = os.path.join(a.out, "tokenizer")
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=prefix, model_type="bpe",
                                   vocab_size=2000, byte_fallback=True, split_digits=True, add_dummy_prefix=True,
                                   normalization_rule_name="identity", remove_extra_whitespaces=False,
                                   allow_whitespace_only_pieces=True, character_coverage=0.9995, unk_id=0, bos_id=1,
                                   eos_id=2, pad_id=-1, max_sentence_length=1 << 16, minloglevel=2)
    os.remove(prefix + ".vocab")
    legacy = a.style == "llama2-legacy"
    config = {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
              "add_bos_token": True, "add_eos_token": False, "legacy": legacy, "clean_up_tokenization_spaces": False,
              "added_tokens_decoder": {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                                "single_word": False, "special": True}
                                       for i, t in enumerate(["<unk>", "<s>", "</s>"])}}
    with open(os.path.join(a.out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f)
    slow = LlamaTokenizer.from_pretrained(a.out)
    fast = LlamaTokenizerFast.from_pretrained(a.out, from_slow=True, legacy=legacy)
    with open(a.lines, encoding="utf-8") as f, open(os.path.join(a.out, "expected.jsonl"), "w") as out:
        for line in f.read().split("\n"):
            ids = slow(line, add_special_tokens=False)["input_ids"]
            decoded = slow.decode(ids)
            out.write(json.dumps({"ids": ids, "decoded": decoded, "with_special": slow(line)["input_ids"],
                                  "hf_decoded": decoded,
                                  "fast_ids": fast(line, add_special_tokens=False)["input_ids"]}) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--style", choices=sorted(SPECIALS) + ["llama2", "llama2-legacy"], required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--lines", required=True)
    ap.add_argument("out")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.style.startswith("llama2"):
        sentencepiece_folder(a)
        return
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
