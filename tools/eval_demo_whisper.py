#!/usr/bin/env python3
"""Word error rate of `kvserve transcribe` on the demo-whisper held-out clips, beside the
transcripts transformers produced on the training machine (models/demo-whisper/eval.json).

Each held-out item is synthesised again here with the same espeak-ng (1.51) and the same voice,
speed and pitch; kvserve decodes the 22,050 Hz WAV, resamples it (libsamplerate) and transcribes.
The training script resampled with torchaudio, so the audio matches up to the resampler: a few
transcripts may differ on that account alone. Standard library only.

  python3 tools/eval_demo_whisper.py --kvserve build/kvserve [--model models/demo-whisper]
      [--limit N] [--out result.json] [-- extra transcribe flags]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wer import normalise, word_errors  # noqa: E402


def synthesise(item, path, espeak):
    subprocess.run([espeak, "-v", item["voice"], "-s", str(item["speed"]), "-p", str(item["pitch"]),
                    "-w", path, "--stdin"], input=item["text"].encode(), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvserve", required=True, help="the kvserve binary")
    ap.add_argument("--model", default=os.path.join(here, "models", "demo-whisper"))
    ap.add_argument("--espeak", default="espeak-ng")
    ap.add_argument("--limit", type=int, default=0, help="first N clips only (0: all)")
    ap.add_argument("--out", help="write per-clip results and the summary as JSON here")
    ap.add_argument("extra", nargs="*", help="more `kvserve transcribe` flags (after --)")
    a = ap.parse_args()

    with open(os.path.join(a.model, "eval.json")) as f:
        items = json.load(f)["clips"]
    if a.limit:
        items = items[:a.limit]
    with tempfile.TemporaryDirectory() as tmp:
        paths = [os.path.join(tmp, f"{i:04d}.wav") for i in range(len(items))]
        for item, path in zip(items, paths):
            synthesise(item, path, a.espeak)
        t0 = time.time()
        cmd = [a.kvserve, "transcribe", "--model-path", a.model, "--response-format", "json",
               "--log-level", "warn", "--max-running-requests", "32", *a.extra, *paths]
        run = subprocess.run(cmd, capture_output=True, text=True)
        seconds = time.time() - t0
        if run.returncode != 0:
            sys.exit(f"kvserve transcribe failed ({run.returncode}):\n{run.stderr[-2000:]}")
        got = {}
        for line in run.stdout.splitlines():
            j = json.loads(line)
            got[j["file"]] = j["text"]

    summary = {}
    rows = []
    for item, path in zip(items, paths):
        text = got[path]
        k = summary.setdefault(item["kind"], {"clips": 0, "words": 0, "kvserve_errors": 0,
                                              "transformers_errors": 0, "kvserve_exact": 0,
                                              "transformers_exact": 0, "same_as_transformers": 0})
        e, n = word_errors(item["text"], text)
        et, _ = word_errors(item["text"], item["transformers"])
        k["clips"] += 1
        k["words"] += n
        k["kvserve_errors"] += e
        k["transformers_errors"] += et
        k["kvserve_exact"] += normalise(item["text"]) == normalise(text)
        k["transformers_exact"] += normalise(item["text"]) == normalise(item["transformers"])
        k["same_as_transformers"] += text == item["transformers"]
        rows.append({**item, "kvserve": text})
    for kind, k in summary.items():
        k["kvserve_wer"] = k["kvserve_errors"] / max(1, k["words"])
        k["transformers_wer"] = k["transformers_errors"] / max(1, k["words"])
        print(f"{kind:9s} clips {k['clips']:4d}  WER kvserve {100 * k['kvserve_wer']:5.1f} % "
              f"(exact {k['kvserve_exact']})  transformers {100 * k['transformers_wer']:5.1f} % "
              f"(exact {k['transformers_exact']})  identical transcripts "
              f"{k['same_as_transformers']}/{k['clips']}")
    print(f"transcribe time {seconds:.1f} s for {len(items)} clips ({' '.join(a.extra) or 'cpu'})")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"summary": summary, "seconds": seconds, "clips": rows}, f, indent=1)


if __name__ == "__main__":
    main()
