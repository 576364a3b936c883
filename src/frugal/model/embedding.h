// TokenEmbedding: the model's input component, token plus learned position embeddings (GPT-2's
// wte and wpe; no wpe with rotary positions, which attention applies). Declares its tensors, runs forward (from a position offset, for decoding) and
// backward. Under tensor parallelism the token embedding is split over the vocabulary (its
// placement): each rank looks up the tokens it holds rows for, zeros for the others, and the
// group's sum is the whole lookup, to the bit; a tied LM head reads it too (objective.h).
#pragma once
#include <cstddef>
#include <cstdint>

#include "frugal/model/collectives.h"
#include "frugal/model/param_table.h"
#include "frugal/model/spec.h"

namespace frugal {

class TokenEmbedding {
 public:
  static constexpr size_t kAbsent = ParamTable::kAbsent;
  // transformer.wte.weight (padded_vocab(), C), its padding rows zero; transformer.wpe.weight
  // (block_size, C) unless the positions are rotary.
  static void declare(ModelSpec& spec);
  // The tensors' offsets in `table` (kAbsent where it lacks them) and this rank's vocabulary rows.
  TokenEmbedding(const ModelConfig& config, const ParamTable& table);

  size_t token_offset() const { return wte_; }
  size_t position_offset() const { return wpe_; }
  // out (B,T,C) = wte[tokens] + wpe[pos0 + t] (no wpe term when rotary) (the rows of wte meet in comm's sum when split)
  void forward(const float* params, float* out, const int32_t* tokens, int B, int T, TensorCollectives& comm,
               int pos0 = 0) const;
  // Accumulates d loss / d wte (this rank's rows; unless token_grad is false) and d loss / d wpe
  // from dout (B,T,C).
  void backward(float* grads, const float* dout, const int32_t* tokens, int B, int T, bool token_grad) const;

 private:
  // Token ids [first_, first_ + rows_) have their rows here; split_: not the whole vocabulary.
  bool split_;
  int first_, rows_;
  int C_;
  size_t wte_, wpe_;
};

}  // namespace frugal
