#!/usr/bin/env python3
"""Write transformers fixtures for kvserve's Whisper model (tests/unit/whisper_model_test.cpp,
test WhisperOracle.MatchesTransformersFixtures). Needs torch + transformers (+ numpy); run it on
a machine that has them, then commit tests/fixtures/whisper/<name>/.

Two ways to get a checkpoint:

  1. A kvserve make-model checkpoint (preferred: the C++ test re-creates it from preset + seed +
     dtype, so no weights are committed):
       kvserve make-model --preset whisper-test --seed 0 --dtype f32 --output /tmp/wt
       python3 tools/whisper_oracle.py --name test-synthetic --model-dir /tmp/wt \\
           --preset whisper-test --seed 0 --dtype f32

  2. A random checkpoint made here with transformers' WhisperConfig (saved into the fixture as
     checkpoint/, f16 weights to keep it small; the oracle reloads it so both sides use the same
     rounded weights):
       python3 tools/whisper_oracle.py --name random-small --random d_model=64,encoder_layers=2,\\
           decoder_layers=2,encoder_attention_heads=4,decoder_attention_heads=4,\\
           encoder_ffn_dim=256,decoder_ffn_dim=256,max_target_positions=64

Features (log-mel, [num_mel_bins, 3000]):
  --features synthetic   (default) the float64 formula the C++ test also computes; nothing stored
  --features-npy F.npy   [80, 3000] or [1, 80, 3000]; stored as features.bin (f32 LE)
  --wav F.wav            16 kHz mono 16-bit PCM read with `wave`, through WhisperFeatureExtractor
                         (the checkpoint's preprocessor_config.json); stored as features.bin

fixture.json holds: the checkpoint recipe, the prompt (<|startoftranscript|> <|lang|> <|task|>
<|notimestamps|>), encoder output statistics + the first 8 values of a few rows, the first-step
logits (raw, before suppression: top-10 ids and values, the first 16 values, abs max) and the
greedy tokens after the prompt from generate(num_beams=1, do_sample=False, language, task,
max_new_tokens).
"""
import argparse
import json
import math
import os
import sys
import wave

import numpy as np
import torch
import transformers
from transformers import (GenerationConfig, WhisperConfig, WhisperFeatureExtractor,
                          WhisperForConditionalGeneration)

LANGUAGES = ("en zh de es ru ko fr ja pt tr pl ca nl ar sv it id hi fi vi he uk el ms cs ro da hu "
             "ta no th ur hr bg lt la mi ml cy sk te fa lv bn sr az sl kn et mk br eu is hy ne mn "
             "bs kk sq sw gl mr pa si km sn yo so af oc ka be tg sd gu am yi lo uz fo ht ps tk nn "
             "mt sa lb my bo tl mg as tt haw ln ha ba jw su").split()


def synthetic_features(mels, frames):
    m = np.arange(mels, dtype=np.float64).reshape(-1, 1)
    t = np.arange(frames, dtype=np.float64).reshape(1, -1)
    v = 0.6 * np.sin(0.013 * t * (m + 1) + 0.7 * m) + 0.2 * np.cos(0.031 * t) - 0.1
    return v.astype(np.float32)


def read_wav(path):
    with wave.open(path, "rb") as w:
        if w.getnchannels() != 1 or w.getsampwidth() != 2 or w.getframerate() != 16000:
            sys.exit(f"{path}: expected 16 kHz mono 16-bit PCM")
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    return pcm.astype(np.float32) / 32768.0


def load_model(path):
    try:
        model = WhisperForConditionalGeneration.from_pretrained(path, dtype=torch.float32)
    except TypeError:
        model = WhisperForConditionalGeneration.from_pretrained(path, torch_dtype=torch.float32)
    return model.eval()


def whisper_generation_config(vocab_size):
    """The Whisper fields kvserve reads, for a checkpoint made here (ids as openai/whisper-tiny)."""
    g = GenerationConfig(
        decoder_start_token_id=50258, bos_token_id=50257, eos_token_id=50257, pad_token_id=50257,
        begin_suppress_tokens=[220, 50257], suppress_tokens=[], no_timestamps_token_id=50363,
        is_multilingual=True, max_length=448, return_timestamps=False,
        lang_to_id={f"<|{c}|>": 50259 + i for i, c in enumerate(LANGUAGES)},
        task_to_id={"transcribe": 50359, "translate": 50358},
        forced_decoder_ids=[[1, None], [2, 50359]])
    assert vocab_size >= 51865, "the random config needs Whisper's vocabulary (51865)"
    return g


