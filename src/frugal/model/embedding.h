// TokenEmbedding: the model's input component, token plus learned position embeddings (GPT-2's
// wte and wpe; no wpe with rotary positions, which attention applies). Declares its tensors, runs forward (from a position offset, for decoding) and
// backward. Under tensor parallelism the token embedding is split over the vocabulary (its
// placement): each rank looks up the tokens it holds rows for, zeros for the others, and the
// group's sum is the whole lookup, to the bit; a tied LM head reads it too (objective.h). An
// encoder (model.objective = mlm) normalises the sum with a LayerNorm (BERT's embeddings.LayerNorm).
// (no tensor-parallel encoder: the masked-LM head refuses one). Under sequence parallelism the
// group's sum is a reduce-scatter, each rank adding the position embeddings of its own rows; the
// backward adds the ranks' position-embedding gradients over the group and gathers the output
// gradient's rows for the token embedding's.
#pragma once
#include <cstddef>
#include <cstdint>

#include "frugal/model/branches.h"
#include "frugal/model/collectives.h"
#include "frugal/model/param_table.h"
#include "frugal/model/spec.h"

namespace frugal {

// What an encoder's embedding LayerNorm keeps for its backward: its input, the sum (N, C), and
// its rows' mean and rstd (N). All null without the LayerNorm. joined: under sequence parallelism,
// room for the whole micro-batch's rows (N, C) (scratch, shared), else null.
struct EmbeddingActs {
  float *sum = nullptr, *mean = nullptr, *rstd = nullptr;
  float* joined = nullptr;
};

class TokenEmbedding {
 public:
  static constexpr size_t kAbsent = ParamTable::kAbsent;
  // transformer.wte.weight (padded_vocab(), C), its padding rows zero; transformer.wpe.weight
  // (block_size, C) unless the positions are rotary; an encoder's transformer.ln_emb.
  static void declare(ModelSpec& spec);
  // Lays out acts for N rows (nothing without the LayerNorm).
  static void lay_out(const ModelConfig& config, double N, const Take& take, EmbeddingActs& acts);
  // The tensors' offsets in `table` (kAbsent where it lacks them) and this rank's vocabulary rows.
  TokenEmbedding(const ModelConfig& config, const ParamTable& table);

  size_t token_offset() const { return wte_; }
  size_t position_offset() const { return wpe_; }
  bool normalised() const { return norm_w_ != kAbsent; }
  // out (B,T,C) = wte[tokens] + wpe[pos0 + t] (no wpe term when rotary; the rows of wte meet in
  // comm's sum when split), layer-normalised when normalised() (the sum and statistics kept in acts,
  // which it needs). Under sequence parallelism out holds this rank's rows only.
  void forward(const float* params, float* out, const int32_t* tokens, int B, int T, TensorCollectives& comm,
               int pos0 = 0, const EmbeddingActs& acts = {}) const;
  // Accumulates d loss / d wte (this rank's rows; unless token_grad is false) and d loss / d wpe
  // from dout (B,T,C; under sequence parallelism this rank's rows). When normalised(): through the
  // LayerNorm first (its weight gradients accumulated), into dsum (B,T,C), d loss / d the sum
  // (overwritten), with the forward's acts.
  void backward(const float* params, float* grads, const float* dout, const int32_t* tokens, int B, int T,
                bool token_grad, TensorCollectives& comm, const EmbeddingActs& acts = {},
                float* dsum = nullptr) const;

 private:
  // Token ids [first_, first_ + rows_) have their rows here; split_: not the whole vocabulary.
  bool split_;
  ShardCoord shard_;
  int first_, rows_;
  int C_;
  float eps_;
  size_t wte_, wpe_, norm_w_, norm_b_;
};

}  // namespace frugal
