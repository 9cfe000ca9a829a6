#!/usr/bin/env bash
# Prefill/decode disaggregation against a co-located server on one GPU machine (issue 18's GPU
# measurements): the same checkpoint served (a) by one server and (b) by a prefill server, a
# decode server (cuda-ipc) and `kvserve router`, each measured the same way:
#   1. greedy outputs of PROMPTS random-id prompts at concurrency 1 (/generate with input_ids):
#      the pair's output ids must equal the single server's;
#   2. TTFT at concurrency 1 for TTFT_LEN-token prompts (bench-serving's first token chunk: random
#      weights' text is held back, so TTFT proper waits for text);
#   3. decode inter-token latency under a Poisson stream of LONG_LEN-token prompts (bench-serving's
#      token-chunk ITL: median, p99, max).
# Then the prefill server's transfer counters (/get_server_info) and a device-to-device copy rate
# (torch, same call) for the transfer GB/s ratio. Results: $OUT_DIR/*.json and the logs; a summary
# on stdout.
#
#   tools/disagg_bench.sh KVSERVE MODEL_DIR OUT_DIR
#
# Environment: PAGE (16), MEM (0.4: --gpu-memory-utilization of each server), PROMPTS (16),
# TTFT_LEN (2048), LONG_LEN (4096), RATE (4 requests/s), LONG_N (40), OUTPUT_LEN (256); DEVICE=cpu
# BACKEND=ucx EXTRA="--max-total-tokens 8192" runs the same on the CPU (a smoke test of the script);
# PD_EXTRA: flags for the prefill and decode servers only (e.g. --disaggregation-staging-buffer-mb
# 512); SINGLE_FROM=DIR: take the single server's results from an earlier run's OUT_DIR instead of
# measuring them again (a second backend on the same loan).
set -euo pipefail
if [[ $# -ne 3 ]]; then
  echo "usage: $0 KVSERVE MODEL_DIR OUT_DIR" >&2
  exit 2
fi
kvserve=$1
model=$2
out=$3
mkdir -p "$out"
page=${PAGE:-16}
mem=${MEM:-0.4}
prompts=${PROMPTS:-16}
ttft_len=${TTFT_LEN:-2048}
long_len=${LONG_LEN:-4096}
rate=${RATE:-4}
long_n=${LONG_N:-40}
output_len=${OUTPUT_LEN:-256}
device=${DEVICE:-cuda}
backend=${BACKEND:-cuda-ipc}
read -r -a extra <<<"${EXTRA:-}"
read -r -a pd_extra <<<"${PD_EXTRA:-}"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

start() {  # name port args...
  local name=$1 port=$2
  shift 2
  "$kvserve" "$@" --port "$port" >"$out/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 600); do
    if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then return 0; fi
    if ! kill -0 "${pids[-1]}" 2>/dev/null; then
      echo "$name exited at startup:" >&2
      tail -20 "$out/$name.log" >&2
      return 1
    fi
    sleep 0.5
  done
  echo "$name did not answer /health within 300 s" >&2
  return 1
}

stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}

greedy() {  # url file
  python3 - "$1" "$2" "$prompts" "$model/config.json" <<'EOF'
import json, random, sys, urllib.request
url, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
config = json.load(open(sys.argv[4]))
vocab = min(config["vocab_size"], 30000)
longest = min(2048, config.get("max_position_embeddings", 2048) - 64)
rng = random.Random(7)
outs = []
for i in range(n):
    ids = [rng.randrange(100, vocab) for _ in range(rng.randrange(16, longest))]
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 32, "temperature": 0,
                                                  "ignore_eos": True}}
    req = urllib.request.Request(url + "/generate", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        outs.append(json.load(r)["output_ids"])
json.dump(outs, open(path, "w"))
EOF
}

info() {  # the pair's /get_server_info into $out/{prefill,decode}-info-$1.json (disagg only)
  [[ $tag == disagg ]] || return 0
  curl -sf http://127.0.0.1:31001/get_server_info >"$out/prefill-info-$1.json"
  curl -sf http://127.0.0.1:31002/get_server_info >"$out/decode-info-$1.json"
}

