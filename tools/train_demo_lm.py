#!/usr/bin/env python3
"""Trains kvserve's demo language model (models/demo-lm) on the GPU machine.

Corpus: the fortune cookie files of Debian's `fortunes` package (BSD licence; see
docs/demo-models.md). Recipe:
  1. split the cookies into train / held-out (every cookie whose SHA-1 is 0 mod 50 is held out);
  2. train a byte-level BPE tokenizer (vocab 4096) with Hugging Face `tokenizers` on the train split;
  3. train a small Llama (LlamaForCausalLM) on a mix of plain cookies and ChatML exchanges
     ("<|im_start|>user ... <|im_end|><|im_start|>assistant <cookie><|im_end|>"), packed into
     256-token windows, AdamW + cosine schedule, bf16 autocast, for --minutes;
  4. keep the checkpoint with the lowest held-out loss; export it in bf16 with save_pretrained
     (config.json, model.safetensors, generation_config.json) plus tokenizer.json and
     tokenizer_config.json (with the chat template);
  5. reload the export in float32 (as kvserve computes) and measure held-out perplexity; write
     eval.json (perplexity, and token ids of the first held-out cookies for kvserve's test),
     loss.csv and loss.png.

Usage (GPU machine): python3 tools/train_demo_lm.py --corpus DIR --out OUT/demo-lm --minutes 8
"""
import argparse
import hashlib
import json
import math
import os
import random
import struct
import time
import zlib

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

SKIP_FILES = {"art", "ascii-art", "translate-me"}  # pictures and non-English
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
PROMPTS = {
    "computers": ["Say something about computers.", "Tell me a joke about programmers."],
    "science": ["Tell me something about science.", "Say something scientific."],
    "wisdom": ["Share some wisdom.", "Give me some advice."],
    "food": ["Say something about food."],
    "love": ["Tell me something about love."],
    "law": ["Tell me a law."],
    "literature": ["Quote some literature."],
    "people": ["Tell me about people."],
    "work": ["Say something about work."],
    "riddles": ["Tell me a riddle."],
    "songs-poems": ["Recite a poem.", "Sing me a song."],
    "linux": ["Say something about Linux."],
    "startrek": ["Say something from Star Trek."],
}
GENERIC_PROMPTS = [
    "Tell me a fortune.", "Say something funny.", "Tell me something interesting.",
    "Give me a quote.", "Hello!", "What do you think?", "Tell me something.",
    "Cheer me up.", "Say something clever.", "What is on your mind?",
]


def read_cookies(corpus_dir):
    cookies = []
    for name in sorted(os.listdir(corpus_dir)):
        path = os.path.join(corpus_dir, name)
        if "." in name or name in SKIP_FILES or not os.path.isfile(path):
            continue
        text = open(path, encoding="utf-8", errors="replace").read()
        for cookie in text.split("\n%\n"):
            cookie = cookie.strip("\n%").rstrip()
            if not cookie or len(cookie) > 1200:
                continue
            letters = sum(c.isalpha() for c in cookie)
            if letters < 0.5 * len(cookie.replace(" ", "").replace("\n", "")):
                continue  # drawings, tables
            cookies.append((name, cookie))
    return cookies


def held_out(cookie):
    return int(hashlib.sha1(cookie.encode()).hexdigest(), 16) % 50 == 0


def train_tokenizer(texts, vocab_size):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return tok


