// Byte-level BPE as GPT-2 defines it, shared by the GPT-2 encoder (gpt2_tokenizer.cpp) and the BPE
// trainer (bpe_trainer.h): GPT-2's pre-tokenizer regex, its byte alphabet (how vocab.json and
// merges.txt spell bytes), the end-of-text special token, and a BPE model (tokens and merges) with
// the files it is written as: vocab.json + merges.txt (GPT-2 / transformers) and tokenizer.json
// (Hugging Face `tokenizers`).
#pragma once
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "frugal/core/error.h"

namespace frugal::data {

inline constexpr std::string_view kEndOfText = "<|endoftext|>";

// A token's bytes written in GPT-2's byte alphabet: bytes that print (other than space) stand for
// themselves, the other bytes are mapped in order to U+0100 and up.
std::string bytes_to_alphabet(std::string_view bytes);
// The inverse; nullopt when s has a character outside the alphabet.
std::optional<std::string> alphabet_to_bytes(std::string_view s);
// GPT-2's ids of the 256 byte tokens: the order of the alphabet (the printing bytes first).
// gpt2_byte_order()[id] is the byte of token id (0..255).
const std::array<uint8_t, 256>& gpt2_byte_order();

// GPT-2's pre-tokenizer regex (tiktoken's spelling), compiled with PCRE2 (UTF, UCP, JIT).
class Pretokenizer {
 public:
  Pretokenizer();
  ~Pretokenizer();
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  // Calls fn(begin, end) for every match starting in [begin, stop) of the subject text (matches
  // may look at and extend up to text.size()). text must be valid UTF-8.
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

// A byte-level BPE: tokens[id] = the bytes of token id (the special token: kEndOfText's text);
// merges[i] = the (left id, right id) pair that merge i (rank i) joins. Models frugal trains and
// GPT-2's have every byte a token and merge i making token 256 + i.
struct BpeModel {
  std::vector<std::string> tokens;
  std::vector<std::pair<int32_t, int32_t>> merges;
  int32_t eot = -1;  // id of kEndOfText, -1 when none
};

// vocab.json's text: {"token in the alphabet": id, ...} in id order.
std::string bpe_vocab_json(const BpeModel& model);
// merges.txt's lines, "LEFT RIGHT" in the alphabet, in rank order (without the #version line).
std::vector<std::string> bpe_merge_lines(const BpeModel& model);
// Hugging Face tokenizer.json: a BPE model (ignore_merges false: every piece is merged by rank,
// as frugal's encoder does), GPT-2's ByteLevel pre-tokenizer (no prefix space), post-processor
// and decoder, and the end-of-text token as a special added token.
std::string bpe_hf_tokenizer_json(const BpeModel& model);
// Writes dir/vocab.json, dir/merges.txt and dir/tokenizer.json (each atomically).
void write_bpe_files(const BpeModel& model, const std::string& dir);

}  // namespace frugal::data
