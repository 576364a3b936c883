// GPT-2 byte-level BPE (GPT-2's own files or a tokenizer `frugal tokenizer train` wrote),
// token-for-token identical to tiktoken's `gpt2` encoding and to Hugging Face `tokenizers`.
//
// Encoding = pre-tokenize with GPT-2's regex (byte_level.h), then turn each piece into tokens by
// BPE as GPT-2 defined it: repeatedly merge the adjacent pair with the lowest merge rank, leftmost
// first, only pairs that merges.txt lists. Merge i makes token 256 + i, so the rank is the merged
// token's id. A piece that is a vocabulary entry whose own BPE gives that one token is looked up
// directly (a shortcut with the same result). Results of BPE are cached per thread. Large inputs
// are cut into chunks at positions where the regex provably starts a new match, and chunks are
// encoded in parallel. The files: OpenAI's encoder.json + vocab.bpe or Hugging Face's vocab.json +
// merges.txt; frugal's tokenizer file names them by directory (the bundled GPT-2) or holds them.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <array>
#include <cstring>
#include <filesystem>
#include <optional>
#include <nlohmann/json.hpp>

#include "frugal/core/error.h"
#include "frugal/data/byte_level.h"
#include "frugal/data/byte_map.h"
#include "frugal/data/text.h"
#include "frugal/data/tokenizer.h"

namespace frugal::data {
namespace {

// Chunks for parallel encoding are at least this long; smaller inputs are encoded on one thread.
constexpr size_t kMinChunkBytes = 1 << 18;
// The per-thread cache of BPE results is emptied when it holds this many pieces.
constexpr size_t kMaxCacheEntries = 1 << 20;

// A vocabulary (vocab.json's object) and merges (merges.txt's text) as a BpeModel, checked as
// tiktoken and frugal's encoder need them: ids 0..N-1, all 256 bytes tokens, merge i making
// token 256 + i. vocab_name and merges_name say where they came from in errors.
BpeModel parse_bpe(const nlohmann::json& j, std::string_view text, const std::string& vocab_name,
                   const std::string& merges_name) {
  const char* fix = "use the vocab.json and merges.txt that GPT-2 or `frugal tokenizer train` wrote";
  FRUGAL_CHECK(j.is_object() && !j.empty(), "'{}' must be a JSON object mapping token strings "
               "to ids; {}", vocab_name, fix);
  BpeModel m;
  m.tokens.assign(j.size(), std::string());
  std::vector<bool> seen(j.size(), false);
  ByteStringMap ids(j.size());  // bytes -> id, without the special token
  for (const auto& [key, value] : j.items()) {
    FRUGAL_CHECK(value.is_number_integer() && value.get<int64_t>() >= 0 &&
                     value.get<int64_t>() < static_cast<int64_t>(j.size()) && !seen[value.get<int64_t>()],
                 "'{}': token '{}' has id {}, but ids must be distinct integers 0..{}; {}",
                 vocab_name, key, value.dump(), j.size() - 1, fix);
    const auto id = value.get<int32_t>();
    seen[id] = true;
    if (key == kEndOfText) {
      m.tokens[id] = std::string(kEndOfText);
      m.eot = id;
      continue;
    }
    std::optional<std::string> bytes = alphabet_to_bytes(key);
    FRUGAL_CHECK(bytes, "'{}': token '{}' has a character outside GPT-2's byte alphabet; {}",
                 vocab_name, key, fix);
    ids.insert(*bytes, static_cast<uint64_t>(id));
    m.tokens[id] = std::move(*bytes);
  }
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    FRUGAL_CHECK(ids.find(std::string_view(&c, 1)), "'{}' has no token for byte 0x{:02X}; a "
                 "byte-level BPE vocabulary needs all 256; {}", vocab_name, b, fix);
  }
  check_utf8(text, "'" + merges_name + "'");
  auto id_of = [&](std::string_view s, size_t line) {
    std::optional<std::string> bytes = alphabet_to_bytes(s);
    FRUGAL_CHECK(bytes, "'{}' line {}: '{}' has a character outside GPT-2's byte alphabet; {}",
                 merges_name, line, s, fix);
    const uint64_t* id = ids.find(*bytes);
    FRUGAL_CHECK(id, "'{}' line {}: '{}' is not a token of '{}'; {}", merges_name, line, s, vocab_name, fix);
    return static_cast<int32_t>(*id);
  };
  size_t line_no = 0, pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    const std::string_view line(text.data() + pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (line_no == 1 && line.starts_with("#version")) continue;
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    FRUGAL_CHECK(space != std::string_view::npos && space > 0 && space + 1 < line.size() &&
                     line.find(' ', space + 1) == std::string_view::npos,
                 "'{}' line {}: expected a merge 'A B', got '{}'; {}", merges_name, line_no, line, fix);
    const int32_t left = id_of(line.substr(0, space), line_no), right = id_of(line.substr(space + 1), line_no);
    // tiktoken and frugal's encoder rank a merge by the id of the token it makes.
    const uint64_t* id = ids.find(m.tokens[left] + m.tokens[right]);
    const int64_t expected = 256 + static_cast<int64_t>(m.merges.size());
    FRUGAL_CHECK(id && static_cast<int64_t>(*id) == expected, "'{}' line {}: merge '{}' should "
                 "make token {} of '{}' but {}; use a vocabulary and merges written together",
                 merges_name, line_no, line, expected, vocab_name,
                 id ? fmt::format("that token has id {}", *id) : std::string("it has no such token"));
    m.merges.emplace_back(left, right);
  }
  FRUGAL_CHECK(256 + m.merges.size() == ids.size(), "'{}' has {} merges but '{}' has {} mergeable "
               "tokens (expected 256 + merges); use a vocabulary and merges written together",
               merges_name, m.merges.size(), vocab_name, ids.size());
  return m;
}

nlohmann::json parse_json(const std::string& text, const std::string& name) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("'{}' is not valid JSON ({}); use the vocab.json that GPT-2 or `frugal tokenizer train` "
         "wrote", name, e.what());
  }
}

