#!/usr/bin/env bash
# Measures kvserve serve's own overhead (scheduling, HTTP, tokenize/detokenize) against the model's
# step time while bench-serving drives it, as the serving issue asks:
#   overhead = (engine-thread CPU outside forward and sampling + CPU of every other server thread)
#              / (forward + sampling time of the engine thread)
# The engine thread and the BLAS/OpenMP workers it starts are named kvserve-engine; every other
# server thread (HTTP workers, accept loop) is server overhead.
# Usage: tools/server_overhead.sh KVSERVE MODEL_DIR [bench-serving flags...]
set -euo pipefail
kvserve=$1
model=$2
shift 2
port=${PORT:-30123}
log=$(mktemp)
"$kvserve" serve --model-path "$model" --port "$port" ${SERVE_FLAGS:-} >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 1 300); do
  grep -q "ready to roll" "$log" && break
  sleep 0.1
done
base=http://127.0.0.1:$port

# CPU seconds of the server's threads: "engine" (kvserve-engine) and "other".
thread_cpu() {
  local hz
  hz=$(getconf CLK_TCK)
  for t in /proc/$pid/task/*; do
    # comm may contain spaces: take the fields after the closing parenthesis.
    local stat comm rest
    stat=$(cat "$t/stat" 2>/dev/null) || continue
    comm=${stat#*(}
    comm=${comm%%)*}
    rest=${stat##*) }
    set -- $rest
    echo "$comm ${12} ${13}"
  done | awk -v hz="$hz" '{ if ($1 == "kvserve-engine") e += $2 + $3; else o += $2 + $3 }
                         END { printf "%.3f %.3f\n", e / hz, o / hz }'
}

# Warm up (first-touch of the pools, thread pools), then measure one bench run.
"$kvserve" bench-serving --backend sglang --base-url "$base" --dataset-name random --num-prompts 8 \
  --random-input-len 64 --random-output-len 16 >/dev/null 2>&1
read -r e0 o0 < <(thread_cpu)
t0=$(curl -s "$base/get_server_info" | jq -c .engine_time)
"$kvserve" bench-serving --base-url "$base" "$@"
read -r e1 o1 < <(thread_cpu)
t1=$(curl -s "$base/get_server_info" | jq -c .engine_time)

jq -n --argjson a "$t0" --argjson b "$t1" --arg e "$(awk -v a="$e0" -v b="$e1" 'BEGIN { print b - a }')" \
  --arg o "$(awk -v a="$o0" -v b="$o1" 'BEGIN { print b - a }')" '
  def d(k): $b[k] - $a[k];
  (d("forward_seconds") + d("sample_seconds")) as $model |
  (d("step_cpu_seconds") - d("forward_cpu_seconds") - d("sample_seconds")) as $sched |
  ($o | tonumber) as $http |
  {
    decode_steps: d("decode_steps"), prefill_batches: d("prefill_batches"),
    engine_step_wall_s: d("step_seconds"), model_forward_wall_s: d("forward_seconds"),
    sampling_wall_s: d("sample_seconds"), model_step_wall_s: $model,
    scheduler_cpu_s: $sched, http_and_tokenizer_cpu_s: $http,
    engine_threads_cpu_s: ($e | tonumber),
    decode_ms_per_step: (1000 * d("decode_step_seconds") / d("decode_steps")),
    decode_model_ms_per_step: (1000 * (d("decode_forward_seconds") + d("decode_sample_seconds")) / d("decode_steps")),
    scheduler_overhead_pct: (100 * $sched / $model),
    http_tokenizer_overhead_pct: (100 * $http / $model),
    server_overhead_pct: (100 * ($sched + $http) / $model)
  }'
