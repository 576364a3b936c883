// Tokenizers: a character-level one (vocabulary = the distinct code points of a training text)
// and GPT-2's byte-level BPE, token-for-token identical to tiktoken's `gpt2` encoding.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace frugal::data {

class Tokenizer {
 public:
  virtual ~Tokenizer();
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;  // text must be UTF-8
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual std::string piece(int32_t id) const = 0;  // the raw bytes of one token
  virtual int vocab_size() const = 0;
  virtual int eot_token() const = 0;  // -1 when none
  virtual std::string spec() const = 0;  // "gpt2", "gpt2:DIR" or "char:/path/vocab.json"
  // The JSON written as tokenizer.json next to token shards; load_tokenizer_json reads it back.
  virtual std::string to_json() const = 0;
};

struct TokenizerOptions {
  // GPT-2: the literal string "<|endoftext|>" in the text becomes the special token 50256 (true)
  // or is encoded as ordinary text (false, like tiktoken's encode_ordinary).
  bool allow_special = true;
  // Threads for encoding large inputs; 0 = OpenMP's current setting. Output never depends on it.
  int threads = 0;
};

// spec: "gpt2" (bundled files), "gpt2:DIR" (DIR/encoder.json + DIR/vocab.bpe), "char:VOCAB_FILE"
// (a vocabulary JSON written by CharTokenizer::save), or a path to a tokenizer.json.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec, const TokenizerOptions& options = {});
// Reads a tokenizer.json written next to token shards (Tokenizer::to_json).
std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& path, const TokenizerOptions& options = {});

// A token's bytes as a double-quoted string: printable ASCII and whole UTF-8 characters as they
// are; quote, backslash, \n, \r, \t escaped; any other byte (e.g. half a character) as \xNN.
std::string quote_piece(const std::string& bytes);

// "" when a and b give every token id the same bytes (the same vocabulary, whichever files or
// options they were loaded from), else the first difference, naming them a_name and b_name:
// `token 12 is "@" in A, "a" in B` or `A has 65 tokens, B 50257`.
std::string vocabulary_difference(const Tokenizer& a, std::string_view a_name, const Tokenizer& b,
                                  std::string_view b_name);

// Character-level tokenizer: token ids are the ranks of the code points in sorted order.
class CharTokenizer final : public Tokenizer {
 public:
  // Vocabulary = sorted distinct code points of text (must be valid UTF-8).
  static CharTokenizer from_text(std::string_view text);
  // Loads a vocabulary JSON ({"type": "char", "chars": [...]}).
  static CharTokenizer load(const std::string& path);
  explicit CharTokenizer(std::vector<uint32_t> code_points, std::string source_path = "");
  void save(const std::string& path);  // also makes spec() "char:PATH"

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  std::string piece(int32_t id) const override;
  int vocab_size() const override { return static_cast<int>(chars_.size()); }
  int eot_token() const override { return -1; }
  std::string spec() const override;
  std::string to_json() const override;

 private:
  static std::string piece_of(uint32_t code_point);  // its UTF-8 bytes

  std::vector<uint32_t> chars_;       // id -> code point, sorted
  std::vector<int32_t> ascii_ids_;    // code point < 128 -> id or -1
  std::string source_path_;           // where it was loaded from / saved to ("" if nowhere)
};

// GPT-2 byte-level BPE (encoder.json + vocab.bpe), see gpt2_tokenizer.cpp.
std::unique_ptr<Tokenizer> make_gpt2_tokenizer(const std::string& dir, const TokenizerOptions& options);

}  // namespace frugal::data
