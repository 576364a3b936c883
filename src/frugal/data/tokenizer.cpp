// Tokenizer loading by spec or from frugal's tokenizer file, and the character-level tokenizer.
#include "frugal/data/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "frugal/core/error.h"
#include "frugal/data/text.h"
#include "frugal/io/atomic_file.h"

namespace frugal::data {

Tokenizer::~Tokenizer() = default;

namespace {

nlohmann::json read_json(const std::string& path, std::string_view what) {
  try {
    return nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail("'{}' is not valid JSON ({}); {}", path, e.what(), what);
  }
}

std::string format_code_point(uint32_t cp) {
  std::string s;
  if (cp >= 0x20 && cp != 0x7F) append_utf8(s, cp);
  return s.empty() ? fmt::format("U+{:04X}", cp) : fmt::format("'{}' (U+{:04X})", s, cp);
}

}  // namespace

CharTokenizer::CharTokenizer(std::vector<uint32_t> code_points, std::string source_path)
    : chars_(std::move(code_points)), ascii_ids_(128, -1), source_path_(std::move(source_path)) {
  FRUGAL_CHECK(!chars_.empty(), "the character vocabulary is empty; build it from a non-empty text");
  FRUGAL_CHECK(std::is_sorted(chars_.begin(), chars_.end()) &&
                   std::adjacent_find(chars_.begin(), chars_.end()) == chars_.end(),
               "the character vocabulary must list distinct characters in code point order; "
               "rebuild it with `frugal prepare --tokenizer char`");
  for (size_t i = 0; i < chars_.size(); ++i) {
    FRUGAL_CHECK(chars_[i] <= 0x10FFFF && (chars_[i] < 0xD800 || chars_[i] > 0xDFFF),
                 "the character vocabulary holds U+{:X}, which is not a Unicode scalar value; "
                 "rebuild it with `frugal prepare --tokenizer char`", chars_[i]);
    if (chars_[i] < 128) ascii_ids_[chars_[i]] = static_cast<int32_t>(i);
  }
}

CharTokenizer CharTokenizer::from_text(std::string_view text) {
  check_utf8(text, "the text for the character vocabulary");
  std::vector<bool> ascii(128, false);
  std::vector<uint32_t> others;
  for (size_t pos = 0; pos < text.size();) {
    const uint32_t cp = next_code_point(text, pos);
    if (cp < 128) {
      ascii[cp] = true;
    } else {
      others.push_back(cp);
    }
  }
  std::sort(others.begin(), others.end());
  others.erase(std::unique(others.begin(), others.end()), others.end());
  std::vector<uint32_t> chars;
  for (uint32_t c = 0; c < 128; ++c)
    if (ascii[c]) chars.push_back(c);
  chars.insert(chars.end(), others.begin(), others.end());
  return CharTokenizer(std::move(chars));
}

CharTokenizer CharTokenizer::load(const std::string& path) {
  const char* fix = "rebuild it with `frugal prepare --tokenizer char`";
  const nlohmann::json j = read_json(path, fix);
  FRUGAL_CHECK(j.is_object() && j.value("type", "") == "char" && j.contains("chars") &&
                   j["chars"].is_array(),
               "'{}' is not a character vocabulary (expected {{\"type\": \"char\", \"chars\": "
               "[...]}}); {}", path, fix);
  std::vector<uint32_t> chars;
  for (const auto& c : j["chars"]) {
    const std::string s = c.is_string() ? c.get<std::string>() : std::string();
    size_t pos = 0;
    const uint32_t cp = s.empty() ? 0 : next_code_point(s, pos);
    FRUGAL_CHECK(!s.empty() && pos == s.size(), "'{}': vocabulary entry {} is not a single "
                 "character; {}", path, c.dump(), fix);
    chars.push_back(cp);
  }
  return CharTokenizer(std::move(chars), path);
}

void CharTokenizer::save(const std::string& path) {
  io::write_file_atomic(path, to_json() + "\n");
  source_path_ = path;
}

std::string CharTokenizer::to_json() const {
  nlohmann::json chars = nlohmann::json::array();
  for (uint32_t cp : chars_) chars.push_back(piece_of(cp));
  return nlohmann::json{{"type", "char"}, {"chars", chars}}.dump(1);
}

std::string CharTokenizer::spec() const {
  return source_path_.empty() ? std::string("char") : "char:" + source_path_;
}

std::vector<int32_t> CharTokenizer::encode(std::string_view text) const {
  check_utf8(text, "text to encode");
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t at = pos;
    const uint32_t cp = next_code_point(text, pos);
    int32_t id = -1;
    if (cp < 128) {
      id = ascii_ids_[cp];
    } else if (auto it = std::lower_bound(chars_.begin(), chars_.end(), cp); it != chars_.end() && *it == cp) {
      id = static_cast<int32_t>(it - chars_.begin());
    }
    FRUGAL_CHECK(id >= 0, "character {} at byte offset {} is not in the character vocabulary "
                 "({} characters{}); rebuild the vocabulary from text that contains it "
                 "(`frugal prepare --tokenizer char`) or use the gpt2 tokenizer",
                 format_code_point(cp), at, chars_.size(),
                 source_path_.empty() ? "" : " from " + source_path_);
    ids.push_back(id);
  }
  return ids;
}

