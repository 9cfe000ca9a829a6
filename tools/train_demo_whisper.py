#!/usr/bin/env python3
"""Trains kvserve's demo speech model (models/demo-whisper) on the GPU machine.

Speech: espeak-ng (Debian 12, 1.51) reads sentences of the `fortunes` cookies (the demo LM's corpus)
and numbers, in 7 English accents x 13 voice variants, at random speeds and pitches. Recipe:
  1. sentences: each cookie's text without its "-- attribution", split after . ! ?, kept when it
     has 3-24 words, at most 150 characters and only letters, digits and . , ; : ' " ! ? -;
     a sentence is held out when its cookie is (SHA-1 of the cookie 0 mod 50, as the demo LM);
  2. numbers: integers written in digits (espeak says "four thousand and twelve") and digit
     strings written with spaces ("4 0 7 2", said digit by digit); held out when the SHA-1 of the
     text is 0 mod 20;
  3. synthesis: `espeak-ng -v VOICE -s SPEED -p PITCH -w FILE` (22,050 Hz), resampled to 16 kHz
     (torchaudio), clips longer than 9.5 s dropped; every training sentence is read twice (two
     random voices), every held-out item once;
  4. features: Whisper log-mel (80 bins, 10 s windows: preprocessor_config chunk_length 10), the
     torch form of transformers' WhisperFeatureExtractor (checked against it on the first clips);
  5. tokenizer: byte-level BPE (vocab 1000 + Whisper's special tokens) on the training texts;
  6. model: WhisperForConditionalGeneration, d_model 256, 4 + 4 layers, 4 heads, FFN 1024,
     max_source_positions 500 (10 s), max_target_positions 128; English-only (tiny.en style): the
     decoder prompt is <|startoftranscript|><|notimestamps|>;
  7. AdamW (lr 1e-3, 300 warm-up steps, cosine to 5 %), batch 128, bf16 autocast, light
     SpecAugment (2 time masks of <= 40 frames, 2 mel masks of <= 8 bins) for --minutes; held-out
     loss every 250 steps, the best checkpoint kept;
  8. export in bf16 with save_pretrained + tokenizer / preprocessor / generation configs; reload it
     (float32) and transcribe the held-out clips with transformers' generate (greedy): word error
     rate per set, written to eval.json with the held-out items (text, voice, speed, pitch, the
     transcript) so kvserve's transcript of the same clips can be compared.

Usage (GPU machine, espeak-ng and its data carried there):
  python3 tools/train_demo_whisper.py --corpus DIR --espeak BIN --out OUT/demo-whisper --minutes 6
"""
import argparse
import hashlib
import io
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import wave
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_demo_lm import held_out, read_cookies, write_png  # noqa: E402
from wer import normalise, word_errors  # noqa: E402

ACCENTS = ["en-us", "en-gb", "en-gb-x-rp", "en-gb-scotland", "en-gb-x-gbclan", "en-gb-x-gbcwmd",
           "en-029"]
VARIANTS = ["", "+m1", "+m2", "+m3", "+m4", "+m5", "+m6", "+m7", "+f1", "+f2", "+f3", "+f4", "+f5"]
ALLOWED = re.compile(r"^[A-Za-z0-9 .,;:'\"!?-]+$")
SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|translate|>", "<|transcribe|>",
            "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>"]
SAMPLE_RATE = 16000
CHUNK_SECONDS = 10
MAX_SECONDS = 9.5


def sentences(cookie):
    text = re.sub(r"\s+", " ", cookie).strip()
    text = re.split(r"\s--\s", text)[0]
    for s in re.split(r"(?<=[.!?])\s+", text):
        s = s.strip()
        words = s.split()
        if 3 <= len(words) <= 24 and len(s) <= 150 and ALLOWED.match(s) and re.search("[a-z]", s):
            yield s


def number_texts(rng, count):
    out = set()
    while len(out) < count:
        if rng.random() < 0.55:
            digits = rng.randint(1, 6)
            out.add(str(rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10 ** digits - 1)))
        else:
            out.add(" ".join(str(rng.randint(0, 9)) for _ in range(rng.randint(3, 8))))
    return sorted(out)


def number_held_out(text):
    return int(hashlib.sha1(text.encode()).hexdigest(), 16) % 20 == 0


def random_voice(rng):
    return {"voice": rng.choice(ACCENTS) + rng.choice(VARIANTS), "speed": rng.randint(130, 200),
            "pitch": rng.randint(30, 70)}


def synthesize(espeak, item, tmpdir):
    """espeak-ng -> int16 samples at its native rate (22,050 Hz)."""
    path = os.path.join(tmpdir, f"{item['id']}.wav")
    subprocess.run([espeak, "-v", item["voice"], "-s", str(item["speed"]), "-p", str(item["pitch"]),
                    "-w", path, "--stdin"], input=item["text"].encode(), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with wave.open(path, "rb") as w:
        rate = w.getframerate()
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)
    os.unlink(path)
    return rate, pcm