// Working memory of one thread: BPE scratch arrays and the piece cache.
struct EncodeScratch {
  ByteStringMap cache{1 << 12};  // piece -> (offset << 8 | count) into cache_ids
  std::vector<int32_t> cache_ids;
  std::vector<int32_t> tok, prev, next;
  std::vector<uint64_t> heap;
};

class Gpt2Tokenizer final : public Tokenizer {
 public:
  // dir: where the model's files are ("" = the bundled GPT-2); embed: to_json holds the model
  // itself, so that data directories and checkpoints keep it when dir goes away.
  Gpt2Tokenizer(BpeModel model, const std::string& dir, bool embed, const TokenizerOptions& options)
      : dir_(dir.empty() ? dir : std::filesystem::absolute(dir).lexically_normal().string()),
        embed_(embed), options_(options), model_(std::move(model)), whole_(model_.tokens.size()),
        pairs_(2 * model_.merges.size() + 16) {
    for (size_t id = 0; id < model_.tokens.size(); ++id)  // the byte tokens (parse_bpe: all 256)
      if (model_.tokens[id].size() == 1 && static_cast<int32_t>(id) != model_.eot)
        byte_token_[static_cast<uint8_t>(model_.tokens[id][0])] = static_cast<int32_t>(id);
    for (size_t i = 0; i < model_.merges.size(); ++i)
      pairs_.insert(pair_key(model_.merges[i].first, model_.merges[i].second), 256 + i);
    // The shortcut: tokens that BPE makes from their own bytes.
    EncodeScratch scratch;
    std::vector<int32_t> ids;
    for (size_t id = 0; id < model_.tokens.size(); ++id) {
      if (static_cast<int32_t>(id) == model_.eot) continue;
      ids.clear();
      bpe(model_.tokens[id], scratch, ids);
      if (ids.size() == 1 && ids[0] == static_cast<int32_t>(id)) whole_.insert(model_.tokens[id], id);
    }
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    check_utf8(text, "text to encode");
    const int threads = options_.threads > 0 ? options_.threads : omp_get_max_threads();
    // Chunk boundaries: a printable ASCII character followed by a space or newline. No match of
    // the regex spans such a position, so the matches from there on are the single-pass ones.
    std::vector<size_t> bounds{0};
    if (threads > 1 && text.size() >= 2 * kMinChunkBytes) {
      const size_t chunks = std::min(text.size() / kMinChunkBytes, static_cast<size_t>(threads) * 8);
      for (size_t c = 1; c < chunks; ++c) {
        size_t p = std::max(bounds.back() + 1, text.size() * c / chunks);
        while (p < text.size() && !is_encode_boundary(text, p)) ++p;
        if (p >= text.size()) break;
        bounds.push_back(p);
      }
    }
    bounds.push_back(text.size());
    const int nchunks = static_cast<int>(bounds.size()) - 1;
    if (nchunks == 1) {
      std::vector<int32_t> out;
      encode_range(text, 0, text.size(), thread_scratch(), out);
      return out;
    }
    std::vector<std::vector<int32_t>> parts(nchunks);
#pragma omp parallel num_threads(std::min(threads, nchunks))
    {
      EncodeScratch& scratch = thread_scratch();
#pragma omp for schedule(dynamic, 1)
      for (int c = 0; c < nchunks; ++c) encode_range(text, bounds[c], bounds[c + 1], scratch, parts[c]);
    }
    size_t total = 0;
    for (const auto& p : parts) total += p.size();
    std::vector<int32_t> out;
    out.reserve(total);
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  }

