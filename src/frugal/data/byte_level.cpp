// GPT-2's byte alphabet and pre-tokenizer, and the files a byte-level BPE model is written as.
#include "frugal/data/byte_level.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "frugal/data/text.h"
#include "frugal/io/atomic_file.h"

namespace frugal::data {
namespace {

// GPT-2's pre-tokenizer: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// written as tiktoken writes it (possessive runs; `\s+(?!\S)|\s`), with \s spelled out as Unicode
// White_Space (what tiktoken's Rust regex means by \s; PCRE2's \s also takes U+180E).
#define FRUGAL_WS "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
constexpr const char* kGpt2Pattern =
    "'(?:[sdmt]|ll|ve|re)| ?\\p{L}++| ?\\p{N}++| ?[^" FRUGAL_WS "\\p{L}\\p{N}]++"
    "|[" FRUGAL_WS "]+(?![^" FRUGAL_WS "])|[" FRUGAL_WS "]";
#undef FRUGAL_WS

bool prints(int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; }

// byte -> the code point that writes it in the alphabet.
const std::array<uint16_t, 256>& byte_to_char() {
  static const std::array<uint16_t, 256> table = [] {
    std::array<uint16_t, 256> t{};
    uint16_t next = 256;
    for (int b = 0; b < 256; ++b) t[b] = prints(b) ? static_cast<uint16_t>(b) : next++;
    return t;
  }();
  return table;
}

}  // namespace

std::string bytes_to_alphabet(std::string_view bytes) {
  std::string s;
  for (char c : bytes) append_utf8(s, byte_to_char()[static_cast<unsigned char>(c)]);
  return s;
}

std::optional<std::string> alphabet_to_bytes(std::string_view s) {
  static const std::array<int16_t, 0x200> char_to_byte = [] {
    std::array<int16_t, 0x200> table;
    table.fill(-1);
    for (int b = 0; b < 256; ++b) table[byte_to_char()[b]] = static_cast<int16_t>(b);
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

const std::array<uint8_t, 256>& gpt2_byte_order() {
  static const std::array<uint8_t, 256> order = [] {
    std::array<uint8_t, 256> o{};
    int id = 0;
    for (int b = 0; b < 256; ++b)
      if (prints(b)) o[id++] = static_cast<uint8_t>(b);
    for (int b = 0; b < 256; ++b)
      if (!prints(b)) o[id++] = static_cast<uint8_t>(b);
    return o;
  }();
  return order;
}

Pretokenizer::Pretokenizer() {
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

Pretokenizer::~Pretokenizer() { pcre2_code_free(code_); }

namespace {

nlohmann::ordered_json vocab_object(const BpeModel& model) {
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (size_t id = 0; id < model.tokens.size(); ++id)
    vocab[static_cast<int32_t>(id) == model.eot ? model.tokens[id] : bytes_to_alphabet(model.tokens[id])] = id;
  return vocab;
}

}  // namespace

std::string bpe_vocab_json(const BpeModel& model) { return vocab_object(model).dump() + "\n"; }

std::vector<std::string> bpe_merge_lines(const BpeModel& model) {
  std::vector<std::string> lines;
  lines.reserve(model.merges.size());
  for (const auto& [left, right] : model.merges)
    lines.push_back(bytes_to_alphabet(model.tokens[left]) + " " + bytes_to_alphabet(model.tokens[right]));
  return lines;
}

std::string bpe_hf_tokenizer_json(const BpeModel& model) {
  using json = nlohmann::ordered_json;
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                           {"use_regex", true}};
  json added = json::array();
  if (model.eot >= 0)
    added.push_back({{"id", model.eot}, {"content", kEndOfText}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
  json post = byte_level;
  post["trim_offsets"] = false;
  const json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", byte_level},
      {"post_processor", post},
      {"decoder", byte_level},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                 {"continuing_subword_prefix", ""}, {"end_of_word_suffix", ""}, {"fuse_unk", false},
                 {"byte_fallback", false}, {"vocab", vocab_object(model)}, {"merges", bpe_merge_lines(model)}}},
  };
  return j.dump(1) + "\n";
}

void write_bpe_files(const BpeModel& model, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  FRUGAL_CHECK(!ec, "cannot create the tokenizer directory '{}': {}; choose a writable path", dir, ec.message());
  const std::filesystem::path d(dir);
  io::write_file_atomic((d / "vocab.json").string(), bpe_vocab_json(model));
  std::string merges = "#version: 0.2\n";
  for (const std::string& line : bpe_merge_lines(model)) merges += line + "\n";
  io::write_file_atomic((d / "merges.txt").string(), merges);
  io::write_file_atomic((d / "tokenizer.json").string(), bpe_hf_tokenizer_json(model));
}

}  // namespace frugal::data
