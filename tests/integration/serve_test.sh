#!/usr/bin/env bash
# kvserve serve as a user runs it: the real binary on a tiny checkpoint, driven by curl and by the
# official OpenAI Node SDK (tests/integration/openai_node), then stopped with SIGTERM while a
# stream is in flight. Usage: serve_test.sh KVSERVE_BINARY [SERVE FLAGS...]: with flags (e.g.
# --tp-size 2) every LLM server of the test runs with them; with --tp-size, a killed worker must
# fail its request and stop the server instead of the Whisper part (not sharded: refused).
set -euo pipefail

kvserve=$1
shift
extra=("$@")
tp=0
for a in "${extra[@]}"; do [ "$a" = --tp-size ] && tp=1; done
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
server_pid=
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then kill -9 "$server_pid"; fi
  rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  echo "--- server log ---" >&2
  cat "$work/server.log" >&2 || true
  exit 1
}

for tool in curl jq node; do
  command -v "$tool" >/dev/null || fail "$tool is not installed (scripts/install-deps.sh installs it)"
done
[ -d "$here/openai_node/node_modules/openai" ] ||
  fail "the OpenAI SDK is not installed: run 'npm ci' in $here/openai_node (scripts/test.sh does)"

"$kvserve" make-model --preset tiny --output "$work/tiny" --seed 5 >/dev/null
key=sk-kvserve-test
"$kvserve" serve --model-path "$work/tiny" --port 0 --api-key "$key" --max-total-tokens 8192 \
  --page-size 16 "${extra[@]}" >"$work/server.log" 2>&1 &
server_pid=$!

# Waits for the "ready to roll" line of $work/server.log; sets $base.
wait_ready() {
  local port=
  for _ in $(seq 1 600); do
    # The log may not exist yet: the background job opens it when it gets to run.
    port=$(sed -n 's|.*ready to roll! http://[^:]*:\([0-9]*\).*|\1|p' "$work/server.log" 2>/dev/null || true)
    [ -n "$port" ] && break
    kill -0 "$server_pid" 2>/dev/null || fail "the server exited during startup"
    sleep 0.1
  done
  [ -n "$port" ] || fail "the server did not start within 60 s"
  base=http://127.0.0.1:$port
}
wait_ready
auth=(-H "Authorization: Bearer $key")
echo "server on $base (pid $server_pid)"

# The startup log says what SGLang's says: KV cache size and dtype, request limits.
grep -q "max_total_num_tokens=8192" "$work/server.log" || fail "startup log lacks max_total_num_tokens"
grep -q "KV cache" "$work/server.log" || fail "startup log lacks the KV cache line"

# --- curl ---------------------------------------------------------------------------------------
# status CODE METHOD PATH [curl args...]: the HTTP status must be CODE; the body is in $work/body.
status() {
  local want=$1 method=$2 path=$3
  shift 3
  local got
  got=$(curl -sS -o "$work/body" -w '%{http_code}' -X "$method" "$@" "$base$path")
  [ "$got" = "$want" ] || fail "$method $path: HTTP $got, expected $want: $(cat "$work/body")"
}

status 200 GET /health
status 401 GET /v1/models
jq -e '.error.code == "invalid_api_key" and .error.type == "invalid_request_error" and (.error.message | length > 0)' "$work/body" >/dev/null ||
  fail "401 body is not an OpenAI error: $(cat "$work/body")"
status 200 GET /v1/models "${auth[@]}"
jq -e '.data[0].id == "tiny"' "$work/body" >/dev/null || fail "/v1/models: $(cat "$work/body")"

gen='{"text": "Hello world", "sampling_params": {"max_new_tokens": 10, "temperature": 0, "ignore_eos": true}}'
status 200 POST /generate "${auth[@]}" -H 'Content-Type: application/json' -d "$gen"
jq -e '.meta_info.completion_tokens == 10 and .meta_info.finish_reason.type == "length"' \
  "$work/body" >/dev/null || fail "/generate: $(cat "$work/body")"
text=$(jq -r .text "$work/body")

# Streaming /generate: SSE events whose last text equals the non-streaming text. Tokens that
# queue up while the handler writes are sent as one event (as vLLM's output collector does), so
# a 10-token stream on this fast model may arrive as a single event: count events only on a long
# stream below, and here check that token counts never go back and end at 10.
streamed=$(curl -sS -N "${auth[@]}" -H 'Content-Type: application/json' \
  -d "$(jq -c '. + {stream: true}' <<<"$gen")" "$base/generate")
