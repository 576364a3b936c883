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

namespace frugal::data {

struct MaskingSpec {
  int32_t mask_id = -1;  // the mask token
  int32_t vocab_size = 0;  // the random replacements are drawn from [0, vocab_size) minus the specials
  std::vector<int32_t> specials;  // never selected, never drawn (the mask token among them)
  float rate = 0.15f;    // of the maskable tokens, selected
  float to_mask = 0.8f;  // of the selected, replaced by the mask token
  float to_random = 0.1f;  // of the selected, replaced by a random maskable token (the rest stay)
  // Throws Error naming the bad field (mask_id outside the vocabulary or not a special, rates
  // outside [0, 1], to_mask + to_random > 1, fewer than one maskable id).
  void validate() const;
};

// The key of one sample's masks at one step.
uint64_t masking_key(uint64_t seed, int64_t step, int64_t sample_id);

// Masks one sample in place: tokens (T) become the encoder's input, targets (T) = the original
// token at the selected positions, -1 elsewhere.
void mask_sample(const MaskingSpec& spec, uint64_t key, int32_t* tokens, int32_t* targets, int T);

}  // namespace frugal::data
