#include "kvserve/tokenizer/bpe.h"

#include <fmt/format.h>

#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>

#include "kvserve/tokenizer/utf8.h"

namespace kvserve::tokenizer {
namespace {

using nlohmann::json;

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

std::optional<std::string> optional_string(const json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  return j.at(key).get<std::string>();
}

}  // namespace

Result<std::unique_ptr<BpeModel>> BpeModel::from_json(const json& j, std::string_view file) {
  auto model = std::make_unique<BpeModel>();
  if (j.contains("dropout") && !j.at("dropout").is_null() && j.at("dropout").get<double>() > 0) {
    return make_status(StatusCode::kUnimplemented, "{}: BPE dropout is not supported", file);
  }
  model->fuse_unk_ = j.value("fuse_unk", false);
  model->byte_fallback_ = j.value("byte_fallback", false);
  model->ignore_merges_ = j.value("ignore_merges", false);
  model->continuing_subword_prefix_ = optional_string(j, "continuing_subword_prefix").value_or("");
  model->end_of_word_suffix_ = optional_string(j, "end_of_word_suffix").value_or("");

  const json& vocab = j.at("vocab");
  if (!vocab.is_object()) return invalid_argument("{}: BPE vocab must be an object", file);
  model->vocab_.reserve(vocab.size());
  int32_t max_id = -1;
  for (const auto& [token, id_json] : vocab.items()) {
    const auto id = id_json.get<int64_t>();
    if (id < 0 || id > INT32_MAX) {
      return invalid_argument("{}: BPE vocab id {} of '{}' is out of range", file, id, token);
    }
    model->vocab_.emplace(token, static_cast<int32_t>(id));
    max_id = std::max(max_id, static_cast<int32_t>(id));
  }
  model->id_to_token_.resize(static_cast<size_t>(max_id + 1));
  for (const auto& [token, id] : model->vocab_)
    model->id_to_token_[static_cast<size_t>(id)] = token;

  if (const auto unk = optional_string(j, "unk_token")) {
    const auto it = model->vocab_.find(*unk);
    if (it != model->vocab_.end()) model->unk_id_ = it->second;
  }
  if (model->byte_fallback_) {
    model->byte_ids_.assign(256, -1);
    for (int b = 0; b < 256; ++b) {
      const auto it = model->vocab_.find(fmt::format("<0x{:02X}>", b));
      if (it != model->vocab_.end()) model->byte_ids_[static_cast<size_t>(b)] = it->second;
    }
  }

  const json& merges = j.at("merges");
  model->merges_.reserve(merges.size());
  const size_t prefix_len = model->continuing_subword_prefix_.size();
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    std::string left, right;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return invalid_argument("{}: BPE merge {} '{}' is not two tokens", file, rank, s);
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      return invalid_argument("{}: BPE merge {} is neither \"a b\" nor [\"a\", \"b\"]", file, rank);
    }
    const auto l = model->vocab_.find(left);
    const auto r = model->vocab_.find(right);
    if (l == model->vocab_.end() || r == model->vocab_.end()) {
      return invalid_argument("{}: BPE merge {} ('{}' '{}') uses a token not in the vocab", file,
                              rank, left, right);
    }
    std::string merged = left;
    merged.append(right.size() >= prefix_len && right.starts_with(model->continuing_subword_prefix_)
                      ? std::string_view(right).substr(prefix_len)
                      : std::string_view(right));
    const auto n = model->vocab_.find(merged);
    if (n == model->vocab_.end()) {
      return invalid_argument("{}: BPE merge {} makes '{}', which is not in the vocab", file, rank,
                              merged);
    }
    // A later duplicate of a pair overrides an earlier one, as in Hugging Face.
    model->merges_[pair_key(l->second, r->second)] =
        MergeTarget{static_cast<uint32_t>(rank), n->second};
  }
  return model;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) return nullptr;
  const std::string& t = id_to_token_[static_cast<size_t>(id)];
  return t.empty() ? nullptr : &t;
}

const BpeModel::MergeTarget* BpeModel::find_merge(int32_t left, int32_t right) const {
  const auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const auto it = vocab_.find(word);
    if (it != vocab_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordLength;
  if (cacheable) {
    std::shared_lock lock(cache_mutex_);
    const auto it = cache_.find(word);
    if (it != cache_.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = ids.size();
  merge_word(word, ids);
  if (cacheable) {
    std::unique_lock lock(cache_mutex_);
    if (cache_.size() < kCacheCapacity) {
      cache_.try_emplace(std::string(word), ids.begin() + static_cast<ptrdiff_t>(first), ids.end());
    }
  }
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& ids) const {
  // Initial symbols: one per character (or per byte with byte fallback), unknown characters
  // becoming unk (consecutive ones fused with fuse_unk).
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool removed;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](int32_t id) {
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back(Symbol{id, index - 1, index + 1, false});
  };
  int32_t pending_unk = -1;  // an unk not yet added (fuse_unk may extend it)
  std::string piece;
  for (size_t pos = 0; pos < word.size();) {
    const size_t begin = pos;
    const size_t len = utf8_sequence_length(word, pos);
    pos += len == 0 ? 1 : len;
    const std::string_view ch = word.substr(begin, pos - begin);
    piece.clear();
    if (begin != 0) piece.append(continuing_subword_prefix_);
    piece.append(ch);
    if (pos == word.size()) piece.append(end_of_word_suffix_);
    const auto it = vocab_.find(piece);
    if (it != vocab_.end()) {
      if (pending_unk >= 0) {
        add(pending_unk);
        pending_unk = -1;
      }
      add(it->second);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (const char c : piece)
        all = all && byte_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        for (const char c : piece)
          add(byte_ids_[static_cast<uint8_t>(c)]);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk >= 0 && !fuse_unk_) add(pending_unk);
      pending_unk = *unk_id_;
    }
  }
  if (pending_unk >= 0) add(pending_unk);
  if (symbols.empty()) return;
  symbols.back().next = -1;

  struct Candidate {
    uint32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const MergeTarget* m = find_merge(symbols[i].id, symbols[i + 1].id)) {
      queue.push(Candidate{m->rank, static_cast<int32_t>(i), m->new_id});
    }
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(top.pos)];
    if (left.removed || left.next < 0) continue;
    Symbol& right = symbols[static_cast<size_t>(left.next)];
    const MergeTarget* m = find_merge(left.id, right.id);
    if (m == nullptr || m->new_id != top.new_id) continue;
    left.id = top.new_id;
    right.removed = true;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = top.pos;
    if (left.prev >= 0) {
      const Symbol& prev = symbols[static_cast<size_t>(left.prev)];
      if (const MergeTarget* pm = find_merge(prev.id, left.id)) {
        queue.push(Candidate{pm->rank, left.prev, pm->new_id});
      }
    }
    if (left.next >= 0) {
      const Symbol& next = symbols[static_cast<size_t>(left.next)];
      if (const MergeTarget* nm = find_merge(left.id, next.id)) {
        queue.push(Candidate{nm->rank, top.pos, nm->new_id});
      }
    }
  }
  for (int32_t i = 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
    ids.push_back(symbols[static_cast<size_t>(i)].id);
  }
}

}  // namespace kvserve::tokenizer
