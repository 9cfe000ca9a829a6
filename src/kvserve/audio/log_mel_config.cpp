// preprocessor_config.json -> LogMelConfig, with the typed JSON fields of model/.
#include "kvserve/audio/log_mel_config.h"

#include <optional>
#include <string>

#include "kvserve/core/json_fields.h"

namespace kvserve::audio {

int64_t LogMelConfig::num_frames() const {
  // center=True pads n_fft / 2 on each side: 1 + (n_samples + 2 * (n_fft / 2) - n_fft) / hop
  // STFT frames, of which the last is dropped.
  return (n_samples + 2 * (n_fft / 2) - n_fft) / hop_length;
}

Status validate(const LogMelConfig& c, std::string_view source) {
  auto bad = [&](std::string_view field, auto value, std::string_view rule) {
    return invalid_argument("{}: {} must be {}, got {}", source, field, rule, value);
  };
  if (c.feature_size < 1 || c.feature_size > 1024) {
    return bad("feature_size", c.feature_size, "in [1, 1024]");
  }
  if (c.sampling_rate < 1000) return bad("sampling_rate", c.sampling_rate, ">= 1000");
  if (c.n_fft < 2 || c.n_fft > 65536) return bad("n_fft", c.n_fft, "in [2, 65536]");
  if (c.hop_length < 1) return bad("hop_length", c.hop_length, ">= 1");
  if (c.chunk_length < 1) return bad("chunk_length", c.chunk_length, ">= 1");
  // Reflect padding needs more than n_fft / 2 samples; one frame needs n_fft.
  if (c.n_samples < c.n_fft || c.n_samples > (int64_t{1} << 31)) {
    return bad("n_samples", c.n_samples, "in [n_fft, 2^31]");
  }
  if (c.num_frames() < 1) return bad("n_samples", c.n_samples, "long enough for two frames");
  return Status::ok();
}

Result<LogMelConfig> parse_preprocessor_config(const std::filesystem::path& path) {
  const std::string source = path.string();
  KV_ASSIGN_OR_RETURN(const std::string text, core::read_text_file(path));
  KV_ASSIGN_OR_RETURN(const nlohmann::json root, core::parse_json(text, source));
  KV_RETURN_IF_ERROR(core::JsonFields::expect_object(root, source, ""));
  const core::JsonFields f(root, source);

  LogMelConfig c;
  auto read_int = [&](std::string_view key, int32_t& out) -> Status {
    KV_ASSIGN_OR_RETURN(const std::optional<int32_t> v, f.optional_positive_int32(key));
    if (v) out = *v;
    return Status::ok();
  };
  KV_RETURN_IF_ERROR(read_int("feature_size", c.feature_size));
  KV_RETURN_IF_ERROR(read_int("sampling_rate", c.sampling_rate));
  KV_RETURN_IF_ERROR(read_int("hop_length", c.hop_length));
  KV_RETURN_IF_ERROR(read_int("n_fft", c.n_fft));
  KV_RETURN_IF_ERROR(read_int("chunk_length", c.chunk_length));
  c.n_samples = int64_t{c.chunk_length} * c.sampling_rate;
  KV_ASSIGN_OR_RETURN(const std::optional<int64_t> n_samples, f.optional_int("n_samples"));
  if (n_samples && *n_samples != c.n_samples) {
    return f.error(
        StatusCode::kInvalidArgument, "n_samples",
        fmt::format("{} differs from chunk_length * sampling_rate = {}", *n_samples, c.n_samples));
  }
  for (const char* key : {"padding_value", "dither"}) {
    KV_ASSIGN_OR_RETURN(const std::optional<double> v, f.optional_number(key));
    if (v && *v != 0.0) {
      return f.error(StatusCode::kUnimplemented, key,
                     fmt::format("only 0.0 is supported, got {}", *v));
    }
  }
  KV_RETURN_IF_ERROR(validate(c, source));
  return c;
}

}  // namespace kvserve::audio
