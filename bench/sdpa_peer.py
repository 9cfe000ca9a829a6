#!/usr/bin/env python3
"""Peers for the prefill kernels: torch SDPA (flash and cuDNN backends), causal, bf16, one sequence
of S tokens, 32 query / 8 KV heads (K/V expanded to 32 heads outside the timed call), timed with
CUDA events (median of 20 after 3 warm-ups). FLOPs as kvserve bench-attention counts them:
4 x head_dim x heads x sum of visible positions (S (S + 1) / 2 causal). One JSON line each.

  python3 bench/sdpa_peer.py [--seq-lens 4096,8192] [--head-dims 64,128,256]
"""
import argparse
import json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def median_ms(fn, iters=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq-lens", default="4096,8192")
    ap.add_argument("--head-dims", default="64,128,256")
    ap.add_argument("--q-heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    a = ap.parse_args()
    group = a.q_heads // a.kv_heads
    for s in map(int, a.seq_lens.split(",")):
        for d in map(int, a.head_dims.split(",")):
            q = torch.randn(1, a.q_heads, s, d, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(1, a.kv_heads, s, d, device="cuda", dtype=torch.bfloat16)
            v = torch.randn(1, a.kv_heads, s, d, device="cuda", dtype=torch.bfloat16)
            kr = k.repeat_interleave(group, dim=1)
            vr = v.repeat_interleave(group, dim=1)
            flops = 4.0 * d * a.q_heads * s * (s + 1) / 2
            for name, backend in (("flash", SDPBackend.FLASH_ATTENTION),
                                  ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                row = {"peer": "torch-sdpa-" + name, "seq_len": s, "head_dim": d,
                       "num_q_heads": a.q_heads, "num_kv_heads": a.kv_heads, "torch": torch.__version__}
                try:
                    with sdpa_kernel(backend):
                        ms = median_ms(lambda: F.scaled_dot_product_attention(q, kr, vr, is_causal=True))
                    row.update(median_ms=ms, tflops=flops / (ms * 1e-3) / 1e12)
                except Exception as e:  # a backend that does not take the shape
                    row["error"] = str(e).splitlines()[0][:160]
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
