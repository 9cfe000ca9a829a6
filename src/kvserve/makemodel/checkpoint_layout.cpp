#include "kvserve/makemodel/checkpoint_layout.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace kvserve::makemodel {

std::vector<CheckpointTensor> checkpoint_tensors(const checkpoint::ModelConfig& c, DType dtype) {
  std::vector<CheckpointTensor> out;
  const auto add = [&](std::string name, std::vector<int64_t> shape, TensorInit init) {
    out.push_back({checkpoint::TensorSpec{std::move(name), dtype, std::move(shape)}, init});
  };
  const int64_t hidden = c.hidden_size;
  const int64_t q_dim = int64_t{c.num_attention_heads} * c.head_dim;
  const int64_t kv_dim = int64_t{c.num_key_value_heads} * c.head_dim;
  const int64_t inter = c.intermediate_size;
  // An identity norm: weight 1, or 0 where the norm multiplies by 1 + weight (Gemma).
  const TensorInit norm_init = c.norm_weight_offset != 0.0 ? TensorInit::kZeros : TensorInit::kOnes;
  add("model.embed_tokens.weight", {c.vocab_size, hidden}, TensorInit::kNormal);
  for (int32_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    add(p + "self_attn.q_proj.weight", {q_dim, hidden}, TensorInit::kNormal);
    if (c.attention_bias) add(p + "self_attn.q_proj.bias", {q_dim}, TensorInit::kNormal);
    add(p + "self_attn.k_proj.weight", {kv_dim, hidden}, TensorInit::kNormal);
    if (c.attention_bias) add(p + "self_attn.k_proj.bias", {kv_dim}, TensorInit::kNormal);
    add(p + "self_attn.v_proj.weight", {kv_dim, hidden}, TensorInit::kNormal);
    if (c.attention_bias) add(p + "self_attn.v_proj.bias", {kv_dim}, TensorInit::kNormal);
    add(p + "self_attn.o_proj.weight", {hidden, q_dim}, TensorInit::kNormal);
    if (c.qk_norm) {
      add(p + "self_attn.q_norm.weight", {c.head_dim}, norm_init);
      add(p + "self_attn.k_norm.weight", {c.head_dim}, norm_init);
    }
    add(p + "mlp.gate_proj.weight", {inter, hidden}, TensorInit::kNormal);
    add(p + "mlp.up_proj.weight", {inter, hidden}, TensorInit::kNormal);
    add(p + "mlp.down_proj.weight", {hidden, inter}, TensorInit::kNormal);
    add(p + "input_layernorm.weight", {hidden}, norm_init);
    add(p + "post_attention_layernorm.weight", {hidden}, norm_init);
    if (c.sandwich_norms) {
      add(p + "pre_feedforward_layernorm.weight", {hidden}, norm_init);
      add(p + "post_feedforward_layernorm.weight", {hidden}, norm_init);
    }
  }
  add("model.norm.weight", {hidden}, norm_init);
  if (!c.tie_word_embeddings) add("lm_head.weight", {c.vocab_size, hidden}, TensorInit::kNormal);
  return out;
}

std::vector<Shard> plan_shards(const std::vector<CheckpointTensor>& tensors,
                               uint64_t max_shard_bytes) {
  std::vector<Shard> shards;
  Shard current;
  for (const CheckpointTensor& t : tensors) {
    const uint64_t bytes = t.spec.bytes();
    if (bytes > max_shard_bytes) {
      shards.push_back(Shard{"", {t}, bytes});
      continue;
    }
    if (current.bytes + bytes > max_shard_bytes && !current.tensors.empty()) {
      shards.push_back(std::move(current));
      current = Shard{};
    }
    current.tensors.push_back(t);
    current.bytes += bytes;
  }
  if (!current.tensors.empty() || shards.empty()) shards.push_back(std::move(current));
  if (shards.size() == 1) {
    shards[0].file = "model.safetensors";
  } else {
    for (size_t i = 0; i < shards.size(); ++i) {
      shards[i].file = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
    }
  }
  return shards;
}

std::string shard_index_json_text(const std::vector<Shard>& shards) {
  nlohmann::json weight_map = nlohmann::json::object();  // sorted keys, as sort_keys=True
  uint64_t total = 0;
  for (const Shard& s : shards) {
    total += s.bytes;
    for (const CheckpointTensor& t : s.tensors)
      weight_map[t.spec.name] = s.file;
  }
  nlohmann::json index;
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = std::move(weight_map);
  return index.dump(2) + "\n";
}

}  // namespace kvserve::makemodel
