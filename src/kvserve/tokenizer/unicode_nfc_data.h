// Unicode tables for NFC (generated into unicode_nfc_data.cpp by tools/gen_unicode_nfc_data.py).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvserve::tokenizer::unicode_data {

struct CombiningClassRange {
  uint32_t first;
  uint32_t last;
  uint32_t ccc;  // canonical combining class, nonzero
};
struct Decomposition {
  uint32_t code_point;
  uint32_t first;
  uint32_t second;  // 0 for a singleton decomposition
};
struct Composition {
  uint32_t first;
  uint32_t second;
  uint32_t composite;
};

extern const char kUnicodeVersion[];
extern const CombiningClassRange kCombiningClasses[];  // sorted, disjoint
extern const size_t kCombiningClassesCount;
extern const Decomposition kDecompositions[];  // sorted by code point; Hangul is algorithmic
extern const size_t kDecompositionsCount;
extern const Composition kCompositions[];  // primary composites, sorted by (first, second)
extern const size_t kCompositionsCount;

}  // namespace kvserve::tokenizer::unicode_data
