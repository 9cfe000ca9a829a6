// The first 4096 merges of GPT-2's byte-level BPE (data/tokenizer/gpt2-merges-4096.txt, MIT),
// embedded in the binary: one "left right" pair per line, in rank order.
#pragma once

#include <string_view>

namespace kvserve::makemodel {

std::string_view gpt2_merges_text();

}  // namespace kvserve::makemodel