class LogMel:
    """transformers' WhisperFeatureExtractor (torch path) for 10 s windows, batched on the GPU."""

    def __init__(self, device):
        from transformers import WhisperFeatureExtractor
        self.fe = WhisperFeatureExtractor(feature_size=80, sampling_rate=SAMPLE_RATE, hop_length=160,
                                          chunk_length=CHUNK_SECONDS, n_fft=400)
        self.filters = torch.tensor(self.fe.mel_filters, dtype=torch.float32, device=device)
        self.window = torch.hann_window(400, device=device)
        self.device = device

    def __call__(self, clips):  # list of float32 arrays at 16 kHz -> [B, 80, 1000]
        n = self.fe.n_samples
        x = torch.zeros(len(clips), n, device=self.device)
        for i, c in enumerate(clips):
            c = torch.as_tensor(c[:n], device=self.device)
            x[i, :len(c)] = c
        stft = torch.stft(x, 400, 160, window=self.window, return_complex=True)
        mag = stft[..., :-1].abs() ** 2
        mel = self.filters.T @ mag
        log = torch.clamp(mel, min=1e-10).log10()
        peak = log.amax(dim=(1, 2), keepdim=True)
        log = torch.maximum(log, peak - 8.0)
        return (log + 4.0) / 4.0


def build_items(args):
    rng = random.Random(1234)
    cookies = read_cookies(args.corpus)
    train_s, test_s = [], []
    for _, cookie in cookies:
        (test_s if held_out(cookie) else train_s).extend(sentences(cookie))
    train_s = sorted(set(train_s))
    test_s = sorted(set(test_s) - set(train_s))
    numbers = number_texts(rng, 12000)
    items = []
    for text in train_s:
        for _ in range(2):
            items.append({"text": text, "kind": "sentence", "split": "train", **random_voice(rng)})
    for text in test_s:
        items.append({"text": text, "kind": "sentence", "split": "test", **random_voice(rng)})
    for text in numbers:
        split = "test" if number_held_out(text) else "train"
        items.append({"text": text, "kind": "number", "split": split, **random_voice(rng)})
    if args.max_items:
        rng.shuffle(items)
        items = items[:args.max_items]
    for i, item in enumerate(items):
        item["id"] = i
    return items


def synthesize_all(args, items, device):
    import torchaudio
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmpdir, ThreadPoolExecutor(args.workers) as pool:
        raw = list(pool.map(lambda it: synthesize(args.espeak, it, tmpdir), items))
    print(f"synthesised {len(raw)} clips in {time.time() - t0:.1f} s", flush=True)
    clips = []
    for start in range(0, len(raw), 256):  # resample in padded batches on the GPU
        part = raw[start:start + 256]
        rate = part[0][0]
        assert all(r == rate for r, _ in part), "espeak-ng changed its sample rate"
        x = torch.zeros(len(part), max(len(p) for _, p in part), device=device)
        for i, (_, pcm) in enumerate(part):
            x[i, :len(pcm)] = torch.as_tensor(pcm.astype(np.float32) / 32768.0, device=device)
        y = torchaudio.functional.resample(x, rate, SAMPLE_RATE).cpu().numpy()
        for i, (_, pcm) in enumerate(part):
            clips.append(y[i, :math.ceil(len(pcm) * SAMPLE_RATE / rate)].copy())
    keep = [i for i, c in enumerate(clips) if len(c) <= MAX_SECONDS * SAMPLE_RATE]
    print(f"{len(keep)} of {len(clips)} clips are at most {MAX_SECONDS} s "
          f"({sum(len(clips[i]) for i in keep) / SAMPLE_RATE / 3600:.1f} hours)", flush=True)
    return [items[i] for i in keep], [clips[i] for i in keep]


def train_tokenizer(texts):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=1000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.add_special_tokens(SPECIALS)
    return tok


def make_config(vocab_size, ids):
    from transformers import WhisperConfig
    return WhisperConfig(
        vocab_size=vocab_size, num_mel_bins=80, d_model=256, encoder_layers=4, decoder_layers=4,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=1024,
        decoder_ffn_dim=1024, max_source_positions=CHUNK_SECONDS * 50, max_target_positions=128,
        activation_function="gelu", dropout=0.0, scale_embedding=False, tie_word_embeddings=True,
        decoder_start_token_id=ids["<|startoftranscript|>"], bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|endoftext|>"], pad_token_id=ids["<|endoftext|>"],
        begin_suppress_tokens=[ids["<|endoftext|>"]], suppress_tokens=[],
        forced_decoder_ids=None)


