#!/usr/bin/env bash
# Packs binaries from a build of this machine (Debian 12) for the GPU machine, which has the CUDA
# driver and toolkit but none of Debian's -dev libraries: each binary stripped of debug info, plus
# every shared library it loads except the CUDA ones and glibc's, as one tar.xz cut into pieces
# small enough to travel beside the checkout (the device tool carries 64 MiB in all and the
# checkout is ~57 MiB of it).
#
#   tools/device_bundle.sh OUT_DIR BINARY...      # e.g. build/kvserve build/tests/paged_prefill_test
#
# OUT_DIR gets part-aa, part-ab, ... (each < PIECE bytes, default 7000000). On the GPU machine,
# carry one piece per call into /tmp/stage (the machine keeps /tmp while it stays warm), then:
#
#   mkdir -p /tmp/b && cat /tmp/stage/part-* | tar xJ -C /tmp/b
#   export LD_LIBRARY_PATH=/tmp/b/lib:/usr/local/cuda/lib64; /tmp/b/bin/<binary> ...
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: $0 OUT_DIR BINARY..." >&2
  exit 2
fi
out=$1
shift
piece=${PIECE:-7000000}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$out"
rm -f "$out"/part-*
for bin in "$@"; do
  [[ -x $bin ]] || { echo "$0: $bin is not an executable" >&2; exit 1; }
  strip --strip-debug -o "$stage/bin/$(basename "$bin")" "$bin"
  # Libraries the GPU machine has (the CUDA driver and toolkit, glibc) stay behind.
  ldd "$bin" | awk '$3 ~ /^\// {print $3}' |
    { grep -v -E '/lib(cuda|cudart|cublas|cublasLt|nvrtc|nccl|c|m|dl|rt|pthread)\.so|ld-linux' || true; } |
    while read -r lib; do cp -L -n "$lib" "$stage/lib/"; done
done
strip --strip-debug "$stage"/lib/* 2>/dev/null || true
# One LZMA stream with a dictionary larger than the whole tar: every binary carries the same
# ~17 MB CUDA fatbin (the platform library's kernels), which then compresses once. 24 binaries
# and their libraries: 35 MB (2026-12-03), against ~8 MB per binary compressed alone.
tar cf - -C "$stage" bin lib | xz -9 --lzma2=preset=9,dict=1GiB -T1 | split -b "$piece" - "$out/part-"
ls -l "$out" >&2
