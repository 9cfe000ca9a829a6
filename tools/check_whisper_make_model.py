#!/usr/bin/env python3
"""Check that `kvserve make-model --preset whisper-*` output loads in transformers unchanged.

Run on a machine with torch + transformers:
    kvserve make-model --preset whisper-tiny-shape --dtype f32 --output /tmp/wt
    python3 tools/check_whisper_make_model.py /tmp/wt [--out FILE]

Checks (each failure is printed and makes the exit status 1):
  * WhisperForConditionalGeneration.from_pretrained loads every tensor: no missing, unexpected or
    mismatched keys (proj_out is tied to model.decoder.embed_tokens);
  * config values (shapes, token ids) and the parameter count;
  * model.encoder.embed_positions equals transformers' own `sinusoids` (how it initialises them);
  * the tokenizer (AutoTokenizer) has Whisper's special tokens at openai/whisper-tiny's ids and
    len(tokenizer) == vocab_size; the feature extractor and generation config load;
  * generate() runs (greedy, language "en", task "transcribe") on a deterministic input.
"""
import argparse
import json
import sys

import numpy as np
import torch
from transformers import (AutoTokenizer, GenerationConfig, WhisperFeatureExtractor,
                          WhisperForConditionalGeneration)

EXPECTED_IDS = {
    "<|endoftext|>": 50257,
    "<|startoftranscript|>": 50258,
    "<|en|>": 50259,
    "<|zh|>": 50260,
    "<|su|>": 50357,
    "<|translate|>": 50358,
    "<|transcribe|>": 50359,
    "<|startoflm|>": 50360,
    "<|startofprev|>": 50361,
    "<|nocaptions|>": 50362,
    "<|notimestamps|>": 50363,
    "<|0.00|>": 50364,
    "<|30.00|>": 51864,
}

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def reference_sinusoids(length, channels):
    try:
        from transformers.models.whisper.modeling_whisper import sinusoids
        return sinusoids(length, channels)
    except ImportError:  # the formula, should the helper move
        inc = np.log(10000) / (channels // 2 - 1)
        inv = torch.exp(-inc * torch.arange(channels // 2))
        t = torch.arange(length).view(-1, 1) * inv.view(1, -1)
        return torch.cat([t.sin(), t.cos()], dim=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--out")
    ap.add_argument("--max-new-tokens", type=int, default=8)
    args = ap.parse_args()

    try:
        model, info = WhisperForConditionalGeneration.from_pretrained(
            args.dir, dtype=torch.float32, output_loading_info=True)
    except TypeError:
        model, info = WhisperForConditionalGeneration.from_pretrained(
            args.dir, torch_dtype=torch.float32, output_loading_info=True)
    model.eval()
    cfg = model.config
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        check(not info.get(k), f"loading info {k}: {info.get(k)}")
    check(model.proj_out.weight.data_ptr() == model.model.decoder.embed_tokens.weight.data_ptr(),
          "proj_out is tied to model.decoder.embed_tokens")
    n_params = sum(p.numel() for p in model.parameters())
    print(f"class {type(model).__name__}, parameters {n_params}, d_model {cfg.d_model}, "
          f"layers {cfg.encoder_layers}+{cfg.decoder_layers}, vocab {cfg.vocab_size}")

    pos = model.model.encoder.embed_positions.weight.detach()
    ref = reference_sinusoids(*pos.shape).to(pos.dtype)
    err = (pos - ref).abs().max().item()
    # Angles reach 1500 rad, where one f32 ulp of the angle is 1.2e-4: libm and torch's sin may
    # round differently there, so agreement is to a few ulps of the angle, not of the value.
    check(err < 1e-4, f"encoder embed_positions are transformers' sinusoids (max |diff| {err:.2e})")

    tok = AutoTokenizer.from_pretrained(args.dir)
    check(len(tok) == cfg.vocab_size, f"len(tokenizer) {len(tok)} == vocab_size {cfg.vocab_size}")
    for token, want in EXPECTED_IDS.items():
        got = tok.convert_tokens_to_ids(token)
        check(got == want, f"{token} id {got} == {want}")
    text = "Hello, world! The quick brown fox."
    ids = tok.encode(text, add_special_tokens=False)
    check(tok.decode(ids) == text, f"round trip {text!r} -> {ids}")

    fe = WhisperFeatureExtractor.from_pretrained(args.dir)
    check(fe.feature_size == cfg.num_mel_bins, f"feature_size {fe.feature_size}")
    gen = GenerationConfig.from_pretrained(args.dir)
    check(gen.decoder_start_token_id == 50258, "generation_config decoder_start_token_id")
    check(gen.no_timestamps_token_id == 50363, "generation_config no_timestamps_token_id")
    check(gen.lang_to_id.get("<|en|>") == 50259, "generation_config lang_to_id <|en|>")

    # A deterministic 2 s tone through the real feature extractor.
    t = np.arange(32000) / 16000.0
    audio = (0.3 * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32)
    features = fe(audio, sampling_rate=16000, return_tensors="pt").input_features
    check(tuple(features.shape) == (1, cfg.num_mel_bins, 2 * cfg.max_source_positions),
          f"features shape {tuple(features.shape)}")
    with torch.no_grad():
        seq = model.generate(features, language="en", task="transcribe", num_beams=1,
                             do_sample=False, max_new_tokens=args.max_new_tokens)
    print("generate:", seq[0].tolist())
    result = {"dir": args.dir, "class": type(model).__name__, "params": n_params,
              "vocab_size": cfg.vocab_size, "tokenizer_len": len(tok),
              "sinusoid_max_abs_diff": err, "generate": seq[0].tolist(), "failures": failures}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f)
    print(json.dumps({k: result[k] for k in ("class", "params", "vocab_size", "failures")}))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
