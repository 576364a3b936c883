// Tokenizers: a character-level one (vocabulary = the distinct code points of a training text)
// and byte-level BPE (GPT-2's, token-for-token identical to tiktoken's `gpt2` encoding, or one
// trained by `frugal tokenizer train`, bpe_trainer.h).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace frugal::data {

struct BpeModel;  // byte_level.h

class Tokenizer {
 public:
  virtual ~Tokenizer();
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;  // text must be UTF-8
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  virtual std::string piece(int32_t id) const = 0;  // the raw bytes of one token
  virtual int vocab_size() const = 0;
  virtual int eot_token() const = 0;  // -1 when none
  virtual std::string spec() const = 0;  // "gpt2", "gpt2:DIR" or "char:/path/vocab.json"
  // The JSON of frugal's tokenizer file (kTokenizerFile: next to token shards, in checkpoints and
  // exports); load_tokenizer_json reads it back.
  virtual std::string to_json() const = 0;
  // The tokens and merges of a byte-level BPE (GPT-2's or a trained one), nullptr for others.
  virtual const BpeModel* bpe_model() const { return nullptr; }
};

// The name of frugal's tokenizer file (Tokenizer::to_json) in a prepared data directory, a
// checkpoint and a Hugging Face export. Not "tokenizer.json": Hugging Face tools read a file of
// that name as their own tokenizer, a different format.
inline constexpr std::string_view kTokenizerFile = "frugal_tokenizer.json";
// DIR's tokenizer file (a prepared data directory or a checkpoint): DIR/frugal_tokenizer.json, or
// DIR/tokenizer.json, the name earlier versions of frugal wrote, when only that exists.
std::string tokenizer_file(const std::string& dir);

// The vocabulary and merges files of a GPT-2 BPE tokenizer in dir ("" = the bundled gpt2-bpe):
// OpenAI's encoder.json + vocab.bpe, or the same contents under Hugging Face's names, vocab.json
// + merges.txt (what `frugal export --format hf` and transformers write). Throws Error when dir
// holds neither pair.
struct Gpt2Files {
  std::string vocab, merges;
};
Gpt2Files find_gpt2_files(const std::string& dir);

struct TokenizerOptions {
  // GPT-2: the literal string "<|endoftext|>" in the text becomes the special token 50256 (true)
  // or is encoded as ordinary text (false, like tiktoken's encode_ordinary).
  bool allow_special = true;
  // Threads for encoding large inputs; 0 = OpenMP's current setting. Output never depends on it.
  int threads = 0;
};

// spec: "gpt2" (bundled files), "gpt2:DIR" (find_gpt2_files), "char:VOCAB_FILE" (a vocabulary
// JSON written by CharTokenizer::save), or the path of frugal's tokenizer file (any name ending
// in .json).
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec, const TokenizerOptions& options = {});
// Reads frugal's tokenizer file (Tokenizer::to_json); a Hugging Face tokenizer.json is refused,
// saying to use gpt2:DIR.
std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& path, const TokenizerOptions& options = {});

// A token's bytes as a double-quoted string: printable ASCII and whole UTF-8 characters as they
// are; quote, backslash, \n, \r, \t escaped; any other byte (e.g. half a character) as \xNN.
std::string quote_piece(const std::string& bytes);

// "" when a and b give every token id the same bytes (the same vocabulary, whichever files or
// options they were loaded from), else the first difference, naming them a_name and b_name:
// `token 12 is "@" in A, "a" in B` or `A has 65 tokens, B 50257`.
std::string vocabulary_difference(const Tokenizer& a, std::string_view a_name, const Tokenizer& b,
                                  std::string_view b_name);

// True when position p of text (0 < p < size) is one where every tokenizer's input may be cut,
// the tokens of text[0, p) followed by those of text[p, end) being those of the whole: a printable
// ASCII character other than space followed by a space or a newline (no GPT-2 pre-tokenizer match
// spans it, and it is a character boundary).
inline bool is_encode_boundary(std::string_view text, size_t p) {
  return text[p - 1] > 0x20 && text[p - 1] < 0x7F && (text[p] == ' ' || text[p] == '\n');
}

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

// GPT-2 byte-level BPE from dir's files (find_gpt2_files), see gpt2_tokenizer.cpp. A tokenizer
// from a directory other than the bundled one writes its vocabulary and merges into its
// frugal_tokenizer.json (to_json), so that data directories and checkpoints carry it.
std::unique_ptr<Tokenizer> make_gpt2_tokenizer(const std::string& dir, const TokenizerOptions& options);
// The same from the text of frugal's tokenizer file of type "gpt2" (read from path): the
// vocabulary and merges it holds, else those of its "dir".
std::unique_ptr<Tokenizer> make_gpt2_tokenizer_from_json(const std::string& json_text, const std::string& path,
                                                         const TokenizerOptions& options);

}  // namespace frugal::data