measure() {  # tag url
  tag=$1
  local url=$2
  greedy "$url" "$out/$tag-greedy.json"
  info before-ttft
  "$kvserve" bench-serving --base-url "$url" --tokenizer "$model" --dataset-name random-ids \
    --random-input-len "$ttft_len" --random-range-ratio 1 --random-output-len 8 \
    --num-prompts 20 --max-concurrency 1 --output-file "$out/$tag-ttft.json" \
    >"$out/$tag-ttft.txt" 2>>"$out/$tag-bench.log"
  info after-ttft
  "$kvserve" bench-serving --base-url "$url" --tokenizer "$model" --dataset-name random-ids \
    --random-input-len "$long_len" --random-range-ratio 1 --random-output-len "$output_len" \
    --num-prompts "$long_n" --request-rate "$rate" --output-file "$out/$tag-itl.json" \
    >"$out/$tag-itl.txt" 2>>"$out/$tag-bench.log"
}

common=(--model-path "$model" --device "$device" --page-size "$page" "${extra[@]}")
[[ $device == cpu ]] || common+=(--gpu-memory-utilization "$mem")
pd=(--disaggregation-transfer-backend "$backend" "${pd_extra[@]}")

if [[ -n ${SINGLE_FROM:-} ]]; then
  cp "$SINGLE_FROM"/single-greedy.json "$SINGLE_FROM"/single-ttft.json \
    "$SINGLE_FROM"/single-itl.json "$out/"
else
  start single 31000 serve "${common[@]}"
  measure single http://127.0.0.1:31000
  stop_all
fi

start prefill 31001 serve "${common[@]}" "${pd[@]}" --disaggregation-mode prefill \
  --disaggregation-bootstrap-port 31011
start decode 31002 serve "${common[@]}" "${pd[@]}" --disaggregation-mode decode
start router 31003 router --prefill http://127.0.0.1:31001 --decode http://127.0.0.1:31002
measure disagg http://127.0.0.1:31003
curl -sf http://127.0.0.1:31001/get_server_info >"$out/prefill-info.json"
curl -sf http://127.0.0.1:31002/get_server_info >"$out/decode-info.json"
stop_all

[[ $device == cpu ]] && echo "no GPU" >"$out/d2d.txt" || python3 - >"$out/d2d.txt" <<'EOF'
import torch
x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
torch.cuda.synchronize(); s.record()
for _ in range(20): y.copy_(x)
e.record(); torch.cuda.synchronize()
print(f"{(1 << 30) * 20 / (s.elapsed_time(e) / 1e3) / 1e9:.1f}")
EOF

python3 - "$out" <<'EOF'
import json, sys
out = sys.argv[1]
a = json.load(open(f"{out}/single-greedy.json"))
b = json.load(open(f"{out}/disagg-greedy.json"))
same = sum(x == y for x, y in zip(a, b))
print(f"greedy outputs equal: {same}/{len(a)}")
for tag in ("single", "disagg"):
    t = json.loads(open(f"{out}/{tag}-ttft.json").read().splitlines()[-1])
    i = json.loads(open(f"{out}/{tag}-itl.json").read().splitlines()[-1])
    print(f"{tag}: first token chunk median {t['median_first_token_chunk_ms']:.2f} ms "
          f"(TTFT median {t['median_ttft_ms']:.2f}); under the stream: token-chunk ITL median "
          f"{i['median_token_chunk_itl_ms']:.2f} p99 {i['p99_token_chunk_itl_ms']:.2f} max "
          f"{i['max_token_chunk_itl_ms']:.2f} ms, output {i['output_throughput']:.0f} tok/s, "
          f"TTFT median {i['median_first_token_chunk_ms']:.1f} ms")
info = json.load(open(f"{out}/prefill-info.json"))
d = info.get("disaggregation", info.get("disagg", {}))
print("prefill transfers:", json.dumps(d))
# The hand-off's stages over the TTFT run alone (concurrency 1): the counters' differences.
for side, keys in (("prefill", ("bootstrap", "forward", "last_transfer")),
                   ("decode", ("bootstrap", "wait"))):
    a = json.load(open(f"{out}/{side}-info-before-ttft.json"))["disaggregation"]
    b = json.load(open(f"{out}/{side}-info-after-ttft.json"))["disaggregation"]
    n = b["succeeded"] - a["succeeded"]
    stages = {k: (b[k + "_mean_s"] * b["succeeded"] - a[k + "_mean_s"] * a["succeeded"]) / n * 1e3
              for k in keys + ("handoff",)}
    print(f"{side} stages at concurrency 1 ({n} hand-offs), ms: " +
          ", ".join(f"{k} {v:.2f}" for k, v in stages.items()))
print("device-to-device copy GB/s:", open(f"{out}/d2d.txt").read().strip())
EOF
