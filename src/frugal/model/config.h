// ModelConfig: the shape of a GPT model (GPT-2 family, optional gated MLP, pre- or post-LN blocks,
// tied or untied head).
#pragma once
#include <string>

namespace frugal {

enum class MlpKind { Gelu, Geglu, Swiglu };

const char* mlp_kind_name(MlpKind kind);
MlpKind parse_mlp_kind(const std::string& name);  // "gelu" | "geglu" | "swiglu"; throws otherwise

// Where a block's LayerNorms sit: before each branch, on its input (GPT-2), or after each residual
// sum (the original Transformer, BERT, RoBERTa).
enum class NormPlacement { Pre, Post };
const char* norm_placement_name(NormPlacement norm);
NormPlacement parse_norm_placement(const std::string& name);  // "pre" | "post"; throws otherwise

struct ModelConfig {
  int vocab_size = 65;    // V: real vocabulary; the embedding is padded to padded_vocab() rows
  int block_size = 256;   // maximum sequence length T (rows of the position embedding)
  int n_layer = 4;        // L
  int n_head = 4;         // NH
  int n_embd = 128;       // C
  int ffn_mult = 4;       // MLP hidden width = ffn_mult * C
  MlpKind mlp = MlpKind::Gelu;
  NormPlacement norm = NormPlacement::Pre;
  bool tied_head = true;  // LM head shares the token embedding
  bool bias = true;       // biases in linears and LayerNorms
  float dropout = 0.0f;   // on attention output and MLP output (residual branches)
  float layernorm_eps = 1e-5f;
  float init_std = 0.02f;

  int padded_vocab() const { return (vocab_size + 63) / 64 * 64; }
  int head_size() const { return n_embd / n_head; }
  int ffn_hidden() const { return ffn_mult * n_embd; }
  bool gated() const { return mlp != MlpKind::Gelu; }
  // Throws frugal::Error naming the offending field and the accepted range.
  void validate() const;
  bool operator==(const ModelConfig&) const = default;
};

}  // namespace frugal
