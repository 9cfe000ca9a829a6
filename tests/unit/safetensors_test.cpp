// safetensors: round trips for every dtype and shape, the exact bytes of the reference writer's
// header, corrupt files (errors, never crashes) and sharded checkpoints.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <numeric>
#include <string>
#include <vector>

#include "kvserve/checkpoint/weights.h"
#include "model_test_util.h"

namespace kvserve::checkpoint {
namespace {

using model::testing::read_file;
using model::testing::TempDir;
using model::testing::write_file;

std::string le64(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

// A file as the format defines it, from a header text and data written by hand.
std::string raw_file(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<uint8_t>(seed + 31 * i);
  return v;
}

void expect_error(const Result<std::unique_ptr<WeightStore>>& r, StatusCode code,
                  std::initializer_list<std::string> parts) {
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  for (const std::string& p : parts) {
    EXPECT_NE(r.status().message().find(p), std::string::npos)
        << "'" << p << "' not in: " << r.status().message();
  }
}

TEST(Safetensors, DtypeNames) {
  EXPECT_EQ(safetensors_dtype_name(DType::kF32), "F32");
  EXPECT_EQ(safetensors_dtype_name(DType::kF16), "F16");
  EXPECT_EQ(safetensors_dtype_name(DType::kBF16), "BF16");
  EXPECT_EQ(safetensors_dtype_name(DType::kFP8E4M3), "F8_E4M3");
  EXPECT_EQ(safetensors_dtype_name(DType::kFP8E5M2), "F8_E5M2");
  EXPECT_EQ(safetensors_dtype_name(DType::kI32), "I32");
  EXPECT_EQ(safetensors_dtype_name(DType::kI64), "I64");
  EXPECT_EQ(safetensors_dtype_name(DType::kU8), "U8");
}

TEST(Safetensors, RoundTripEveryDtypeAndShape) {
  const DType dtypes[] = {DType::kF32,     DType::kF16, DType::kBF16, DType::kFP8E4M3,
                          DType::kFP8E5M2, DType::kI32, DType::kI64,  DType::kU8};
  const std::vector<std::vector<int64_t>> shapes = {{}, {0}, {3, 0}, {1}, {5}, {2, 3, 4}, {7, 3}};
  std::vector<std::vector<uint8_t>> storage;
  storage.reserve(std::size(dtypes) * shapes.size());  // the spans below point into it
  std::vector<TensorToWrite> tensors;
  size_t total = 0;
  for (const DType t : dtypes) {
    for (size_t s = 0; s < shapes.size(); ++s) {
      const int64_t numel =
          std::accumulate(shapes[s].begin(), shapes[s].end(), int64_t{1}, std::multiplies<>());
      storage.push_back(pattern(numel * dtype_size(t), static_cast<uint8_t>(s * 7 + 1)));
      total += storage.back().size();
      tensors.push_back({fmt::format("t.{}.{}", dtype_name(t), s), t, shapes[s], storage.back()});
    }
  }
  TempDir dir;
  const auto file = dir / "all.safetensors";
  ASSERT_TRUE(write_safetensors(file, tensors, {{"format", "pt"}}).is_ok());
  const Result<std::unique_ptr<WeightStore>> store = WeightStore::open_file(file);
  ASSERT_TRUE(store.is_ok()) << store.status().to_string();
  const WeightStore& w = **store;
  const std::vector<std::string> names = w.names();
  EXPECT_EQ(names.size(), tensors.size());
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_EQ(w.total_bytes(), total);
  for (const TensorToWrite& t : tensors) {
    ASSERT_TRUE(w.contains(t.name));
    const Result<WeightView> v = w.get(t.name);
    ASSERT_TRUE(v.is_ok()) << v.status().to_string();
    EXPECT_EQ(v->name, t.name);
    EXPECT_EQ(v->dtype, t.dtype);
    EXPECT_EQ(v->shape, t.shape);
    EXPECT_EQ(v->numel() * static_cast<int64_t>(dtype_size(t.dtype)),
              static_cast<int64_t>(t.data.size()));
    ASSERT_EQ(v->bytes, t.data.size());
    if (v->bytes > 0) {
      EXPECT_EQ(std::memcmp(v->data, t.data.data(), v->bytes), 0) << t.name;
      // Header padded to 8 bytes and wider dtypes first: every tensor is aligned.
      EXPECT_EQ(reinterpret_cast<uintptr_t>(v->data) % dtype_size(t.dtype), 0u) << t.name;
    }
    EXPECT_EQ(v->file, file.string());
  }
  const Result<WeightView> missing = w.get("no.such.tensor");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("no.such.tensor"), std::string::npos);
  EXPECT_NE(missing.status().message().find(file.string()), std::string::npos);
}

TEST(Safetensors, HeaderIsByteExactAsTheReferenceWriter) {
  // Reference writer (safetensors' Rust `prepare`/`serialize`): tensors sorted by dtype
  // descending (I64 > F32 > BF16 > U8 in its Dtype enum), then by name; compact JSON with
  // "__metadata__" first and keys dtype, shape, data_offsets; spaces up to a multiple of 8.
  const std::vector<uint8_t> a = {1, 2, 3, 4, 5, 6};        // BF16 [3]
  const std::vector<uint8_t> b = {9, 9, 9, 9, 8, 8, 8, 8};  // F32 [2]
  const std::vector<uint8_t> c = {7, 0, 0, 0, 0, 0, 0, 0};  // I64 []
  const std::vector<uint8_t> d = {42};                      // U8 [1, 1]
  const std::vector<uint8_t> e;                             // F32 [0]
  const std::vector<TensorToWrite> tensors = {
      {"layer.b", DType::kF32, {2}, b}, {"layer.a", DType::kBF16, {3}, a},
      {"d", DType::kU8, {1, 1}, d},     {"c", DType::kI64, {}, c},
      {"a_empty", DType::kF32, {0}, e},
  };
  std::string header = R"({"__metadata__":{"format":"pt"},)"
                       R"("c":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)"
                       R"("a_empty":{"dtype":"F32","shape":[0],"data_offsets":[8,8]},)"
                       R"("layer.b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                       R"("layer.a":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]},)"
                       R"("d":{"dtype":"U8","shape":[1,1],"data_offsets":[22,23]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  ASSERT_EQ(header.size() % 8, 0u);
  const std::string data = std::string(c.begin(), c.end()) + std::string(b.begin(), b.end()) +
                           std::string(a.begin(), a.end()) + std::string(d.begin(), d.end());
  const std::string expected = le64(header.size()) + header + data;

  TempDir dir;
  ASSERT_TRUE(write_safetensors(dir / "x.safetensors", tensors, {{"format", "pt"}}).is_ok());
  EXPECT_EQ(read_file(dir / "x.safetensors"), expected);

  // Without metadata there is no "__metadata__" key at all; names are JSON-escaped.
  const std::vector<TensorToWrite> one = {{"q\"uote\\", DType::kU8, {1}, d}};
  ASSERT_TRUE(write_safetensors(dir / "y.safetensors", one).is_ok());
  std::string header2 = R"({"q\"uote\\":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  header2.append((8 - header2.size() % 8) % 8, ' ');
  EXPECT_EQ(read_file(dir / "y.safetensors"), le64(header2.size()) + header2 + "*");
  const auto store = WeightStore::open_file(dir / "y.safetensors");
  ASSERT_TRUE(store.is_ok()) << store.status().to_string();
  EXPECT_TRUE((*store)->contains("q\"uote\\"));
}

TEST(Safetensors, MatchesTheReferenceImplementationsTestVectors) {
  // The expected bytes of safetensors' own serialization tests (tensor.rs: test_serialization,
  // test_empty, test_serialization_forced_alignement).
  std::vector<uint8_t> floats;
  for (const float f : {0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f}) {
    uint8_t b[4];
    std::memcpy(b, &f, 4);
    floats.insert(floats.end(), b, b + 4);
  }
  const std::string data(floats.begin(), floats.end());
  TempDir dir;
  std::vector<TensorToWrite> t = {{"attn.0", DType::kF32, {1, 2, 3}, floats}};
  ASSERT_TRUE(write_safetensors(dir / "a.safetensors", t).is_ok());
  EXPECT_EQ(
      read_file(dir / "a.safetensors"),
      le64(64) + R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})" + data);
  t = {{"attn0", DType::kF32, {1, 1, 2, 3}, floats}};
  ASSERT_TRUE(write_safetensors(dir / "b.safetensors", t).is_ok());
  EXPECT_EQ(read_file(dir / "b.safetensors"),
            le64(72) + R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})" +
                std::string(7, ' ') + data);
  ASSERT_TRUE(write_safetensors(dir / "c.safetensors", {}).is_ok());
  EXPECT_EQ(read_file(dir / "c.safetensors"), le64(8) + "{}      ");
  ASSERT_TRUE(write_safetensors(dir / "d.safetensors", {}, {{"framework", "pt"}}).is_ok());
  EXPECT_EQ(read_file(dir / "d.safetensors"),
            le64(40) + R"({"__metadata__":{"framework":"pt"}})" + "     ");
  for (const char* name : {"a.safetensors", "b.safetensors", "c.safetensors", "d.safetensors"}) {
    EXPECT_TRUE(WeightStore::open_file(dir / name).is_ok()) << name;
  }
}

