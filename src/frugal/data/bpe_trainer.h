// Training a byte-level BPE (GPT-2 style) from a corpus: `frugal tokenizer train`.
//
// The text is cut at the literal end-of-text token and pre-tokenized with GPT-2's regex
// (byte_level.h); merges never cross a piece. Starting from the 256 bytes (GPT-2's byte ids), each
// merge joins the adjacent pair of tokens that occurs most often over all pieces (counting every
// adjacent position, overlapping ones in runs included). The tie rule: among pairs of equal count,
// the one whose (left id, right id) is smallest, ids being frugal's (bytes 0..255 in GPT-2's
// order, merge i = 256 + i). A pair whose bytes are already a token is never merged, so every
// token comes from exactly one merge and token ids follow merge order (what the encoder's rank
// rule and tiktoken need). The end-of-text token comes last.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "frugal/data/byte_level.h"
#include "frugal/data/byte_map.h"

namespace frugal::data {

// The distinct pre-tokenizer pieces of a text and how often each occurs.
class PieceCounts {
 public:
  // Adds text's pieces (text: valid UTF-8; "<|endoftext|>" in it separates, it is no piece).
  void add(std::string_view text);
  // Adds another count (e.g. one made on another thread).
  void merge_from(const PieceCounts& other);
  // (piece, count) in first-seen order.
  const std::vector<std::pair<std::string, int64_t>>& pieces() const { return pieces_; }

 private:
  void add_piece(std::string_view piece, int64_t count);

  std::vector<std::pair<std::string, int64_t>> pieces_;
  ByteStringMap index_;  // piece -> position in pieces_
};

// A BPE of vocab_size tokens (the 256 bytes, the merges, the end-of-text token) trained on the
// counts, with the incremental algorithm: pair counts and the pieces holding each pair are kept
// and updated for the pieces a merge changes; a max-heap with stale entries picks the next pair.
// Fewer tokens when the pieces run out of pairs first.
BpeModel train_bpe(const PieceCounts& counts, int vocab_size);
// The same by the definition: every pair recounted over every piece before each merge. Slow; the
// reference that tests compare train_bpe with.
BpeModel train_bpe_reference(const PieceCounts& counts, int vocab_size);

// The sample of a corpus a tokenizer is trained on: the inputs as `frugal prepare` reads them
// (corpus.h: files, directories, globs; .gz/.xz/.zst; JSONL with text_field), in order, up to
// max_bytes of document text and max_documents documents (0: no limit), counted on `threads`
// threads (0: OpenMP's default).
struct CorpusSampleOptions {
  std::vector<std::string> inputs;
  std::string text_field = "text";
  int64_t max_bytes = int64_t{1} << 30;
  int64_t max_documents = 0;
  int threads = 0;
};
struct CorpusSample {
  PieceCounts counts;
  int64_t bytes = 0, documents = 0;
  bool truncated = false;  // the bounds stopped the reading before the inputs ended
};
CorpusSample sample_corpus(const CorpusSampleOptions& options);

}  // namespace frugal::data
