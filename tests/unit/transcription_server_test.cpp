// POST /v1/audio/transcriptions, black box: a whisper-test checkpoint (random weights, so the
// text is deterministic gibberish) served by the real Engine + TranscriptionServer on a free port,
// real multipart uploads of the committed clips from an httplib client. The expected texts come
// from the library called directly (decode_audio_file, resample, log-mel, whisper_generate on a
// runner of its own, tokenizer decode): a second decoding path beside the engine's.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "kvserve/engine/engine.h"
#include "kvserve/model/whisper_front_end.h"
#include "kvserve/server/transcription_server.h"
#include "support/whisper_test_util.h"
#include "unit/model_test_util.h"

namespace kvserve {
namespace {

using json = nlohmann::json;
using model::testing::TempDir;

const std::filesystem::path& whisper_model() {
  static TempDir dir;
  static const std::filesystem::path path = [] {
    const std::filesystem::path out = dir.path() / "whisper-test";
    const Status made =
        model::testing::make_whisper_checkpoint("whisper-test", out, DType::kBF16, /*seed=*/5);
    EXPECT_TRUE(made.is_ok()) << made.to_string();
    return out;
  }();
  return path;
}

std::string clip_path(const std::string& name) {
  return (model::testing::fixtures_dir() / "audio" / name).string();
}

std::string clip_bytes(const std::string& name) {
  return model::testing::read_file(clip_path(name));
}

// The independent path: the library's pieces, called one by one on a runner of our own.
struct Expected {
  std::string text;
  std::vector<int32_t> tokens;
  double seconds = 0;
};

Expected expected_for(const std::string& name) {
  auto t = model::testing::transcribe_with_library(whisper_model(), clip_path(name));
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  if (!t.is_ok()) return {};
  return {t->text, t->tokens, t->seconds};
}

const Expected& expected(const std::string& name) {
  static std::map<std::string, Expected> cache;
  static std::mutex mu;
  std::lock_guard lock(mu);
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, expected_for(name)).first;
  return it->second;
}

engine::EngineOptions engine_options(int max_running) {
  engine::EngineOptions o;
  o.model_path = whisper_model();
  o.runner.max_running_requests = max_running;
  return o;
}

class TranscriptionTestServer {
 public:
  explicit TranscriptionTestServer(server::ServerOptions so = {}, int max_running = 8) {
    auto e = engine::Engine::create(engine_options(max_running));
    EXPECT_TRUE(e.is_ok()) << e.status().to_string();
    engine_ = std::move(e).value();
    auto f = model::WhisperFrontEnd::load(whisper_model(), *engine_->whisper_config(),
                                          *engine_->whisper_generation_config());
    EXPECT_TRUE(f.is_ok()) << f.status().to_string();
    front_end_ = std::move(f).value();
    so.port = 0;
    http_ = std::make_unique<server::TranscriptionServer>(*engine_, *front_end_,
                                                          whisper_model().string(), so);
    EXPECT_TRUE(http_->bind().is_ok());
    thread_ = std::thread([this] { http_->run(); });
  }
  ~TranscriptionTestServer() {
    http_->stop();
    engine_->shutdown();
    thread_.join();
  }

  engine::Engine& engine() { return *engine_; }
  std::unique_ptr<httplib::Client> client(const std::string& key = "") const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", http_->port());
    c->set_read_timeout(120, 0);
    if (!key.empty()) c->set_bearer_token_auth(key.c_str());
    return c;
  }
  // POST /v1/audio/transcriptions with `items`; returns (status, body, content type).
  std::tuple<int, std::string, std::string> upload(const httplib::MultipartFormDataItems& items,
                                                   const std::string& key = "") const {
    auto res = client(key)->Post("/v1/audio/transcriptions", items);
    if (!res) return {-1, httplib::to_string(res.error()), ""};
    return {res->status, res->body, res->get_header_value("Content-Type")};
  }
  json info() const {
    auto res = client()->Get("/get_server_info");
    EXPECT_TRUE(res && res->status == 200);
    return json::parse(res->body);
  }
  // The engine publishes its counters after the step whose outputs carried the replies, so a
  // reply can arrive first: the info once nothing runs or waits (bounded wait, as
  // server_test_util.h's idle_info).
  json idle_info() const {
    json i = info();
    for (int n = 0; n < 400 && (i["num_running_reqs"] != 0 || i["num_waiting_reqs"] != 0); ++n) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      i = info();
    }
    return i;
  }

 private:
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<model::WhisperFrontEnd> front_end_;
  std::unique_ptr<server::TranscriptionServer> http_;
  std::thread thread_;
};

