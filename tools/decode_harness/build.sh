#!/usr/bin/env bash
# Builds the decode harness (decode_harness.cpp: old-vs-new timing of the tensor-core decode
# kernel) against a CUDA build's kvserve_platform and kvserve_core, plus main's kernel compiled
# from main's sources in namespace kvserve_old (old_decode.cu).
#   tools/decode_harness/build.sh [BUILD_DIR (build-cuda)] [OUT_DIR (BUILD_DIR/decode_harness)]
# Needs: `ninja -C BUILD_DIR kvserve_platform kvserve_core` first; OLD_REF (default main) names the
# commit whose kernel is "old". The binary links the CUDA runtime statically and libstdc++
# statically: it runs on the GPU machine with its driver alone.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
build=$(realpath "${1:-$root/build-cuda}")
out=$(realpath -m "${2:-$build/decode_harness}")
here=$root/tools/decode_harness
mkdir -p "$out/old-src"
git -C "$root" archive "${OLD_REF:-main}" src/kvserve | tar -x -C "$out/old-src"
# Only the harness's shape of main's kernel (bf16, head_dim 128, 3 stages): its other 80-odd
# instantiations would not fit a device call's carry. The launch itself is main's, unchanged.
python3 - "$out/old-src/src/kvserve/platform/cuda/paged_decode_tc.cu" <<'PY'
import sys
p = sys.argv[1]
s = open(p).read()
a = s.index("void paged_decode_tc(const ops::PagedDecodeParams& p, int32_t stages, StreamHandle stream) {")
b = s.index("}  // namespace kvserve::platform::cuda", a)
s = s[:a] + """void paged_decode_tc(const ops::PagedDecodeParams& p, int32_t, StreamHandle stream) {
  int page_shift = 0;
  while ((1 << page_shift) < p.page_size) ++page_shift;
  launch_decode_tc<__nv_bfloat16, 128, 3>(p, page_shift, static_cast<cudaStream_t>(stream.ptr));
}

""" + s[b:]
open(p, "w").write(s)
PY
nvcc_flags=(-O2 -DNDEBUG -std=c++20 "--generate-code=arch=compute_90a,code=[compute_90a,sm_90a]"
  -Xcompiler=-Wall,-Wextra -Werror=all-warnings)
# main's kernel and the adapter, renamed wholesale so that nothing collides with this branch's.
nice /usr/local/cuda/bin/nvcc -O2 -DNDEBUG -std=c++20 "--generate-code=arch=compute_90a,code=sm_90a" \
  -Dkvserve=kvserve_old -I "$out/old-src/src" \
  -x cu -c "$out/old-src/src/kvserve/platform/cuda/paged_decode_tc.cu" -o "$out/old_kernel.o"
nice /usr/local/cuda/bin/nvcc "${nvcc_flags[@]}" -Dkvserve=kvserve_old -I "$out/old-src/src" -I "$here" \
  -x cu -c "$here/old_decode.cu" -o "$out/old_decode.o"
nice g++ -O2 -std=c++20 -Wall -Wextra -Werror -DFMT_HEADER_ONLY=1 -DSPDLOG_FMT_EXTERNAL \
  -DKVSERVE_WITH_CUDA=1 -I "$build/module-includes/platform" -I "$build/module-includes/core" \
  -I "$build/src/generated" -I "$here" -isystem /usr/local/cuda/include \
  -c "$here/decode_harness.cpp" -o "$out/decode_harness.o"
g++ -o "$out/decode_harness" "$out/decode_harness.o" "$out/old_decode.o" "$out/old_kernel.o" \
  "$build/src/libkvserve_platform.a" "$build/src/libkvserve_core.a" \
  -L/usr/local/cuda/lib64 -lcudart_static -Wl,-Bstatic -lgomp -Wl,-Bdynamic -ldl -lrt -lpthread \
  -static-libstdc++ -static-libgcc
echo "$out/decode_harness"
