#include "kvserve/mem/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include "kvserve/mem/allocation.h"
#include "kvserve/mem/chunk_cache.h"
#include "kvserve/mem/invariants.h"

namespace kvserve::mem {
namespace {

constexpr uint64_t kRootHash = 0x6a09e667f3bcc908ull;

// Hash of a page-aligned prefix, chained page by page from the root.
uint64_t page_hash(uint64_t parent, std::span<const int32_t> page) {
  uint64_t h = parent ^ 0x9e3779b97f4a7c15ull;
  for (const int32_t t : page) {
    h ^= static_cast<uint32_t>(t) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
  }
  return h ^ (h >> 31);
}

struct SimReq {
  int64_t id = 0;
  std::vector<int32_t> tokens;  // prompt, then sampled tokens (the last one has no KV yet)
  int32_t prompt_len = 0;
  int32_t max_new = 0;
  bool prefilling = false;     // a chunked prefill not yet complete
  int32_t ref_locked_len = 0;  // the prefix this request locks in the reference model
  KvReqState kv;

  int32_t generated() const { return static_cast<int32_t>(tokens.size()) - prompt_len; }
};

// One cached page of the reference prefix cache.
struct RefPage {
  int32_t first_slot = 0;
  uint64_t parent = kRootHash;
  uint64_t time = 0;
  int32_t locks = 0;
};

struct Violation {
  std::string message;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Violation{fmt::format(f, std::forward<Args>(args)...)};
}

}  // namespace

std::string SimulatorStats::to_string() const {
  return fmt::format(
      "{} steps: {} admitted ({} out of memory, {} prefix-hit tokens), {} chunks, {} decode "
      "batches ({} out of memory, {} retracted), {} finished, {} evictions ({} tokens evicted in "
      "all), {} lookups, {} rollbacks, {} flushes; peak {} live requests, {} cached tokens",
      steps, admitted, admit_oom, prefix_hit_tokens, chunks, decode_batches, decode_oom, retracted,
      finished, explicit_evictions, evicted_tokens, lookups, rollbacks, flushes, max_live,
      max_cached_tokens);
}

struct MemorySimulator::Impl {
  SimulatorConfig cfg;
  int32_t ps;
  int32_t unit;  // length scale of prompts and outputs
  int32_t max_context_len;
  std::mt19937_64 rng;
  std::unique_ptr<ReqToTokenPool> req_to_token;
  std::unique_ptr<BaseTokenToKVPoolAllocator> allocator;
  std::unique_ptr<PrefixCache> cache;
  std::vector<std::pair<int32_t, int32_t>> content;  // slot -> (token, position) written there
  std::vector<std::unique_ptr<SimReq>> live;
  std::vector<std::vector<int32_t>> families;
  std::vector<int32_t> last_prompt;
  std::unordered_map<uint64_t, RefPage> ref;
  uint64_t ref_clock = 0;
  int64_t next_id = 0;
  SimulatorStats stats;
  const char* op = "";

  explicit Impl(const SimulatorConfig& c)
      : cfg(c), ps(c.page_size), unit(std::max(c.page_size, 16)), rng(c.seed) {
    KV_CHECK_GE(ps, 1);
    const int64_t slots = cfg.pool_slots > 0 ? cfg.pool_slots : 40 * static_cast<int64_t>(unit);
    max_context_len = 8 * unit;
    req_to_token = std::make_unique<ReqToTokenPool>(cfg.max_requests, max_context_len);
    allocator = make_allocator(slots, ps);
    if (cfg.radix_cache) {
      cache = std::make_unique<RadixCache>(*req_to_token, *allocator, cfg.eviction_policy);
    } else {
      cache = std::make_unique<ChunkCache>(*req_to_token, *allocator);
    }
    content.assign(allocator->size() + ps, {-1, -1});
    for (int i = 0; i < 6; ++i) {
      std::vector<int32_t> f(uniform(0, 3 * unit));
      for (int32_t& t : f)
        t = random_token();
      families.push_back(std::move(f));
    }
  }

