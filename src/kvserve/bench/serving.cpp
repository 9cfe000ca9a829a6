#include "kvserve/bench/serving.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <thread>

namespace kvserve::bench {
namespace {

using nlohmann::json;

Status validate(const ServingOptions& o) {
  KV_RETURN_IF_ERROR(parse_base_url(o.client.base_url).status());
  if (o.dataset_name != "sharegpt" && o.dataset_name != "random" &&
      o.dataset_name != "random-ids") {
    return invalid_argument("--dataset-name: '{}' is not one of sharegpt, random, random-ids",
                            o.dataset_name);
  }
  if (o.num_prompts < 1)
    return invalid_argument("--num-prompts must be >= 1, got {}", o.num_prompts);
  if (!(o.request_rate > 0)) {
    return invalid_argument("--request-rate must be > 0 (or inf), got {}", o.request_rate);
  }
  if (o.max_concurrency < 0) {
    return invalid_argument("--max-concurrency must be >= 1, got {}", o.max_concurrency);
  }
  if (o.warmup_requests < 0) {
    return invalid_argument("--warmup-requests must be >= 0, got {}", o.warmup_requests);
  }
  return Status::ok();
}

// The tokenizer: --tokenizer, else the directory the server reports, else none.
Result<std::unique_ptr<tokenizer::Tokenizer>> load_tokenizer(
    const ServingOptions& o, const std::function<void(std::string_view)>& log) {
  if (!o.tokenizer.empty()) {
    auto t = tokenizer::Tokenizer::from_directory(o.tokenizer);
    if (!t.is_ok()) return invalid_argument("--tokenizer: {}", t.status().message());
    return std::move(t).value();
  }
  const Result<json> info = get_json(o.client.base_url, "/get_server_info");
  if (!info.is_ok() || !info->is_object()) return std::unique_ptr<tokenizer::Tokenizer>();
  for (const char* key : {"tokenizer_path", "model_path"}) {
    auto it = info->find(key);
    if (it == info->end() || !it->is_string()) continue;
    const std::string dir = it->get<std::string>();
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) {
      log(fmt::format("the server's {} {} is not a directory here; no tokenizer", key, dir));
      return std::unique_ptr<tokenizer::Tokenizer>();
    }
    auto t = tokenizer::Tokenizer::from_directory(dir);
    if (!t.is_ok()) {
      log(fmt::format("cannot load the server's tokenizer ({}): {}", dir, t.status().message()));
      return std::unique_ptr<tokenizer::Tokenizer>();
    }
    log(fmt::format("tokenizer: {} (the server's {})", dir, key));
    return std::move(t).value();
  }
  return std::unique_ptr<tokenizer::Tokenizer>();
}

Result<std::vector<DatasetRow>> make_dataset(const ServingOptions& o,
                                             const tokenizer::Tokenizer* tok,
                                             std::mt19937_64& rng) {
  const std::string no_tokenizer =
      "needs a tokenizer: pass --tokenizer DIR (the server reported no model directory that "
      "exists here)";
  if (o.dataset_name == "sharegpt") {
    if (o.dataset_path.empty()) {
      return invalid_argument(
          "--dataset-name sharegpt needs --dataset-path (a ShareGPT JSON file; kvserve does not "
          "download it)");
    }
    if (tok == nullptr) return invalid_argument("--dataset-name sharegpt {}", no_tokenizer);
    ShareGptOptions s;
    s.path = o.dataset_path;
    s.num_prompts = o.num_prompts;
    s.fixed_output_len = o.sharegpt_output_len;
    s.context_len = o.sharegpt_context_len;
    return sample_sharegpt_requests(s, *tok, rng);
  }
  RandomDatasetOptions r;
  r.num_prompts = o.num_prompts;
  r.input_len = o.random_input_len;
  r.output_len = o.random_output_len;
  r.range_ratio = o.random_range_ratio;
  // random-ids on /generate sends the ids themselves; everything else sends text.
  r.return_text = !(o.dataset_name == "random-ids" && o.client.backend == Backend::kSglang);
  if (r.return_text && tok == nullptr) {
    return invalid_argument("--dataset-name {} {}", o.dataset_name, no_tokenizer);
  }
  return sample_random_requests(r, tok, rng);
}

Status append_line(const std::string& path, const std::string& line) {
  std::ofstream out(path, std::ios::app);
  if (!out) return make_status(StatusCode::kIoError, "--output-file: cannot open {}", path);
  out << line << '\n';
  if (!out.good()) return make_status(StatusCode::kIoError, "--output-file: cannot write {}", path);
  return Status::ok();
}

}  // namespace

