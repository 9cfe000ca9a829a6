// The tensors of a Hugging Face Llama/Qwen2/Mistral checkpoint (names, [out, in] shapes, in
// state-dict order) and how save_pretrained splits them into shards.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvserve/checkpoint/config.h"
#include "kvserve/checkpoint/safetensors_format.h"

namespace kvserve::makemodel {

// kSinusoidal: Whisper's encoder positions (whisper_checkpoint_layout.h), not learned. kZeros:
// Gemma's norm weights (its RMSNorm multiplies by 1 + weight, so zeros are the identity).
enum class TensorInit { kNormal, kOnes, kZeros, kSinusoidal };

struct CheckpointTensor {
  checkpoint::TensorSpec spec;
  TensorInit init = TensorInit::kNormal;
};

// model.embed_tokens.weight, model.layers.N.{self_attn,mlp,*_layernorm}..., model.norm.weight,
// lm_head.weight (unless tied); q/k/v biases when config.attention_bias; self_attn.q_norm /
// k_norm when config.qk_norm; pre_/post_feedforward_layernorm when config.sandwich_norms.
std::vector<CheckpointTensor> checkpoint_tensors(const checkpoint::ModelConfig& config,
                                                 DType dtype);

struct Shard {
  std::string file;  // "model.safetensors" or "model-00001-of-00004.safetensors"
  std::vector<CheckpointTensor> tensors;
  uint64_t bytes = 0;
};

// huggingface_hub's split_torch_state_dict_into_shards: tensors in order, a new shard when the
// next one would exceed max_shard_bytes, a tensor larger than the limit alone in its own shard.
std::vector<Shard> plan_shards(const std::vector<CheckpointTensor>& tensors,
                               uint64_t max_shard_bytes);

// model.safetensors.index.json for sharded checkpoints.
std::string shard_index_json_text(const std::vector<Shard>& shards);

}  // namespace kvserve::makemodel