[ "$(grep -c '^data: {' <<<"$streamed")" -ge 1 ] || fail "streaming /generate: $streamed"
grep '^data: {' <<<"$streamed" | sed 's/^data: //' | jq -s -e \
  '[.[].meta_info.completion_tokens] as $c | ($c | last) == 10 and $c == ($c | sort)' >/dev/null ||
  fail "streamed completion_tokens do not grow to 10: $streamed"
[ "$(grep '^data: ' <<<"$streamed" | tail -1)" = "data: [DONE]" ] || fail "no [DONE]: $streamed"
last_text=$(grep '^data: {' <<<"$streamed" | tail -1 | sed 's/^data: //' | jq -r .text)
[ "$last_text" = "$text" ] || fail "streamed text '$last_text' != '$text'"
# A long stream arrives in many events (the engine takes far longer than one write per token).
long=$(curl -sS -N "${auth[@]}" -H 'Content-Type: application/json' \
  -d '{"text": "Hello", "stream": true, "sampling_params": {"max_new_tokens": 400, "temperature": 0, "ignore_eos": true}}' \
  "$base/generate")
events=$(grep -c '^data: {' <<<"$long")
[ "$events" -ge 3 ] || fail "a 400-token stream came in $events events"
echo "a 400-token stream came in $events events"

completion='{"model": "tiny", "prompt": "Hello world", "max_tokens": 10, "temperature": 0, "ignore_eos": true}'
status 200 POST /v1/completions "${auth[@]}" -H 'Content-Type: application/json' -d "$completion"
jq -e --arg t "$text" '.choices[0].text == $t and .usage.completion_tokens == 10' "$work/body" \
  >/dev/null || fail "/v1/completions disagrees with /generate: $(cat "$work/body")"

status 400 POST /v1/completions "${auth[@]}" -H 'Content-Type: application/json' -d '{"prompt": '
jq -e '.error.type == "invalid_request_error" and .error.code == 400' "$work/body" >/dev/null || fail "bad JSON: $(cat "$work/body")"
status 400 POST /v1/chat/completions "${auth[@]}" -H 'Content-Type: application/json' \
  -d '{"model": "tiny", "messages": [], "max_tokens": 4}'
status 200 GET /metrics "${auth[@]}"
grep -q '^kvserve:generation_tokens_total' "$work/body" || fail "/metrics lacks token counters"
echo "curl checks passed"

