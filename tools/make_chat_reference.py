#!/usr/bin/env python3
"""Chat conversations as transformers' apply_chat_template tokenizes them.

    make_chat_reference.py TOKENIZER_DIR TEMPLATES_JSON NAME CONVERSATIONS_JSON OUT_JSON

Writes the template NAME of TEMPLATES_JSON (tests/data/chat_templates.json:
the families' published template strings) into TOKENIZER_DIR's
tokenizer_config.json as its chat_template, loads the folder with
AutoTokenizer and writes OUT_JSON: for each conversation of
CONVERSATIONS_JSON (a list of message lists), the ids of
apply_chat_template(messages, tokenize=True) (no generation prompt), or
{"error": ...} where the template refuses it. Run by
tests/data/chat_template_test.cpp with the project's .venv python.
"""
import json
import os
import sys

from transformers import AutoTokenizer


def main():
    tok_dir, templates, name, conversations, out = sys.argv[1:6]
    template = json.load(open(templates))[name]
    config_path = os.path.join(tok_dir, "tokenizer_config.json")
    config = json.load(open(config_path))
    config["chat_template"] = template
    with open(config_path, "w") as f:
        json.dump(config, f)
    tok = AutoTokenizer.from_pretrained(tok_dir)
    results = []
    for messages in json.load(open(conversations)):
        try:
            results.append({"ids": tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=False)})
        except Exception as e:  # the template's raise_exception
            results.append({"error": str(e)})
    with open(out, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
