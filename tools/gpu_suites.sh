#!/usr/bin/env bash
# Runs GoogleTest suites on the GPU machine in N shards side by side (GTEST_TOTAL_SHARDS), each
# shard walking the suites in order, all under one deadline, then prints a pass/fail line per suite
# and every failed test, and leaves the logs in $OUT/suites.tgz. For the device tool, with binaries
# unpacked from tools/device_bundle.sh (LD_LIBRARY_PATH set by the caller):
#
#   SHARDS=8 DEADLINE=300 tools/gpu_suites.sh /tmp/b/bin paged_decode_tc_test \
#       'paged_prefill_test:*sm90*' model_test
#
# A suite given as NAME:FILTER runs with --gtest_filter=FILTER. The deadline (seconds from the
# start, default 300) bounds every shard: a suite a shard could not start is listed as not run.
# Suites that need models/ or tests/fixtures read them from the build's source path: link the
# checkout there first (ln -s "$PWD" /work/main). Side by side, a suite that sizes its KV pool
# from the free memory or reads the device's free memory can fail for the other shards' sake.
set -u
if [[ $# -lt 2 ]]; then
  echo "usage: $0 BIN_DIR SUITE[:FILTER]..." >&2
  exit 2
fi
bin=$1
shift
shards=${SHARDS:-8}
deadline=${DEADLINE:-300}
logs=$(mktemp -d)
start=$SECONDS
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}

shard() {
  local i=$1 spec name filter left
  for spec in "${@:2}"; do
    name=${spec%%:*}
    filter='*'
    [[ $spec == *:* ]] && filter=${spec#*:}
    left=$((deadline - (SECONDS - start)))
    if ((left < 10)); then
      echo "not run: $name (shard $i)" >>"$logs/not_run.txt"
      continue
    fi
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i timeout "$left" "$bin/$name" \
      --gtest_filter="$filter" --gtest_brief=1 >"$logs/$name.$i.txt" 2>&1
    echo "rc $?" >>"$logs/$name.$i.txt"
  done
}

for ((i = 0; i < shards; ++i)); do shard "$i" "$@" & done
wait
echo "suites done in $((SECONDS - start)) s"
for spec in "$@"; do
  name=${spec%%:*}
  passed=$(cat "$logs/$name".*.txt 2>/dev/null | awk '/^\[  PASSED  \]/ {s += $4} END {print s + 0}')
  rcs=$(grep -h '^rc ' "$logs/$name".*.txt 2>/dev/null | sort | uniq -c | tr -s ' ' | tr '\n' ',')
  echo "$name: $passed passed; exit codes (count rc): ${rcs:-none}"
done
grep -h -E '^\[  FAILED  \] [A-Za-z]' "$logs"/*.txt 2>/dev/null | sort -u
cat "$logs/not_run.txt" 2>/dev/null
if [[ -n ${OUT:-} ]]; then tar czf "$OUT/suites.tgz" -C "$logs" .; fi