TEST(Safetensors, ReadsFilesOfOtherWriters) {
  // Unpadded header, tensors out of name order, a gap-free layout in a different order.
  const std::string header =
      R"({"w":{"dtype":"F16","shape":[2],"data_offsets":[4,8]},)"
      R"("v":{"data_offsets":[0,4],"shape":[1],"dtype":"F32"},"__metadata__":{}})";
  TempDir dir;
  write_file(dir / "o.safetensors", raw_file(header, "ABCDEFGH"));
  const auto store = WeightStore::open_file(dir / "o.safetensors");
  ASSERT_TRUE(store.is_ok()) << store.status().to_string();
  const Result<WeightView> w = (*store)->get("w");
  ASSERT_TRUE(w.is_ok());
  EXPECT_EQ(std::string(static_cast<const char*>(w->data), w->bytes), "EFGH");
  EXPECT_EQ((*store)->total_bytes(), 8u);
}

TEST(Safetensors, DtypesKvserveCannotHoldOpenButDoNotLoad) {
  const std::string header = R"({"f64":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},)"
                             R"("ok":{"dtype":"U8","shape":[2],"data_offsets":[8,10]}})";
  TempDir dir;
  write_file(dir / "f.safetensors", raw_file(header, "12345678ab"));
  const auto store = WeightStore::open_file(dir / "f.safetensors");
  ASSERT_TRUE(store.is_ok()) << store.status().to_string();
  EXPECT_TRUE((*store)->get("ok").is_ok());
  const Result<WeightView> f64 = (*store)->get("f64");
  ASSERT_FALSE(f64.is_ok());
  EXPECT_EQ(f64.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(f64.status().message().find("F64"), std::string::npos);
}

TEST(Safetensors, CorruptFilesAreErrorsNamingFileAndTensor) {
  TempDir dir;
  const auto file = dir / "bad.safetensors";
  const std::string path = file.string();
  const std::string ok_entry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  struct Case {
    std::string name;
    std::string bytes;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"empty file", "", {path, "truncated"}},
      {"short length", std::string("\x10\x00\x00", 3), {path, "truncated"}},
      {"header past end", le64(1000) + "{}", {path, "header length 1000"}},
      {"huge header length", le64(~uint64_t{0}) + "{}", {path, "header length"}},
      {"truncated header", le64(40) + "{\"a\":{\"dtype\":", {path, "header length 40"}},
      {"not json", raw_file("{\"a\": nope}", ""), {path, "not valid JSON"}},
      {"not an object", raw_file("[1,2,3]", ""), {path, "not a JSON object"}},
      {"unknown dtype",
       raw_file(R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", "12345678"),
       {path, "'a'", "unknown dtype 'Q4'"}},
      {"offsets past end", raw_file("{" + ok_entry + "}", "1234"), {path, "'a'", "past the end"}},
      {"truncated data",
       raw_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", "12345678"),
       {path, "'a'", "past the end"}},
      {"size mismatch",
       raw_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", "12345678"),
       {path, "'a'", "needs 12 bytes"}},
      {"overlap",
       raw_file("{" + ok_entry + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                "123456789012"),
       {path, "'a'", "'b'", "overlap"}},
      {"duplicate region",
       raw_file("{" + ok_entry + R"(,"b":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})",
                "12345678"),
       {path, "overlap"}},
      {"begin after end",
       raw_file(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[8,0]}})", "12345678"),
       {path, "'a'", "begin is after end"}},
      {"negative dim",
       raw_file(R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})", ""),
       {path, "'a'", "shape"}},
      {"shape not list",
       raw_file(R"({"a":{"dtype":"U8","shape":4,"data_offsets":[0,4]}})", "1234"),
       {path, "'a'", "shape"}},
      {"offsets not a pair",
       raw_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0]}})", "1234"),
       {path, "'a'", "data_offsets"}},
      {"negative offset",
       raw_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[-4,0]}})", "1234"),
       {path, "'a'", "data_offsets"}},
      {"overflowing shape",
       raw_file(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})",
                "1234"),
       {path, "'a'", "overflow"}},
      {"dtype not a string",
       raw_file(R"({"a":{"dtype":4,"shape":[4],"data_offsets":[0,4]}})", "1234"),
       {path, "'a'", "dtype"}},
      {"entry not an object", raw_file(R"({"a":[1]})", ""), {path, "'a'"}},
      {"metadata value not a string",
       raw_file(R"({"__metadata__":{"format":1}})", ""),
       {path, "__metadata__.format"}},
      {"invalid utf-8 header", raw_file("{\"\xff\":{}}", ""), {path, "JSON"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    write_file(file, c.bytes);
    const auto r = WeightStore::open_file(file);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
    for (const std::string& p : c.parts) {
      EXPECT_NE(r.status().message().find(p), std::string::npos)
          << "'" << p << "' not in: " << r.status().message();
    }
  }
  expect_error(WeightStore::open_file(dir / "none.safetensors"), StatusCode::kNotFound,
               {"none.safetensors"});
  expect_error(WeightStore::open_file(dir.path()), StatusCode::kInvalidArgument,
               {"not a regular file"});
}