std::string CharTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) out += piece(id);
  return out;
}

std::string CharTokenizer::piece(int32_t id) const {
  FRUGAL_CHECK(id >= 0 && id < vocab_size(), "token id {} is outside the character vocabulary "
               "[0, {}); the ids were not made by this tokenizer", id, vocab_size());
  return piece_of(chars_[id]);
}

std::string CharTokenizer::piece_of(uint32_t cp) {
  std::string s;
  append_utf8(s, cp);
  return s;
}

std::string tokenizer_file(const std::string& dir) {
  const std::filesystem::path current = std::filesystem::path(dir) / kTokenizerFile;
  const std::filesystem::path legacy = std::filesystem::path(dir) / "tokenizer.json";
  return (!std::filesystem::exists(current) && std::filesystem::exists(legacy) ? legacy : current).string();
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec, const TokenizerOptions& options) {
  if (spec == "gpt2") return make_gpt2_tokenizer("", options);
  if (spec.starts_with("gpt2:")) return make_gpt2_tokenizer(spec.substr(5), options);
  if (spec.starts_with("char:")) return std::make_unique<CharTokenizer>(CharTokenizer::load(spec.substr(5)));
  if (spec.ends_with(".json") && std::filesystem::exists(spec)) return load_tokenizer_json(spec, options);
  fail("unknown tokenizer '{}'; use gpt2, gpt2:DIR (with vocab.json and merges.txt, or "
       "encoder.json and vocab.bpe), char:VOCAB_FILE or the path of a {} written by frugal",
       spec, kTokenizerFile);
}

std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& path, const TokenizerOptions& options) {
  const char* fix = "re-run `frugal prepare` to write it again";
  const nlohmann::json j = read_json(path, fix);
  const std::string type = j.is_object() ? j.value("type", "") : "";
  if (type == "char") return std::make_unique<CharTokenizer>(CharTokenizer::load(path));
  if (type == "gpt2") return make_gpt2_tokenizer_from_json(read_text_file(path), path, options);
  FRUGAL_CHECK(!(j.is_object() && j.contains("model") && j["model"].is_object()), "'{}' is a "
               "Hugging Face tokenizer.json, not frugal's tokenizer file; for a GPT-2 tokenizer "
               "pass gpt2:DIR, DIR holding its vocab.json and merges.txt", path);
  fail("'{}' has no known tokenizer type (\"char\" or \"gpt2\"); {}", path, fix);
}

std::string quote_piece(const std::string& bytes) {
  std::string out = "\"";
  for (size_t i = 0; i < bytes.size();) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c >= 0x80) {
      const size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      const std::string_view ch = std::string_view(bytes).substr(i, len);
      if (len > 1 && ch.size() == len && !find_invalid_utf8(ch)) {
        out += ch;
        i += len;
        continue;
      }
    }
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c >= 0x7F) {
      out += fmt::format("\\x{:02X}", c);
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  return out + "\"";
}

std::string vocabulary_difference(const Tokenizer& a, std::string_view a_name, const Tokenizer& b,
                                  std::string_view b_name) {
  if (a.vocab_size() != b.vocab_size())
    return fmt::format("{} has {} tokens, {} {}", a_name, a.vocab_size(), b_name, b.vocab_size());
  for (int32_t id = 0; id < a.vocab_size(); ++id) {
    const std::string in_a = a.piece(id), in_b = b.piece(id);
    if (in_a != in_b)
      return fmt::format("token {} is {} in {}, {} in {}", id, quote_piece(in_a), a_name,
                         quote_piece(in_b), b_name);
  }
  return "";
}

}  // namespace frugal::data
