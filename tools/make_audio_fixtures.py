#!/usr/bin/env python3
"""Audio front-end fixtures: Whisper log-mel features from transformers for kvserve's audio tests.

Two modes:

  python3 tools/make_audio_fixtures.py --out tests/fixtures/audio
      (the GPU machine: Python with numpy and transformers; torch optional; no soundfile/librosa)
      Reads every clip's 16 kHz int16 WAV with the `wave` module, runs transformers'
      WhisperFeatureExtractor numpy path (`_np_extract_fbank_features`) for feature_size 80 and
      128, checks the result against an independent numpy implementation written here, and writes
      features.json + little-endian float32 .bin files into --out (see FORMAT below).

  python3 tools/make_audio_fixtures.py --make-clips --out tests/fixtures/audio
      (any machine with espeak-ng; Python standard library only) Synthesises the clips with
      espeak-ng (22050 Hz) and converts them to 16 kHz int16 with a Kaiser-windowed sinc resampler
      written below. This is how the committed clips were made; rerunning it with another espeak-ng
      version changes them (and then the features must be regenerated).

FORMAT (features mode), all little-endian float32, C order:
  mel{F}_filters.bin         transformers' mel filters, shape [201, F] (num_frequency_bins, F)
  {clip}_mel{F}.bin          head: features[:, :frames_stored], shape [F, frames_stored], then
                             frame_mean: the mean over the F bins of each of the 3000 frames
  features.json              versions, shapes, offsets and whole-array statistics (max, min, mean)
Only the frames that can contain speech (plus a margin) are stored in full; past them the audio is
zero padding and every frame is the same clamp value, which frame_mean and the statistics cover.
"""

import argparse
import inspect
import json
import math
import os
import shutil
import subprocess
import sys
import wave

# name, espeak-ng voice, speed (words per minute), text. Every clip is kept as a 16 kHz int16 WAV
# ({name}_16k.wav); the one with keep_native also as espeak-ng wrote it ({name}_22050.wav), so the
# C++ tests can resample it themselves.
CLIPS = [
    {"name": "hello", "voice": "en", "speed": 170, "text": "Hello, world.", "keep_native": False},
    {"name": "spoons", "voice": "en-us+f3", "speed": 190, "text": "Seven silver spoons.",
     "keep_native": False},
    {"name": "testing", "voice": "en-gb-x-rp+m3", "speed": 170, "text": "Testing one two.",
     "keep_native": True},
]
FEATURE_SIZES = [80, 128]
SAMPLE_RATE = 16000
HOP = 160
N_FFT = 400
N_SAMPLES = 30 * SAMPLE_RATE
NUM_FRAMES = N_SAMPLES // HOP
MARGIN_FRAMES = 8  # frames kept past the end of the audio (the window still overlaps it)


def fail(msg):
    print(f"make_audio_fixtures: error: {msg}", file=sys.stderr)
    sys.exit(1)


def read_wav_int16(path):
    """Mono int16 PCM WAV -> (list of ints, rate), standard library only."""
    with wave.open(path, "rb") as w:
        if w.getnchannels() != 1 or w.getsampwidth() != 2:
            fail(f"{path}: expected mono 16-bit PCM, got {w.getnchannels()} channels, "
                 f"{8 * w.getsampwidth()} bits")
        rate = w.getframerate()
        raw = w.readframes(w.getnframes())
    samples = [int.from_bytes(raw[i:i + 2], "little", signed=True) for i in range(0, len(raw), 2)]
    return samples, rate


def write_wav_int16(path, samples, rate):
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"".join(int(s).to_bytes(2, "little", signed=True) for s in samples))


# --- clips mode: espeak-ng + a standard-library resampler ------------------------------------


def bessel_i0(x):
    total, term, k = 1.0, 1.0, 1
    while term > 1e-12 * total:
        term *= (x / (2.0 * k)) ** 2
        total += term
        k += 1
    return total


def resample_sinc(samples, rate_in, rate_out, half_taps=32, beta=8.0, passband=0.92):
    """Polyphase Kaiser-windowed sinc for a rational ratio; lowpass at passband * min Nyquist."""
    g = math.gcd(rate_in, rate_out)
    up, down = rate_out // g, rate_in // g  # output n sits at input position n * down / up
    cutoff = passband * 0.5 * min(rate_in, rate_out) / rate_in  # cycles per input sample
    phases = []
    for p in range(up):
        frac = p / up
        taps = []
        for j in range(-half_taps + 1, half_taps + 1):
            d = j - frac
            x = 2.0 * cutoff * d
            sinc = 1.0 if x == 0 else math.sin(math.pi * x) / (math.pi * x)
            r = d / half_taps
            win = bessel_i0(beta * math.sqrt(max(0.0, 1.0 - r * r))) / bessel_i0(beta)
            taps.append(2.0 * cutoff * sinc * win)
        s = sum(taps)
        phases.append([t / s for t in taps])  # unit gain at DC
    n_out = len(samples) * up // down
    out = []
    for n in range(n_out):
        base, p = divmod(n * down, up)
        acc = 0.0
        for j, w in zip(range(-half_taps + 1, half_taps + 1), phases[p]):
            k = base + j
            if 0 <= k < len(samples):
                acc += w * samples[k]
        out.append(acc)
    return out


