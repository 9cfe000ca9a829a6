#!/usr/bin/env bash
# Rewrites the supported-models tables of README.md (`kvserve supported-models --brief`) and
# docs/supported-models.md (the full output) between their markers, from the built binary.
# Usage: scripts/update-supported-models.sh [path/to/kvserve]   (default: build/kvserve)
# The `supported_models_doc` test fails until the two files match the binary's output.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kvserve=${1:-$root/build/kvserve}

rewrite() {  # file, kvserve's arguments
  local file=$1
  shift
  local table
  table=$(mktemp)
  "$kvserve" supported-models "$@" >"$table"
  awk -v table="$table" '
    /<!-- supported-models:begin/ { print; while ((getline line < table) > 0) print line; skip = 1; next }
    /<!-- supported-models:end -->/ { skip = 0 }
    !skip { print }
  ' "$file" >"$file.tmp"
  mv "$file.tmp" "$file"
  rm -f "$table"
}

rewrite "$root/README.md" --brief
rewrite "$root/docs/supported-models.md"
