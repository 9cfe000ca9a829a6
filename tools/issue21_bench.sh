#!/usr/bin/env bash
# Every number of issue 21's table in one run on a GPU machine, the previous tree's binaries beside
# the new ones, with the peers (torch SDPA) in the same run:
#
#   tools/issue21_bench.sh OUT_DIR NEW_BIN_DIR [OLD_BIN_DIR]
#
# A bin dir holds kvserve and sampling_bench (tools/device_bundle.sh packs them). Writes one text
# file per measurement under OUT_DIR and OUT_DIR/times.txt (seconds since the start, per step).
#   prefill attention   bench-attention --mode prefill, d64/128/256 x 4k/8k, contiguous K/V (a
#                       fresh prefill), 1- and 16-slot pages (an extend); bench/sdpa_peer.py
#   decode attention    bench-attention --mode decode --kernel tc, 1 and 16 x 4096, pages 1-128:
#                       one launch per timed iteration, and launches queued with PDL over
#                       per-layer K/V (--layers)
#   8B decode step      bench-one-batch on a llama-3.1-8b-shape checkpoint (made at L8B, default
#                       /tmp/l8b, when absent), batch 1 and 64, 1024 in, 256 out
#   device sampling     sampling_bench, the cluster kernel (radix:0) and, at 64 x 128k, the radix
#                       select (radix:1, the issue-start tree's kernel)
#   TTFT                serve + bench-serving at concurrency 1: the 8B shape (random ids) and
#                       models/demo-lm (text-producing weights)
# Environment: L8B, PORT (default 31000), SKIP (space-separated section names to leave out:
# prefill decode step sampling ttft), OLD_SECTIONS (the sections the old tree runs in too;
# default all of them). The previous tree may be the issue-start tree (e87a3a8): it runs the
# commands it has flags for (no --layers, no --contiguous, no sampling_bench: leave sampling out
# of OLD_SECTIONS), and the new tree runs those same commands too.
set -uo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: $0 OUT_DIR NEW_BIN_DIR [OLD_BIN_DIR]" >&2
  exit 2
fi
out=$1
new=$2
old=${3:-}
l8b=${L8B:-/tmp/l8b}
port=${PORT:-31000}
skip=" ${SKIP:-} "
old_sections=" ${OLD_SECTIONS:-prefill decode step sampling ttft} "
mkdir -p "$out"
t0=$(date +%s)
stamp() { echo "$1 $(($(date +%s) - t0)) s" >>"$out/times.txt"; }
want() { [[ $skip != *" $1 "* ]]; }
trees() {  # the tags and bin dirs to run for section $1: new, and old when given
  echo "new $new"
  if [[ -n $old && $old_sections == *" $1 "* ]]; then echo "old $old"; fi
}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv >"$out/gpu.txt"

if want decode; then
  while read -r tag dir; do
    common=(bench-attention --device cuda --mode decode --kernel tc --num-q-heads 32
      --num-kv-heads 8 --head-dim 128 --iters 30 --no-check --seq-len 4096 --page-size 1,16,64,128)
    # One launch per timed iteration: the only form the issue-start tree (e87a3a8) has.
    "$dir/kvserve" "${common[@]}" --batch 1,16 >"$out/decode_single_$tag.txt" 2>&1
    [[ $tag == old ]] && continue
    "$dir/kvserve" "${common[@]}" --batch 1 --layers 8 >"$out/decode_b1_$tag.txt" 2>&1
    "$dir/kvserve" "${common[@]}" --batch 16 --layers 4 >"$out/decode_b16_$tag.txt" 2>&1
  done < <(trees decode)
  stamp decode
fi

if want step || want ttft; then
  [[ -f $l8b/config.json ]] ||
    "$new/kvserve" make-model --preset llama-3.1-8b-shape --output "$l8b" --quiet >"$out/make_model.txt" 2>&1
  stamp make-model
fi

if want step; then
  # The KV pool capped so that 64 x 1024 tokens of prefill activations fit on an 80 GB card.
  while read -r tag dir; do
    "$dir/kvserve" bench-one-batch --device cuda --model-path "$l8b" --page-size 16 \
      --batch-size 1 64 --input-len 1024 --output-len 256 --max-total-tokens 100000 \
      >"$out/step_$tag.txt" 2>"$out/step_$tag.err"
  done < <(trees step)
  stamp step
fi

if want sampling; then
  while read -r tag dir; do
    # radix:1 is the issue-start tree's sampler (the radix select), kept as the fallback.
    "$dir/sampling_bench" --benchmark_filter='radix:0|rows:64/vocab:128256/.*radix:1' \
      >"$out/sampling_$tag.txt" 2>&1
  done < <(trees sampling)
  stamp sampling
fi

if want prefill; then
  while read -r tag dir; do
    for d in 64 128 256; do
      common=(bench-attention --device cuda --mode prefill --num-q-heads 32 --num-kv-heads 8
        --batch 1 --iters 20 --no-check --head-dim "$d" --seq-len 4096,8192)
      "$dir/kvserve" "${common[@]}" --page-size 1 >"$out/prefill_page1_d${d}_$tag.txt" 2>&1
      "$dir/kvserve" "${common[@]}" --page-size 16 >"$out/prefill_page16_d${d}_$tag.txt" 2>&1
      [[ $tag == old ]] && continue  # --contiguous came later
      "$dir/kvserve" "${common[@]}" --page-size 1 --contiguous >"$out/prefill_contig_d${d}_$tag.txt" 2>&1
    done
  done < <(trees prefill)
  python3 bench/sdpa_peer.py --seq-lens 4096,8192 --head-dims 64,128,256 >"$out/prefill_sdpa.txt" 2>&1
  stamp prefill
fi

# serve MODEL on the next port, wait for /health, run bench-serving with the given arguments, stop it.
serve_and_bench() {
  local bin=$1 model=$2 file=$3
  shift 3
  # A fresh port per server: the previous one's socket may still hold its port.
  port=$((port + 1))
  "$bin" serve --model-path "$model" --device cuda --page-size 16 --port "$port" \
    --log-level warn >"$file.serve" 2>&1 &
  local pid=$!
  for _ in $(seq 240); do
    python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=1)" \
      2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  "$bin" bench-serving --port "$port" "$@" >"$file" 2>&1
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
}

if want ttft; then
  while read -r tag dir; do
    serve_and_bench "$dir/kvserve" "$l8b" "$out/ttft_8b_$tag.txt" --dataset-name random-ids \
      --random-input-len 1024 --random-output-len 64 --num-prompts 16 --max-concurrency 1
    # The demo model when the checkout carries it (a device call may leave it behind for room).
    [[ -f models/demo-lm/config.json ]] || continue
    serve_and_bench "$dir/kvserve" models/demo-lm "$out/ttft_demo_$tag.txt" --dataset-name random \
      --random-input-len 512 --random-output-len 64 --random-range-ratio 1 --num-prompts 12 \
      --max-concurrency 1
  done < <(trees ttft)
  stamp ttft
fi
