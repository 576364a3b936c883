// Decoder: fast autoregressive inference over a trained GPT's weights with a key/value cache.
// Each block keeps the keys and values of every position seen so far (block_size rows of C), so a
// new token costs one row through every linear plus one attention row over the cached positions:
// O(params + L·t·C) instead of a full forward over the whole context.
//
// The context window holds at most block_size tokens (the position embedding has that many rows).
// When a step would go past it, the decoder slides: it keeps the last block_size/2 tokens
// (including the new one), resets the cache and prefills them again at positions 0, 1, ... — one
// full forward every block_size/2 tokens. Logits always equal GPT::logits over the tokens in the
// window (context()). Each block runs TransformerBlock::forward, the one the training forward
// runs, with its key/value cache, so installed linear formats (e.g. 2:4 sparse) and attention
// patterns apply as in training. Inference only: no dropout, no gradients; the GPT must outlive
// the decoder and its parameters must not change while the cache is in use (prefill again after).
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "frugal/core/memory.h"
#include "frugal/model/gpt.h"

namespace frugal {

class Decoder {
 public:
  explicit Decoder(const GPT& model);

  // Empties the cache and the window.
  void reset();
  // Resets, then runs `tokens` (non-empty; only the last block_size are kept when longer) at
  // positions 0, 1, ... Returns the logits (V) for the token that follows them.
  const float* prefill(std::span<const int32_t> tokens);
  // Appends one token (sliding first when the window is full) and returns the logits (V) for the
  // token after it. Needs a preceding prefill().
  const float* step(int32_t token);

  // The tokens whose keys and values are cached, oldest first (at most block_size).
  const std::vector<int32_t>& context() const { return window_; }
  int vocab_size() const { return model_.config().vocab_size; }

 private:
  // Runs rows n new tokens at positions pos0 .. pos0+n-1 through the model, filling the caches,
  // and leaves the logits of the last one in logits_. Either pos0 == 0 (a prefill, attention
  // within the rows) or n == 1 (a step, attention against the cache); both under each block's
  // attention pattern, with positions counted from the start of the window.
  void forward_rows(const int32_t* tokens, int n, int pos0);
  // Which set of internals block `layer` uses: 0 (dense MLP) or 1 (mixture of experts).
  int kind(int layer) const;

  const GPT& model_;
  std::vector<int32_t> window_;
  // key and value caches, per block: (block_size, C) each
  std::vector<Buffer<float>> k_cache_, v_cache_;
  // the residual stream and a block's internals for up to block_size rows (a prefill; a step uses
  // the first row), laid out by TransformerBlock::lay_out_internals with the residual in place:
  // one set per block kind (a dense MLP, a mixture of experts)
  Buffer<float> x_, internals_, branch_, logits_, head_scratch_;
  std::array<BlockActs, 2> acts_{};
  SoloCollectives solo_;
};

}  // namespace frugal
