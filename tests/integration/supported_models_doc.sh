#!/usr/bin/env bash
# README.md and docs/supported-models.md carry `kvserve supported-models` output between
# <!-- supported-models:begin --> and <!-- supported-models:end -->: fails when either differs
# from what the binary prints (the loaders' own tables), so the documentation cannot drift.
# Usage: supported_models_doc.sh path/to/kvserve repo-root
set -euo pipefail
kvserve=$1
root=$2
status=0
check() {  # file, kvserve's arguments
  local file=$1
  shift
  local expected actual
  expected=$("$kvserve" supported-models "$@")
  actual=$(awk '/<!-- supported-models:end -->/ { on = 0 } on { print } /<!-- supported-models:begin/ { on = 1 }' "$file")
  if [[ -z "$actual" ]]; then
    echo "FAIL: $file has no supported-models block between the markers"
    status=1
  elif [[ "$expected" != "$actual" ]]; then
    echo "FAIL: $file differs from \`kvserve supported-models $*\` (run scripts/update-supported-models.sh):"
    diff <(printf '%s\n' "$actual") <(printf '%s\n' "$expected") || true
    status=1
  else
    echo "ok: $file"
  fi
}
check "$root/README.md" --brief
check "$root/docs/supported-models.md"
exit $status
