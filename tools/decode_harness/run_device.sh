#!/bin/bash
# The decode harness's device call (copy it beside decode_bundle.tar.xz into a carry folder):
# harness timing, then the GPU suites, each part under its own timeout (H, T1..T4 seconds).
cd "$(dirname "$0")"
tar xJf decode_bundle.tar.xz
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
timeout ${H:-35} ./decode_bundle harness ${ITERS:-50} 2>&1 | tee $OUT/harness.txt
echo "harness rc ${PIPESTATUS[0]}"
part() {  # name timeout filter
  local t0=$SECONDS
  timeout $2 ./decode_bundle --gtest_filter="$3" --gtest_brief=1 > $OUT/$1.txt 2>&1
  echo "== $1 rc $? ($((SECONDS - t0)) s)"
  grep -E "^\[  (PASSED|FAILED) |tests? from .* ran|Failure|Expected|Which is|ulp|merge    \]" $OUT/$1.txt | head -${4:-25}
}
part tc_tests ${T1:-30} 'PagedDecodeTc.*' 40
part tc_grid ${T2:-35} 'Configs/PagedDecodeTcTest.*'
part tc_fp8 ${T3:-20} 'Fp8/PagedDecodeTcFp8Test.*'
part decode ${T4:-20} '*PagedDecodeTest.*:*PagedDecodeFp8Test.*'