httplib::MultipartFormData file_item(const std::string& name) {
  return {"file", clip_bytes(name), name, "audio/wav"};
}

httplib::MultipartFormData text_item(const std::string& field, const std::string& value) {
  return {field, value, "", ""};
}

// An OpenAI error body: {"error": {"message", "type", "param", "code"}}.
void expect_error(int status, const std::string& body, int want_status, const std::string& param,
                  const std::string& message_part) {
  EXPECT_EQ(status, want_status) << body;
  const json j = json::parse(body, nullptr, false);
  ASSERT_TRUE(j.is_object() && j.contains("error")) << body;
  const json& e = j["error"];
  EXPECT_TRUE(e["message"].is_string());
  EXPECT_EQ(e["type"], "invalid_request_error") << body;
  EXPECT_TRUE(e.contains("param") && e.contains("code")) << body;
  if (!param.empty()) {
    EXPECT_EQ(e["param"], param) << body;
  }
  EXPECT_NE(e["message"].get<std::string>().find(message_part), std::string::npos) << body;
}

TEST(TranscriptionServer, JsonTextAndVerboseJsonMatchTheLibrary) {
  TranscriptionTestServer s;
  for (const std::string name : {"hello_16k.wav", "testing_22050.wav"}) {
    const Expected& want = expected(name);
    auto [status, body, type] = s.upload({file_item(name)});
    ASSERT_EQ(status, 200) << body;
    EXPECT_EQ(type, "application/json");
    EXPECT_EQ(json::parse(body), json({{"text", want.text}})) << name;

    std::tie(status, body, type) =
        s.upload({file_item(name), text_item("response_format", "text"),
                  text_item("model", "whisper-test"), text_item("temperature", "0"),
                  text_item("prompt", "ignored"), text_item("language", "en")});
    ASSERT_EQ(status, 200) << body;
    EXPECT_EQ(type.rfind("text/plain", 0), 0u) << type;
    EXPECT_EQ(body, want.text);

    std::tie(status, body, type) =
        s.upload({file_item(name), text_item("response_format", "verbose_json")});
    ASSERT_EQ(status, 200) << body;
    const json v = json::parse(body);
    EXPECT_EQ(v["task"], "transcribe");
    EXPECT_EQ(v["language"], "en");
    EXPECT_DOUBLE_EQ(v["duration"].get<double>(), want.seconds);
    EXPECT_EQ(v["text"], want.text);
    ASSERT_EQ(v["segments"].size(), 1u);
    const json& seg = v["segments"][0];
    EXPECT_EQ(seg["id"], 0);
    EXPECT_EQ(seg["start"], 0.0);
    EXPECT_DOUBLE_EQ(seg["end"].get<double>(), want.seconds);
    EXPECT_EQ(seg["text"], want.text);
    EXPECT_EQ(seg["tokens"].get<std::vector<int32_t>>(), want.tokens);
  }
  const json info = s.info();
  EXPECT_EQ(info["requests_served"], 6);
  EXPECT_EQ(info["requests_failed"], 0);
  EXPECT_EQ(info["model_type"], "whisper");
  EXPECT_EQ(info["device"], "cpu");
  EXPECT_EQ(info["page_size"], 1);
  EXPECT_EQ(info["encoder_kv_layout"], "aligned");
}