TEST(Safetensors, WriterRejectsBadInput) {
  TempDir dir;
  const std::vector<uint8_t> four(4);
  std::vector<TensorToWrite> t = {{"a", DType::kF32, {2}, four}};
  Status s = write_safetensors(dir / "a.safetensors", t);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'a'"), std::string::npos) << s.message();
  t = {{"a", DType::kU8, {4}, four}, {"a", DType::kU8, {4}, four}};
  s = write_safetensors(dir / "a.safetensors", t);
  EXPECT_NE(s.message().find("twice"), std::string::npos) << s.message();
  t = {{"__metadata__", DType::kU8, {4}, four}};
  EXPECT_FALSE(write_safetensors(dir / "a.safetensors", t).is_ok());
  t = {{"a", DType::kU8, {4}, four}};
  s = write_safetensors(dir / "no" / "such" / "dir.safetensors", t);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("dir.safetensors"), std::string::npos) << s.message();
}

// Two shards and an index in Hugging Face's layout.
void write_sharded(const TempDir& dir, const std::string& index) {
  const std::vector<uint8_t> x = pattern(16, 1), y = pattern(6, 2), z = pattern(1, 3);
  const std::vector<TensorToWrite> s1 = {{"model.x", DType::kF32, {2, 2}, x},
                                         {"model.y", DType::kBF16, {3}, y}};
  const std::vector<TensorToWrite> s2 = {{"lm_head.weight", DType::kU8, {1}, z}};
  ASSERT_TRUE(write_safetensors(dir / "model-00001-of-00002.safetensors", s1).is_ok());
  ASSERT_TRUE(write_safetensors(dir / "model-00002-of-00002.safetensors", s2).is_ok());
  write_file(dir / "model.safetensors.index.json", index);
}

