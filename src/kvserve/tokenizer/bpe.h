// The BPE model of tokenizer.json ("model": {"type": "BPE"}): merges by rank (as "a b" strings or
// ["a", "b"] pairs), ignore_merges, byte_fallback (<0xNN> tokens), unk_token, fuse_unk,
// continuing_subword_prefix and end_of_word_suffix. Dropout is not supported (kUnimplemented).
//
// Each pre-token is split into characters and the lowest-ranked adjacent pair is merged until no
// pair has a merge (a heap over a linked list of symbols, as Hugging Face's word.rs). Results of
// words up to 256 bytes are cached (shared across calls, read-mostly lock).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvserve/core/status.h"

namespace kvserve::tokenizer {

// Hash/equality that let unordered_map<std::string, V> be searched by std::string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  static Result<std::unique_ptr<BpeModel>> from_json(const nlohmann::json& model,
                                                     std::string_view file);

  // Appends the ids of one pre-token.
  void tokenize(std::string_view word, std::vector<int32_t>& ids) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(int32_t id) const;  // nullptr when unknown
  int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }

 private:
  struct MergeTarget {
    uint32_t rank;
    int32_t new_id;
  };

  void merge_word(std::string_view word, std::vector<int32_t>& ids) const;
  const MergeTarget* find_merge(int32_t left, int32_t right) const;

  StringMap<int32_t> vocab_;
  std::vector<std::string> id_to_token_;  // "" for ids the vocab does not use
  std::unordered_map<uint64_t, MergeTarget> merges_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  std::vector<int32_t> byte_ids_;  // id of <0xNN> or -1, when byte_fallback

  static constexpr size_t kCacheCapacity = 100000;
  static constexpr size_t kMaxCachedWordLength = 256;
  mutable std::shared_mutex cache_mutex_;
  mutable StringMap<std::vector<int32_t>> cache_;
};

}  // namespace kvserve::tokenizer