  std::string decode(std::span<const int32_t> ids) const override {
    std::string out;
    for (int32_t id : ids) out += token_bytes(id);
    return out;
  }

  std::string piece(int32_t id) const override { return std::string(token_bytes(id)); }
  int vocab_size() const override { return static_cast<int>(model_.tokens.size()); }
  int eot_token() const override { return model_.eot; }
  std::string spec() const override { return dir_.empty() ? "gpt2" : "gpt2:" + dir_; }
  std::string to_json() const override {
    nlohmann::ordered_json j = {{"type", "gpt2"}, {"dir", dir_}, {"allow_special", options_.allow_special}};
    if (embed_) {
      j["vocab"] = nlohmann::ordered_json::parse(bpe_vocab_json(model_));
      j["merges"] = bpe_merge_lines(model_);
    }
    return j.dump(1);
  }
  const BpeModel* bpe_model() const override { return &model_; }

 private:
  std::string_view token_bytes(int32_t id) const {
    FRUGAL_CHECK(id >= 0 && id < vocab_size(), "token id {} is outside the vocabulary [0, {}) of {}; "
                 "the ids were not made by this tokenizer", id, vocab_size(), spec());
    return model_.tokens[id];
  }

  static std::string_view pair_key(int32_t a, int32_t b, char (&buf)[8]) {
    std::memcpy(buf, &a, 4);
    std::memcpy(buf + 4, &b, 4);
    return {buf, 8};
  }
  static std::string pair_key(int32_t a, int32_t b) {
    char buf[8];
    return std::string(pair_key(a, b, buf));
  }
  // The token made by merging adjacent tokens a and b, or -1.
  int32_t merged(int32_t a, int32_t b) const {
    char buf[8];
    const uint64_t* v = pairs_.find(pair_key(a, b, buf));
    return v ? static_cast<int32_t>(*v) : -1;
  }

  // Appends the tokens of matches starting in [begin, end) to out.
  void encode_range(std::string_view text, size_t begin, size_t end, EncodeScratch& scratch,
                    std::vector<int32_t>& out) const {
    size_t pos = begin;
    while (pos < end) {
      size_t special = text.size();
      if (options_.allow_special && model_.eot >= 0) special = std::min(text.find(kEndOfText, pos), text.size());
      const std::string_view segment = text.substr(0, special);
      pretok_.for_each_piece(segment, pos, std::min(end, special), [&](size_t a, size_t b) {
        encode_piece(segment.substr(a, b - a), scratch, out);
      });
      if (special >= end) break;
      out.push_back(model_.eot);
      pos = special + kEndOfText.size();
    }
  }

  // The calling thread's scratch for this tokenizer, kept between calls so that encoding many
  // short texts (the documents of a corpus) keeps its piece cache warm; made anew for another
  // tokenizer (told apart by an id, never by an address that may be reused).
  EncodeScratch& thread_scratch() const {
    thread_local uint64_t owner = 0;
    thread_local std::unique_ptr<EncodeScratch> scratch;
    if (owner != instance_id_) {
      scratch = std::make_unique<EncodeScratch>();
      owner = instance_id_;
    }
    return *scratch;
  }

  void encode_piece(std::string_view piece, EncodeScratch& scratch, std::vector<int32_t>& out) const {
    if (const uint64_t* id = whole_.find(piece)) {
      out.push_back(static_cast<int32_t>(*id));
      return;
    }
    if (const uint64_t* hit = scratch.cache.find(piece)) {
      const int32_t* ids = scratch.cache_ids.data() + (*hit >> 8);
      out.insert(out.end(), ids, ids + (*hit & 0xFF));
      return;
    }
    const size_t first = out.size();
    bpe(piece, scratch, out);
    const size_t count = out.size() - first;
    if (count < 256) {
      if (scratch.cache.size() >= kMaxCacheEntries) {
        scratch.cache.clear();
        scratch.cache_ids.clear();
      }
      scratch.cache.insert(piece, (scratch.cache_ids.size() << 8) | count);
      scratch.cache_ids.insert(scratch.cache_ids.end(), out.begin() + first, out.end());
    }
  }