def write_hf_files(out, tok, ids):
    tok.save(os.path.join(out, "tokenizer.json"))
    eot = "<|endoftext|>"
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "WhisperTokenizer", "bos_token": eot, "eos_token": eot,
                   "unk_token": eot, "pad_token": eot, "add_prefix_space": False,
                   "model_max_length": 128, "errors": "replace"}, f, indent=2)
    with open(os.path.join(out, "preprocessor_config.json"), "w") as f:
        json.dump({"feature_extractor_type": "WhisperFeatureExtractor", "feature_size": 80,
                   "sampling_rate": SAMPLE_RATE, "hop_length": 160, "n_fft": 400,
                   "chunk_length": CHUNK_SECONDS, "n_samples": CHUNK_SECONDS * SAMPLE_RATE,
                   "nb_max_frames": CHUNK_SECONDS * 100, "padding_side": "right",
                   "padding_value": 0.0, "return_attention_mask": False,
                   "processor_class": "WhisperProcessor"}, f, indent=2)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"decoder_start_token_id": ids["<|startoftranscript|>"],
                   "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|endoftext|>"],
                   "pad_token_id": ids["<|endoftext|>"],
                   "no_timestamps_token_id": ids["<|notimestamps|>"], "is_multilingual": False,
                   "max_length": 128, "suppress_tokens": [],
                   "begin_suppress_tokens": [ids["<|endoftext|>"]]}, f, indent=2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--espeak", default="espeak-ng")
    ap.add_argument("--out", required=True)
    ap.add_argument("--minutes", type=float, default=6.0)
    ap.add_argument("--max-items", type=int, default=0, help="a quick run on a subset")
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--wall-limit", type=float, default=0,
                    help="seconds from start by which the export must begin (training stops early)")
    args = ap.parse_args()
    script_start = time.time()
    os.makedirs(args.out, exist_ok=True)
    device = "cuda"
    torch.manual_seed(1234)

    items, clips = synthesize_all(args, build_items(args), device)
    mel = LogMel(device)
    ref = mel.fe([clips[0]], sampling_rate=SAMPLE_RATE, return_tensors="np")["input_features"][0]
    ours = mel([clips[0]])[0].cpu().numpy()
    print(f"log-mel vs WhisperFeatureExtractor: max |diff| {np.abs(ref - ours).max():.2e}", flush=True)
    feats = torch.cat([mel(clips[i:i + 512]).to(torch.bfloat16) for i in range(0, len(clips), 512)])
    print(f"features {tuple(feats.shape)}", flush=True)

    train_idx = [i for i, it in enumerate(items) if it["split"] == "train"]
    test_idx = [i for i, it in enumerate(items) if it["split"] == "test"]
    tok = train_tokenizer([" " + items[i]["text"] for i in train_idx])
    ids = {s: tok.token_to_id(s) for s in SPECIALS}
    vocab = tok.get_vocab_size()
    prefix = [ids["<|startoftranscript|>"], ids["<|notimestamps|>"]]
    seqs = [prefix + tok.encode(" " + it["text"]).ids + [ids["<|endoftext|>"]] for it in items]
    print(f"vocab {vocab}, {len(train_idx)} train / {len(test_idx)} held-out clips, "
          f"longest target {max(map(len, seqs))} tokens", flush=True)

    from transformers import WhisperForConditionalGeneration
    config = make_config(vocab, ids)
    model = WhisperForConditionalGeneration(config).to(device)
    params = sum(p.numel() for p in model.parameters())
    print(f"parameters {params:,} ({params * 2 / 2**20:.1f} MiB in bf16)", flush=True)

    def batch_of(idx, augment):
        x = feats[idx].float()
        if augment:  # SpecAugment: two time masks and two mel masks per clip, filled with its mean
            b = len(idx)
            fill = x.mean(dim=(1, 2), keepdim=True)
            for size, span, dim in ((1000, 40, 2), (1000, 40, 2), (80, 8, 1), (80, 8, 1)):
                start = torch.randint(0, size - span, (b, 1), device=device)
                width = torch.randint(0, span + 1, (b, 1), device=device)
                pos = torch.arange(size, device=device)[None, :]
                m = (pos >= start) & (pos < start + width)
                m = m[:, None, :] if dim == 2 else m[:, :, None]
                x = torch.where(m, fill, x)
        longest = max(len(seqs[i]) for i in idx)
        dec = torch.full((len(idx), longest - 1), ids["<|endoftext|>"], dtype=torch.long)
        lab = torch.full((len(idx), longest - 1), -100, dtype=torch.long)
        for b, i in enumerate(idx):
            s = torch.tensor(seqs[i])
            dec[b, :len(s) - 1] = s[:-1]
            lab[b, :len(s) - 1] = s[1:]
        lab[:, 0] = -100  # <|notimestamps|> is forced, not predicted
        return x, dec.to(device), lab.to(device)

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.98), weight_decay=0.05)
    eval_idx = test_idx[:512]

    @torch.no_grad()
    def held_out_loss():
        model.eval()
        total, count = 0.0, 0
        for i in range(0, len(eval_idx), 128):
            x, dec, lab = batch_of(eval_idx[i:i + 128], False)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_features=x, decoder_input_ids=dec, labels=lab).loss
            n = int((lab != -100).sum())
            total, count = total + float(loss) * n, count + n
        model.train()
        return total / count

    budget = args.minutes * 60
    if args.wall_limit:
        budget = min(budget, args.wall_limit - (time.time() - script_start))
    print(f"setup took {time.time() - script_start:.0f} s; training for {budget:.0f} s", flush=True)
    est_steps = None
    t50 = None
    step, t_start, history, best = 0, time.time(), [], (float("inf"), None, 0)
    rng = random.Random(7)
    order = []
    while True:
        elapsed = time.time() - t_start
        if elapsed > budget:
            break
        if step == 50:
            t50 = elapsed
        if step == 200:  # the schedule's length, from the speed of steps 50-200 (after warm-up)
            est_steps = 200 + int((budget - elapsed) / ((elapsed - t50) / 150))
            print(f"~{est_steps} steps in the budget", flush=True)
        total_steps = est_steps or 10 ** 9
        lr = 1e-3 * min(1.0, (step + 1) / 300)
        if est_steps:
            progress = min(1.0, step / total_steps)
            lr *= 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress))
        for g in opt.param_groups:
            g["lr"] = lr
        if len(order) < args.batch:
            order = train_idx[:]
            rng.shuffle(order)
        idx, order = order[:args.batch], order[args.batch:]
        x, dec, lab = batch_of(idx, True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_features=x, decoder_input_ids=dec, labels=lab).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 250 == 0:
            val = held_out_loss()
            history.append((step, loss.item(), val))
            print(f"step {step} {time.time() - t_start:.0f}s lr {lr:.2e} train {loss.item():.4f} "
                  f"held-out {val:.4f}", flush=True)
            if val < best[0]:
                best = (val, {k: v.detach().clone() for k, v in model.state_dict().items()}, step)
    if best[1] is not None:
        model.load_state_dict(best[1])
    print(f"{step} steps; best held-out loss {best[0]:.4f} at step {best[2]}", flush=True)

    model.to(torch.bfloat16).save_pretrained(args.out)
    write_hf_files(args.out, tok, ids)
    with open(os.path.join(args.out, "loss.csv"), "w") as f:
        f.write("step,train_loss,heldout_loss\n")
        for s, tr, va in history:
            f.write(f"{s},{tr:.5f},{va:.5f}\n")
    if history:
        write_png(os.path.join(args.out, "loss.png"),
                  {"train": [(s, tr) for s, tr, _ in history],
                   "held-out": [(s, va) for s, _, va in history]})

    # Reload the export as a user would, in float32, and transcribe the held-out clips.
    from transformers import AutoTokenizer, WhisperFeatureExtractor
    reloaded = WhisperForConditionalGeneration.from_pretrained(args.out, dtype=torch.float32)
    reloaded = reloaded.to(device).eval()
    hf_tok = AutoTokenizer.from_pretrained(args.out)
    WhisperFeatureExtractor.from_pretrained(args.out)
    results, errs = [], {}
    for i in range(0, len(test_idx), 128):
        idx = test_idx[i:i + 128]
        with torch.no_grad():
            out = reloaded.generate(input_features=feats[idx].float(), max_new_tokens=100)
        texts = hf_tok.batch_decode(out, skip_special_tokens=True)
        for j, text in zip(idx, texts):
            it = items[j]
            e, n = word_errors(it["text"], text)
            k = errs.setdefault(it["kind"], [0, 0, 0, 0])
            k[0] += e
            k[1] += n
            k[2] += normalise(it["text"]) == normalise(text)
            k[3] += 1
            results.append({k2: it[k2] for k2 in ("text", "kind", "voice", "speed", "pitch")}
                           | {"transformers": text.strip()})
    summary = {kind: {"wer": e / n, "words": n, "exact": ex, "clips": c}
               for kind, (e, n, ex, c) in errs.items()}
    print(json.dumps(summary, indent=1), flush=True)
    with open(os.path.join(args.out, "eval.json"), "w") as f:
        json.dump({"summary": summary, "steps": step, "best_step": best[2],
                   "best_heldout_loss": best[0], "parameters": params, "clips": results}, f,
                  indent=1)
    for r in results[:10]:
        print(f"{r['text']!r} -> {r['transformers']!r}")


if __name__ == "__main__":
    main()
