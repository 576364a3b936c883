// GPT-2 byte-level BPE, token-for-token identical to tiktoken's `gpt2` encoding.
//
// Encoding = pre-tokenize with GPT-2's regex (PCRE2, JIT-compiled, UTF + UCP), then turn each
// piece into tokens: a piece that is itself a vocabulary entry is one token; otherwise BPE merges
// the adjacent pair whose concatenation has the lowest rank (= token id), leftmost first, exactly
// as tiktoken does. Results of BPE are cached per thread. Large inputs are cut into chunks at
// positions where the regex provably starts a new match, and chunks are encoded in parallel.
// The files: OpenAI's encoder.json + vocab.bpe or Hugging Face's vocab.json + merges.txt.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <omp.h>
#include <pcre2.h>

#include <algorithm>
#include <atomic>
#include <array>
#include <cstring>
#include <filesystem>
#include <optional>
#include <nlohmann/json.hpp>

#include "frugal/core/error.h"
#include "frugal/data/byte_map.h"
#include "frugal/data/text.h"
#include "frugal/data/tokenizer.h"

namespace frugal::data {
namespace {

constexpr std::string_view kEndOfText = "<|endoftext|>";

// GPT-2's pre-tokenizer: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// written as tiktoken writes it (possessive runs; `\s+(?!\S)|\s`), with \s spelled out as Unicode
// White_Space (what tiktoken's Rust regex means by \s; PCRE2's \s also takes U+180E).
#define FRUGAL_WS "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
constexpr const char* kGpt2Pattern =
    "'(?:[sdmt]|ll|ve|re)| ?\\p{L}++| ?\\p{N}++| ?[^" FRUGAL_WS "\\p{L}\\p{N}]++"
    "|[" FRUGAL_WS "]+(?![^" FRUGAL_WS "])|[" FRUGAL_WS "]";
#undef FRUGAL_WS

// Chunks for parallel encoding are at least this long; smaller inputs are encoded on one thread.
constexpr size_t kMinChunkBytes = 1 << 18;
// The per-thread cache of BPE results is emptied when it holds this many pieces.
constexpr size_t kMaxCacheEntries = 1 << 20;

// Decodes a token string written in GPT-2's byte alphabet: bytes that print (other than space)
// stand for themselves, the other bytes are mapped in order to U+0100 and up. nullopt when the
// string has a character outside that alphabet.
std::optional<std::string> alphabet_to_bytes(std::string_view s) {
  static const std::array<int16_t, 0x200> char_to_byte = [] {
    std::array<int16_t, 0x200> table;
    table.fill(-1);
    int16_t next = 256;
    for (int16_t b = 0; b < 256; ++b) {
      const bool prints = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      table[prints ? b : next++] = b;
    }
    return table;
  }();
  std::string bytes;
  for (size_t pos = 0; pos < s.size();) {
    const uint32_t cp = next_code_point(s, pos);
    if (cp >= char_to_byte.size() || char_to_byte[cp] < 0) return std::nullopt;
    bytes.push_back(static_cast<char>(char_to_byte[cp]));
  }
  return bytes;
}

// Compiled regex plus JIT; match data is made per thread.
class Pretokenizer {
 public:
  Pretokenizer() {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2Pattern), PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
    if (!code_) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      fail("cannot compile the GPT-2 regex at offset {}: {}; PCRE2 must be built with Unicode "
           "support", err_off, reinterpret_cast<const char*>(msg));
    }
    FRUGAL_CHECK(pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0,
                 "PCRE2 JIT compilation failed; install a PCRE2 built with JIT (libpcre2-dev)");
  }
  ~Pretokenizer() { pcre2_code_free(code_); }
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  // Calls fn(begin, end) for every match starting in [begin, stop) of subject text[0, end_of_subject).
  template <class Fn>
  void for_each_piece(std::string_view text, size_t begin, size_t stop, Fn&& fn) const {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = begin;
    while (pos < stop) {
      const int rc = pcre2_jit_match(code_, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
      if (rc < 0) {
        pcre2_match_data_free(md);
        fail("GPT-2 pre-tokenizer found no match at byte {} (PCRE2 code {}); this is a bug, "
             "please report it with the input", pos, rc);
      }
      fn(ov[0], ov[1]);
      pos = ov[1];
    }
    pcre2_match_data_free(md);
  }

 private:
  pcre2_code* code_ = nullptr;
};

// Working memory of one thread: BPE scratch arrays and the piece cache.
struct EncodeScratch {
  ByteStringMap cache{1 << 12};  // piece -> (offset << 8 | count) into cache_ids
  std::vector<int32_t> cache_ids;
  std::vector<int32_t> tok, prev, next;
  std::vector<uint64_t> heap;
};

class Gpt2Tokenizer final : public Tokenizer {
 public:
  Gpt2Tokenizer(const std::string& dir, const TokenizerOptions& options)
      : dir_(dir.empty() ? dir : std::filesystem::absolute(dir).lexically_normal().string()), options_(options), vocab_(1 << 17), pairs_(1 << 19) {
    const Gpt2Files files = find_gpt2_files(dir);
    load_encoder(files.vocab);
    check_merges(files.merges, files.vocab);
    build_pairs();
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
  int vocab_size() const override { return static_cast<int>(tokens_.size()); }
  int eot_token() const override { return eot_; }
  std::string spec() const override { return dir_.empty() ? "gpt2" : "gpt2:" + dir_; }
  std::string to_json() const override {
    return nlohmann::json{{"type", "gpt2"}, {"dir", dir_}, {"allow_special", options_.allow_special}}
        .dump(1);
  }

 private:
  std::string_view token_bytes(int32_t id) const {
    FRUGAL_CHECK(id >= 0 && id < vocab_size(), "token id {} is outside the GPT-2 vocabulary "
                 "[0, {}); the ids were not made by this tokenizer", id, vocab_size());
    return tokens_[id];
  }

  void load_encoder(const std::string& path) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_text_file(path));
    } catch (const nlohmann::json::exception& e) {
      fail("'{}' is not valid JSON ({}); replace it with GPT-2's (data/gpt2-bpe/encoder.json)", path, e.what());
    }
    FRUGAL_CHECK(j.is_object() && !j.empty(), "'{}' must be a JSON object mapping token strings "
                 "to ids; replace it with GPT-2's (data/gpt2-bpe/encoder.json)", path);
    tokens_.assign(j.size(), std::string());
    std::vector<bool> seen(j.size(), false);
    for (const auto& [key, value] : j.items()) {
      FRUGAL_CHECK(value.is_number_integer() && value.get<int64_t>() >= 0 &&
                       value.get<int64_t>() < static_cast<int64_t>(j.size()) && !seen[value.get<int64_t>()],
                   "'{}': token '{}' has id {}, but ids must be distinct integers 0..{}; replace "
                   "it with GPT-2's (data/gpt2-bpe/encoder.json)", path, key, value.dump(), j.size() - 1);
      const auto id = value.get<int32_t>();
      seen[id] = true;
      if (key == kEndOfText) {
        tokens_[id] = std::string(kEndOfText);
        eot_ = id;
        continue;
      }
      std::optional<std::string> bytes = alphabet_to_bytes(key);
      FRUGAL_CHECK(bytes, "'{}': token '{}' has a character outside GPT-2's byte alphabet; "
                   "replace it with GPT-2's (data/gpt2-bpe/encoder.json)", path, key);
      vocab_.insert(*bytes, static_cast<uint64_t>(id));
      tokens_[id] = std::move(*bytes);
    }
    for (int b = 0; b < 256; ++b) {
      const char c = static_cast<char>(b);
      const uint64_t* id = vocab_.find(std::string_view(&c, 1));
      FRUGAL_CHECK(id, "'{}' has no token for byte 0x{:02X}; a byte-level BPE vocabulary needs "
                   "all 256; replace it with GPT-2's (data/gpt2-bpe/encoder.json)", path, b);
      byte_token_[b] = static_cast<int32_t>(*id);
    }
  }

  // tiktoken requires the merge list and the vocabulary (read from vocab_path) to agree: merge i
  // creates token 256 + i.
  void check_merges(const std::string& path, const std::string& vocab_path) const {
    const std::string text = read_text_file(path);
    auto to_bytes = [&](std::string_view s, size_t line) {
      std::optional<std::string> bytes = alphabet_to_bytes(s);
      FRUGAL_CHECK(bytes, "'{}' line {}: '{}' has a character outside GPT-2's byte alphabet; "
                   "replace it with GPT-2's (data/gpt2-bpe/vocab.bpe)", path, line, s);
      return *bytes;
    };
    check_utf8(text, "'" + path + "'");
    size_t line_no = 0, merges = 0, pos = 0;
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
                   "'{}' line {}: expected a merge 'A B', got '{}'; replace it with GPT-2's "
                   "(data/gpt2-bpe/vocab.bpe)", path, line_no, line);
      const std::string merged = to_bytes(line.substr(0, space), line_no) + to_bytes(line.substr(space + 1), line_no);
      const uint64_t* id = vocab_.find(merged);
      const int64_t expected = 256 + static_cast<int64_t>(merges);
      FRUGAL_CHECK(id && static_cast<int64_t>(*id) == expected, "'{}' line {}: merge '{}' should "
                   "make token {} of '{}' but {}; use a vocabulary and merges from the same GPT-2 "
                   "release (data/gpt2-bpe)", path, line_no, line, expected, vocab_path,
                   id ? fmt::format("that token has id {}", *id) : std::string("it has no such token"));
      ++merges;
    }
    FRUGAL_CHECK(256 + merges == vocab_.size(), "'{}' has {} merges but '{}' has {} mergeable "
                 "tokens (expected 256 + merges); use a vocabulary and merges from the same GPT-2 "
                 "release (data/gpt2-bpe)", path, merges, vocab_path, vocab_.size());
  }

  // Every way to write a token as the concatenation of two tokens: (left, right) -> token.
  void build_pairs() {
    for (size_t id = 0; id < tokens_.size(); ++id) {
      const std::string& t = tokens_[id];
      if (static_cast<int>(id) == eot_) continue;
      for (size_t k = 1; k < t.size(); ++k) {
        const uint64_t* left = vocab_.find(std::string_view(t).substr(0, k));
        const uint64_t* right = left ? vocab_.find(std::string_view(t).substr(k)) : nullptr;
        if (right) pairs_.insert(pair_key(static_cast<int32_t>(*left), static_cast<int32_t>(*right)), id);
      }
    }
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
      if (options_.allow_special && eot_ >= 0) special = std::min(text.find(kEndOfText, pos), text.size());
      const std::string_view segment = text.substr(0, special);
      pretok_.for_each_piece(segment, pos, std::min(end, special), [&](size_t a, size_t b) {
        encode_piece(segment.substr(a, b - a), scratch, out);
      });
      if (special >= end) break;
      out.push_back(eot_);
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
    if (const uint64_t* id = vocab_.find(piece)) {
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

  // Byte-pair merging of one piece: repeatedly merge the adjacent pair that makes the
  // lowest-ranked token, leftmost first. A min-heap of (rank, position) with stale entries
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
  TokenizerOptions options_;
  Pretokenizer pretok_;
  std::vector<std::string> tokens_;  // id -> bytes
  ByteStringMap vocab_;              // bytes -> id, without the special token
  ByteStringMap pairs_;              // (left id, right id) as 8 bytes -> merged id
  std::array<int32_t, 256> byte_token_{};
  int32_t eot_ = -1;
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
  return std::make_unique<Gpt2Tokenizer>(dir, options);
}

}  // namespace frugal::data
