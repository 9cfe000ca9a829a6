#include "kvserve/tokenizer/normalizer.h"

#include <nlohmann/json.hpp>
#include <vector>

#include "kvserve/tokenizer/nfc.h"
#include "kvserve/tokenizer/regex.h"
#include "kvserve/tokenizer/utf8.h"

namespace kvserve::tokenizer {
namespace {

using nlohmann::json;

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> normalizers)
      : normalizers_(std::move(normalizers)) {}
  void normalize(std::string& text) const override {
    for (const auto& n : normalizers_)
      n->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> normalizers_;
};

// Hugging Face prepends only to non-empty text.
class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prepend) : prepend_(std::move(prepend)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prepend_);
  }

 private:
  std::string prepend_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& text) const override {
    text = regex_replace_all(pattern_, text, content_);
  }

 private:
  Regex pattern_;
  std::string content_;
};

class NfcNormalizer final : public Normalizer {
 public:
  void normalize(std::string& text) const override { text = nfc(text); }
};

// Strips leading and/or trailing Unicode whitespace.
class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        size_t pos = begin;
        if (!is_unicode_whitespace(decode_utf8(text, pos))) break;
        begin = pos;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80)
          --start;
        size_t pos = start;
        if (!is_unicode_whitespace(decode_utf8(text, pos))) break;
        end = start;
      }
    }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

}  // namespace

Result<std::unique_ptr<Normalizer>> make_normalizer(const json& j, std::string_view file) {
  if (j.is_null()) return std::unique_ptr<Normalizer>();
  const std::string type = j.at("type").get<std::string>();
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> children;
    for (const json& child : j.at("normalizers")) {
      KV_ASSIGN_OR_RETURN(auto n, make_normalizer(child, file));
      if (n != nullptr) children.push_back(std::move(n));
    }
    return std::unique_ptr<Normalizer>(std::make_unique<SequenceNormalizer>(std::move(children)));
  }
  if (type == "Prepend") {
    return std::unique_ptr<Normalizer>(
        std::make_unique<PrependNormalizer>(j.at("prepend").get<std::string>()));
  }
  if (type == "Replace") {
    KV_ASSIGN_OR_RETURN(Regex pattern, make_pattern(j.at("pattern"),
                                                    fmt::format("Replace normalizer in {}", file)));
    return std::unique_ptr<Normalizer>(std::make_unique<ReplaceNormalizer>(
        std::move(pattern), j.at("content").get<std::string>()));
  }
  if (type == "NFC") return std::unique_ptr<Normalizer>(std::make_unique<NfcNormalizer>());
  if (type == "Strip") {
    return std::unique_ptr<Normalizer>(std::make_unique<StripNormalizer>(
        j.value("strip_left", true), j.value("strip_right", true)));
  }
  return make_status(StatusCode::kUnimplemented,
                     "{}: normalizer type '{}' is not supported (supported: Sequence, Prepend, "
                     "Replace, NFC, Strip)",
                     file, type);
}

}  // namespace kvserve::tokenizer
