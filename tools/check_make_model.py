#!/usr/bin/env python3
"""Check that `kvserve make-model` output loads in Hugging Face transformers unchanged.

Run on the GPU machine:  python3 tools/check_make_model.py DIR [--greedy N] [--out FILE]

Loads config, weights and tokenizer with the Auto classes, tokenizes a set of strings (the ids
become a fixture for kvserve's tokenizer), applies the chat template, and runs greedy decoding in
fp32 on the CPU for a fixed prompt so that kvserve's output can be compared.
"""
import argparse
import json

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

STRINGS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "  leading spaces and trailing   ",
    "line one\nline two\n\n\nline five\t tab",
    "numbers 12345678 and 3.14159, contractions I'm don't 'S",
    "accents: café naïve Zürich; CJK: 你好世界; emoji: 👋🏽 👨‍👩‍👧",
    "<|im_start|>user\nhi<|im_end|>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "",
    " ",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--greedy", type=int, default=16)
    ap.add_argument("--out")
    args = ap.parse_args()
    tok = AutoTokenizer.from_pretrained(args.dir)
    try:
        model = AutoModelForCausalLM.from_pretrained(args.dir, dtype=torch.float32)
    except TypeError:
        model = AutoModelForCausalLM.from_pretrained(args.dir, torch_dtype=torch.float32)
    model.eval()
    n_params = sum(p.numel() for p in model.parameters())
    encoded = [{"text": s, "ids": tok.encode(s), "ids_no_special": tok.encode(s, add_special_tokens=False)}
               for s in STRINGS]
    chat = tok.apply_chat_template([{"role": "system", "content": "Be brief."},
                                    {"role": "user", "content": "Hi!"}],
                                   tokenize=False, add_generation_prompt=True)
    prompt = tok.encode("Once upon a time", add_special_tokens=True)
    with torch.no_grad():
        ids = torch.tensor([prompt])
        logits = model(ids).logits[0, -1].float()
        seq = model.generate(ids, max_new_tokens=args.greedy, min_new_tokens=args.greedy,
                             do_sample=False, eos_token_id=None, pad_token_id=0)
    result = {
        "dir": args.dir, "class": type(model).__name__, "params": n_params,
        "vocab_size": model.config.vocab_size, "tokenizer_len": len(tok),
        "bos": tok.bos_token_id, "eos": tok.eos_token_id, "encoded": encoded,
        "chat_template_output": chat, "prompt": prompt,
        "last_logits_top5": torch.topk(logits, 5).indices.tolist(),
        "greedy": seq[0, len(prompt):].tolist(),
    }
    print(json.dumps({k: result[k] for k in ("dir", "class", "params", "vocab_size",
                                            "tokenizer_len", "bos", "eos", "greedy")}))
    print("chat template:", repr(chat))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
