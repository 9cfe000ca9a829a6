#include "kvserve/tokenizer/nfc.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kvserve/tokenizer/unicode_nfc_data.h"
#include "kvserve/tokenizer/utf8.h"

namespace kvserve::tokenizer {
namespace {

namespace ud = unicode_data;

// Hangul syllables compose and decompose algorithmically.
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr uint32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// Below U+0300 no character decomposes into something that NFC changes, and none combines.
constexpr uint32_t kFirstInteresting = 0x300;

uint32_t combining_class(uint32_t cp) {
  if (cp < kFirstInteresting) return 0;
  const auto* begin = ud::kCombiningClasses;
  const auto* end = begin + ud::kCombiningClassesCount;
  const auto* it = std::upper_bound(
      begin, end, cp, [](uint32_t c, const ud::CombiningClassRange& r) { return c < r.first; });
  if (it == begin) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

const ud::Decomposition* find_decomposition(uint32_t cp) {
  const auto* begin = ud::kDecompositions;
  const auto* end = begin + ud::kDecompositionsCount;
  const auto* it = std::lower_bound(
      begin, end, cp, [](const ud::Decomposition& d, uint32_t c) { return d.code_point < c; });
  return it != end && it->code_point == cp ? it : nullptr;
}

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const ud::Decomposition* d = cp >= 0xC0 ? find_decomposition(cp) : nullptr;
  if (d == nullptr) {
    out.push_back(cp);
    return;
  }
  decompose(d->first, out);
  if (d->second != 0) decompose(d->second, out);
}

// The primary composite of (first, second), or 0.
uint32_t compose_pair(uint32_t first, uint32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase &&
      second < kVBase + kVCount) {
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  }
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 &&
      second > kTBase && second < kTBase + kTCount) {
    return first + (second - kTBase);
  }
  const auto* begin = ud::kCompositions;
  const auto* end = begin + ud::kCompositionsCount;
  const auto* it =
      std::lower_bound(begin, end, std::pair{first, second},
                       [](const ud::Composition& c, const std::pair<uint32_t, uint32_t>& key) {
                         return std::pair{c.first, c.second} < key;
                       });
  return it != end && it->first == first && it->second == second ? it->composite : 0;
}

}  // namespace

std::string nfc(std::string_view text) {
  // Fast path: nothing at or above U+0300 means nothing to do.
  bool trivial = true;
  for (size_t pos = 0; pos < text.size();) {
    const auto b = static_cast<uint8_t>(text[pos]);
    if (b < 0x80) {
      ++pos;
      continue;
    }
    if (decode_utf8(text, pos) >= kFirstInteresting) {
      trivial = false;
      break;
    }
  }
  if (trivial) return std::string(text);

  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  for (size_t pos = 0; pos < text.size();)
    decompose(decode_utf8(text, pos), cps);

  // Canonical ordering: stable sort of each run of non-starters by combining class.
  std::vector<uint32_t> ccc(cps.size());
  for (size_t i = 0; i < cps.size(); ++i)
    ccc[i] = combining_class(cps[i]);
  for (size_t i = 0; i < cps.size();) {
    if (ccc[i] == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && ccc[j] != 0)
      ++j;
    if (j - i > 1) {
      std::vector<std::pair<uint32_t, uint32_t>> run;  // (ccc, cp)
      for (size_t k = i; k < j; ++k)
        run.emplace_back(ccc[k], cps[k]);
      std::stable_sort(run.begin(), run.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
      for (size_t k = i; k < j; ++k) {
        ccc[k] = run[k - i].first;
        cps[k] = run[k - i].second;
      }
    }
    i = j;
  }

  // Canonical composition.
  std::string out;
  out.reserve(text.size());
  std::vector<uint32_t> composed;
  std::vector<uint32_t> composed_ccc;
  composed.reserve(cps.size());
  composed_ccc.reserve(cps.size());
  int64_t starter = -1;  // index in `composed` of the last starter
  for (size_t i = 0; i < cps.size(); ++i) {
    const uint32_t cp = cps[i];
    const uint32_t cc = ccc[i];
    if (starter >= 0) {
      // Blocked when a character between the starter and cp has class 0 or >= cc; after
      // canonical ordering only the last one appended can block.
      const bool adjacent = composed.size() - 1 == static_cast<size_t>(starter);
      const uint32_t last_cc = adjacent ? 0 : composed_ccc.back();
      if (adjacent || (last_cc != 0 && last_cc < cc)) {
        const uint32_t c = compose_pair(composed[static_cast<size_t>(starter)], cp);
        if (c != 0) {
          composed[static_cast<size_t>(starter)] = c;
          continue;
        }
      }
    }
    if (cc == 0) starter = static_cast<int64_t>(composed.size());
    composed.push_back(cp);
    composed_ccc.push_back(cc);
  }
  for (const uint32_t cp : composed)
    append_utf8(out, cp);
  return out;
}

}  // namespace kvserve::tokenizer