Result<ServingResult> run_bench_serving(const ServingOptions& o,
                                        const std::function<void(std::string_view)>& log) {
  KV_RETURN_IF_ERROR(validate(o));
  ClientOptions client = o.client;
  KV_ASSIGN_OR_RETURN(std::unique_ptr<tokenizer::Tokenizer> tok, load_tokenizer(o, log));

  if (client.backend == Backend::kOpenAI && client.model.empty()) {
    const Result<json> models = get_json(client.base_url, "/v1/models");
    if (!models.is_ok()) {
      return unavailable("cannot ask the server for its model ({}); pass --model",
                         models.status().message());
    }
    const json* data =
        models->is_object() && models->contains("data") ? &(*models)["data"] : nullptr;
    if (data == nullptr || !data->is_array() || data->empty() || !(*data)[0].is_object() ||
        !(*data)[0].contains("id") || !(*data)[0]["id"].is_string()) {
      return unavailable("GET {}/v1/models lists no model; pass --model", client.base_url);
    }
    client.model = (*data)[0]["id"].get<std::string>();
    log(fmt::format("model: {}", client.model));
  }

  std::mt19937_64 rng(o.seed);
  KV_ASSIGN_OR_RETURN(std::vector<DatasetRow> rows, make_dataset(o, tok.get(), rng));
  if (rows.empty()) {
    return invalid_argument("the dataset {} has no usable conversations", o.dataset_path);
  }
  int64_t input_tokens = 0, output_tokens = 0;
  for (const DatasetRow& r : rows) {
    input_tokens += r.prompt_len;
    output_tokens += r.output_len;
  }
  log(fmt::format("#Input tokens: {}", input_tokens));
  log(fmt::format("#Output tokens: {}", output_tokens));
  const std::vector<double> arrivals =
      poisson_arrival_times(static_cast<int32_t>(rows.size()), o.request_rate, rng);

  if (o.warmup_requests > 0) {
    log(fmt::format("Starting warmup with {} sequences...", o.warmup_requests));
    const DatasetRow& first = rows.front();
    std::vector<DatasetRow> warmup(static_cast<size_t>(o.warmup_requests), first);
    for (DatasetRow& w : warmup)
      w.output_len = std::min(first.output_len, 32);
    const auto origin = std::chrono::steady_clock::now();
    const std::vector<double> at(warmup.size(), 0.0);
    const std::vector<RequestOutput> outs = run_requests(client, warmup, at, 0, origin);
    bool any_ok = false;
    for (const RequestOutput& w : outs)
      any_ok = any_ok || w.success;
    if (!any_ok) {
      return unavailable(
          "Warmup failed - please make sure the server is up and the benchmark arguments are "
          "right. Error: {}",
          outs.front().error);
    }
    log(fmt::format("Warmup completed with {} sequences. Starting main benchmark run...",
                    o.warmup_requests));
  }
  if (o.flush_cache) {
    if (Status s = post_empty(client.base_url, "/flush_cache"); !s.is_ok()) {
      log(fmt::format("warning: flush_cache failed: {}", s.message()));
    }
  }
  if (o.pause_after_warmup_s > 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(o.pause_after_warmup_s));
  }

  const auto origin = std::chrono::steady_clock::now();
  ServingResult result;
  result.outputs = run_requests(client, rows, arrivals, o.max_concurrency, origin);
  const double duration = std::max(seconds_since(origin), 1e-9);

  std::vector<int64_t> retokenized;
  if (tok != nullptr) {
    for (const RequestOutput& out : result.outputs) {
      retokenized.push_back(
          out.success ? static_cast<int64_t>(tok->encode(out.generated_text, false).size()) : 0);
    }
  }
  result.metrics = calculate_metrics(result.outputs, duration, retokenized);
  if (result.metrics.failed > 0) {
    for (const RequestOutput& out : result.outputs) {
      if (out.success) continue;
      log(fmt::format("{} of {} requests failed; the first error: {}", result.metrics.failed,
                      result.outputs.size(), out.error));
      break;
    }
  }
  ReportInfo info;
  info.backend = std::string(backend_name(client.backend));
  info.dataset_name = o.dataset_name;
  info.request_rate = o.request_rate;
  info.max_concurrency = o.max_concurrency;
  info.num_prompts = o.num_prompts;
  info.sharegpt_output_len = o.sharegpt_output_len;
  info.random_input_len = o.random_input_len;
  info.random_output_len = o.random_output_len;
  info.random_range_ratio = o.random_range_ratio;
  result.table = format_report(result.metrics, info);
  result.json = result_json(result.metrics, info);
  if (!o.output_file.empty()) {
    KV_RETURN_IF_ERROR(append_line(o.output_file, result.json.dump()));
  }
  return result;
}

}  // namespace kvserve::bench
