#!/usr/bin/env bash
# Prefill/decode disaggregation as a user deploys it: a prefill server, a decode server (UCX
# transfers between the two processes) and `kvserve router`, driven with curl on the demo model;
# a server of its own answers the same requests as the reference. Then the prefill server is
# killed (SIGKILL) while requests are in flight: they must fail within the heartbeat timeout, the
# decode server's memory must come back to idle with no invariant violation, and it must serve on
# behind a new prefill server. Usage: disagg_test.sh KVSERVE_BINARY
set -euo pipefail

kvserve=$1
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  for log in "$work"/*.log; do
    echo "--- $log ---" >&2
    tail -n 40 "$log" >&2 || true
  done
  exit 1
}

for tool in curl jq; do
  command -v "$tool" >/dev/null || fail "$tool is not installed (scripts/install-deps.sh installs it)"
done

common=(--max-total-tokens 4096 --max-running-requests 16 --port 0 --page-size 16)
pd=(--disaggregation-transfer-backend ucx --disaggregation-heartbeat-interval 0.2
  --disaggregation-heartbeat-timeout 2 --disaggregation-transfer-timeout 20)

# start NAME ARGS...: a server in the background, logging to $work/NAME.log.
start() {
  local name=$1
  shift
  "$kvserve" "$@" >"$work/$name.log" 2>&1 &
  pids+=($!)
  eval "${name}_pid=$!"
}
# ready NAME PATTERN: waits for the server's "http://host:PORT" line; sets NAME_url.
ready() {
  local name=$1 port=
  for _ in $(seq 1 600); do
    port=$(sed -n -e 's@.*ready to roll! http://[^:]*:\([0-9]*\).*@\1@p' -e 's@.*router: .* http://[^:]*:\([0-9]*\).*@\1@p' "$work/$name.log" 2>/dev/null | head -1 || true)
    [ -n "$port" ] && break
    kill -0 "$(eval echo "\$${name}_pid")" 2>/dev/null || fail "$name exited during startup"
    sleep 0.1
  done
  [ -n "$port" ] || fail "$name did not start within 60 s"
  eval "${name}_url=http://127.0.0.1:$port"
}

start single serve "${common[@]}"
start prefill serve "${common[@]}" "${pd[@]}" --disaggregation-mode prefill \
  --disaggregation-bootstrap-port 0
start decode serve "${common[@]}" "${pd[@]}" --disaggregation-mode decode
ready single
ready prefill
ready decode
start router router --prefill "$prefill_url" --decode "$decode_url" --port 0 \
  --health-check-interval 0.5
ready router
echo "single $single_url, prefill $prefill_url, decode $decode_url, router $router_url"

# A prefill or decode server's role and layout.
[ "$(curl -sf "$prefill_url/disaggregation/bootstrap" | jq -r .mode)" = prefill ] ||
  fail "the prefill server's bootstrap route"
[ "$(curl -sf "$decode_url/disaggregation/bootstrap" | jq -r .layout.page_size)" = 16 ] ||
  fail "the decode server's bootstrap route"

# The router refuses, at startup, a pair whose KV layouts cannot work together (other page sizes
# work: the writes address slots; other KV dtypes do not).
start odd serve --max-total-tokens 1024 --port 0 --page-size 16 --kv-cache-dtype fp8_e4m3 \
  --disaggregation-mode decode --disaggregation-transfer-backend ucx
ready odd
if "$kvserve" router --prefill "$prefill_url" --decode "$odd_url" --port 0 \
  --startup-timeout 10 >"$work/refused.log" 2>&1; then
  fail "the router accepted KV dtype f32 (prefill) with fp8_e4m3 (decode)"
fi
grep -q 'KV dtype f32 (prefill) vs fp8_e4m3 (decode)' "$work/refused.log" ||
  fail "the router's refusal does not name the KV dtypes: $(cat "$work/refused.log")"
kill -9 "$odd_pid"

# post URL PATH BODY: the response body on stdout (HTTP errors fail).
post() {
  curl -sS -f --max-time 60 -H "Content-Type: application/json" -d "$3" "$1$2"
}

# Greedy and seeded /generate, and /v1/completions, equal a single server's.
prompts=("The old lighthouse keeper looked at the sea and said"
  "Once upon a time, in a village by the river, there lived a baker who"
  "A fortune for today: you will find")
for p in "${prompts[@]}"; do
  for sampling in '{"max_new_tokens": 24, "temperature": 0, "ignore_eos": true}' \
    '{"max_new_tokens": 24, "temperature": 0.8, "seed": 7, "ignore_eos": true}'; do
    body=$(jq -nc --arg t "$p" --argjson s "$sampling" '{text: $t, sampling_params: $s}')
    want=$(post "$single_url" /generate "$body" | jq -c .output_ids)
    got=$(post "$router_url" /generate "$body" | jq -c .output_ids)
    [ "$want" = "$got" ] || fail "/generate '$p' $sampling: router $got, single server $want"
  done
  body=$(jq -nc --arg t "$p" '{prompt: $t, max_tokens: 16, temperature: 0}')
  want=$(post "$single_url" /v1/completions "$body" | jq -r '.choices[0].text')
  got=$(post "$router_url" /v1/completions "$body" | jq -r '.choices[0].text')
  [ "$want" = "$got" ] || fail "/v1/completions '$p': router '$got', single server '$want'"
  # Streamed through the router: the deltas add up to the same text.
  body=$(jq -nc --arg t "$p" '{prompt: $t, max_tokens: 16, temperature: 0, stream: true}')
  streamed=$(curl -sS -N --max-time 60 -H "Content-Type: application/json" -d "$body" \
    "$router_url/v1/completions" | sed -n 's/^data: //p' | grep -v '^\[DONE\]' |
    jq -rj '.choices[0].text')
  [ "$want" = "$streamed" ] || fail "streamed /v1/completions '$p': '$streamed' vs '$want'"
done
echo "outputs equal a single server's"
[ "$(curl -sf "$prefill_url/get_server_info" | jq .disaggregation.transfer_bytes)" -gt 0 ] ||
  fail "no transfer bytes counted"
curl -sf "$prefill_url/metrics" | grep -q '^kvserve:disagg_transfer_bytes_total' ||
  fail "/metrics lacks the transfer counters"

# Through staging buffers over UCX (both servers with --disaggregation-staging-buffer-mb; the
# prefill's holds 8 tokens of f32 KV, so each prompt goes in several pieces): outputs equal the
# single server's; a staged prefill with the plain decode server is refused by the router, naming
# the flag.
start sprefill serve "${common[@]}" "${pd[@]}" --disaggregation-mode prefill \
  --disaggregation-bootstrap-port 0 --disaggregation-staging-buffer-mb 0.047
start sdecode serve "${common[@]}" "${pd[@]}" --disaggregation-mode decode \
  --disaggregation-staging-buffer-mb 4
ready sprefill
ready sdecode
if "$kvserve" router --prefill "$sprefill_url" --decode "$decode_url" --port 0 \
  --startup-timeout 10 >"$work/refused-staging.log" 2>&1; then
  fail "the router accepted a staged prefill server with a decode server without staging"
fi
grep -q -- '--disaggregation-staging-buffer-mb' "$work/refused-staging.log" ||
  fail "the router's refusal does not name the staging flag: $(cat "$work/refused-staging.log")"
start srouter router --prefill "$sprefill_url" --decode "$sdecode_url" --port 0
ready srouter
for p in "${prompts[@]}"; do
  body=$(jq -nc --arg t "$p" '{text: $t, sampling_params: {max_new_tokens: 16, temperature: 0}}')
  want=$(post "$single_url" /generate "$body" | jq -c .output_ids)
  got=$(post "$srouter_url" /generate "$body" | jq -c .output_ids)
  [ "$want" = "$got" ] || fail "staged /generate '$p': router $got, single server $want"
done
info=$(curl -sf "$sprefill_url/get_server_info")
[ "$(jq .disaggregation.staged_chunks <<<"$info")" -gt 3 ] || fail "no staged pieces: $info"
[ "$(curl -sf "$sdecode_url/get_server_info" | jq .disaggregation.staging_used_tokens)" = 0 ] ||
  fail "the decode server still holds staging extents"
echo "staged outputs equal a single server's"
kill -9 "$srouter_pid" "$sprefill_pid" "$sdecode_pid"

# Kill the prefill server while requests are in flight (its transfers held back 3 s each).
kill -9 "$prefill_pid"
wait "$prefill_pid" 2>/dev/null || true
start prefill serve "${common[@]}" "${pd[@]}" --disaggregation-mode prefill \
  --disaggregation-bootstrap-port 0 --disaggregation-test-delay-ms 3000
ready prefill
kill -9 "$router_pid"
start router router --prefill "$prefill_url" --decode "$decode_url" --port 0 \
  --health-check-interval 0.5
ready router
body=$(jq -nc '{text: "Q: What is the best way to learn to cook?\nA:",
  sampling_params: {max_new_tokens: 16, temperature: 0}}')
for i in 1 2 3; do
  (curl -sS --max-time 30 -H "Content-Type: application/json" -d "$body" \
    -w '\n%{http_code} %{time_total}\n' "$router_url/generate" >"$work/inflight$i.out" 2>&1 || true) &
done
for _ in $(seq 1 100); do
  [ "$(curl -sf "$prefill_url/get_server_info" | jq .disaggregation.transferring)" -ge 1 ] && break
  sleep 0.05
done
kill -9 "$prefill_pid"
wait "$prefill_pid" 2>/dev/null || true
wait_start=$(date +%s)
while jobs -r | grep -q curl; do
  [ $(($(date +%s) - wait_start)) -lt 20 ] || fail "requests still hanging 20 s after the kill"
  sleep 0.1
done
for i in 1 2 3; do
  code=$(tail -n 1 "$work/inflight$i.out" | cut -d' ' -f1)
  secs=$(tail -n 1 "$work/inflight$i.out" | cut -d' ' -f2)
  [ "$code" != 200 ] || fail "request $i succeeded although its prefill server died: $(cat "$work/inflight$i.out")"
  awk -v s="$secs" 'BEGIN { exit !(s < 10) }' || fail "request $i took $secs s to fail"
done
echo "in-flight requests failed after the kill"
for _ in $(seq 1 100); do
  info=$(curl -sf "$decode_url/get_server_info")
  [ "$(jq .used_tokens <<<"$info")" = 0 ] && [ "$(jq .disaggregation.draining <<<"$info")" = 0 ] &&
    [ "$(jq .num_running_reqs <<<"$info")" = 0 ] && break
  sleep 0.1
done
[ "$(jq .used_tokens <<<"$info")" = 0 ] || fail "decode memory not idle: $info"
[ "$(jq .invariant_violations <<<"$info")" = 0 ] || fail "invariant violations: $info"

# The decode server serves on behind a new prefill server.
start prefill serve "${common[@]}" "${pd[@]}" --disaggregation-mode prefill \
  --disaggregation-bootstrap-port 0
ready prefill
kill -9 "$router_pid"
start router router --prefill "$prefill_url" --decode "$decode_url" --port 0
ready router
body=$(jq -nc --arg t "${prompts[0]}" '{text: $t, sampling_params: {max_new_tokens: 12, temperature: 0}}')
want=$(post "$single_url" /generate "$body" | jq -c .output_ids)
got=$(post "$router_url" /generate "$body" | jq -c .output_ids)
[ "$want" = "$got" ] || fail "after the kill: router $got, single server $want"
echo "PASS"