def chat_text(category, cookie, rng):
    prompt = rng.choice(PROMPTS.get(category, []) + GENERIC_PROMPTS)
    return (f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n{cookie}<|im_end|>\n")


def token_stream(tok, cookies, rng):
    ids = []
    eot = tok.token_to_id("<|endoftext|>")
    for category, cookie in cookies:
        if rng.random() < 0.5:
            ids += [eot] + tok.encode(cookie).ids
        else:
            ids += tok.encode(chat_text(category, cookie, rng)).ids
    return ids


def write_png(path, series, width=800, height=400):
    """A line chart of `series` ({name: [(x, y)]}) as an RGB PNG, no plotting library needed."""
    img = [[(255, 255, 255)] * width for _ in range(height)]
    colours = [(31, 119, 180), (214, 39, 40), (44, 160, 44)]
    xs = [x for s in series.values() for x, _ in s]
    ys = [y for s in series.values() for _, y in s]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    pad = 30

    def px(x, y):
        return (pad + int((x - x0) / max(x1 - x0, 1e-9) * (width - 2 * pad)),
                height - pad - int((y - y0) / max(y1 - y0, 1e-9) * (height - 2 * pad)))

    for i in range(pad, width - pad):
        img[height - pad][i] = (0, 0, 0)
    for j in range(pad, height - pad + 1):
        img[j][pad] = (0, 0, 0)
    for colour, points in zip(colours, series.values()):
        prev = None
        for x, y in points:
            cur = px(x, y)
            if prev:
                steps = max(abs(cur[0] - prev[0]), abs(cur[1] - prev[1]), 1)
                for k in range(steps + 1):
                    u = prev[0] + (cur[0] - prev[0]) * k // steps
                    v = prev[1] + (cur[1] - prev[1]) * k // steps
                    if 0 <= u < width and 0 <= v < height:
                        img[v][u] = colour
            prev = cur
    raw = b"".join(b"\x00" + bytes(c for p in row for c in p) for row in img)

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)))
        f.write(chunk(b"IDAT", zlib.compress(raw, 9)))
        f.write(chunk(b"IEND", b""))


