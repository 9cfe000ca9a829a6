// The attention backends' capability table (attention/capabilities.h): every unsupported
// combination is refused by check_attention_support with the config field or flag, the value and
// the supported values; supported ones pass. And the runners consult it at load, before any
// weight is read or any device touched, so a model the CUDA kernels cannot serve is refused on
// this (GPU-less) machine with the table's message, not a kernel CHECK at its first decode.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvserve/attention/capabilities.h"
#include "kvserve/makemodel/make_model.h"
#include "kvserve/model/model_runner.h"
#include "unit/model_test_util.h"

namespace kvserve::attention {
namespace {

namespace fs = std::filesystem;
using Kind = AttentionBackendKind;

// A Llama-8B-like request of attention: every backend of its device takes it.
AttentionRequirements base(DeviceKind device) {
  AttentionRequirements n;
  n.num_q_heads = 32;
  n.num_kv_heads = 8;
  n.head_dim = 128;
  n.rope_type = "llama3";
  n.page_size = 16;
  n.kv_dtype = device == DeviceKind::kCpu ? DType::kF32 : DType::kBF16;
  n.device = device;
  return n;
}

struct Case {
  const char* name;
  Kind backend;
  std::function<void(AttentionRequirements&)> edit;
  StatusCode code;      // kOk: supported
  const char* message;  // the whole message, when refused
};

std::vector<Case> cases() {
  return {
      // cuda-paged: the paged kernels' head dims, GQA groups, page sizes, dtypes, row layout.
      {"paged_head_dim_112", Kind::kCudaPaged, [](auto& n) { n.head_dim = 112; },
       StatusCode::kUnimplemented,
       "config.json: head_dim 112: attention backend cuda-paged supports 64, 80, 96, 128, 256"},
      {"paged_head_dim_16", Kind::kCudaPaged, [](auto& n) { n.head_dim = 16; },
       StatusCode::kUnimplemented,
       "config.json: head_dim 16: attention backend cuda-paged supports 64, 80, 96, 128, 256"},
      {"paged_head_dim_64", Kind::kCudaPaged, [](auto& n) { n.head_dim = 64; }, StatusCode::kOk,
       ""},
      {"paged_head_dim_80", Kind::kCudaPaged, [](auto& n) { n.head_dim = 80; }, StatusCode::kOk,
       ""},
      {"paged_head_dim_96", Kind::kCudaPaged, [](auto& n) { n.head_dim = 96; }, StatusCode::kOk,
       ""},
      {"paged_head_dim_256", Kind::kCudaPaged, [](auto& n) { n.head_dim = 256; }, StatusCode::kOk,
       ""},
      {"paged_sliding_window_softcap", Kind::kCudaPaged,
       [](auto& n) {
         n.sliding_window_field = "sliding_window";
         n.logit_softcap_field = "attn_logit_softcapping";
       },
       StatusCode::kOk, ""},
      {"ragged_sliding_window_softcap", Kind::kCudaRagged,
       [](auto& n) {
         n.sliding_window_field = "sliding_window";
         n.logit_softcap_field = "attn_logit_softcapping";
       },
       StatusCode::kOk, ""},
      {"paged_group_16", Kind::kCudaPaged, [](auto& n) { n.num_kv_heads = 2; },
       StatusCode::kUnimplemented,
       "config.json: num_attention_heads / num_key_value_heads = 32 / 2 (a GQA group of 16): "
       "attention backend cuda-paged supports GQA groups 1..8"},
      {"paged_group_8", Kind::kCudaPaged, [](auto& n) { n.num_kv_heads = 4; }, StatusCode::kOk, ""},
      {"paged_page_8", Kind::kCudaPaged, [](auto& n) { n.page_size = 8; },
       StatusCode::kUnimplemented,
       "--page-size 8: attention backend cuda-paged supports page sizes 1, 16, 32, 64, 128"},
      {"paged_page_2", Kind::kCudaPaged, [](auto& n) { n.page_size = 2; },
       StatusCode::kUnimplemented,
       "--page-size 2: attention backend cuda-paged supports page sizes 1, 16, 32, 64, 128"},
      {"paged_page_1", Kind::kCudaPaged, [](auto& n) { n.page_size = 1; }, StatusCode::kOk, ""},
      {"paged_page_128", Kind::kCudaPaged, [](auto& n) { n.page_size = 128; }, StatusCode::kOk, ""},
      {"paged_kv_f16", Kind::kCudaPaged, [](auto& n) { n.kv_dtype = DType::kF16; },
       StatusCode::kUnimplemented,
       "--kv-cache-dtype f16: attention backend cuda-paged supports KV cache dtypes bf16, "
       "fp8_e4m3, fp8_e5m2"},
      {"paged_kv_f32", Kind::kCudaPaged, [](auto& n) { n.kv_dtype = DType::kF32; },
       StatusCode::kUnimplemented,
       "--kv-cache-dtype f32: attention backend cuda-paged supports KV cache dtypes bf16, "
       "fp8_e4m3, fp8_e5m2"},
      {"paged_kv_fp8", Kind::kCudaPaged, [](auto& n) { n.kv_dtype = DType::kFP8E5M2; },
       StatusCode::kOk, ""},
      {"paged_rope_yarn", Kind::kCudaPaged, [](auto& n) { n.rope_type = "yarn"; }, StatusCode::kOk,
       ""},
      {"paged_rope_su", Kind::kCudaPaged, [](auto& n) { n.rope_type = "su"; },
       StatusCode::kUnimplemented,
       "config.json: rope_scaling.rope_type su: attention backend cuda-paged supports rope "
       "types default, linear, dynamic, yarn, longrope, llama3"},
      {"paged_ragged_rows", Kind::kCudaPaged,
       [](auto& n) {
         n.cross_attention = true;
         n.ragged_encoder_rows = true;
         n.rope_type.reset();
       },
       StatusCode::kUnimplemented,
       "--encoder-kv-layout ragged with --page-size 16 (the decoder region starts inside a "
       "page): attention backend cuda-paged supports whole pages only; use cuda-ragged or the "
       "aligned layout"},
      {"paged_ragged_rows_page_1", Kind::kCudaPaged,
       [](auto& n) {
         n.cross_attention = true;
         n.ragged_encoder_rows = true;
         n.page_size = 1;
       },
       StatusCode::kOk, ""},
      {"paged_on_cpu", Kind::kCudaPaged, [](auto& n) { n.device = DeviceKind::kCpu; },
       StatusCode::kInvalidArgument,
       "--attention-backend cuda-paged runs on CUDA, not on the CPU (there: cpu, native)"},
      // cuda-ragged: gathered rows, so any page size and the varlen kernel's head dims.
      {"ragged_head_dim_16", Kind::kCudaRagged, [](auto& n) { n.head_dim = 16; }, StatusCode::kOk,
       ""},
      {"ragged_head_dim_96", Kind::kCudaRagged, [](auto& n) { n.head_dim = 96; }, StatusCode::kOk,
       ""},
      {"ragged_head_dim_48", Kind::kCudaRagged, [](auto& n) { n.head_dim = 48; },
       StatusCode::kUnimplemented,
       "config.json: head_dim 48: attention backend cuda-ragged supports 16, 32, 64, 80, 96, 128, "
       "256"},
      {"ragged_page_8", Kind::kCudaRagged, [](auto& n) { n.page_size = 8; }, StatusCode::kOk, ""},
      {"ragged_ragged_rows", Kind::kCudaRagged,
       [](auto& n) {
         n.cross_attention = true;
         n.ragged_encoder_rows = true;
       },
       StatusCode::kOk, ""},
      {"ragged_group_9", Kind::kCudaRagged,
       [](auto& n) {
         n.num_q_heads = 9;
         n.num_kv_heads = 1;
       },
       StatusCode::kUnimplemented,
       "config.json: num_attention_heads / num_key_value_heads = 9 / 1 (a GQA group of 9): "
       "attention backend cuda-ragged supports GQA groups 1..8"},
      // The CPU backends: any head dim and page size, every float KV dtype; cpu's GQA group cap.
      {"cpu_head_dim_96_page_8_f16", Kind::kCpu,
       [](auto& n) {
         n.device = DeviceKind::kCpu;
         n.head_dim = 96;
         n.page_size = 8;
         n.kv_dtype = DType::kF16;
       },
       StatusCode::kOk, ""},
      {"cpu_group_128", Kind::kCpu,
       [](auto& n) {
         n.device = DeviceKind::kCpu;
         n.num_q_heads = 128;
         n.num_kv_heads = 1;
         n.kv_dtype = DType::kF32;
       },
       StatusCode::kUnimplemented,
       "config.json: num_attention_heads / num_key_value_heads = 128 / 1 (a GQA group of 128): "
       "attention backend cpu supports GQA groups 1..64"},
      {"native_group_128", Kind::kNative,
       [](auto& n) {
         n.device = DeviceKind::kCpu;
         n.num_q_heads = 128;
         n.num_kv_heads = 1;
         n.kv_dtype = DType::kF32;
       },
       StatusCode::kOk, ""},
      {"cpu_kv_i32", Kind::kCpu,
       [](auto& n) {
         n.device = DeviceKind::kCpu;
         n.kv_dtype = DType::kI32;
       },
       StatusCode::kUnimplemented,
       "--kv-cache-dtype i32: attention backend cpu supports KV cache dtypes f32, bf16, f16, "
       "fp8_e4m3, fp8_e5m2"},
      {"cpu_on_cuda", Kind::kCpu, [](auto& n) { n.device = DeviceKind::kCuda; },
       StatusCode::kInvalidArgument,
       "--attention-backend cpu runs on the CPU, not on CUDA (there: cuda-paged, cuda-ragged)"},
  };
}

TEST(AttentionCapabilities, EveryUnsupportedCombinationNamesItsFieldAndTheSupportedValues) {
  for (const Case& c : cases()) {
    AttentionRequirements need = base(capabilities(c.backend).device);
    c.edit(need);
    const Status s = check_attention_support(c.backend, need);
    EXPECT_EQ(s.code(), c.code) << c.name << ": " << s.to_string();
    if (c.code != StatusCode::kOk) {
      EXPECT_EQ(s.message(), c.message) << c.name;
    }
  }
}

// The table agrees with what the kernels dispatch on (their switch statements are the other
// side of this one source of truth; their CHECKs stay as the last line).
TEST(AttentionCapabilities, TableRows) {
  const AttentionCapabilities& paged = capabilities(Kind::kCudaPaged);
  EXPECT_EQ(std::vector<int32_t>(paged.head_dims.begin(), paged.head_dims.end()),
            (std::vector<int32_t>{64, 80, 96, 128, 256}));
  EXPECT_EQ(std::vector<int32_t>(paged.page_sizes.begin(), paged.page_sizes.end()),
            (std::vector<int32_t>{1, 16, 32, 64, 128}));
  EXPECT_EQ(paged.max_gqa_group, 8);
  EXPECT_TRUE(paged.decode_graphs);
  EXPECT_FALSE(capabilities(Kind::kCudaRagged).decode_graphs);
  for (const Kind cuda : {Kind::kCudaPaged, Kind::kCudaRagged}) {
    EXPECT_TRUE(capabilities(cuda).sliding_window) << attention_backend_name(cuda);
    EXPECT_TRUE(capabilities(cuda).logit_softcap) << attention_backend_name(cuda);
  }
  for (const AttentionCapabilities& c : attention_backend_table()) {
    EXPECT_TRUE(c.cross_attention) << c.name;
    EXPECT_FALSE(c.kv_dtypes.empty()) << c.name;
    EXPECT_EQ(default_attention_backend(c.device) == c.kind,
              c.name == "cpu" || c.name == "cuda-paged")
        << c.name;
  }
}

// At load: tiny checkpoints whose config.json asks what the CUDA kernels cannot do are refused by
// ModelRunner::create for --device cuda with the table's message, before the platform exists (so
// on this GPU-less machine too); the same checkpoints pass the check on the CPU.
class LoadTimeRefusal : public ::testing::Test {
 protected:
  void SetUp() override {
    makemodel::MakeModelOptions o;
    o.preset = "tiny";
    o.output = dir_.path() / "tiny";
    ASSERT_TRUE(makemodel::make_model(o).is_ok());
  }

