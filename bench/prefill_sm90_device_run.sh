#!/usr/bin/env bash
# One device call for the sm_90a prefill kernel (docs/perf/2026-12-03-prefill-sm90.md): unpack the
# harness bundle (prefill_attention_check + prefill_attention_bench from a 90a-real build, packed
# by tools/device_bundle.sh with a stub libopenblas; expected at ../h/bundle.tar.xz beside this
# script's folder, sdpa_peer.py beside the script), run the sm90 correctness cases, time the
# mma.sync kernel against sm90 / sm90pp, then the torch SDPA peers. Everything goes to $OUT.
set -u
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p /tmp/b && tar xJf "$here"/../h/bundle.tar.xz -C /tmp/b || exit 1
export LD_LIBRARY_PATH=/tmp/b/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
B=/tmp/b/bin/prefill_attention_bench
C=/tmp/b/bin/prefill_attention_check
FILTER=${FILTER:-'*sm90*:*contig*:*CudaPagedBackendPrefill*'}
# 1. Smoke: one small sm90 launch with the check (a hang shows here first).
timeout 30 $B bench-attention --mode prefill --batch 1 --seq-len 300 --prefix-len 1000 --page-size 16 \
  --num-q-heads 8 --num-kv-heads 2 --head-dim 128 --variant sm90,mma --iters 3 2>&1 | tee $OUT/smoke.txt
# 2. The suite's sm90 / contiguous / backend cases.
timeout ${SUITE_S:-90} $C --gtest_filter="$FILTER" --gtest_brief=1 > $OUT/suite.txt 2>&1
echo "suite rc $?" | tee -a $OUT/suite.txt; grep -E "FAILED|Failure|PASSED|rc " $OUT/suite.txt | head -40
grep -B2 -A6 "Failure" $OUT/suite.txt | head -60
# 3. Timing: 32q/8kv causal, 1 x 4k and 1 x 8k, d128 page 16 (+ page 1/64, contiguous), d64, d256.
run() { timeout 60 $B bench-attention --mode prefill --num-q-heads 32 --num-kv-heads 8 --iters 20 "$@" 2>&1 | tee -a $OUT/bench.txt; }
run --batch 1 --seq-len 4096,8192 --page-size 16 --head-dim 128 --variant sm90,sm90pp,mma
run --batch 1 --seq-len 8192 --page-size 1,64 --head-dim 128 --variant sm90 --no-check
run --batch 1 --seq-len 8192 --page-size 1 --contiguous --head-dim 128 --variant sm90 --no-check
run --batch 1 --seq-len 4096,8192 --page-size 16 --head-dim 64 --variant sm90,mma --no-check
run --batch 1 --seq-len 4096,8192 --page-size 16 --head-dim 256 --variant sm90,mma --no-check
run --batch 8 --seq-len 1024 --prefix-len 1024 --page-size 16 --head-dim 128 --variant sm90,mma
# 4. Peers.
PYTHONUNBUFFERED=1 timeout 60 python3 "$here"/sdpa_peer.py 2>&1 | tee $OUT/peers.txt