# --- hardening (issue 22): each repro answers 4xx or the documented behaviour, and the server
# keeps serving ----------------------------------------------------------------------------------
json=(-H 'Content-Type: application/json')
# Invalid UTF-8 in the path (percent-encoded, then raw through bash's /dev/tcp) used to abort.
status 404 GET '/%ff' "${auth[@]}"
jq -e '.error.message | length > 0' "$work/body" >/dev/null || fail "/%ff: $(cat "$work/body")"
raw_request() { # raw_request BYTES: the raw answer of a fresh connection
  local port=${base##*:}
  exec 3<>"/dev/tcp/127.0.0.1/$port"
  printf '%b' "$1" >&3
  timeout 5 cat <&3 || true
  exec 3<&- 3>&-
}
answer=$(raw_request "GET /\\xff\\xfe HTTP/1.1\\r\\nHost: x\\r\\nAuthorization: Bearer $key\\r\\nConnection: close\\r\\n\\r\\n")
grep -q '^HTTP/1.1 404' <<<"$answer" || fail "raw 0xFF path: $answer"
status 200 GET /health
# 100,000 nested objects in "tools" overflowed the stack.
deep=$(printf '{"a":%.0s' $(seq 1 100000))1$(printf '}%.0s' $(seq 1 100000))
printf '{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "tools": %s}' "$deep" >"$work/deep.json"
status 400 POST /v1/chat/completions "${auth[@]}" "${json[@]}" --data-binary @"$work/deep.json"
status 200 GET /health
# A wrong response_format type was a 500 with the JSON library's text.
for rf in '{"type": 1}' '{"type": null}'; do
  status 400 POST /v1/chat/completions "${auth[@]}" "${json[@]}" \
    -d "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"response_format\": $rf}"
  grep -q -e 'type_error' -e 'json.exception' "$work/body" && fail "library text in: $(cat "$work/body")"
done
# max_tokens 0: no new tokens (SGLang's prompt scoring).
status 200 POST /v1/completions "${auth[@]}" "${json[@]}" -d '{"prompt": "Hello", "max_tokens": 0}'
jq -e '.usage.completion_tokens == 0 and .choices[0].text == ""' "$work/body" >/dev/null ||
  fail "max_tokens 0: $(cat "$work/body")"
# SGLang's documented `curl -X POST /flush_cache`: no body, no Content-Length.
status 200 POST /flush_cache "${auth[@]}"
# Content parts, roles, tools.
status 200 POST /v1/chat/completions "${auth[@]}" "${json[@]}" \
  -d '{"messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}], "max_tokens": 2}'
status 400 POST /v1/chat/completions "${auth[@]}" "${json[@]}" \
  -d '{"messages": [{"role": "wizard", "content": "hi"}], "max_tokens": 2}'
for tools in 5 '"x"'; do
  status 400 POST /v1/chat/completions "${auth[@]}" "${json[@]}" \
    -d "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tools\": $tools}"
done
# Framing: conflicting lengths and unknown codings are refused at once, a huge declared body
# before it is sent.
answer=$(raw_request 'POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 9\r\n\r\n{}')
grep -q '^HTTP/1.1 400' <<<"$answer" || fail "conflicting Content-Length: $answer"
answer=$(raw_request 'POST /generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n')
grep -q '^HTTP/1.1 400' <<<"$answer" || fail "gzip, chunked: $answer"
answer=$(raw_request 'POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 52428800\r\n\r\n')
grep -q '^HTTP/1.1 413' <<<"$answer" || fail "50 MB Content-Length: $answer"
status 200 GET /health
echo "hardening checks passed"

# --- the OpenAI Node SDK -------------------------------------------------------------------------
KVSERVE_BASE_URL=$base KVSERVE_API_KEY=$key KVSERVE_MODEL=tiny \
  node --test "$here/openai_node/sdk.test.mjs" || fail "OpenAI Node SDK tests failed"

# --- graceful shutdown --------------------------------------------------------------------------
# A long stream is in flight when SIGTERM arrives: the server stops within seconds, exits 0, and
# the stream ends (aborted) rather than hanging.
curl -sS -N "${auth[@]}" -H 'Content-Type: application/json' \
  -d '{"text": "long", "stream": true, "sampling_params": {"max_new_tokens": 1900, "ignore_eos": true}}' \
  "$base/generate" >"$work/stream" 2>&1 &
curl_pid=$!
for _ in $(seq 1 100); do
  grep -q '^data: {' "$work/stream" && break
  sleep 0.05
done
grep -q '^data: {' "$work/stream" || fail "the long stream did not start"
kill -TERM "$server_pid"
for _ in $(seq 1 100); do
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$server_pid" 2>/dev/null && fail "the server is still running 10 s after SIGTERM"
rc=0
wait "$server_pid" || rc=$?
server_pid=
[ "$rc" = 0 ] || fail "the server exited with $rc after SIGTERM"
grep -q "server stopped" "$work/server.log" || fail "no 'server stopped' in the log"
wait "$curl_pid" || true  # the stream was cut; it must simply end
# Cut short by the shutdown, the stream still ends properly: its last event says abort, then [DONE].
last=$(grep '^data: {' "$work/stream" | tail -1 | sed 's/^data: //')
reason=$(jq -r '.meta_info.finish_reason.type' <<<"$last")
tokens=$(jq -r '.meta_info.completion_tokens' <<<"$last")
echo "in-flight stream at SIGTERM: $tokens tokens, finish_reason $reason"
if [ "$tokens" -lt 1900 ]; then
  [ "$reason" = abort ] || fail "a stream cut by shutdown ended with finish_reason $reason"
  grep -q '^data: \[DONE\]' "$work/stream" || fail "a stream cut by shutdown did not end with [DONE]"
fi
echo "graceful shutdown passed"

if [ "$tp" = 1 ]; then
  # --- tensor parallelism: a worker that dies ---------------------------------------------------
  # Its request fails (an error, never a hang) and the server stops by itself; the workers of the
  # stopped servers are gone.
  rm -f "$work/server.log"  # wait_ready must not read the previous server's port
  "$kvserve" serve --model-path "$work/tiny" --port 0 --api-key "$key" --max-total-tokens 8192 \
    --page-size 16 "${extra[@]}" >"$work/server.log" 2>&1 &
  server_pid=$!
  wait_ready
  grep -q "tensor parallel" "$work/server.log" || fail "no tensor-parallel line in the startup log"
  workers=$(pgrep -P "$server_pid" || true)
  [ -n "$workers" ] || fail "no worker processes under the server"
  status 200 POST /generate "${auth[@]}" -H 'Content-Type: application/json' \
    -d '{"text": "hello", "sampling_params": {"max_new_tokens": 4, "temperature": 0}}'
  kill -9 $workers
  code=$(curl -s -m 30 -o "$work/body" -w '%{http_code}' "${auth[@]}" \
    -H 'Content-Type: application/json' \
    -d '{"text": "hello again", "sampling_params": {"max_new_tokens": 4}}' "$base/generate" || true)
  [ "$code" != 200 ] || grep -q error "$work/body" || fail "a request after the worker died: $code $(cat "$work/body")"
  for _ in $(seq 1 150); do
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$server_pid" 2>/dev/null && fail "the server is still running 15 s after its worker died"
  rc=0
  wait "$server_pid" || rc=$?
  server_pid=
  [ "$rc" = 1 ] || fail "the server stopped by its dead worker exited with $rc, not 1"
  grep -q "the group stops" "$work/server.log" || fail "no tensor-parallel failure in the log"
  grep -q "stopped because a tensor-parallel rank failed" "$work/server.log" ||
    fail "the exit does not say why"
  echo "worker death passed"
  # Whisper is not sharded: refused naming the flag.
  "$kvserve" make-model --preset whisper-test --output "$work/whisper" --seed 5 >/dev/null
  if "$kvserve" serve --model-path "$work/whisper" --port 0 "${extra[@]}" >"$work/server.log" 2>&1; then
    fail "a Whisper checkpoint was served with ${extra[*]}"
  fi
  grep -q -- "--tp-size" "$work/server.log" || fail "the Whisper refusal does not name --tp-size"
  echo "tensor parallelism passed"
  exit 0
fi

# --- speech recognition -------------------------------------------------------------------------
# A Whisper checkpoint (random weights: gibberish text) served by the same command: OpenAI's
# /v1/audio/transcriptions with a multipart upload; the LLM routes answer 400; SIGTERM exits 0.
"$kvserve" make-model --preset whisper-test --output "$work/whisper" --seed 5 >/dev/null
rm -f "$work/server.log"  # wait_ready must not read the previous server's port
"$kvserve" serve --model-path "$work/whisper" --port 0 --api-key "$key" >"$work/server.log" 2>&1 &
server_pid=$!
wait_ready
clip="$here/../fixtures/audio/hello_16k.wav"
status 200 POST /v1/audio/transcriptions "${auth[@]}" -F file=@"$clip" -F model=whisper
jq -e '.text | type == "string"' "$work/body" >/dev/null || fail "transcription: $(cat "$work/body")"
status 200 POST /v1/audio/transcriptions "${auth[@]}" -F file=@"$clip" -F response_format=verbose_json
jq -e '.task == "transcribe" and .duration > 1 and (.segments | length == 1)' "$work/body" \
  >/dev/null || fail "verbose_json: $(cat "$work/body")"
status 400 POST /v1/audio/transcriptions "${auth[@]}" -F file=@"$clip" -F language=xx
jq -e '.error.param == "language"' "$work/body" >/dev/null || fail "bad language: $(cat "$work/body")"
status 401 POST /v1/audio/transcriptions -F file=@"$clip"
status 400 POST /v1/completions "${auth[@]}" -H 'Content-Type: application/json' -d "$completion"
grep -q "speech-recognition model" "$work/body" || fail "LLM route on Whisper: $(cat "$work/body")"
kill -TERM "$server_pid"
for _ in $(seq 1 100); do
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$server_pid" 2>/dev/null && fail "the Whisper server is still running 10 s after SIGTERM"
rc=0
wait "$server_pid" || rc=$?
server_pid=
[ "$rc" = 0 ] || fail "the Whisper server exited with $rc after SIGTERM"
grep -q "server stopped" "$work/server.log" || fail "no 'server stopped' in the Whisper server log"
echo "speech recognition passed"
