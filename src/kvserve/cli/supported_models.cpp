// kvserve supported-models: what kvserve serves, printed as Markdown from the tables the loaders
// consult (the architecture table and the config.json field audit of checkpoint/, the attention
// backends' capability table), so the documentation cannot drift from the code: README.md and
// docs/supported-models.md hold this output between markers, and the `supported_models_doc` test
// fails when they differ (scripts/update-supported-models.sh rewrites them).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>
#include <string>
#include <vector>

#include "kvserve/attention/capabilities.h"
#include "kvserve/checkpoint/architectures.h"
#include "kvserve/checkpoint/config.h"
#include "kvserve/checkpoint/whisper_config.h"
#include "kvserve/cli/commands.h"

namespace kvserve::cli {
namespace {

// A table cell: Markdown's column separator escaped.
std::string cell(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

std::string yes_no(bool b) {
  return b ? "yes" : "no";
}

void print_architectures() {
  fmt::print("| architecture | model_type | what kvserve runs |\n|---|---|---|\n");
  for (const checkpoint::SupportedArchitecture& a : checkpoint::supported_architecture_table()) {
    fmt::print("| `{}` | `{}` | {} |\n", a.name, a.model_type, cell(a.summary));
  }
  fmt::print("| `{}` | `whisper` | {} |\n", checkpoint::WhisperConfig{}.architecture_name,
             "Whisper speech recognition: the log-mel front end, the encoder and the decoder with "
             "cross-attention (`/v1/audio/transcriptions`, `kvserve transcribe`)");
  fmt::print("\nAny other architecture is refused at load, naming `architectures`.\n");
}

void print_backends() {
  fmt::print(
      "| backend | device | head dims | page sizes | KV cache dtypes | GQA group | rope types | "
      "sliding window | soft-capping | encoder-decoder | decode graphs |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const attention::AttentionCapabilities& c : attention::attention_backend_table()) {
    std::vector<std::string_view> dtypes;
    for (const DType t : c.kv_dtypes)
      dtypes.push_back(dtype_name(t));
    const std::string head_dims =
        c.head_dims.empty() ? std::string("any") : fmt::format("{}", fmt::join(c.head_dims, ", "));
    const std::string pages = c.page_sizes.empty()
                                  ? std::string("1-128")
                                  : fmt::format("{}", fmt::join(c.page_sizes, ", "));
    const std::string group =
        c.max_gqa_group >= (1 << 20) ? std::string("any") : fmt::format("1-{}", c.max_gqa_group);
    fmt::print("| `{}` | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", c.name,
               c.device == DeviceKind::kCpu ? "CPU" : "CUDA", head_dims, pages,
               fmt::join(dtypes, ", "), group, fmt::join(c.rope_types, ", "),
               yes_no(c.sliding_window), yes_no(c.logit_softcap), yes_no(c.cross_attention),
               yes_no(c.decode_graphs));
  }
  fmt::print(
      "\nA model or a flag a backend cannot serve is refused at load, naming the config field or "
      "the flag and what the backend supports.\n");
}

void print_fields() {
  fmt::print("| config.json field | handling | how |\n|---|---|---|\n");
  for (const checkpoint::ConfigFieldAudit& a : checkpoint::config_field_audit()) {
    fmt::print("| `{}` | {} | {} |\n", a.field, checkpoint::field_handling_name(a.handling),
               cell(a.note));
  }
  fmt::print(
      "\nimplemented: parsed and applied; refused: load fails naming the field and its value; "
      "ignored: cannot change the logits. Keys not listed are not read (metadata and "
      "task-specific extras).\n");
}

}  // namespace

Command add_supported_models_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "supported-models",
      "Print the supported architectures, attention backends and config.json fields (Markdown)");
  auto brief = std::make_shared<bool>(false);
  cmd->add_flag("--brief", *brief, "architectures and attention backends only (README's table)");
  return {cmd, [brief] {
            fmt::print("### Architectures\n\n");
            print_architectures();
            fmt::print("\n### Attention backends\n\n");
            print_backends();
            if (!*brief) {
              fmt::print("\n### config.json fields\n\n");
              print_fields();
            }
            return 0;
          }};
}

}  // namespace kvserve::cli
