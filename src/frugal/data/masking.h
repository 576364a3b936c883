// Dynamic masking for the masked-LM objective (BERT, RoBERTa; docs/mlm.md): which tokens of a
// sample an encoder is trained to predict, and what it sees in their place. Of the sample's
// maskable tokens (every id but the specials: separators, padding, the mask itself) each is
// selected with probability `rate` (15%); a selected token becomes the mask token (80%), a random
// maskable token (10%) or stays (10%), and its target is the original token; every other
// position's target is -1 (no loss).
//
// Every decision is a counter-based draw keyed by masking_key(seed, step, sample id) and the
// position: a pure function of those, so the masks are reproducible from the seed, new at every
// step (dynamic masking), and identical whichever data-parallel rank, micro-batch or thread draws
// the sample (keyed by the global sample id, never the rank). Validation keys by a fixed step so
// that runs compare on the same masks.
#pragma once
#include <cstdint>
#include <vector>

#include "frugal/data/tokenizer.h"

namespace frugal::data {

inline constexpr float kMaskRate = 0.15f;  // BERT's share of the tokens selected

struct MaskingSpec {
  int32_t mask_id = -1;  // the mask token
  int32_t vocab_size = 0;  // the random replacements are drawn from [0, vocab_size) minus the specials
  std::vector<int32_t> specials;  // never selected, never drawn (the mask token among them)
  float rate = kMaskRate;  // of the maskable tokens, selected
  float to_mask = 0.8f;  // of the selected, replaced by the mask token
  float to_random = 0.1f;  // of the selected, replaced by a random maskable token (the rest stay)
  // Throws Error naming the bad field (mask_id outside the vocabulary or not a special, rates
  // outside [0, 1], to_mask + to_random > 1, fewer than one maskable id).
  void validate() const;
};

// An encoder's vocabulary over a data tokenizer of Vt tokens (docs/mlm.md): the tokenizer's ids
// [0, Vt), then `<mask>` = Vt; the model's vocabulary is at least Vt + 1. The specials are the
// mask and the tokenizer's end-of-text token (the separator between packed documents), if any;
// random replacements are drawn from the tokenizer's other tokens.
int32_t encoder_vocab_size(const Tokenizer& tokenizer);  // Vt + 1
MaskingSpec encoder_masking(const Tokenizer& tokenizer);
inline constexpr std::string_view kMaskToken = "<mask>";

// The key of one sample's masks at one step.
uint64_t masking_key(uint64_t seed, int64_t step, int64_t sample_id);
// Validation's masks: the same for every run, whatever its seed (runs compare on one set of
// masked positions), keyed as step -1 of seed 0.
inline uint64_t validation_masking_key(int64_t sample_id) { return masking_key(0, -1, sample_id); }

// Masks one sample in place: tokens (T) become the encoder's input, targets (T) = the original
// token at the selected positions, -1 elsewhere.
void mask_sample(const MaskingSpec& spec, uint64_t key, int32_t* tokens, int32_t* targets, int T);
// Masks `rows` samples (B,T) in place, row b keyed by masking_key(seed, step, sample_ids[b]).
void mask_batch(const MaskingSpec& spec, uint64_t seed, int64_t step, int32_t* tokens, int32_t* targets,
                const int64_t* sample_ids, int rows, int T);

}  // namespace frugal::data