// temperature > 0 samples (whisper_pick_token): a seeded upload gives the library's sampled tokens
// for the same clip, temperature and seed, every time, also batched with other requests;
// verbose_json reports the temperature; the random-weight model's near-flat logits make the
// samples differ from the greedy text.
TEST(TranscriptionServer, TemperatureSamplesReproduciblyWithASeed) {
  TranscriptionTestServer s;
  const std::string name = "hello_16k.wav";
  auto want = model::testing::transcribe_with_library(whisper_model(), clip_path(name), {},
                                                      /*temperature=*/0.8f, /*seed=*/42);
  ASSERT_TRUE(want.is_ok()) << want.status().to_string();
  EXPECT_NE(want->tokens, expected(name).tokens) << "sampling gave the greedy tokens";
  const httplib::MultipartFormDataItems sampled = {file_item(name), text_item("temperature", "0.8"),
                                                   text_item("seed", "42"),
                                                   text_item("response_format", "verbose_json")};
  for (int i = 0; i < 2; ++i) {
    auto [status, body, type] = s.upload(sampled);
    ASSERT_EQ(status, 200) << body;
    const json v = json::parse(body);
    EXPECT_EQ(v["text"], want->text);
    EXPECT_EQ(v["segments"][0]["tokens"].get<std::vector<int32_t>>(), want->tokens);
    EXPECT_FLOAT_EQ(v["segments"][0]["temperature"].get<float>(), 0.8f);
  }
  // Decoded together with greedy and differently seeded uploads: the same draws.
  std::vector<std::future<std::tuple<int, std::string, std::string>>> futures;
  for (int i = 0; i < 4; ++i) {
    futures.push_back(std::async(std::launch::async, [&s, &sampled, i] {
      if (i == 1) return s.upload({file_item("spoons_16k.wav")});
      if (i == 2) {
        return s.upload(
            {file_item("hello_16k.wav"), text_item("temperature", "0.8"), text_item("seed", "7")});
      }
      return s.upload(sampled);
    }));
  }
  std::vector<std::string> texts;
  for (auto& f : futures) {
    auto [status, body, type] = f.get();
    ASSERT_EQ(status, 200) << body;
    texts.push_back(json::parse(body)["text"]);
  }
  EXPECT_EQ(texts[0], want->text);
  EXPECT_EQ(texts[3], want->text);
  EXPECT_EQ(texts[1], expected("spoons_16k.wav").text);
}

// 8 uploads one after the other (each its own prefill), then 8 at once (decoded together by the
// engine's continuous batching): each text is the one a lone request gets.
TEST(TranscriptionServer, ConcurrentUploadsAreBatchedWithoutChangingTheText) {
  TranscriptionTestServer s;
  const std::vector<std::string> names = {"hello_16k.wav", "testing_22050.wav", "spoons_16k.wav",
                                          "testing_16k.wav"};
  std::vector<std::string> sequential;
  for (size_t i = 0; i < 8; ++i) {
    auto [status, body, type] = s.upload({file_item(names[i % names.size()])});
    ASSERT_EQ(status, 200) << body;
    sequential.push_back(json::parse(body)["text"]);
  }
  EXPECT_EQ(s.info()["prefill_batches"], 8);

  std::vector<std::future<std::tuple<int, std::string, std::string>>> futures;
  for (size_t i = 0; i < 8; ++i) {
    futures.push_back(std::async(std::launch::async, [&s, &names, i] {
      return s.upload({file_item(names[i % names.size()])});
    }));
  }
  for (size_t i = 0; i < 8; ++i) {
    auto [status, body, type] = futures[i].get();
    ASSERT_EQ(status, 200) << body;
    EXPECT_EQ(json::parse(body)["text"], sequential[i]) << i;
  }
  const json info = s.idle_info();
  EXPECT_EQ(info["requests_served"], 16);
  EXPECT_EQ(info["requests_failed"], 0);
  EXPECT_EQ(info["num_waiting_reqs"], 0);
  EXPECT_EQ(info["num_running_reqs"], 0);
  EXPECT_EQ(info["memory_invariant_violations"], 0);
}

