#!/usr/bin/env bash
# Links the decode bundle (bundle_main.cpp): the harness (build.sh's objects) and the GPU suites
# paged_decode_tc_test and paged_decode_test in one stripped binary, xz-compressed into
# OUT_DIR/decode_bundle.tar.xz (small enough to carry into a device call).
#   tools/decode_harness/bundle.sh [BUILD_DIR (build-cuda)] [OUT_DIR (BUILD_DIR/decode_harness)]
# Needs build.sh's objects and the two suites' objects (compile_commands.json's commands).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
build=$(realpath "${1:-$root/build-cuda}")
out=$(realpath -m "${2:-$build/decode_harness}")
here=$root/tools/decode_harness
cd "$build"
# SASS-only copies of the two decode kernels' objects (no PTX), when
# compiled into OUT_DIR/sass (the build's commands with code=sm_90a): linked ahead of the library,
# they stand in for its members.
sass=()
if [[ -f $out/sass/paged_decode_tc.cu.o && -f $out/sass/paged_decode.cu.o ]]; then
  sass=("$out/sass/paged_decode_tc.cu.o" "$out/sass/paged_decode.cu.o")
fi
nice g++ -O2 -std=c++20 -Wall -Wextra -Werror -DFMT_HEADER_ONLY=1 -DSPDLOG_FMT_EXTERNAL \
  -DKVSERVE_WITH_CUDA=1 -Dmain=decode_harness_main -I "$build/module-includes/platform" \
  -I "$build/module-includes/core" -I "$build/src/generated" -I "$here" \
  -isystem /usr/local/cuda/include -c "$here/decode_harness.cpp" -o "$out/decode_harness_lib.o"
nice g++ -O2 -std=c++20 -Wall -Wextra -Werror -DFMT_HEADER_ONLY=1 -DKVSERVE_WITH_CUDA=1 \
  -I "$build/module-includes/platform" -I "$build/module-includes/core" -I "$build/src/generated" \
  -isystem /usr/local/cuda/include -c "$here/bundle_main.cpp" -o "$out/bundle_main.o"
g++ -o "$out/decode_bundle" "$out/bundle_main.o" "$out/decode_harness_lib.o" "$out/old_decode.o" \
  "$out/old_kernel.o" "${sass[@]}" tests/CMakeFiles/paged_decode_tc_test.dir/gpu/paged_decode_tc_test.cpp.o \
  tests/CMakeFiles/paged_decode_test.dir/gpu/paged_decode_test.cpp.o \
  src/CMakeFiles/kvserve_bench.dir/kvserve/bench/attention.cpp.o \
  src/CMakeFiles/kvserve_attention.dir/kvserve/attention/capabilities.cpp.o \
  src/libkvserve_platform.a src/libkvserve_core.a /usr/lib/x86_64-linux-gnu/libgtest.a \
  -L/usr/local/cuda/lib64 -lcudart_static -Wl,-Bstatic -lopenblas -lgfortran -lquadmath -lgomp \
  -Wl,-Bdynamic -ldl -lrt -lpthread -lm -static-libstdc++ -static-libgcc
strip "$out/decode_bundle"
XZ_OPT=-9e tar -C "$out" -cJf "$out/decode_bundle.tar.xz" decode_bundle
ls -la "$out/decode_bundle" "$out/decode_bundle.tar.xz"