def make_random_checkpoint(spec, out_dir, seed):
    kwargs = {}
    for item in filter(None, spec.split(",")):
        k, v = item.split("=")
        kwargs[k.strip()] = int(v) if v.strip().lstrip("-").isdigit() else v.strip()
    torch.manual_seed(seed)
    config = WhisperConfig(**kwargs)
    model = WhisperForConditionalGeneration(config).eval().half()
    model.generation_config = whisper_generation_config(config.vocab_size)
    model.save_pretrained(out_dir, safe_serialization=True)
    WhisperFeatureExtractor(feature_size=config.num_mel_bins).save_pretrained(out_dir)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--name", required=True, help="fixture directory name")
    ap.add_argument("--out-root", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                       "fixtures", "whisper"))
    ap.add_argument("--model-dir", help="a kvserve make-model checkpoint")
    ap.add_argument("--preset", help="the make-model preset of --model-dir")
    ap.add_argument("--seed", type=int, default=0, help="make-model seed (or torch seed)")
    ap.add_argument("--dtype", default="f32", help="make-model dtype of --model-dir")
    ap.add_argument("--random", help="comma-separated WhisperConfig overrides for a random model")
    ap.add_argument("--features", default="synthetic")
    ap.add_argument("--features-npy")
    ap.add_argument("--wav")
    ap.add_argument("--language", default="en")
    ap.add_argument("--task", default="transcribe")
    ap.add_argument("--max-new-tokens", type=int, default=20)
    args = ap.parse_args()

    out = os.path.abspath(os.path.join(args.out_root, args.name))
    os.makedirs(out, exist_ok=True)
    if args.random:
        model_dir = os.path.join(out, "checkpoint")
        make_random_checkpoint(args.random, model_dir, args.seed)
        checkpoint = {"path": "checkpoint"}
    else:
        if not (args.model_dir and args.preset):
            sys.exit("give --model-dir and --preset (a make-model checkpoint) or --random")
        model_dir = args.model_dir
        checkpoint = {"preset": args.preset, "seed": args.seed, "dtype": args.dtype}
    model = load_model(model_dir)
    cfg = model.config
    gen = GenerationConfig.from_pretrained(model_dir)
    frames = 2 * cfg.max_source_positions

    features_name = "synthetic"
    if args.features_npy:
        feats = np.load(args.features_npy).astype(np.float32).reshape(cfg.num_mel_bins, frames)
    elif args.wav:
        fe = WhisperFeatureExtractor.from_pretrained(model_dir)
        feats = fe(read_wav(args.wav), sampling_rate=16000, return_tensors="np").input_features[0]
        feats = feats.astype(np.float32)
    else:
        feats = synthetic_features(cfg.num_mel_bins, frames)
    if args.features_npy or args.wav:
        features_name = "features.bin"
        feats.astype("<f4").tofile(os.path.join(out, features_name))
    features = torch.from_numpy(np.ascontiguousarray(feats)).unsqueeze(0)

    prompt = [gen.decoder_start_token_id]
    if getattr(gen, "is_multilingual", False):
        prompt += [gen.lang_to_id[f"<|{args.language}|>"], gen.task_to_id[args.task]]
    if not getattr(gen, "return_timestamps", False) and getattr(gen, "no_timestamps_token_id", None):
        prompt.append(gen.no_timestamps_token_id)

    with torch.no_grad():
        enc = model.model.encoder(features).last_hidden_state[0].double()
        logits = model(input_features=features,
                       decoder_input_ids=torch.tensor([prompt])).logits[0, -1].double()
        gen_kwargs = dict(num_beams=1, do_sample=False, max_new_tokens=args.max_new_tokens)
        if getattr(gen, "is_multilingual", False):
            gen_kwargs.update(language=args.language, task=args.task)
        seq = model.generate(features, **gen_kwargs)[0].tolist()
    if seq[:len(prompt)] == prompt:
        greedy = seq[len(prompt):]
    elif seq[:len(prompt) - 1] == prompt[1:]:  # versions that drop the decoder start token
        greedy = seq[len(prompt) - 1:]
    elif len(seq) <= args.max_new_tokens and not set(seq) & set(prompt):
        greedy = seq  # transformers 5 returns only the generated tokens
    else:
        sys.exit(f"generate() returned {seq[:8]}..., which does not start with the prompt {prompt}")
    # generate() stops at eos and leaves it in; the C++ side compares the tokens it produced.

    rows = [0, 1, 2, enc.shape[0] // 2, enc.shape[0] - 1]
    top = torch.topk(logits, 10)
    fixture = {
        "checkpoint": checkpoint,
        "features": features_name,
        "language": args.language,
        "task": args.task,
        "max_new_tokens": args.max_new_tokens,
        "prompt": prompt,
        "encoder": {
            "shape": list(enc.shape),
            "mean": enc.mean().item(),
            "std": enc.std(unbiased=False).item(),
            "abs_max": enc.abs().max().item(),
            "slice_rows": rows,
            "slice": [[round(x, 7) for x in enc[r, :8].tolist()] for r in rows],
        },
        "first_logits": {
            "abs_max": logits.abs().max().item(),
            "top_ids": top.indices.tolist(),
            "top_values": top.values.tolist(),
            "slice": logits[:16].tolist(),
        },
        "greedy": greedy,
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__},
    }
    with open(os.path.join(out, "fixture.json"), "w") as f:
        json.dump(fixture, f, indent=1)
        f.write("\n")
    print(f"wrote {out}/fixture.json: prompt {prompt}, greedy {greedy}")
    if math.isnan(fixture["encoder"]["mean"]):
        sys.exit("encoder output is NaN")


if __name__ == "__main__":
    main()
