// Filling masked positions with an encoder (model.objective = mlm): the text's "<mask>" markers
// become the mask token (data::encoder_masking), the model reads the whole sequence at once
// (bidirectional attention) and each masked position gets its most likely tokens.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "frugal/data/tokenizer.h"
#include "frugal/model/gpt.h"

namespace frugal {

// text's tokens with every "<mask>" (data::kMaskToken) as the mask id. Errors (one line each): no
// "<mask>" in the text, a piece the tokenizer cannot encode, more tokens than the model's
// block_size.
std::vector<int32_t> encode_with_masks(const data::Tokenizer& tokenizer, const std::string& text, int block_size);

struct MaskFill {
  int position = 0;                              // in the encoded sequence
  std::vector<std::pair<int32_t, float>> top;    // (token, probability), most likely first
};

// The `top` most likely tokens (of the tokenizer's: never the mask itself) at every mask position
// of `ids`, by the softmax of the encoder's logits there. The model must be an encoder whose
// vocabulary holds the mask (tokenizer.vocab_size() + 1 ids at least).
std::vector<MaskFill> fill_masks(GPT& model, const data::Tokenizer& tokenizer, const std::vector<int32_t>& ids, int top);

// Prints, for each "<mask>" of text, its `top` predictions with their probabilities, then the text
// with every mask replaced by its most likely token.
void print_mask_fills(GPT& model, const data::Tokenizer& tokenizer, const std::string& text, int top);

}  // namespace frugal