  KvMemory mem() { return {*req_to_token, *allocator, *cache}; }
  int64_t uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng); }
  int32_t random_token() { return static_cast<int32_t>(uniform(1, 499)); }

  // --- the reference prefix cache --------------------------------------------------------

  std::vector<uint64_t> prefix_hashes(std::span<const int32_t> key) const {
    std::vector<uint64_t> hashes;
    uint64_t h = kRootHash;
    for (size_t p = 0; p + ps <= key.size(); p += ps) {
      h = page_hash(h, key.subspan(p, ps));
      hashes.push_back(h);
    }
    return hashes;
  }

  int64_t ref_match(std::span<const int32_t> key, std::vector<int32_t>* indices) const {
    if (!cfg.radix_cache) return 0;
    int64_t n = 0;
    for (const uint64_t h : prefix_hashes(key)) {
      const auto it = ref.find(h);
      if (it == ref.end()) break;
      for (int32_t k = 0; k < ps; ++k)
        indices->push_back(it->second.first_slot + k);
      n += ps;
    }
    return n;
  }

  // Mirrors one walk of match_prefix: the matched pages are used now.
  void ref_touch(std::span<const int32_t> key) {
    if (!cfg.radix_cache) return;
    const uint64_t now = ++ref_clock;
    for (const uint64_t h : prefix_hashes(key)) {
      const auto it = ref.find(h);
      if (it == ref.end()) break;
      it->second.time = now;
    }
  }

  // Mirrors insert: existing pages keep their slots, new pages take `slots`.
  void ref_insert(std::span<const int32_t> key, std::span<const int32_t> slots) {
    if (!cfg.radix_cache) return;
    const uint64_t now = ++ref_clock;
    uint64_t parent = kRootHash;
    const auto hashes = prefix_hashes(key);
    for (size_t k = 0; k < hashes.size(); ++k) {
      auto [it, added] = ref.try_emplace(hashes[k], RefPage{slots[k * ps], parent, now, 0});
      it->second.time = now;
      parent = hashes[k];
    }
  }

  void ref_lock(std::span<const int32_t> tokens, int64_t len, int32_t delta) {
    if (!cfg.radix_cache) return;
    const auto hashes = prefix_hashes(tokens.first(len));
    for (const uint64_t h : hashes) {
      const auto it = ref.find(h);
      if (it == ref.end()) fail("lock of a page the reference does not cache");
      it->second.locks += delta;
      if (it->second.locks < 0) fail("reference lock count below zero");
    }
  }

  // Compares the cache with the reference. Pages the reference has and the cache lost were
  // evicted: they must have been unlocked, whole subtrees, and (LRU) no newer than any unlocked
  // leaf the cache kept. Call right after anything that may evict.
  void absorb_evictions(int64_t requested = -1, int64_t evictable_before = 0, int64_t freed = 0) {
    if (!cfg.radix_cache) return;
    std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> cached;  // hash -> (slot, lock)
    cache->for_each_cached_run([&](const CachedRun& run) {
      uint64_t h = kRootHash;
      for (int32_t p = 0; p < run.start; p += ps)
        h = page_hash(h, run.path.subspan(p, ps));
      for (size_t p = run.start; p < run.path.size(); p += ps) {
        h = page_hash(h, run.path.subspan(p, ps));
        cached[h] = {run.slots[p - run.start], run.lock_ref};
      }
    });
    for (const auto& [h, page] : cached) {
      const auto it = ref.find(h);
      if (it == ref.end()) fail("the cache holds a page the reference never inserted");
      if (it->second.first_slot != page.first) {
        fail("a cached page sits at slot {}, the reference says {}", page.first,
             it->second.first_slot);
      }
      if (it->second.locks != page.second) {
        fail("a cached page has lock_ref {}, the reference counts {} locks", page.second,
             it->second.locks);
      }
    }
    std::unordered_set<uint64_t> evicted;
    uint64_t newest_evicted = 0;
    for (const auto& [h, page] : ref) {
      if (cached.contains(h)) continue;
      if (page.locks != 0) fail("evicted a page locked {} times", page.locks);
      evicted.insert(h);
      newest_evicted = std::max(newest_evicted, page.time);
    }
    if (requested >= 0) {
      const auto n = static_cast<int64_t>(evicted.size()) * ps;
      if (n != freed) fail("evict() reported {} tokens, {} left the cache", freed, n);
      if (freed < std::min(requested, evictable_before)) {
        fail("evict({}) freed {} with {} evictable", requested, freed, evictable_before);
      }
    }
    if (evicted.empty()) return;
    std::unordered_set<uint64_t> has_child;
    for (const auto& [h, page] : ref) {
      if (evicted.contains(h)) continue;
      if (evicted.contains(page.parent)) fail("evicted a page but kept its child");
      has_child.insert(page.parent);
    }
    if (cfg.eviction_policy == EvictionPolicy::kLru) {
      for (const auto& [h, page] : ref) {
        if (!evicted.contains(h) && page.locks == 0 && !has_child.contains(h) &&
            page.time < newest_evicted) {
          fail("LRU order: kept an unlocked leaf used at {}, evicted a page used at {}", page.time,
               newest_evicted);
        }
      }
    }
    for (const uint64_t h : evicted)
      ref.erase(h);
    stats.evicted_tokens += static_cast<int64_t>(evicted.size()) * ps;
  }

  // --- checks after every step -----------------------------------------------------------

  void check_all() {
    std::vector<const KvReqState*> states;
    for (const auto& r : live)
      states.push_back(&r->kv);
    MemoryReport report;
    const Status s = check_memory_invariants(mem(), states, &report);
    if (!s.is_ok()) fail("{} [{}]", s.message(), report.to_string());
    for (const auto& r : live) {
      if (r->kv.row == kNoRow) fail("live request {} without a row", r->id);
      const auto row = req_to_token->row(r->kv.row, 0, r->kv.kv_committed_len);
      for (int32_t p = 0; p < r->kv.kv_committed_len; ++p) {
        const auto [token, pos] = content[row[p]];
        if (token != r->tokens[p] || pos != p) {
          fail("request {} position {}: slot {} holds token {} of position {}, expected {}", r->id,
               p, row[p], token, pos, r->tokens[p]);
        }
      }
      if (r->prefilling) {
        const auto& pre = r->kv.prefix_indices;
        if (!std::equal(pre.begin(), pre.end(), row.begin())) {
          fail("request {}: prefix_indices differ from its row", r->id);
        }
      }
    }
    cache->for_each_cached_run([&](const CachedRun& run) {
      for (size_t k = 0; k < run.slots.size(); ++k) {
        const auto [token, pos] = content[run.slots[k]];
        const size_t p = run.start + k;
        if (token != run.path[p] || pos != static_cast<int32_t>(p)) {
          fail("cached position {}: slot {} holds token {} of position {}, expected {}", p,
               run.slots[k], token, pos, run.path[p]);
        }
      }
    });
    absorb_evictions();
    if (cfg.radix_cache && static_cast<int64_t>(ref.size()) * ps !=
                               cache->sizes().evictable + cache->sizes().protected_) {
      fail("the cache reports {} tokens, the reference {}",
           cache->sizes().evictable + cache->sizes().protected_, ref.size() * ps);
    }
    stats.max_live = std::max(stats.max_live, static_cast<int32_t>(live.size()));
    stats.max_cached_tokens =
        std::max(stats.max_cached_tokens, cache->sizes().evictable + cache->sizes().protected_);
  }

  // --- request lifecycle -----------------------------------------------------------------

  std::vector<int32_t> gen_prompt(int32_t max_len) {
    std::vector<int32_t> p;
    if (!last_prompt.empty() && chance(0.1)) {
      p = last_prompt;
    } else {
      const auto& base = families[uniform(0, static_cast<int64_t>(families.size()) - 1)];
      int64_t cut = uniform(0, static_cast<int64_t>(base.size()));
      if (chance(0.3)) {  // on a page boundary, or one token off it
        cut = floor_align(cut, ps) + (chance(0.5) ? 0 : (chance(0.5) ? 1 : -1));
        cut = std::clamp<int64_t>(cut, 0, static_cast<int64_t>(base.size()));
      }
      p.assign(base.begin(), base.begin() + cut);
      const int64_t suffix = uniform(p.empty() ? 1 : 0, 2 * unit);
      for (int64_t i = 0; i < suffix; ++i)
        p.push_back(random_token());
    }
    if (static_cast<int32_t>(p.size()) > max_len) p.resize(max_len);
    last_prompt = p;
    return p;
  }

  void write_kv(std::span<const int32_t> slots, const SimReq& r, int32_t from) {
    for (size_t i = 0; i < slots.size(); ++i) {
      const int32_t pos = from + static_cast<int32_t>(i);
      content[slots[i]] = {r.tokens[pos], pos};
    }
  }

  void cache_unfinished(SimReq& r, int32_t len) {
    const std::span<const int32_t> fill(r.tokens.data(), len);
    const int64_t aligned = floor_align(len, ps);
    const auto row = req_to_token->row(r.kv.row, 0, static_cast<int32_t>(aligned));
    const std::vector<int32_t> values(row.begin(), row.end());
    cache->cache_unfinished_req(r.kv, fill);
    if (cfg.radix_cache) {
      ref_insert(fill.first(aligned), values);
      ref_touch(fill.first(aligned));
      ref_lock(fill, aligned, +1);
      ref_lock(fill, r.ref_locked_len, -1);
      r.ref_locked_len = static_cast<int32_t>(aligned);
    }
    if (static_cast<int32_t>(r.kv.prefix_indices.size()) != len) {
      fail("cache_unfinished_req left {} prefix slots for {} tokens", r.kv.prefix_indices.size(),
           len);
    }
    if (r.kv.cache_protected_len != (cfg.radix_cache ? aligned : 0)) {
      fail("cache_unfinished_req protected {} of {}", r.kv.cache_protected_len, len);
    }
  }

  // Result processing after an extend of positions [from, seq).
  void after_extend(SimReq& r, int32_t from, int32_t seq, const std::vector<int32_t>& out) {
    if (static_cast<int32_t>(out.size()) != seq - from)
      fail("out_cache_loc has {} slots", out.size());
    const auto row = req_to_token->row(r.kv.row, from, seq - from);
    if (!std::equal(out.begin(), out.end(), row.begin())) fail("row does not hold out_cache_loc");
    write_kv(out, r, from);
    if (seq < r.prompt_len) {
      r.prefilling = true;
      ++stats.chunks;
      cache_unfinished(r, seq);
    } else {
      r.prefilling = false;
      r.tokens.push_back(random_token());
      if (chance(0.7)) cache_unfinished(r, r.prompt_len);  // share the prompt while decoding
    }
  }

  void verify_match(std::span<const int32_t> key, const MatchResult& m) {
    std::vector<int32_t> expected;
    ref_match(key, &expected);
    if (m.indices != expected) {
      fail("match_prefix of {} tokens matched {}, the reference {}", key.size(), m.indices.size(),
           expected.size());
    }
    ref_touch(key);
  }

  void release(SimReq& r, bool insert) {
    const int64_t aligned = floor_align(r.kv.kv_committed_len, ps);
    const auto row = req_to_token->row(r.kv.row, 0, static_cast<int32_t>(aligned));
    const std::vector<int32_t> values(row.begin(), row.end());
    release_kv_cache(mem(), r.kv, r.tokens, insert);
    if (cfg.radix_cache) {
      if (insert) ref_insert(std::span<const int32_t>(r.tokens).first(aligned), values);
      ref_lock(r.tokens, r.ref_locked_len, -1);
    }
    if (r.kv.row != kNoRow || r.kv.last_node != nullptr) fail("release left state behind");
  }

  void remove_live(const SimReq* r) {
    std::erase_if(live, [&](const std::unique_ptr<SimReq>& p) { return p.get() == r; });
  }

  void admit() {
    if (static_cast<int32_t>(live.size()) >= cfg.max_requests) return decode();
    op = "admit";
    auto r = std::make_unique<SimReq>();
    r->id = next_id++;
    r->max_new = static_cast<int32_t>(uniform(1, 2 * unit));
    r->tokens = gen_prompt(max_context_len - r->max_new - 2);
    r->prompt_len = static_cast<int32_t>(r->tokens.size());
    const std::span<const int32_t> key(r->tokens.data(), r->prompt_len - 1);
    MatchResult m = cache->match_prefix(key);
    verify_match(key, m);
    const auto matched = static_cast<int32_t>(m.indices.size());
    cache->inc_lock_ref(m.last_node);
    ref_lock(key, matched, +1);
    r->ref_locked_len = matched;
    r->kv.prefix_indices = m.indices;
    r->kv.cache_protected_len = matched;
    r->kv.last_node = m.last_node;

    int32_t seq = r->prompt_len;
    if (chance(0.3) && seq - matched > 1)
      seq = matched + static_cast<int32_t>(uniform(1, seq - matched - 1));
    std::vector<int32_t> out;
    KvReqState* kv = &r->kv;
    const Status s = alloc_for_extend(mem(), std::span(&kv, 1), std::span(&seq, 1), out);
    absorb_evictions();
    if (!s.is_ok()) {
      if (s.code() != StatusCode::kOutOfMemory) fail("admission failed: {}", s.to_string());
      if (r->kv.row != kNoRow || r->kv.kv_allocated_len != 0) fail("failed admission left a row");
      cache->dec_lock_ref(m.last_node);
      ref_lock(key, matched, -1);
      ++stats.admit_oom;
      return;
    }
    ++stats.admitted;
    stats.prefix_hit_tokens += matched;
    after_extend(*r, matched, seq, out);
    live.push_back(std::move(r));
  }

  void continue_chunk() {
    std::vector<SimReq*> chunked;
    for (const auto& r : live) {
      if (r->prefilling) chunked.push_back(r.get());
    }
    if (chunked.empty()) return admit();
    op = "chunk";
    SimReq& r = *chunked[uniform(0, static_cast<int64_t>(chunked.size()) - 1)];
    const int32_t from = r.kv.kv_committed_len;
    int32_t seq =
        std::min<int32_t>(r.prompt_len, from + static_cast<int32_t>(uniform(1, 2 * unit)));
    const KvReqState before = r.kv;
    std::vector<int32_t> out;
    KvReqState* kv = &r.kv;
    const Status s = alloc_for_extend(mem(), std::span(&kv, 1), std::span(&seq, 1), out);
    absorb_evictions();
    if (!s.is_ok()) {
      if (s.code() != StatusCode::kOutOfMemory) fail("chunk failed: {}", s.to_string());
      if (r.kv.kv_allocated_len != before.kv_allocated_len ||
          r.kv.prefix_indices != before.prefix_indices) {
        fail("a failed chunk changed the request");
      }
      ++stats.admit_oom;
      return;
    }
    after_extend(r, from, seq, out);
  }

  void decode() {
    std::vector<SimReq*> running;
    for (const auto& r : live) {
      if (!r->prefilling) running.push_back(r.get());
    }
    if (running.empty()) return admit();
    op = "decode";
    std::vector<SimReq*> batch;
    if (chance(0.5)) {
      batch = running;
    } else {
      for (SimReq* r : running) {
        if (chance(0.5)) batch.push_back(r);
      }
      if (batch.empty()) batch.push_back(running[0]);
    }
    std::vector<KvReqState*> states;
    for (SimReq* r : batch)
      states.push_back(&r->kv);
    std::vector<int32_t> out;
    const Status s = alloc_for_decode(mem(), states, out);
    absorb_evictions();
    ++stats.decode_batches;
    if (!s.is_ok()) {
      if (s.code() != StatusCode::kOutOfMemory) fail("decode failed: {}", s.to_string());
      ++stats.decode_oom;
      // Retract as SGLang does: fewest generated tokens first, then the longest prompt.
      SimReq* victim = *std::min_element(running.begin(), running.end(), [](auto* a, auto* b) {
        return std::pair(a->generated(), -a->prompt_len) <
               std::pair(b->generated(), -b->prompt_len);
      });
      release(*victim, /*insert=*/false);
      remove_live(victim);
      ++stats.retracted;
      return;
    }
    std::vector<SimReq*> done;
    for (size_t i = 0; i < batch.size(); ++i) {
      SimReq& r = *batch[i];
      const int32_t pos = r.kv.kv_allocated_len - 1;
      if (static_cast<int32_t>(r.tokens.size()) != pos + 1)
        fail("decode position {} of {}", pos, r.tokens.size());
      content[out[i]] = {r.tokens[pos], pos};
      r.tokens.push_back(random_token());
      if (r.generated() >= r.max_new ||
          static_cast<int32_t>(r.tokens.size()) >= max_context_len - 1) {
        done.push_back(&r);
      }
    }
    finish(done, chance(0.9));
  }

  void finish(const std::vector<SimReq*>& reqs, bool insert) {
    if (reqs.empty()) return;
    const bool group = reqs.size() > 1 || chance(0.5);
    if (group) allocator->free_group_begin();
    for (SimReq* r : reqs)
      release(*r, insert);
    if (group) allocator->free_group_end();
    for (SimReq* r : reqs)
      remove_live(r);
    stats.finished += static_cast<int64_t>(reqs.size());
  }

  void finish_random() {
    if (live.empty()) return admit();
    op = "finish";
    std::vector<SimReq*> reqs;
    for (const auto& r : live) {
      if (reqs.empty() || chance(0.2)) reqs.push_back(r.get());
    }
    std::shuffle(reqs.begin(), reqs.end(), rng);
    reqs.resize(1 + uniform(0, static_cast<int64_t>(reqs.size()) - 1));
    finish(reqs, chance(0.8));
  }

  void evict() {
    op = "evict";
    const int64_t before = cache->evictable_size();
    const int64_t n = uniform(0, before + ps);
    const int64_t freed = cache->evict(n);
    if (!cfg.radix_cache && freed != 0) fail("ChunkCache evicted {}", freed);
    absorb_evictions(n, before, freed);
    ++stats.explicit_evictions;
  }

  void lookup() {
    op = "lookup";
    std::vector<int32_t> key;
    if (!live.empty() && chance(0.5)) {
      const auto& r = *live[uniform(0, static_cast<int64_t>(live.size()) - 1)];
      key.assign(r.tokens.begin(),
                 r.tokens.begin() + uniform(0, static_cast<int64_t>(r.tokens.size())));
    } else {
      key = gen_prompt(max_context_len);
    }
    verify_match(key, cache->match_prefix(key));
    ++stats.lookups;
  }

  void rollback() {
    op = "rollback";
    const AllocatorState state = allocator->backup_state();
    const int64_t avail = allocator->available_size();
    const int64_t n = uniform(0, avail / ps + 1) * ps;
    std::vector<int32_t> out;
    const Status s = allocator->alloc(n, out);
    if (s.is_ok()) {
      std::unordered_set<int64_t> in_use;
      for (const auto& r : live) {
        const auto row = req_to_token->row(r->kv.row, 0, r->kv.kv_allocated_len);
        for (const int32_t slot : row)
          in_use.insert(slot / ps);
      }
      cache->for_each_cached_run([&](const CachedRun& run) {
        for (const int32_t slot : run.slots)
          in_use.insert(slot / ps);
      });
      for (size_t i = 0; i < out.size(); ++i) {
        if (out[i] < ps || in_use.contains(out[i] / ps))
          fail("alloc handed out slot {} in use", out[i]);
        if (i % ps != 0 && out[i] != out[i - 1] + 1) fail("alloc broke a page at slot {}", out[i]);
      }
    } else if (n <= avail) {
      fail("alloc({}) failed with {} available: {}", n, avail, s.to_string());
    }
    allocator->restore_state(state);
    if (allocator->available_size() != avail) fail("restore_state() did not restore {}", avail);
    ++stats.rollbacks;
  }

  void drain_and_flush() {
    op = "flush";
    std::vector<SimReq*> all;
    for (const auto& r : live)
      all.push_back(r.get());
    finish(all, chance(0.8));
    cache->reset();
    absorb_evictions();
    if (!ref.empty()) fail("reset() left {} cached pages", ref.size());
    ++stats.flushes;
  }

  void random_op() {
    const int64_t x = uniform(0, 99);
    if (x < 22) return admit();
    if (x < 36) return continue_chunk();
    if (x < 70) return decode();
    if (x < 78) return finish_random();
    if (x < 84) return evict();
    if (x < 92) return lookup();
    if (x < 98) return rollback();
    if (x < 99 && chance(0.3)) return drain_and_flush();
    return lookup();
  }
};

MemorySimulator::MemorySimulator(const SimulatorConfig& config)
    : impl_(std::make_unique<Impl>(config)) {}

MemorySimulator::~MemorySimulator() = default;

Status MemorySimulator::step() {
  Impl& s = *impl_;
  ++s.stats.steps;
  try {
    s.random_op();
    s.check_all();
  } catch (const Violation& v) {
    return make_status(StatusCode::kInternal, "step {} ({}): {}", s.stats.steps, s.op, v.message);
  } catch (const CheckError& e) {
    return make_status(StatusCode::kInternal, "step {} ({}): {}", s.stats.steps, s.op, e.what());
  }
  return Status::ok();
}

Status MemorySimulator::run(int64_t steps) {
  for (int64_t i = 0; i < steps; ++i)
    KV_RETURN_IF_ERROR(step());
  return Status::ok();
}

const SimulatorStats& MemorySimulator::stats() const {
  return impl_->stats;
}

}  // namespace kvserve::mem