def make_clips(out_dir):
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        fail("--make-clips needs espeak-ng on PATH")
    version = subprocess.run([espeak, "--version"], capture_output=True, text=True).stdout.strip()
    print(f"make_audio_fixtures: {version}")
    os.makedirs(out_dir, exist_ok=True)
    for clip in CLIPS:
        native = os.path.join(out_dir, f"{clip['name']}_22050.wav")
        subprocess.run([espeak, "-v", clip["voice"], "-s", str(clip["speed"]), "-w", native,
                        clip["text"]], check=True)
        samples, rate = read_wav_int16(native)
        if rate != 22050:
            fail(f"{native}: espeak-ng wrote {rate} Hz, expected 22050")
        floats = [s / 32768.0 for s in samples]
        resampled = resample_sinc(floats, rate, SAMPLE_RATE)
        ints = [max(-32768, min(32767, round(v * 32768.0))) for v in resampled]
        write_wav_int16(os.path.join(out_dir, f"{clip['name']}_16k.wav"), ints, SAMPLE_RATE)
        if not clip["keep_native"]:
            os.remove(native)
        print(f"make_audio_fixtures: {clip['name']}: {len(samples)} samples at 22050 Hz -> "
              f"{len(ints)} at 16 kHz ({len(ints) / SAMPLE_RATE:.2f} s)")


# --- features mode: transformers -----------------------------------------------------------


def reference_log_mel(np, audio, filters):
    """Independent float64 numpy version of the same pipeline, for the self-check."""
    x = np.zeros(N_SAMPLES, dtype=np.float64)
    x[:min(len(audio), N_SAMPLES)] = audio[:N_SAMPLES]
    x = np.pad(x, N_FFT // 2, mode="reflect")
    window = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(N_FFT) / N_FFT)
    n_frames = 1 + (len(x) - N_FFT) // HOP
    idx = np.arange(N_FFT)[None, :] + HOP * np.arange(n_frames)[:, None]
    power = np.abs(np.fft.rfft(x[idx] * window, axis=1)) ** 2  # [frames, 201]
    mel = np.log10(np.maximum(power @ filters, 1e-10)).T[:, :-1]  # filters: [201, F]
    mel = np.maximum(mel, mel.max() - 8.0)
    return (mel + 4.0) / 4.0


def np_path_features(np, extractor, wave_f32):
    """transformers' numpy path; its signature changed over versions (batch + device now)."""
    fn = extractor._np_extract_fbank_features
    params = inspect.signature(fn).parameters
    if "device" in params or len(params) >= 2:
        return np.asarray(fn(wave_f32[None, :], "cpu"))[0]
    return np.asarray(fn(wave_f32))


