// Byte-level BPE training (bpe_trainer.h): piece counting, the incremental trainer, the
// by-definition reference trainer and the corpus sample.
#include "frugal/data/bpe_trainer.h"

#include <omp.h>

#include <algorithm>
#include <map>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "frugal/core/error.h"
#include "frugal/data/corpus.h"
#include "frugal/data/tokenizer.h"

namespace frugal::data {

void PieceCounts::add_piece(std::string_view piece, int64_t count) {
  if (const uint64_t* at = index_.find(piece)) {
    pieces_[*at].second += count;
    return;
  }
  index_.insert(piece, pieces_.size());
  pieces_.emplace_back(std::string(piece), count);
}

void PieceCounts::add(std::string_view text) {
  static const Pretokenizer pretok;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t special = std::min(text.find(kEndOfText, pos), text.size());
    const std::string_view segment = text.substr(0, special);
    pretok.for_each_piece(segment, pos, special, [&](size_t a, size_t b) { add_piece(segment.substr(a, b - a), 1); });
    pos = special + (special < text.size() ? kEndOfText.size() : 0);
  }
}

void PieceCounts::merge_from(const PieceCounts& other) {
  for (const auto& [piece, count] : other.pieces_) add_piece(piece, count);
}

namespace {

using Pair = std::pair<int32_t, int32_t>;
uint64_t key_of(Pair p) { return (static_cast<uint64_t>(p.first) << 32) | static_cast<uint32_t>(p.second); }
Pair pair_of(uint64_t key) { return {static_cast<int32_t>(key >> 32), static_cast<int32_t>(key & 0xFFFFFFFFu)}; }

// The training state both trainers share: the tokens so far, each piece as token ids, its count.
struct Words {
  BpeModel model;
  std::unordered_set<std::string> token_bytes;  // to refuse a merge that would repeat a token
  std::vector<std::vector<int32_t>> ids;
  std::vector<int64_t> counts;

  Words(const PieceCounts& counts_in, int vocab_size) {
    FRUGAL_CHECK(vocab_size >= 257, "the vocabulary size must be at least 257 (the 256 bytes and "
                 "the end-of-text token), got {}", vocab_size);
    std::array<int32_t, 256> byte_id{};
    for (int32_t id = 0; id < 256; ++id) {
      const uint8_t b = gpt2_byte_order()[id];
      byte_id[b] = id;
      model.tokens.emplace_back(1, static_cast<char>(b));
      token_bytes.insert(model.tokens.back());
    }
    for (const auto& [piece, count] : counts_in.pieces()) {
      std::vector<int32_t> w;
      w.reserve(piece.size());
      for (char c : piece) w.push_back(byte_id[static_cast<uint8_t>(c)]);
      ids.push_back(std::move(w));
      counts.push_back(count);
    }
  }

  // The bytes pair p would make, or "" when they are a token already (the pair is never merged).
  std::string new_token(Pair p) const {
    std::string bytes = model.tokens[p.first] + model.tokens[p.second];
    return token_bytes.contains(bytes) ? std::string() : bytes;
  }

  int32_t add_merge(Pair p, std::string bytes) {
    const auto id = static_cast<int32_t>(model.tokens.size());
    model.merges.push_back(p);
    token_bytes.insert(bytes);
    model.tokens.push_back(std::move(bytes));
    return id;
  }

  // Replaces the occurrences of p in word w, left to right, by id; false when it has none.
  bool apply(size_t w, Pair p, int32_t id) {
    std::vector<int32_t>& word = ids[w];
    size_t out = 0;
    bool changed = false;
    for (size_t i = 0; i < word.size(); ++i) {
      if (i + 1 < word.size() && word[i] == p.first && word[i + 1] == p.second) {
        word[out++] = id;
        ++i;
        changed = true;
      } else {
        word[out++] = word[i];
      }
    }
    word.resize(out);
    return changed;
  }

  BpeModel finish() {
    model.eot = static_cast<int32_t>(model.tokens.size());
    model.tokens.emplace_back(kEndOfText);
    return std::move(model);
  }
};

}  // namespace

BpeModel train_bpe_reference(const PieceCounts& counts, int vocab_size) {
  Words words(counts, vocab_size);
  while (static_cast<int>(words.model.tokens.size()) + 1 < vocab_size) {
    std::map<Pair, int64_t> pairs;  // ordered by (left, right): the first of the most frequent wins
    for (size_t w = 0; w < words.ids.size(); ++w)
      for (size_t i = 0; i + 1 < words.ids[w].size(); ++i) pairs[{words.ids[w][i], words.ids[w][i + 1]}] += words.counts[w];
    Pair best{-1, -1};
    int64_t best_count = 0;
    std::string best_bytes;
    for (const auto& [p, c] : pairs) {
      if (c <= best_count) continue;
      std::string bytes = words.new_token(p);
      if (bytes.empty()) continue;
      best = p, best_count = c, best_bytes = std::move(bytes);
    }
    if (best_count == 0) break;
    const int32_t id = words.add_merge(best, std::move(best_bytes));
    for (size_t w = 0; w < words.ids.size(); ++w) words.apply(w, best, id);
  }
  return words.finish();
}