const char* kIndex = R"({
  "metadata": {"total_size": 23},
  "weight_map": {
    "lm_head.weight": "model-00002-of-00002.safetensors",
    "model.x": "model-00001-of-00002.safetensors",
    "model.y": "model-00001-of-00002.safetensors"
  }
})";

TEST(Safetensors, ShardedCheckpoint) {
  TempDir dir;
  write_sharded(dir, kIndex);
  const auto store = WeightStore::open(dir.path());
  ASSERT_TRUE(store.is_ok()) << store.status().to_string();
  EXPECT_EQ((*store)->names(), (std::vector<std::string>{"lm_head.weight", "model.x", "model.y"}));
  EXPECT_EQ((*store)->total_bytes(), 23u);
  const Result<WeightView> y = (*store)->get("model.y");
  ASSERT_TRUE(y.is_ok());
  EXPECT_EQ(y->dtype, DType::kBF16);
  EXPECT_EQ(std::memcmp(y->data, pattern(6, 2).data(), 6), 0);
  EXPECT_NE(y->file.find("model-00001-of-00002.safetensors"), std::string::npos);
  const Result<WeightView> head = (*store)->get("lm_head.weight");
  ASSERT_TRUE(head.is_ok());
  EXPECT_NE(head->file.find("model-00002-of-00002.safetensors"), std::string::npos);
  EXPECT_FALSE((*store)->contains("model.z"));
  EXPECT_EQ((*store)->get("model.z").status().code(), StatusCode::kNotFound);
}

