#include "kvserve/mem/encoder_layout.h"

#include "kvserve/mem/common.h"

namespace kvserve::mem {

Result<EncoderKvLayout> parse_encoder_kv_layout(std::string_view name) {
  if (name == "aligned") return EncoderKvLayout::kAligned;
  if (name == "ragged") return EncoderKvLayout::kRagged;
  return invalid_argument("unknown encoder KV layout '{}' (expected aligned or ragged)", name);
}

std::string_view encoder_kv_layout_name(EncoderKvLayout layout) {
  return layout == EncoderKvLayout::kAligned ? "aligned" : "ragged";
}

int32_t encoder_reserved_len(int32_t encoder_len, int32_t page_size, EncoderKvLayout layout) {
  KV_CHECK_GE(encoder_len, 0);
  if (layout == EncoderKvLayout::kRagged) return encoder_len;
  return static_cast<int32_t>(ceil_align(encoder_len, page_size));
}

KvRange cross_attention_range(const EncDecRow& r) {
  return {r.row, 0, r.encoder_len};
}

KvRange self_attention_range(const EncDecRow& r, int32_t page_size, EncoderKvLayout layout) {
  return {r.row, encoder_reserved_len(r.encoder_len, page_size, layout), r.decoder_len};
}

void build_encoder_decoder_metadata(const ReqToTokenPool& req_to_token,
                                    std::span<const EncDecRow> rows, int32_t page_size,
                                    EncoderKvLayout layout, EncoderDecoderMetadata& out) {
  std::vector<KvRange> cross(rows.size());
  std::vector<KvRange> self(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    cross[i] = cross_attention_range(rows[i]);
    self[i] = self_attention_range(rows[i], page_size, layout);
  }
  const IndexUnit unit = layout == EncoderKvLayout::kAligned ? IndexUnit::kPage : IndexUnit::kToken;
  build_kv_indices(req_to_token, cross, unit, page_size, out.cross);
  build_kv_indices(req_to_token, self, unit, page_size, out.self);
}

void split_encoder_decoder_loc(std::span<const int32_t> out_cache_loc,
                               std::span<const EncDecRow> rows, int32_t page_size,
                               EncoderKvLayout layout, std::vector<int32_t>& encoder_loc,
                               std::vector<int32_t>& decoder_loc) {
  encoder_loc.clear();
  decoder_loc.clear();
  size_t pt = 0;
  for (const EncDecRow& r : rows) {
    const int32_t reserved = encoder_reserved_len(r.encoder_len, page_size, layout);
    const size_t row_len = static_cast<size_t>(reserved) + r.decoder_len;
    KV_CHECK_LE(pt + row_len, out_cache_loc.size(), "out_cache_loc too short");
    const auto slots = out_cache_loc.subspan(pt, row_len);
    encoder_loc.insert(encoder_loc.end(), slots.begin(), slots.begin() + r.encoder_len);
    decoder_loc.insert(decoder_loc.end(), slots.begin() + reserved, slots.end());
    pt += row_len;
  }
  KV_CHECK_EQ(pt, out_cache_loc.size(), "out_cache_loc has slots no request took");
}

}  // namespace kvserve::mem
