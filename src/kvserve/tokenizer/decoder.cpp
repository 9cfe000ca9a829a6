#include "kvserve/tokenizer/decoder.h"

#include <nlohmann/json.hpp>

#include "kvserve/tokenizer/byte_level.h"
#include "kvserve/tokenizer/regex.h"
#include "kvserve/tokenizer/utf8.h"

namespace kvserve::tokenizer {
namespace {

using nlohmann::json;
using Tokens = std::vector<std::string>;

// Byte-level tokens back to bytes, all joined, then lossy UTF-8.
class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(Tokens& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens)
      append_bytes_of_token(bytes, t);
    tokens.assign(1, utf8_lossy(bytes));
  }
};

// The replacement character becomes a space; in the first token it is dropped (every occurrence,
// as in Hugging Face) unless prepend_scheme is "never".
class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void decode_chain(Tokens& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const std::string_view with = i == 0 && strip_first_ ? "" : " ";
      std::string out;
      out.reserve(tokens[i].size());
      size_t pos = 0;
      while (true) {
        const size_t hit = tokens[i].find(replacement_, pos);
        if (hit == std::string::npos) break;
        out.append(tokens[i], pos, hit - pos);
        out.append(with);
        pos = hit + replacement_.size();
      }
      out.append(tokens[i], pos);
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(Tokens& tokens) const override {
    for (std::string& t : tokens)
      t = regex_replace_all(pattern_, t, content_);
  }

 private:
  Regex pattern_;
  std::string content_;
};

// Runs of <0xNN> tokens become their bytes; a run that is not valid UTF-8 becomes one U+FFFD per
// byte (Hugging Face's ByteFallback, unlike from_utf8_lossy).
class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(Tokens& tokens) const override {
    Tokens out;
    out.reserve(tokens.size());
    std::string bytes;
    auto flush = [&] {
      if (bytes.empty()) return;
      if (is_valid_utf8(bytes)) {
        out.push_back(bytes);
      } else {
        for (size_t i = 0; i < bytes.size(); ++i)
          out.emplace_back(kReplacementChar);
      }
      bytes.clear();
    };
    for (std::string& t : tokens) {
      int value = -1;
      if (t.size() == 6 && t.starts_with("<0x") && t.ends_with('>')) value = parse_hex_byte(t);
      if (value >= 0) {
        bytes.push_back(static_cast<char>(value));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }

 private:
  static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  static int parse_hex_byte(std::string_view t) {
    const int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(Tokens& tokens) const override {
    std::string all;
    for (const std::string& t : tokens)
      all += t;
    tokens.assign(1, std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing occurrences of one character per token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(Tokens& tokens) const override {
    for (std::string& t : tokens) {
      size_t begin = 0, end = t.size();
      for (size_t i = 0; i < start_ && std::string_view(t).substr(begin).starts_with(content_);
           ++i) {
        begin += content_.size();
      }
      for (size_t i = 0; i < stop_ && end - begin >= content_.size() &&
                         std::string_view(t).substr(0, end).ends_with(content_);
           ++i) {
        end -= content_.size();
      }
      t = t.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

// The end-of-word suffix becomes a space (nothing after the last token).
class BpeSuffixDecoder final : public Decoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(Tokens& tokens) const override {
    if (suffix_.empty()) return;
    for (size_t i = 0; i < tokens.size(); ++i) {
      const std::string_view with = i + 1 == tokens.size() ? "" : " ";
      std::string out;
      size_t pos = 0;
      while (true) {
        const size_t hit = tokens[i].find(suffix_, pos);
        if (hit == std::string::npos) break;
        out.append(tokens[i], pos, hit - pos);
        out.append(with);
        pos = hit + suffix_.size();
      }
      out.append(tokens[i], pos);
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string suffix_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> children)
      : children_(std::move(children)) {}
  void decode_chain(Tokens& tokens) const override {
    for (const auto& c : children_)
      c->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> children_;
};

}  // namespace

Result<std::unique_ptr<Decoder>> make_decoder(const json& j, std::string_view file) {
  using Ptr = std::unique_ptr<Decoder>;
  if (j.is_null()) return Ptr();
  const std::string type = j.at("type").get<std::string>();
  if (type == "ByteLevel") return Ptr(std::make_unique<ByteLevelDecoder>());
  if (type == "Metaspace") {
    bool strip_first = true;
    if (j.contains("prepend_scheme")) {
      strip_first = j.at("prepend_scheme").get<std::string>() != "never";
    } else if (j.contains("add_prefix_space")) {
      strip_first = j.at("add_prefix_space").get<bool>();
    }
    return Ptr(std::make_unique<MetaspaceDecoder>(j.value("replacement", std::string("\u2581")),
                                                  strip_first));
  }
  if (type == "Replace") {
    KV_ASSIGN_OR_RETURN(Regex pattern,
                        make_pattern(j.at("pattern"), fmt::format("Replace decoder in {}", file)));
    return Ptr(
        std::make_unique<ReplaceDecoder>(std::move(pattern), j.at("content").get<std::string>()));
  }
  if (type == "ByteFallback") return Ptr(std::make_unique<ByteFallbackDecoder>());
  if (type == "Fuse") return Ptr(std::make_unique<FuseDecoder>());
  if (type == "Strip") {
    const std::string content = j.at("content").get<std::string>();
    if (content.empty() || utf8_sequence_length(content, 0) != content.size()) {
      return invalid_argument("{}: Strip decoder content must be one character, got '{}'", file,
                              content);
    }
    return Ptr(std::make_unique<StripDecoder>(content, j.value("start", size_t{0}),
                                              j.value("stop", size_t{0})));
  }
  if (type == "BPEDecoder") {
    return Ptr(std::make_unique<BpeSuffixDecoder>(j.value("suffix", std::string("</w>"))));
  }
  if (type == "Sequence") {
    std::vector<Ptr> children;
    for (const json& child : j.at("decoders")) {
      KV_ASSIGN_OR_RETURN(Ptr c, make_decoder(child, file));
      if (c != nullptr) children.push_back(std::move(c));
    }
    return Ptr(std::make_unique<SequenceDecoder>(std::move(children)));
  }
  return make_status(StatusCode::kUnimplemented,
                     "{}: decoder type '{}' is not supported (supported: ByteLevel, Metaspace, "
                     "Replace, ByteFallback, Fuse, Strip, BPEDecoder, Sequence)",
                     file, type);
}

}  // namespace kvserve::tokenizer
