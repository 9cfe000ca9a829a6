// One binary for a device call (its size is what a call may carry): `decode_bundle harness
// [iters]` runs decode_harness.cpp's timing (its main compiled as decode_harness_main), anything
// else runs the linked GoogleTest suites (paged_decode_tc_test, paged_decode_test) with the
// usual --gtest_* flags. bundle.sh links it. The prefill kernel stays out (its code would not fit
// a call's carry): the suites here never run it, and a call to it aborts.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "kvserve/platform/cuda/ops.h"

namespace kvserve::platform::cuda {
void paged_prefill(const ops::PagedPrefillParams&, StreamHandle) {
  std::fprintf(stderr, "decode_bundle: the prefill kernel is not in this bundle\n");
  std::abort();
}
}  // namespace kvserve::platform::cuda

int decode_harness_main(int argc, char** argv);

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "harness") return decode_harness_main(argc - 1, argv + 1);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