@torch.no_grad()
def heldout_nll(model, sequences, device, dtype=None):
    """Sum of -log p over every token after the first, and the number of such tokens."""
    total, count = 0.0, 0
    for ids in sequences:
        x = torch.tensor([ids], device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype is not None):
            logits = model(x).logits.float()
        logp = torch.log_softmax(logits[0, :-1], dim=-1)
        total -= logp.gather(1, x[0, 1:, None]).sum().item()
        count += len(ids) - 1
    return total, count


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=8.0)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--eval-every", type=int, default=50)
    a = ap.parse_args()
    random.seed(a.seed)
    torch.manual_seed(a.seed)
    device = "cuda"
    os.makedirs(a.out, exist_ok=True)

    cookies = read_cookies(a.corpus)
    train = [c for c in cookies if not held_out(c[1])]
    test = [c for c in cookies if held_out(c[1])]
    print(f"cookies: {len(cookies)} ({len(train)} train, {len(test)} held out), "
          f"{sum(len(c) for _, c in cookies)} characters")

    tok = train_tokenizer([c for _, c in train], a.vocab)
    eot = tok.token_to_id("<|endoftext|>")
    im_end = tok.token_to_id("<|im_end|>")
    test_seqs = [[eot] + tok.encode(c).ids + [eot] for _, c in test]

    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=384, intermediate_size=1024,
        num_hidden_layers=6, num_attention_heads=6, num_key_value_heads=2, head_dim=64,
        max_position_embeddings=1024, rms_norm_eps=1e-5, rope_theta=10000.0,
        tie_word_embeddings=True, bos_token_id=eot, eos_token_id=[eot, im_end],
        pad_token_id=eot)
    model = LlamaForCausalLM(config).to(device)
    params = sum(p.numel() for p in model.parameters())
    print(f"parameters: {params} ({params * 2 / 2**20:.1f} MiB in bf16)")
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1)

    rng = random.Random(a.seed)
    budget = a.minutes * 60
    start = time.time()
    step, epoch = 0, 0
    history, best = [], (float("inf"), None)
    est_steps = None
    while time.time() - start < budget:
        ids = torch.tensor(token_stream(tok, rng.sample(train, len(train)), rng))
        n = (len(ids) - 1) // a.seq
        windows = ids[: n * a.seq + 1]
        xs = windows[:-1].view(n, a.seq)
        ys = windows[1:].view(n, a.seq)
        order = torch.randperm(n)
        for b in range(0, n - a.batch + 1, a.batch):
            elapsed = time.time() - start
            if elapsed >= budget:
                break
            if est_steps is None and step == 50:
                est_steps = int(50 * budget / elapsed)
            total = est_steps or 10**9
            warm = 100
            lr = a.lr * min(1.0, (step + 1) / warm) * (
                0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(step / total, 1.0))))
            for g in opt.param_groups:
                g["lr"] = lr
            sel = order[b: b + a.batch]
            x, y = xs[sel].to(device), ys[sel].to(device)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(x).logits
            loss = torch.nn.functional.cross_entropy(logits.float().view(-1, logits.size(-1)),
                                                     y.view(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if step % a.eval_every == 0:
                model.eval()
                s, c = heldout_nll(model, test_seqs[:200], device, dtype=torch.bfloat16)
                model.train()
                history.append((step, elapsed, loss.item(), s / c))
                print(f"step {step} epoch {epoch} {elapsed:.0f}s lr {lr:.2e} "
                      f"train {loss.item():.3f} held-out {s / c:.3f}", flush=True)
                if s / c < best[0]:
                    best = (s / c, {k: v.detach().clone() for k, v in model.state_dict().items()})
            step += 1
        epoch += 1
    print(f"trained {step} steps, {epoch} epochs in {time.time() - start:.0f}s; "
          f"best held-out loss {best[0]:.3f}")
    model.load_state_dict(best[1])

    # Export in bf16, Hugging Face layout.
    model.to(torch.bfloat16).save_pretrained(a.out, safe_serialization=True)
    # Stop at the end of a cookie, of a turn, or where a new turn would begin; sample (greedy
    # decoding of so small a model loops).
    im_start = tok.token_to_id("<|im_start|>")
    model.generation_config.eos_token_id = [eot, im_start, im_end]
    model.generation_config.do_sample = True
    model.generation_config.temperature = 0.8
    model.generation_config.top_p = 0.95
    model.generation_config.save_pretrained(a.out)
    tok.save(os.path.join(a.out, "tokenizer.json"))
    json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": None,
               "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
               "unk_token": None, "model_max_length": 1024, "add_bos_token": False,
               "clean_up_tokenization_spaces": False, "chat_template": CHAT_TEMPLATE,
               "added_tokens_decoder": {str(tok.token_to_id(t)): {
                   "content": t, "lstrip": False, "rstrip": False, "normalized": False,
                   "single_word": False, "special": True} for t in SPECIALS}},
              open(os.path.join(a.out, "tokenizer_config.json"), "w"), indent=2)

    # Held-out perplexity of the export, computed in float32 as kvserve does on the CPU.
    ref = AutoModelForCausalLM.from_pretrained(a.out, dtype=torch.float32).to(device).eval()
    s, c = heldout_nll(ref, test_seqs, device)
    subset = test_seqs[:64]
    s64, c64 = heldout_nll(ref, subset, device)
    result = {"heldout_cookies": len(test_seqs), "heldout_tokens": c,
              "heldout_perplexity": math.exp(s / c), "subset_sequences": subset,
              "subset_tokens": c64, "subset_perplexity": math.exp(s64 / c64),
              "train_cookies": len(train), "parameters": params, "steps": step,
              "epochs": epoch, "seconds": round(time.time() - start), "seed": a.seed}
    json.dump(result, open(os.path.join(a.out, "eval.json"), "w"))
    print(f"held-out perplexity {result['heldout_perplexity']:.3f} over {c} tokens; "
          f"subset {result['subset_perplexity']:.4f}")

    with open(os.path.join(a.out, "loss.csv"), "w") as f:
        f.write("step,seconds,train_loss,heldout_loss\n")
        for row in history:
            f.write(",".join(f"{v:.4f}" if isinstance(v, float) else str(v) for v in row) + "\n")
    write_png(os.path.join(a.out, "loss.png"),
              {"train": [(h[0], h[2]) for h in history], "held-out": [(h[0], h[3]) for h in history]})

    # A few samples, greedy and sampled, for the record.
    from transformers import PreTrainedTokenizerFast
    hf_tok = PreTrainedTokenizerFast.from_pretrained(a.out)
    for prompt in ["<|endoftext|>The", "<|im_start|>user\nTell me a fortune.<|im_end|>\n<|im_start|>assistant\n"]:
        x = torch.tensor([tok.encode(prompt).ids], device=device)
        out = ref.generate(x, max_new_tokens=60, do_sample=False)
        print(repr(hf_tok.decode(out[0][x.size(1):])))


if __name__ == "__main__":
    main()