  // A copy of the tiny checkpoint with config.json fields replaced.
  fs::path with_config(const std::string& name, const nlohmann::json& fields) {
    const fs::path out = dir_.path() / name;
    fs::create_directories(out);
    for (const auto& f : fs::directory_iterator(dir_.path() / "tiny"))
      fs::copy_file(f.path(), out / f.path().filename());
    nlohmann::json config = nlohmann::json::parse(std::ifstream(out / "config.json"));
    config.update(fields);
    std::ofstream(out / "config.json") << config.dump(2);
    return out;
  }

  static Status create(const fs::path& dir, Device device, int32_t page_size = 16,
                       std::optional<Kind> backend = std::nullopt) {
    model::ModelRunnerOptions o;
    o.device = device;
    o.page_size = page_size;
    o.attention_backend = backend;
    o.max_total_tokens = 1024;
    auto r = model::ModelRunner::create(dir, o);
    return r.is_ok() ? Status::ok() : r.status();
  }

  model::testing::TempDir dir_;
};

TEST_F(LoadTimeRefusal, UnsupportedModelsAreRefusedBeforeLoading) {
  const Device cuda{DeviceKind::kCuda, 0};
  const Device cpu{DeviceKind::kCpu, 0};
  struct Refusal {
    const char* name;
    nlohmann::json config;  // fields replaced in tiny's config.json
    int32_t page_size;
    std::optional<Kind> backend;
    const char* message;
  };
  const std::vector<Refusal> refusals = {
      // hidden 64 / 4 heads: tiny's own head_dim 16 is not a paged kernel's.
      {"tiny_as_is", nlohmann::json::object(), 16, std::nullopt,
       "config.json: head_dim 16: attention backend cuda-paged supports 64, 80, 96, 128, 256"},
      {"head_dim_112",
       {{"head_dim", 112}},
       16,
       std::nullopt,
       "config.json: head_dim 112: attention backend cuda-paged supports 64, 80, 96, 128, 256"},
      {"head_dim_48_ragged",
       {{"head_dim", 48}},
       16,
       Kind::kCudaRagged,
       "config.json: head_dim 48: attention backend cuda-ragged supports 16, 32, 64, 80, 96, 128, "
       "256"},
      {"group_16",
       {{"head_dim", 64}, {"num_attention_heads", 16}, {"num_key_value_heads", 1}},
       16,
       std::nullopt,
       "config.json: num_attention_heads / num_key_value_heads = 16 / 1 (a GQA group of 16): "
       "attention backend cuda-paged supports GQA groups 1..8"},
      {"page_8",
       {{"head_dim", 64}},
       8,
       std::nullopt,
       "--page-size 8: attention backend cuda-paged supports page sizes 1, 16, 32, 64, 128"},
  };
  for (const Refusal& r : refusals) {
    const fs::path dir = with_config(r.name, r.config);
    const Status s = create(dir, cuda, r.page_size, r.backend);
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << r.name << ": " << s.to_string();
    EXPECT_EQ(s.message(), r.message) << r.name;
  }
  // A model the kernels do take gets past the check on CUDA: without a GPU here it fails at the
  // platform instead (kUnavailable), not with a capability message.
  const Status supported = create(with_config("head_dim_64", {{"head_dim", 64}}), cuda);
  if (!supported.is_ok()) {
    EXPECT_EQ(supported.message().find("attention backend"), std::string::npos)
        << supported.to_string();
  }
  // The CPU backends take tiny as it is, at any page size.
  EXPECT_TRUE(create(dir_.path() / "tiny", cpu, 8).is_ok());
  // A CPU backend asked for on CUDA is a usage error naming the flag.
  const Status wrong = create(dir_.path() / "tiny", cuda, 16, Kind::kCpu);
  EXPECT_EQ(wrong.code(), StatusCode::kInvalidArgument) << wrong.to_string();
  EXPECT_NE(wrong.message().find("--attention-backend cpu"), std::string::npos) << wrong.message();
}

}  // namespace
}  // namespace kvserve::attention
