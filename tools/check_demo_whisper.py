#!/usr/bin/env python3
"""kvserve vs transformers on the demo-whisper held-out clips, from the same 16 kHz samples.

Runs on the GPU machine (torch, torchaudio, transformers, scipy; espeak-ng carried there). For each
held-out item of models/demo-whisper/eval.json: synthesise it with espeak-ng (22,050 Hz), resample to
16 kHz with torchaudio (the training pipeline), write a float32 WAV; then transcribe every WAV with
  - transformers: WhisperFeatureExtractor + WhisperForConditionalGeneration (float32, greedy), and
  - kvserve transcribe (--device cpu and, when given, --device cuda),
and compare the token sequences. Both sides read the very same samples, so any difference is the
runtime's. A few clips that both transcribe exactly are copied with their transformers tokens as
CI fixtures (tests/fixtures/audio/demo_whisper/).

  python3 tools/check_demo_whisper.py --espeak BIN --kvserve BIN --out DIR [--devices cpu cuda]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import wave
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.io.wavfile
import torch
import torchaudio
from transformers import AutoTokenizer, WhisperFeatureExtractor, WhisperForConditionalGeneration

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wer import normalise, word_errors  # noqa: E402

MAX_NEW = 100


def synthesise(espeak, item, path):
    subprocess.run([espeak, "-v", item["voice"], "-s", str(item["speed"]), "-p", str(item["pitch"]),
                    "-w", path, "--stdin"], input=item["text"].encode(), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with wave.open(path, "rb") as w:
        return w.getframerate(), np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16)


def kvserve_tokens(binary, model, wavs, device, flags=()):
    t0 = time.time()
    run = subprocess.run([binary, "transcribe", "--model-path", model, "--device", device,
                          "--response-format", "verbose_json", "--log-level", "warn",
                          "--max-new-tokens", str(MAX_NEW), "--max-running-requests", "32",
                          *flags, *wavs], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"kvserve --device {device} failed ({run.returncode}): {run.stderr[-2000:]}")
    out = {}
    for line in run.stdout.splitlines():
        j = json.loads(line)
        out[j["file"]] = (j["tokens"], j["text"])
    return out, time.time() - t0


def main():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(here, "models", "demo-whisper"))
    ap.add_argument("--espeak", required=True)
    ap.add_argument("--kvserve", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--devices", nargs="+", default=["cpu", "cuda"])
    ap.add_argument("--fixtures", type=int, default=2, help="clips per kind kept as fixtures")
    ap.add_argument("--layouts", action="store_true",
                    help="also run kvserve on cuda for every encoder-KV layout x page size x "
                         "backend and compare the tokens with the default configuration's")
    a = ap.parse_args()
    os.makedirs(os.path.join(a.out, "fixtures"), exist_ok=True)
    items = json.load(open(os.path.join(a.model, "eval.json")))["clips"]
    wav_dir = tempfile.mkdtemp()
    wavs = [os.path.join(wav_dir, f"{i:04d}.wav") for i in range(len(items))]
    with ThreadPoolExecutor(os.cpu_count()) as pool:
        raw = list(pool.map(lambda p: synthesise(a.espeak, p[0], p[1] + ".22k"),
                            zip(items, wavs)))
    audio = []
    for (rate, pcm), path in zip(raw, wavs):
        y = torchaudio.functional.resample(torch.from_numpy(pcm.astype(np.float32) / 32768.0),
                                           rate, 16000).numpy()
        scipy.io.wavfile.write(path, 16000, y.astype(np.float32))
        audio.append(y)
    print(f"{len(items)} clips synthesised and resampled", flush=True)

    fe = WhisperFeatureExtractor.from_pretrained(a.model)
    tok = AutoTokenizer.from_pretrained(a.model)
    model = WhisperForConditionalGeneration.from_pretrained(a.model, dtype=torch.float32).cuda()
    model.eval()
    hf = []
    t0 = time.time()
    for s in range(0, len(audio), 64):
        feats = fe(audio[s:s + 64], sampling_rate=16000, return_tensors="pt").input_features
        with torch.no_grad():
            out = model.generate(input_features=feats.cuda(), max_new_tokens=MAX_NEW)
        hf.extend(out.tolist())  # prompt + text + end token / padding
    hf_seconds = time.time() - t0
    print(f"transformers float32 on cuda: {hf_seconds:.1f} s", flush=True)

    special = set(tok.all_special_ids) | set(tok.added_tokens_decoder)

    def text_ids(ids):
        return [t for t in ids if t not in special]

    report = {"clips": len(items), "transformers_seconds": hf_seconds, "devices": {}}
    per_clip = [{**it, "transformers_tokens": text_ids(hf[i]),
                 "transformers_text": tok.decode(hf[i], skip_special_tokens=True).strip()}
                for i, it in enumerate(items)]
    for device in a.devices:
        got, seconds = kvserve_tokens(a.kvserve, a.model, wavs, device)
        summary = {"seconds": seconds}
        for i, (it, path) in enumerate(zip(items, wavs)):
            tokens, text = got[path]
            pc = per_clip[i]
            pc[f"kvserve_{device}_text"] = text
            k = summary.setdefault(it["kind"], {"clips": 0, "words": 0, "identical_tokens": 0,
                                                "kvserve_errors": 0, "transformers_errors": 0})
            k["clips"] += 1
            k["identical_tokens"] += text_ids(tokens) == pc["transformers_tokens"]
            e, n = word_errors(it["text"], text)
            k["words"] += n
            k["kvserve_errors"] += e
            k["transformers_errors"] += word_errors(it["text"], pc["transformers_text"])[0]
        for kind in ("sentence", "number"):
            k = summary[kind]
            k["kvserve_wer"] = k["kvserve_errors"] / k["words"]
            k["transformers_wer"] = k["transformers_errors"] / k["words"]
            print(f"{device:5s} {kind:9s} clips {k['clips']}: identical tokens "
                  f"{k['identical_tokens']}, WER kvserve {100 * k['kvserve_wer']:.2f} % "
                  f"transformers {100 * k['transformers_wer']:.2f} %", flush=True)
        print(f"{device}: kvserve transcribe {seconds:.1f} s", flush=True)
        report["devices"][device] = summary
    if a.layouts and "cuda" in a.devices:
        base, _ = kvserve_tokens(a.kvserve, a.model, wavs, "cuda")
        report["cuda_configurations"] = {}
        for layout in ("aligned", "ragged"):
            for page in (1, 16, 64, 128):
                for backend in ("", "cuda-ragged"):
                    flags = ["--encoder-kv-layout", layout, "--page-size", str(page)]
                    if backend:
                        flags += ["--attention-backend", backend]
                    got, seconds = kvserve_tokens(a.kvserve, a.model, wavs, "cuda", flags)
                    same = sum(got[p][0] == base[p][0] for p in wavs)
                    name = " ".join(flags)
                    report["cuda_configurations"][name] = {"identical": same, "seconds": seconds}
                    print(f"cuda {name}: {same}/{len(wavs)} token sequences identical to the "
                          f"default configuration's ({seconds:.1f} s)", flush=True)
    # Fixtures: short clips that every runtime transcribes exactly.
    kept = {"sentence": 0, "number": 0}
    fixtures = []
    for i, pc in enumerate(per_clip):
        texts = [pc["transformers_text"]] + [pc[f"kvserve_{d}_text"] for d in a.devices]
        if kept[pc["kind"]] >= a.fixtures or len(audio[i]) > 16000 * 4:
            continue
        if all(normalise(t) == normalise(pc["text"]) for t in texts):
            name = f"demo_{pc['kind']}_{kept[pc['kind']]}.wav"
            subprocess.run(["cp", wavs[i], os.path.join(a.out, "fixtures", name)], check=True)
            fixtures.append({"file": name, **{k: pc[k] for k in (
                "text", "kind", "voice", "speed", "pitch", "transformers_tokens",
                "transformers_text")}})
            kept[pc["kind"]] += 1
    json.dump(fixtures, open(os.path.join(a.out, "fixtures", "expected.json"), "w"), indent=1)
    json.dump({"report": report, "clips": per_clip}, open(os.path.join(a.out, "check.json"), "w"),
              indent=1)


if __name__ == "__main__":
    main()