  // Byte-pair merging of one piece: repeatedly merge the adjacent pair of lowest merge rank (=
  // the id of the token it makes), leftmost first. A min-heap of (rank, position) with stale entries
  // skipped keeps long pieces (e.g. runs of one character) at n log n.
  void bpe(std::string_view piece, EncodeScratch& s, std::vector<int32_t>& out) const {
    const int n = static_cast<int>(piece.size());
    s.tok.resize(n);
    s.prev.resize(n);
    s.next.resize(n);
    s.heap.clear();
    for (int i = 0; i < n; ++i) {
      s.tok[i] = byte_token_[static_cast<unsigned char>(piece[i])];
      s.prev[i] = i - 1;
      s.next[i] = i + 1 < n ? i + 1 : -1;
    }
    auto push = [&](int i) {
      const int32_t r = merged(s.tok[i], s.tok[s.next[i]]);
      if (r < 0) return;
      s.heap.push_back((static_cast<uint64_t>(r) << 32) | static_cast<uint32_t>(i));
      std::push_heap(s.heap.begin(), s.heap.end(), std::greater<>());
    };
    for (int i = 0; i + 1 < n; ++i) push(i);
    while (!s.heap.empty()) {
      std::pop_heap(s.heap.begin(), s.heap.end(), std::greater<>());
      const uint64_t top = s.heap.back();
      s.heap.pop_back();
      const auto rank = static_cast<int32_t>(top >> 32);
      const auto i = static_cast<int>(top & 0xFFFFFFFFu);
      // Stale: i was merged away (tok = -1), or its pair has changed since.
      if (s.tok[i] < 0 || s.next[i] < 0 || merged(s.tok[i], s.tok[s.next[i]]) != rank) continue;
      const int j = s.next[i];
      s.tok[i] = rank;
      s.tok[j] = -1;
      s.next[i] = s.next[j];
      if (s.next[i] >= 0) {
        s.prev[s.next[i]] = i;
        push(i);
      }
      if (s.prev[i] >= 0) push(s.prev[i]);
    }
    for (int i = 0; i >= 0; i = s.next[i]) out.push_back(s.tok[i]);
  }

  std::string dir_;  // "" = the bundled files; else absolute, so that a tokenizer file written
                    // from here (data dirs, checkpoints) works from any working directory
  bool embed_ = false;
  TokenizerOptions options_;
  Pretokenizer pretok_;
  BpeModel model_;
  ByteStringMap whole_;  // bytes -> id of the tokens BPE makes from their own bytes
  ByteStringMap pairs_;  // (left id, right id) of each merge as 8 bytes -> the id it makes
  std::array<int32_t, 256> byte_token_{};
  const uint64_t instance_id_ = next_instance_id();

  static uint64_t next_instance_id() {
    static std::atomic<uint64_t> next{1};
    return next++;
  }
};

}  // namespace

Gpt2Files find_gpt2_files(const std::string& dir) {
  const std::string root = dir.empty() ? data_dir() + "/gpt2-bpe" : dir;
  const auto pair = [&](const char* vocab, const char* merges) -> std::optional<Gpt2Files> {
    Gpt2Files files{root + "/" + vocab, root + "/" + merges};
    if (!std::filesystem::is_regular_file(files.vocab) || !std::filesystem::is_regular_file(files.merges))
      return std::nullopt;
    return files;
  };
  if (auto openai = pair("encoder.json", "vocab.bpe")) return *openai;
  if (auto hf = pair("vocab.json", "merges.txt")) return *hf;
  fail("'{}' holds neither vocab.json + merges.txt (Hugging Face's GPT-2 tokenizer files) nor "
       "encoder.json + vocab.bpe (OpenAI's); point gpt2:DIR at a directory with one pair", root);
}

std::unique_ptr<Tokenizer> make_gpt2_tokenizer(const std::string& dir, const TokenizerOptions& options) {
  const Gpt2Files files = find_gpt2_files(dir);
  BpeModel model = parse_bpe(parse_json(read_text_file(files.vocab), files.vocab),
                             read_text_file(files.merges), files.vocab, files.merges);
  return std::make_unique<Gpt2Tokenizer>(std::move(model), dir, !dir.empty(), options);
}

std::unique_ptr<Tokenizer> make_gpt2_tokenizer_from_json(const std::string& json_text, const std::string& path,
                                                         const TokenizerOptions& options) {
  const nlohmann::json j = parse_json(json_text, path);
  TokenizerOptions opts = options;
  opts.allow_special = j.value("allow_special", true);
  const std::string dir = j.value("dir", "");
  if (!j.contains("vocab")) return make_gpt2_tokenizer(dir, opts);
  FRUGAL_CHECK(j.contains("merges") && j["merges"].is_array(), "'{}' has a \"vocab\" but no "
               "\"merges\" list; re-run `frugal prepare` to write it again", path);
  std::string merges;
  for (const auto& line : j["merges"]) {
    FRUGAL_CHECK(line.is_string(), "'{}': merge {} is not a string; re-run `frugal prepare` to "
                 "write it again", path, line.dump());
    merges += line.get<std::string>() + "\n";
  }
  BpeModel model = parse_bpe(j["vocab"], merges, path + " (vocab)", path + " (merges)");
  return std::make_unique<Gpt2Tokenizer>(std::move(model), dir, true, opts);
}

}  // namespace frugal::data
