// Encoder-decoder rows (seed 000): one req_to_token row holds [encoder region | decoder region].
//
// Cross-attention reads the encoder region, self-attention the decoder region. Two layouts:
//   kAligned (approach 1): the encoder reserves ceil_align(encoder_len, page_size) positions, so
//     the decoder region starts on a page boundary and both regions are read in place through
//     page ids. Costs up to page_size - 1 padding slots per request.
//   kRagged (approach 2): the encoder takes exactly encoder_len positions; the regions share a
//     page, so both are read by gathering token slots into a contiguous buffer (varlen path).
//     Costs a gather per forward, no padding.
// With page_size 1 the two are identical. encoder_len == 0 is legal: the cross-attention
// metadata is empty (total_kv() == 0) and a backend must not launch on it.
#pragma once

#include <string_view>
#include <vector>

#include "kvserve/core/status.h"
#include "kvserve/mem/page_table.h"

namespace kvserve::mem {

enum class EncoderKvLayout { kAligned, kRagged };

Result<EncoderKvLayout> parse_encoder_kv_layout(std::string_view name);  // "aligned" | "ragged"
std::string_view encoder_kv_layout_name(EncoderKvLayout layout);

// Positions the encoder region takes at the head of a row; the decoder region starts here.
int32_t encoder_reserved_len(int32_t encoder_len, int32_t page_size, EncoderKvLayout layout);

// One encoder-decoder request: its row and the lengths of its two regions.
struct EncDecRow {
  int32_t row = 0;
  int32_t encoder_len = 0;
  int32_t decoder_len = 0;
};

KvRange cross_attention_range(const EncDecRow& r);
KvRange self_attention_range(const EncDecRow& r, int32_t page_size, EncoderKvLayout layout);

// What the two kinds of attention of a batch read: page ids (kAligned, IndexUnit::kPage) or token
// slots to gather (kRagged, IndexUnit::kToken).
struct EncoderDecoderMetadata {
  KvIndices cross;
  KvIndices self;
};

void build_encoder_decoder_metadata(const ReqToTokenPool& req_to_token,
                                    std::span<const EncDecRow> rows, int32_t page_size,
                                    EncoderKvLayout layout, EncoderDecoderMetadata& out);

// A prefill allocates each request's whole row, [0, reserved + decoder_len), request-major in
// `out_cache_loc`. This splits those slots into where the encoder's K/V go ([0, encoder_len)) and
// where the decoder's go; the alignment padding goes to neither.
void split_encoder_decoder_loc(std::span<const int32_t> out_cache_loc,
                               std::span<const EncDecRow> rows, int32_t page_size,
                               EncoderKvLayout layout, std::vector<int32_t>& encoder_loc,
                               std::vector<int32_t>& decoder_loc);

}  // namespace kvserve::mem