def make_features(out_dir, clips_dir):
    try:
        import numpy as np
        import transformers
        from transformers import WhisperFeatureExtractor
    except ImportError as e:
        fail(f"features mode needs numpy and transformers: {e}")
    try:
        import torch
        torch_version = torch.__version__
    except ImportError:
        torch_version = None

    os.makedirs(out_dir, exist_ok=True)
    doc = {
        "generator": "tools/make_audio_fixtures.py",
        "transformers_version": transformers.__version__,
        "numpy_version": np.__version__,
        "torch_version": torch_version,
        "sampling_rate": SAMPLE_RATE,
        "num_frames": NUM_FRAMES,
        "dtype": "float32 little-endian",
        "mel_filters": [],
        "clips": [],
    }
    extractors = {}
    for f in FEATURE_SIZES:
        fe = WhisperFeatureExtractor(feature_size=f)
        if (fe.n_samples, fe.hop_length, fe.n_fft, fe.sampling_rate) != (N_SAMPLES, HOP, N_FFT,
                                                                        SAMPLE_RATE):
            fail(f"unexpected WhisperFeatureExtractor defaults: {fe.to_dict()}")
        filters = np.asarray(fe.mel_filters)
        if filters.shape != (N_FFT // 2 + 1, f):
            fail(f"mel_filters shape {filters.shape}, expected {(N_FFT // 2 + 1, f)}")
        name = f"mel{f}_filters.bin"
        filters.astype("<f4").tofile(os.path.join(out_dir, name))
        doc["mel_filters"].append({"feature_size": f, "file": name, "shape": list(filters.shape),
                                   "source_dtype": str(filters.dtype)})
        extractors[f] = fe

    for clip in CLIPS:
        wav = f"{clip['name']}_16k.wav"
        ints, rate = read_wav_int16(os.path.join(clips_dir, wav))
        if rate != SAMPLE_RATE:
            fail(f"{wav}: {rate} Hz, expected {SAMPLE_RATE}")
        audio = np.asarray(ints, dtype=np.float32) / np.float32(32768.0)
        padded = np.zeros(N_SAMPLES, dtype=np.float32)
        padded[:min(len(audio), N_SAMPLES)] = audio[:N_SAMPLES]
        frames_stored = min(NUM_FRAMES, -(-len(audio) // HOP) + MARGIN_FRAMES)
        entry = {"name": clip["name"], "wav": wav, "num_samples": len(audio),
                 "voice": clip["voice"], "speed": clip["speed"], "text": clip["text"],
                 "features": []}
        for f, fe in extractors.items():
            feats = np_path_features(np, fe, padded)
            if feats.shape != (f, NUM_FRAMES):
                fail(f"{wav}: numpy path gave shape {feats.shape}, expected {(f, NUM_FRAMES)}")
            if feats.dtype != np.float32:
                print(f"make_audio_fixtures: warning: numpy path returned {feats.dtype}; "
                      "stored as float32")
                feats = feats.astype(np.float32)
            if not np.all(np.isfinite(feats)):
                fail(f"{wav}: non-finite features")
            # Self-check 1: the public __call__ (the float32 torch path when torch is installed)
            # agrees loosely; it pads the same way. Recorded, and only a warning: the stored
            # fixture is the numpy path.
            called = fe(audio, sampling_rate=SAMPLE_RATE, return_tensors="np")["input_features"][0]
            call_diff = float(np.max(np.abs(np.asarray(called, dtype=np.float64) - feats)))
            if call_diff > 1e-3:
                print(f"make_audio_fixtures: warning: {wav} F={f}: __call__ differs from the "
                      f"numpy path by {call_diff}")
            # Self-check 2: an independent float64 implementation agrees tightly.
            ref = reference_log_mel(np, audio.astype(np.float64), np.asarray(fe.mel_filters))
            ref_diff = float(np.max(np.abs(ref - feats)))
            if ref_diff > 2e-5:
                fail(f"{wav} F={f}: independent reference differs by {ref_diff}")
            # Past the stored head the audio is padding: every value is the clamp value.
            tail = feats[:, frames_stored:]
            floor_value = float(feats.min())
            if tail.size and float(np.max(np.abs(tail - floor_value))) > 1e-6:
                fail(f"{wav} F={f}: frames past {frames_stored} are not all the clamp value")
            name = f"{clip['name']}_mel{f}.bin"
            head = np.ascontiguousarray(feats[:, :frames_stored])
            frame_mean = feats.astype(np.float64).mean(axis=0).astype(np.float32)
            with open(os.path.join(out_dir, name), "wb") as out:
                out.write(head.astype("<f4").tobytes())
                out.write(frame_mean.astype("<f4").tobytes())
            entry["features"].append({
                "feature_size": f, "file": name, "frames_stored": frames_stored,
                "head_shape": [f, frames_stored], "frame_mean_offset_bytes": head.nbytes,
                "frame_mean_shape": [NUM_FRAMES],
                "max": float(feats.max()), "min": floor_value,
                "mean": float(feats.astype(np.float64).mean()),
                "call_path_max_abs_diff": call_diff, "reference_max_abs_diff": ref_diff,
            })
            print(f"make_audio_fixtures: {wav} F={f}: {frames_stored} frames stored, "
                  f"max {feats.max():.6f}, __call__ diff {call_diff:.2e}, ref diff {ref_diff:.2e}")
        doc["clips"].append(entry)

    with open(os.path.join(out_dir, "features.json"), "w") as out:
        json.dump(doc, out, indent=2)
        out.write("\n")
    total = sum(os.path.getsize(os.path.join(out_dir, n)) for n in os.listdir(out_dir))
    print(f"make_audio_fixtures: wrote {out_dir} ({total / 1024:.0f} KiB in the directory)")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_dir = os.path.normpath(os.path.join(here, "..", "tests", "fixtures", "audio"))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=default_dir, help="output directory")
    parser.add_argument("--clips-dir", default=default_dir,
                        help="where the *_16k.wav clips are (features mode)")
    parser.add_argument("--make-clips", action="store_true",
                        help="synthesise the clips with espeak-ng instead (standard library only)")
    args = parser.parse_args()
    if args.make_clips:
        make_clips(args.out)
    else:
        make_features(args.out, args.clips_dir)


if __name__ == "__main__":
    main()
