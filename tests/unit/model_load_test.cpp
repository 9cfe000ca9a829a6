// Loading a checkpoint into the model runtime: broken checkpoints are clear errors naming the
// file and the tensor or field, never crashes.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "kvserve/makemodel/make_model.h"
#include "kvserve/model/model_runner.h"
#include "unit/model_test_util.h"

namespace kvserve::model {
namespace {

namespace fs = std::filesystem;

class ModelLoad : public ::testing::Test {
 protected:
  void SetUp() override {
    makemodel::MakeModelOptions o;
    o.preset = "tiny";
    o.output = dir_.path() / "ok";
    ASSERT_TRUE(makemodel::make_model(o).is_ok());
  }

  // A copy of the tiny checkpoint whose weights are rewritten by `edit` (name -> shape/bytes).
  fs::path variant(const std::string& name,
                   const std::function<void(std::vector<checkpoint::TensorToWrite>&)>& edit) {
    const fs::path out = dir_.path() / name;
    fs::create_directories(out);
    for (const auto& f : fs::directory_iterator(dir_.path() / "ok")) {
      if (f.path().filename() != "model.safetensors")
        fs::copy_file(f.path(), out / f.path().filename());
    }
    auto store = std::move(checkpoint::WeightStore::open(dir_.path() / "ok").value());
    std::vector<checkpoint::TensorToWrite> tensors;
    for (const std::string& n : store->names()) {
      const checkpoint::WeightView w = std::move(store->get(n).value());
      tensors.push_back(
          {n, w.dtype, w.shape, std::span(static_cast<const uint8_t*>(w.data), w.bytes)});
    }
    edit(tensors);
    EXPECT_TRUE(checkpoint::write_safetensors(out / "model.safetensors", tensors).is_ok());
    return out;
  }

  Status load(const fs::path& dir) {
    ModelRunnerOptions o;
    o.max_total_tokens = 1024;
    auto r = ModelRunner::create(dir, o);
    return r.is_ok() ? Status::ok() : r.status();
  }

  testing::TempDir dir_;
};

TEST_F(ModelLoad, TheTinyCheckpointLoads) {
  EXPECT_TRUE(load(dir_.path() / "ok").is_ok());
}

TEST_F(ModelLoad, WrongShapeNamesTensorFileAndShapes) {
  const fs::path d = variant("shape", [](std::vector<checkpoint::TensorToWrite>& t) {
    for (auto& x : t) {
      if (x.name == "model.layers.1.mlp.down_proj.weight") std::swap(x.shape[0], x.shape[1]);
    }
  });
  const Status s = load(d);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("model.layers.1.mlp.down_proj.weight"), std::string::npos);
  EXPECT_NE(s.message().find("model.safetensors"), std::string::npos);
  EXPECT_NE(s.message().find("[176, 64]"), std::string::npos) << s.message();
}

TEST_F(ModelLoad, MissingTensorIsNotFound) {
  const fs::path d = variant("missing", [](std::vector<checkpoint::TensorToWrite>& t) {
    std::erase_if(t,
                  [](const checkpoint::TensorToWrite& x) { return x.name == "model.norm.weight"; });
  });
  const Status s = load(d);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.to_string();
  EXPECT_NE(s.message().find("model.norm.weight"), std::string::npos);
}

TEST_F(ModelLoad, TruncatedWeightsFile) {
  const fs::path d = variant("truncated", [](std::vector<checkpoint::TensorToWrite>&) {});
  fs::resize_file(d / "model.safetensors", fs::file_size(d / "model.safetensors") / 2);
  const Status s = load(d);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("model.safetensors"), std::string::npos) << s.message();
}

TEST_F(ModelLoad, ConfigAndWeightsDisagree) {
  const fs::path d = variant("config", [](std::vector<checkpoint::TensorToWrite>&) {});
  std::ifstream in(d / "config.json");
  nlohmann::json c = nlohmann::json::parse(in);
  in.close();
  c["intermediate_size"] = 200;
  std::ofstream(d / "config.json") << c.dump(2);
  const Status s = load(d);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("gate_proj"), std::string::npos) << s.message();
}

TEST_F(ModelLoad, UnknownArchitectureAndBadOptions) {
  const fs::path d = variant("arch", [](std::vector<checkpoint::TensorToWrite>&) {});
  std::ifstream in(d / "config.json");
  nlohmann::json c = nlohmann::json::parse(in);
  in.close();
  c["architectures"] = {"GPT2LMHeadModel"};
  std::ofstream(d / "config.json") << c.dump(2);
  const Status s = load(d);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("GPT2LMHeadModel"), std::string::npos) << s.message();

  ModelRunnerOptions o;
  o.page_size = 0;
  EXPECT_EQ(ModelRunner::create(dir_.path() / "ok", o).status().code(),
            StatusCode::kInvalidArgument);
  o = {};
  o.kv_cache_dtype = DType::kI32;  // a name the command line refuses; a typed value, at load
  EXPECT_EQ(ModelRunner::create(dir_.path() / "ok", o).status().code(), StatusCode::kUnimplemented);
  o = {};
  o.device = Device{DeviceKind::kCuda, 7};
  EXPECT_FALSE(ModelRunner::create(dir_.path() / "ok", o).is_ok());
}

}  // namespace
}  // namespace kvserve::model