// More uploads than --max-running-requests: the engine holds the rest back until rows free up,
// and every text is still the lone request's.
TEST(TranscriptionServer, RunningRequestsAreCappedAtMaxRunningRequests) {
  TranscriptionTestServer s({}, /*max_running=*/3);
  EXPECT_EQ(s.info()["max_running_requests"], 3);
  std::vector<std::future<std::tuple<int, std::string, std::string>>> futures;
  for (size_t i = 0; i < 7; ++i) {
    futures.push_back(
        std::async(std::launch::async, [&s] { return s.upload({file_item("hello_16k.wav")}); }));
  }
  for (auto& f : futures) {
    auto [status, body, type] = f.get();
    ASSERT_EQ(status, 200) << body;
    EXPECT_EQ(json::parse(body)["text"], expected("hello_16k.wav").text);
  }
  const json info = s.info();
  EXPECT_EQ(info["requests_served"], 7);
  EXPECT_GE(info["prefill_batches"], 3);  // at most 3 rows: 7 requests need 3 admissions or more
}

// A 16-bit PCM mono WAV of `seconds` of a quiet tone.
std::string tone_wav(int rate, double seconds) {
  const auto n = static_cast<uint32_t>(rate * seconds);
  std::string out = "RIFF";
  const auto u32 = [&](uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); };
  const auto u16 = [&](uint16_t v) { out.append(reinterpret_cast<const char*>(&v), 2); };
  u32(36 + 2 * n);
  out += "WAVEfmt ";
  u32(16);
  u16(1);
  u16(1);
  u32(rate);
  u32(rate * 2);
  u16(2);
  u16(16);
  out += "data";
  u32(2 * n);
  for (uint32_t i = 0; i < n; ++i)
    u16(static_cast<uint16_t>(static_cast<int16_t>(1000 * ((i / 20) % 2 ? 1 : -1))));
  return out;
}

TEST(TranscriptionServer, BadRequestsAreOpenAiErrorsAndTheServerKeepsServing) {
  TranscriptionTestServer s;
  // Not multipart.
  auto res = s.client()->Post("/v1/audio/transcriptions", R"({"file": "x"})", "application/json");
  ASSERT_TRUE(res);
  expect_error(res->status, res->body, 400, "", "multipart/form-data");

  const auto check = [&](const httplib::MultipartFormDataItems& items, int want,
                         const std::string& param, const std::string& part) {
    auto [status, body, type] = s.upload(items);
    expect_error(status, body, want, param, part);
  };
  check({text_item("model", "whisper-test")}, 400, "file", "`file` field is required");
  check({{"file", "", "empty.wav", "audio/wav"}}, 400, "file", "empty");
  check({{"file", "these are not samples\n", "notes.wav", "audio/wav"}}, 400, "file",
        "notes.wav: not a supported audio file");
  check({{"file", tone_wav(8000, 31.0), "long.wav", "audio/wav"}}, 400, "file",
        "long-form transcription");
  check({file_item("hello_16k.wav"), text_item("language", "xx")}, 400, "language", "xx");
  check({file_item("hello_16k.wav"), text_item("response_format", "srt")}, 400, "response_format",
        "not supported");
  check({file_item("hello_16k.wav"), text_item("response_format", "vtt")}, 400, "response_format",
        "not supported");
  check({file_item("hello_16k.wav"), text_item("response_format", "yaml")}, 400, "response_format",
        "yaml");
  check({file_item("hello_16k.wav"), text_item("temperature", "1.5")}, 400, "temperature", "1.5");
  check({file_item("hello_16k.wav"), text_item("temperature", "-0.1")}, 400, "temperature", "-0.1");
  check({file_item("hello_16k.wav"), text_item("temperature", "warm")}, 400, "temperature", "warm");
  check({file_item("hello_16k.wav"), text_item("seed", "-3")}, 400, "seed", "-3");
  check({file_item("hello_16k.wav"), text_item("seed", "4x")}, 400, "seed", "4x");
  {
    auto [status, body, type] =
        s.upload({file_item("hello_16k.wav"), text_item("model", "whisper-large-v3")});
    expect_error(status, body, 404, "model", "whisper-large-v3");
    EXPECT_EQ(json::parse(body)["error"]["code"], "model_not_found");
  }
  // A 31 s clip at 8 kHz was refused, but one of 29 s is transcribed.
  auto [status, body, type] = s.upload({{"file", tone_wav(8000, 29.0), "tone.wav", "audio/wav"}});
  EXPECT_EQ(status, 200) << body;
  // Still serving, with the same answer as before.
  std::tie(status, body, type) = s.upload({file_item("hello_16k.wav")});
  ASSERT_EQ(status, 200) << body;
  EXPECT_EQ(json::parse(body)["text"], expected("hello_16k.wav").text);
  EXPECT_EQ(s.info()["requests_failed"], 0);
}

