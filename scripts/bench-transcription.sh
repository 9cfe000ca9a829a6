#!/usr/bin/env bash
# Transcription throughput of `kvserve serve` on a Whisper checkpoint: starts the server, uploads
# the committed clips (tests/fixtures/audio/*.wav, round robin) to POST /v1/audio/transcriptions
# with CONCURRENCY uploads in flight (curl, one process per upload), and prints requests/s over
# REQUESTS uploads after one warm-up upload per clip. Every response must be 200.
#
#   scripts/bench-transcription.sh KVSERVE_BINARY [CONCURRENCY=16] [REQUESTS=64] [-- serve flags]
#   e.g. scripts/bench-transcription.sh build/kvserve 16 64 -- --max-running-requests 8
set -euo pipefail

bin=${1:?usage: $0 KVSERVE_BINARY [CONCURRENCY] [REQUESTS] [-- serve flags]}
shift
concurrency=16
requests=64
if [[ $# -gt 0 && $1 != -- ]]; then concurrency=$1; shift; fi
if [[ $# -gt 0 && $1 != -- ]]; then requests=$1; shift; fi
[[ $# -gt 0 && $1 == -- ]] && shift
root=$(cd "$(dirname "$0")/.." && pwd)
model=$root/models/demo-whisper
port=$((20000 + RANDOM % 10000))
clips=("$root"/tests/fixtures/audio/{hello_16k,spoons_16k,testing_16k,testing_22050}.wav)
url=http://127.0.0.1:$port/v1/audio/transcriptions
log=$(mktemp)

"$bin" serve --model-path "$model" --port "$port" "$@" >"$log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 600); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
  kill -0 $server 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done
for clip in "${clips[@]}"; do
  curl -sf -o /dev/null -F "file=@$clip" "$url"
done

export url
export clips_list="${clips[*]}"
start=$(date +%s.%N)
codes=$(seq 0 $((requests - 1)) | xargs -P "$concurrency" -I{} bash -c \
  'clips=($clips_list); clip=${clips[$(({} % ${#clips[@]}))]}; curl -s -o /dev/null -w "%{http_code}\n" -F "file=@$clip" "$url"')
end=$(date +%s.%N)
ok=$(grep -c '^200$' <<<"$codes" || true)
if [[ $ok -ne $requests ]]; then
  echo "only $ok of $requests uploads answered 200" >&2
  exit 1
fi
info=$(curl -sf "http://127.0.0.1:$port/get_server_info")
awk -v n="$requests" -v c="$concurrency" -v s="$start" -v e="$end" 'BEGIN {
  printf "requests %d, concurrency %d, %.3f s, %.3f requests/s\n", n, c, e - s, n / (e - s) }'
echo "server info: $info"
