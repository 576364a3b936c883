// Dynamic masking for the masked-LM objective; see masking.h.
#include "frugal/data/masking.h"

#include <algorithm>

#include "frugal/core/error.h"
#include "frugal/core/rng.h"

namespace frugal::data {

void MaskingSpec::validate() const {
  FRUGAL_CHECK(vocab_size >= 2, "masking: the vocabulary has {} ids; it needs at least 2", vocab_size);
  FRUGAL_CHECK(mask_id >= 0 && mask_id < vocab_size, "masking: the mask token id {} is outside the vocabulary "
               "[0, {}); use a tokenizer with a <mask> token", mask_id, vocab_size);
  FRUGAL_CHECK(std::find(specials.begin(), specials.end(), mask_id) != specials.end(),
               "internal: the mask token {} must be among the specials (never masked itself)", mask_id);
  for (float r : {rate, to_mask, to_random})
    FRUGAL_CHECK(r >= 0.0f && r <= 1.0f, "masking: the rates must be in [0, 1] (got {})", r);
  FRUGAL_CHECK(to_mask + to_random <= 1.0f, "masking: to_mask + to_random = {} exceeds 1", to_mask + to_random);
  int maskable = 0;
  for (int32_t id = 0; id < vocab_size && maskable == 0; ++id)
    maskable += std::find(specials.begin(), specials.end(), id) == specials.end();
  FRUGAL_CHECK(maskable > 0, "masking: every id of the vocabulary is a special token; nothing can be masked");
}

int32_t encoder_vocab_size(const Tokenizer& tokenizer) { return tokenizer.vocab_size() + 1; }

MaskingSpec encoder_masking(const Tokenizer& tokenizer) {
  MaskingSpec spec;
  spec.mask_id = tokenizer.vocab_size();
  spec.vocab_size = encoder_vocab_size(tokenizer);
  if (tokenizer.eot_token() >= 0) spec.specials.push_back(tokenizer.eot_token());
  spec.specials.push_back(spec.mask_id);
  spec.validate();
  return spec;
}

uint64_t masking_key(uint64_t seed, int64_t step, int64_t sample_id) {
  return mix64(mix64(mix64(seed ^ 0x6D61736B696E67ull) ^ uint64_t(step)) ^ uint64_t(sample_id));
}

namespace {

bool special(const MaskingSpec& spec, int32_t id) {
  return std::find(spec.specials.begin(), spec.specials.end(), id) != spec.specials.end();
}

// A uniform maskable id for position t: draws from [0, V) keyed by (key, t, attempt) until one is
// not special (validate() guarantees one exists; the specials are a handful of a large vocabulary).
int32_t random_token(const MaskingSpec& spec, uint64_t key, int t) {
  for (uint64_t attempt = 0;; ++attempt) {
    const uint64_t bits = mix64(key ^ mix64((uint64_t(t) << 20 | attempt) * 4 + 3));
    const auto id = static_cast<int32_t>(bits % uint64_t(spec.vocab_size));
    if (!special(spec, id)) return id;
  }
}

}  // namespace

void mask_sample(const MaskingSpec& spec, uint64_t key, int32_t* tokens, int32_t* targets, int T) {
  for (int t = 0; t < T; ++t) {
    targets[t] = -1;
    if (special(spec, tokens[t]) || uniform_at(key, 4 * uint64_t(t)) >= spec.rate) continue;
    targets[t] = tokens[t];
    const float how = uniform_at(key, 4 * uint64_t(t) + 1);
    if (how < spec.to_mask)
      tokens[t] = spec.mask_id;
    else if (how < spec.to_mask + spec.to_random)
      tokens[t] = random_token(spec, key, t);
  }
}

void mask_batch(const MaskingSpec& spec, uint64_t seed, int64_t step, int32_t* tokens, int32_t* targets,
                const int64_t* sample_ids, int rows, int T) {
  for (int b = 0; b < rows; ++b)
    mask_sample(spec, masking_key(seed, step, sample_ids[b]), tokens + size_t(b) * T, targets + size_t(b) * T, T);
}

}  // namespace frugal::data
