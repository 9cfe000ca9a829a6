#include "kvserve/makemodel/bpe_vocab.h"

#include <unordered_set>

#include "kvserve/makemodel/gpt2_merges.h"

namespace kvserve::makemodel {
namespace {

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

bool printable_byte(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

}  // namespace

const std::vector<uint8_t>& byte_level_order() {
  static const std::vector<uint8_t> order = [] {
    std::vector<uint8_t> o;
    for (int b = 0; b < 256; ++b) {
      if (printable_byte(b)) o.push_back(static_cast<uint8_t>(b));
    }
    for (int b = 0; b < 256; ++b) {
      if (!printable_byte(b)) o.push_back(static_cast<uint8_t>(b));
    }
    return o;
  }();
  return order;
}

const std::vector<std::string>& byte_level_symbols() {
  static const std::vector<std::string> symbols = [] {
    std::vector<std::string> s(256);
    uint32_t next = 256;  // non-printable bytes map to U+0100, U+0101, ... in byte order
    for (int b = 0; b < 256; ++b) {
      s[b] = printable_byte(b) ? utf8(static_cast<uint32_t>(b)) : utf8(next++);
    }
    return s;
  }();
  return symbols;
}

Result<BpeVocab> build_bpe_vocab(std::string_view merges_text) {
  BpeVocab v;
  std::unordered_set<std::string> known;
  for (const uint8_t b : byte_level_order()) {
    v.tokens.push_back(byte_level_symbols()[b]);
    known.insert(v.tokens.back());
  }
  size_t line_no = 0;
  while (!merges_text.empty()) {
    const size_t nl = merges_text.find('\n');
    std::string_view line = merges_text.substr(0, nl);
    merges_text = nl == std::string_view::npos ? std::string_view() : merges_text.substr(nl + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.starts_with("#version")) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || sp == 0 || sp + 1 == line.size() ||
        line.find(' ', sp + 1) != std::string_view::npos) {
      return invalid_argument("merges line {}: expected 'left right', got '{}'", line_no, line);
    }
    const std::string left(line.substr(0, sp));
    const std::string right(line.substr(sp + 1));
    if (!known.contains(left) || !known.contains(right)) {
      return invalid_argument("merges line {}: '{}' uses a token not yet in the vocabulary",
                              line_no, line);
    }
    std::string merged = left + right;
    if (!known.insert(merged).second) {
      return invalid_argument("merges line {}: '{}' repeats the token '{}'", line_no, line, merged);
    }
    v.tokens.push_back(std::move(merged));
    v.merges.emplace_back(line);
  }
  return v;
}

const BpeVocab& gpt2_4096_vocab() {
  static const BpeVocab vocab = [] {
    Result<BpeVocab> r = build_bpe_vocab(gpt2_merges_text());
    KV_CHECK(r.is_ok(), "the embedded GPT-2 merges are corrupt: {}", r.status().to_string());
    return std::move(r).value();
  }();
  return vocab;
}

}  // namespace kvserve::makemodel