BpeModel train_bpe(const PieceCounts& counts, int vocab_size) {
  Words words(counts, vocab_size);
  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<uint32_t>> where;  // pair -> words that held it (maybe stale)
  for (size_t w = 0; w < words.ids.size(); ++w) {
    const std::vector<int32_t>& word = words.ids[w];
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const uint64_t k = key_of({word[i], word[i + 1]});
      pair_count[k] += words.counts[w];
      std::vector<uint32_t>& list = where[k];
      if (list.empty() || list.back() != w) list.push_back(static_cast<uint32_t>(w));
    }
  }
  // Max-heap on (count, then the smaller pair key); an entry is stale when its count is not the
  // pair's count now: a stale higher count is re-pushed with the current one, a lower one is
  // dropped (an entry with the current count was pushed when it rose).
  struct Entry {
    int64_t count;
    uint64_t key;
    bool operator<(const Entry& o) const { return count != o.count ? count < o.count : key > o.key; }
  };
  std::priority_queue<Entry> heap;
  for (const auto& [k, c] : pair_count) heap.push({c, k});
  std::unordered_set<uint64_t> refused;  // pairs whose bytes are a token already
  std::unordered_map<uint64_t, int64_t> delta;
  std::vector<uint32_t> stamp(words.ids.size(), 0);  // merge number that last visited a word
  uint32_t merge_no = 0;
  while (static_cast<int>(words.model.tokens.size()) + 1 < vocab_size && !heap.empty()) {
    const Entry top = heap.top();
    heap.pop();
    const auto it = pair_count.find(top.key);
    const int64_t now = it == pair_count.end() ? 0 : it->second;
    if (now != top.count) {
      if (now > 0 && now < top.count) heap.push({now, top.key});
      continue;
    }
    if (now <= 0 || refused.contains(top.key)) continue;
    const Pair p = pair_of(top.key);
    std::string bytes = words.new_token(p);
    if (bytes.empty()) {
      refused.insert(top.key);
      continue;
    }
    const int32_t id = words.add_merge(p, std::move(bytes));
    ++merge_no;
    delta.clear();
    std::vector<uint32_t> holders = std::move(where[top.key]);
    where.erase(top.key);
    for (uint32_t w : holders) {
      if (stamp[w] == merge_no) continue;
      stamp[w] = merge_no;
      const std::vector<int32_t> before = words.ids[w];
      if (!words.apply(w, p, id)) continue;
      const int64_t c = words.counts[w];
      for (size_t i = 0; i + 1 < before.size(); ++i) delta[key_of({before[i], before[i + 1]})] -= c;
      const std::vector<int32_t>& after = words.ids[w];
      for (size_t i = 0; i + 1 < after.size(); ++i) {
        const uint64_t k = key_of({after[i], after[i + 1]});
        delta[k] += c;
        if (after[i] == id || after[i + 1] == id) {
          std::vector<uint32_t>& list = where[k];
          if (list.empty() || list.back() != w) list.push_back(w);
        }
      }
    }
    for (const auto& [k, d] : delta) {
      if (d == 0) continue;
      int64_t& c = pair_count[k];
      c += d;
      if (d > 0) heap.push({c, k});
      if (c == 0) pair_count.erase(k);
    }
  }
  return words.finish();
}

CorpusSample sample_corpus(const CorpusSampleOptions& o) {
  const std::vector<std::string> files = expand_inputs(o.inputs, "input");
  const int threads = o.threads > 0 ? o.threads : omp_get_max_threads();
  CorpusSample sample;
  std::vector<PieceCounts> per_thread(threads);
  std::vector<std::string> batch;
  // Counts a batch of units on all threads (unit u on thread u % threads: order-independent sums).
  auto count_batch = [&] {
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int t = 0; t < threads; ++t)
      for (size_t u = t; u < batch.size(); u += threads) per_thread[t].add(batch[u]);
    batch.clear();
  };
  struct SampleFull {};  // thrown from the reader's callback to stop reading at the bound
  try {
    read_units(files, o.text_field, [&](TextUnit&& unit) {
      if (unit.starts_document) {
        if ((o.max_documents > 0 && sample.documents >= o.max_documents) ||
            (o.max_bytes > 0 && sample.bytes >= o.max_bytes))
          throw SampleFull{};
        ++sample.documents;
      }
      if (o.max_bytes > 0 && sample.bytes + static_cast<int64_t>(unit.text.size()) > o.max_bytes) {
        // Cut at the last boundary within the bound (where any input may be cut).
        size_t cut = static_cast<size_t>(o.max_bytes - sample.bytes);
        while (cut > 0 && !is_encode_boundary(unit.text, cut)) --cut;
        unit.text.resize(cut);
        sample.truncated = true;
      }
      sample.bytes += static_cast<int64_t>(unit.text.size());
      batch.push_back(std::move(unit.text));
      if (batch.size() >= static_cast<size_t>(4 * threads)) count_batch();
      if (sample.truncated) throw SampleFull{};
    });
  } catch (const SampleFull&) {
    sample.truncated = true;
  }
  count_batch();
  for (const PieceCounts& c : per_thread) sample.counts.merge_from(c);
  return sample;
}

}  // namespace frugal::data