TEST(TranscriptionServer, InfoRoutesAndLlmRoutesAnswerForASpeechModel) {
  TranscriptionTestServer s;
  EXPECT_EQ(s.client()->Get("/health")->status, 200);
  auto res = s.client()->Get("/v1/models");
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(json::parse(res->body)["data"][0]["id"], "whisper-test");
  for (const char* path : {"/generate", "/v1/completions", "/v1/chat/completions"}) {
    res = s.client()->Post(path, R"({"prompt": "hi", "text": "hi"})", "application/json");
    ASSERT_TRUE(res);
    expect_error(res->status, res->body, 400, "", "speech-recognition model");
  }
  res = s.client()->Get("/no/such/route");
  EXPECT_EQ(res->status, 404);
}

TEST(TranscriptionServer, ApiKeyIsRequired) {
  server::ServerOptions so;
  so.api_key = "sekrit";
  TranscriptionTestServer s(so);
  auto [status, body, type] = s.upload({file_item("hello_16k.wav")});
  EXPECT_EQ(status, 401) << body;
  EXPECT_EQ(json::parse(body)["error"]["code"], "invalid_api_key");
  std::tie(status, body, type) = s.upload({file_item("hello_16k.wav")}, "wrong");
  EXPECT_EQ(status, 401) << body;
  std::tie(status, body, type) = s.upload({file_item("hello_16k.wav")}, "sekrit");
  ASSERT_EQ(status, 200) << body;
  EXPECT_EQ(json::parse(body)["text"], expected("hello_16k.wav").text);
  EXPECT_EQ(s.client()->Get("/health")->status, 200);
  EXPECT_EQ(s.client()->Get("/v1/models")->status, 401);
}

// Shutdown with requests in flight and queued: each stream ends (abort, none hangs), later
// submissions fail with kUnavailable (the server answers 503 for both).
TEST(TranscriptionServer, ShutdownEndsEveryRequest) {
  auto e = engine::Engine::create(engine_options(/*max_running=*/1));
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  engine::Engine& engine = **e;
  const checkpoint::WhisperConfig& c = *engine.whisper_config();
  const size_t n = static_cast<size_t>(c.num_mel_bins) * c.input_frames();
  const auto features = std::make_shared<std::vector<float>>(n, 0.0f);
  auto submit = [&] {
    engine::SubmitRequest r;
    r.input_ids = {*c.decoder_start_token_id};
    r.sampling.temperature = 0.0f;
    r.sampling.ignore_eos = true;
    r.sampling.max_new_tokens = 1000;
    r.encoder_input = features;
    return engine.submit(r);
  };
  std::vector<std::shared_ptr<engine::RequestStream>> streams;
  for (int i = 0; i < 3; ++i) {
    auto stream = submit();
    ASSERT_TRUE(stream.is_ok()) << stream.status().to_string();
    streams.push_back(*stream);
  }
  engine.shutdown();
  for (auto& stream : streams) {
    engine::StreamEvent ev;
    bool finished = false;
    while (!finished && stream->pop(ev, std::chrono::seconds(30)))
      finished = ev.finished;
    ASSERT_TRUE(finished);
    EXPECT_EQ(ev.finish.kind, engine::FinishKind::kAbort);
  }
  EXPECT_EQ(submit().status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace kvserve
