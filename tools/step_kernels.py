#!/usr/bin/env python3
"""Where a decode step's time goes, from Nsight Compute's per-kernel CSV (issue 21 item 3).

Run the model under ncu with one row per kernel, e.g.

  ncu --clock-control none --cache-control none --csv --page raw --print-units base \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
      kvserve bench-one-batch --device cuda --model-path M --batch-size 1 --input-len 1024 \
      --output-len 4 --disable-cuda-graph > kernels.csv

then `tools/step_kernels.py kernels.csv`. Every forward starts with the embedding
kernel; forwards with one new token per row (decode steps) are grouped by batch size (the embedding
kernel's grid) and the last one of each batch size is broken down: time per kernel name (summed
over the layers), its share, DRAM bytes and GB/s, and the total against the step time the caller
measured with graphs (the difference is launch gaps and host work).
"""
import argparse
import csv
import collections
import sys


def rows(path):
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    reader = csv.DictReader(lines)
    for r in reader:
        if not r.get("ID", "").isdigit():
            continue  # the units row
        yield r


def num(text):
    return float((text or "0").replace(",", ""))  # ncu writes thousands separators


def short(name):
    for p in ("void ", "kvserve::", "platform::", "cuda::", "(anonymous namespace)::",
              "<unnamed>::"):
        name = name.replace(p, "")
    return name.split("(")[0].split("<")[0][:60]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    forwards = []
    all_rows = list(rows(a.csv))
    for i, r in enumerate(all_rows):
        name = r["Kernel Name"]
        # A forward starts with the embedding lookup, then the first layer's norm; the embedding
        # kernel also gathers the rows that get logits near the end (then the lm_head GEMM).
        nxt = all_rows[i + 1]["Kernel Name"] if i + 1 < len(all_rows) else ""
        if "embedding_kernel" in name and "rms_norm" in nxt:
            forwards.append({"grid": r.get("Grid Size", ""), "kernels": []})
        if not forwards:
            continue
        t = num(r["gpu__time_duration.sum"]) * 1e-3  # ns -> us
        b = num(r.get("dram__bytes_read.sum")) + num(r.get("dram__bytes_write.sum"))
        forwards[-1]["kernels"].append((short(name), t, b))
    print(f"{len(forwards)} forwards")
    last = collections.OrderedDict()
    for i, f in enumerate(forwards):
        total = sum(t for _, t, _ in f["kernels"])
        print(f"forward {i}: grid {f['grid']}, {len(f['kernels'])} kernels, {total / 1e3:.3f} ms")
        last[f["grid"]] = i
    for grid, i in last.items():
        f = forwards[i]
        by = collections.defaultdict(lambda: [0, 0.0, 0.0])
        for n, t, b in f["kernels"]:
            by[n][0] += 1
            by[n][1] += t
            by[n][2] += b
        total = sum(v[1] for v in by.values())
        total_b = sum(v[2] for v in by.values())
        print(f"\n== forward {i} (embedding grid {grid}): {total / 1e3:.3f} ms of kernels, "
              f"{total_b / 1e9:.2f} GB DRAM, {total_b / total / 1e3:.0f} GB/s overall")
        print(f"{'kernel':60s} {'n':>4s} {'us':>9s} {'share':>6s} {'GB':>7s} {'GB/s':>6s}")
        for n, (c, t, b) in sorted(by.items(), key=lambda kv: -kv[1][1])[: a.top]:
            print(f"{n:60s} {c:4d} {t:9.1f} {100 * t / total:5.1f}% {b / 1e9:7.3f} "
                  f"{b / t / 1e3 if t else 0:6.0f}")


if __name__ == "__main__":
    sys.exit(main())