TEST(Safetensors, ShardedCheckpointErrors) {
  {
    TempDir dir;
    write_sharded(dir, kIndex);
    std::filesystem::remove(dir / "model-00002-of-00002.safetensors");
    expect_error(WeightStore::open(dir.path()), StatusCode::kNotFound,
                 {"model.safetensors.index.json", "model-00002-of-00002.safetensors", "missing"});
  }
  {
    TempDir dir;
    write_sharded(dir, R"({"weight_map": {"model.x": "model-00002-of-00002.safetensors"}})");
    expect_error(WeightStore::open(dir.path()), StatusCode::kInvalidArgument,
                 {"'model.x'", "model-00002-of-00002.safetensors", "does not contain"});
  }
  const std::pair<const char*, std::vector<std::string>> bad_indexes[] = {
      {R"({"metadata": {}})", {"model.safetensors.index.json: weight_map", "missing"}},
      {R"({"weight_map": [1]})", {"weight_map", "object"}},
      {R"({"weight_map": {"a": 1}})", {"weight_map.a"}},
      {R"({"weight_map": {"a": "../outside.safetensors"}})", {"weight_map.a"}},
      {R"({"weight_map": {"a": "/etc/passwd"}})", {"weight_map.a"}},
      {R"({"weight_map": )", {"model.safetensors.index.json", "not valid JSON"}},
  };
  for (const auto& [text, parts] : bad_indexes) {
    TempDir dir;
    write_sharded(dir, text);
    const auto r = WeightStore::open(dir.path());
    ASSERT_FALSE(r.is_ok()) << text;
    for (const std::string& p : parts) {
      EXPECT_NE(r.status().message().find(p), std::string::npos)
          << "'" << p << "' not in: " << r.status().message();
    }
  }
  TempDir empty;
  expect_error(WeightStore::open(empty.path()), StatusCode::kNotFound,
               {"model.safetensors", "model.safetensors.index.json"});
  expect_error(WeightStore::open(empty / "nope"), StatusCode::kNotFound, {"nope"});
}

TEST(Safetensors, SingleFileWinsOverIndex) {
  TempDir dir;
  write_sharded(dir, kIndex);
  const std::vector<uint8_t> one = {5};
  const std::vector<TensorToWrite> t = {{"only", DType::kU8, {1}, one}};
  ASSERT_TRUE(write_safetensors(dir / "model.safetensors", t).is_ok());
  const auto store = WeightStore::open(dir.path());
  ASSERT_TRUE(store.is_ok());
  EXPECT_EQ((*store)->names(), std::vector<std::string>{"only"});
}

}  // namespace
}  // namespace kvserve::checkpoint
