// The req_to_token mirror through a request lifecycle (mem/device_req_to_token.h): a radix-cache
// prefix hit, identical prompts prefilled together (the second's row is pointed at the first's
// slots on the host by cache_unfinished_req, outside any forward), a chunked prefill, decode steps
// (eager, and through cuda-paged's decode-graph path: the staged plan plus
// launch_decode_graph_metadata), a retraction and a re-admission. After every forward the mirror
// must equal the host row on each request's [0, kv_len). The backend's metadata code does the
// writes, with whatever ops the platform runs: the CPU reference ops in tests/unit, the CUDA
// kernels in tests/gpu.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "kvserve/platform/platform.h"

namespace kvserve::test_support {

struct MirrorScenarioStats {
  int32_t forwards = 0;
  int32_t graph_forwards = 0;
  int64_t rows_checked = 0;
  bool host_rewrote_a_row = false;  // cache_unfinished_req pointed a row at another's slots
};

// `backend`: "cuda-paged" or "cuda-ragged" (graph steps only with cuda-paged). Failures are
// gtest EXPECTs naming the step, request and seed.
MirrorScenarioStats run_mirror_scenario(platform::Platform& platform, const std::string& backend,
                                        int32_t page_size, uint32_t seed);

// Encoder-decoder rows ([encoder region | decoder region], mem/encoder_layout.h) as Whisper's
// generation writes them: a prefill of requests with encoder lengths (one of them 0) and prompts,
// then decode steps with self_kv_start / encoder_lens set. The mirror must equal the host row on
// [0, self_kv_start + seq_len) after every forward. cuda-paged needs the aligned layout (its
// decoder region starts on a page); cuda-ragged reads both. Returns the rows checked.
int64_t run_encoder_decoder_mirror_scenario(platform::Platform& platform,
                                            const std::string& backend, int32_t page_size,
                                            bool ragged_layout, uint32_t seed);

// What the CPU suite (tests/unit) and the GPU suite (tests/gpu) both run: the lifecycle scenario
// over these backends and page sizes, seeds 1-3, each reaching the cases it exists for; and the
// encoder-decoder scenario over page sizes 1 and 16, the aligned layout through both backends and
// the ragged one through cuda-ragged, seeds 1-2. Failures are gtest EXPECTs.
struct MirrorScenarioCase {
  const char* backend;
  int32_t page_size;
};
inline constexpr MirrorScenarioCase kMirrorScenarioCases[] = {
    {"cuda-paged", 1}, {"cuda-paged", 16}, {"cuda-ragged", 1}, {"cuda-ragged", 16}};
void PrintTo(const MirrorScenarioCase& c, std::ostream* os);
std::string mirror_scenario_case_name(const MirrorScenarioCase& c);  // "cuda_paged_page16"

void expect_mirror_scenario(platform::Platform& platform, const MirrorScenarioCase& c);
void expect_encoder_decoder_mirror_scenarios(platform::Platform& platform);

}  // namespace kvserve::test_support
