// ModelConfig: the shape of a GPT model (GPT-2 family, optional gated MLP, pre- or post-LN blocks,
// learned or rotary positions, optional QK-norm and logit soft-capping, tied or untied head,
// optional mixture-of-experts MLPs) or of a BERT-style encoder trained on the masked-LM objective.
#pragma once
#include <string>

namespace frugal {

enum class MlpKind { Gelu, Geglu, Swiglu, Relu2 };

const char* mlp_kind_name(MlpKind kind);
// Whether the MLP has a gate projection (GEGLU, SwiGLU).
inline bool config_gated(MlpKind kind) { return kind == MlpKind::Geglu || kind == MlpKind::Swiglu; }
MlpKind parse_mlp_kind(const std::string& name);  // "gelu" | "geglu" | "swiglu" | "relu2"; throws otherwise

// Where a block's LayerNorms sit: before each branch, on its input (GPT-2), or after each residual
// sum (the original Transformer, BERT, RoBERTa).
enum class NormPlacement { Pre, Post };
const char* norm_placement_name(NormPlacement norm);
NormPlacement parse_norm_placement(const std::string& name);  // "pre" | "post"; throws otherwise

// How attention learns positions: a learned (block_size, C) embedding added to the tokens' (GPT-2,
// BERT), or rotary embeddings turning each head's queries and keys by their position (RoFormer,
// GPT-NeoX, Llama; no position tensor). kernels::QkTransform has the definition.
enum class PositionKind { Learned, Rotary };
const char* position_kind_name(PositionKind kind);
PositionKind parse_position_kind(const std::string& name);  // "learned" | "rotary"; throws otherwise
// What the model is trained to predict: the next token (a causal decoder: causal attention, the
// LM head), or masked tokens (an encoder as BERT/RoBERTa: bidirectional attention, a LayerNorm on
// the embeddings, the masked-LM head: dense + GELU + LayerNorm + the decoder tied to the token
// embedding with its own output bias).
enum class ObjectiveKind { Causal, Mlm };
const char* objective_kind_name(ObjectiveKind kind);
ObjectiveKind parse_objective_kind(const std::string& name);  // "causal" | "mlm"; throws otherwise

// A mixture-of-experts MLP (model/moe.h) in place of the dense one on every `every`-th block:
// `experts` MLPs of the model's kind (model.mlp) and `hidden` units each, of which a router sends
// each token to its top_k (softmax over the experts, the combine weights renormalised over the
// top k). Balancing: the Switch loss and the router z-loss, weighted by their coefficients, and
// the auxiliary-loss-free bias (a per-expert bias on the router's choice, moved by bias_rate
// against the load after every optimizer step; 0: off).
struct MoeConfig {
  int experts = 0;  // E; 0: every block has the dense MLP
  int top_k = 2;
  int every = 1;    // on blocks l with (l + 1) % every == 0
  int hidden = 0;   // each expert's hidden units; 0: the dense MLP's (ffn_mult · n_embd)
  bool shared_expert = false;  // a dense MLP of `hidden` units every token also passes through
  float aux_loss_coef = 0.01f;
  float z_loss_coef = 0.001f;
  float bias_rate = 0.0f;
  bool on(int layer) const { return experts > 0 && (layer + 1) % every == 0; }
  bool operator==(const MoeConfig&) const = default;
};

// The share of an encoder's positions the masked-LM objective predicts (data::kMaskRate, which a
// static_assert in train/ keeps equal): what the head's FLOP count assumes, as it runs on those
// rows only.
inline constexpr float kMlmPredictedShare = 0.15f;

struct ModelConfig {
  int vocab_size = 65;    // V: real vocabulary; the embedding is padded to padded_vocab() rows
  int block_size = 256;   // maximum sequence length T (rows of the position embedding)
  int n_layer = 4;        // L
  int n_head = 4;         // NH
  int n_embd = 128;       // C
  int ffn_mult = 4;       // MLP hidden width = ffn_mult * C
  MlpKind mlp = MlpKind::Gelu;
  NormPlacement norm = NormPlacement::Pre;
  ObjectiveKind objective = ObjectiveKind::Causal;
  bool tied_head = true;  // LM head shares the token embedding
  bool bias = true;       // biases in linears and LayerNorms
  float dropout = 0.0f;   // on attention output and MLP output (residual branches)
  float layernorm_eps = 1e-5f;
  float init_std = 0.02f;
  // The residual branches' output projections (attention's, the MLP's, the experts') start at zero
  // instead of N(0, init_std / √(2L)): every block starts as the identity (modded-nanogpt's recipe).
  bool zero_init_proj = false;
  PositionKind position = PositionKind::Learned;
  float rope_base = 10000.0f;  // rotary: the angle of pair i at position p is p · rope_base^(-2i/HS)
  bool qk_norm = false;        // each head's queries and keys RMS-normalised before attention (no gain)
  float logit_softcap = 0.0f;  // > 0: the LM head's logits become cap · tanh(logits / cap) (Gemma 2)
  MoeConfig moe;

  // An encoder: every query sees every key, the embeddings are layer-normalised (objective mlm).
  bool encoder() const { return objective == ObjectiveKind::Mlm; }
  int padded_vocab() const { return (vocab_size + 63) / 64 * 64; }
  int head_size() const { return n_embd / n_head; }
  int ffn_hidden() const { return ffn_mult * n_embd; }
  bool gated() const { return config_gated(mlp); }
  int expert_hidden() const { return moe.hidden > 0 ? moe.hidden : ffn_hidden(); }
  bool rotary() const { return position == PositionKind::Rotary; }
  // Throws frugal::Error naming the offending field and the accepted range.
  void validate() const;
  bool operator==(const ModelConfig&) const = default;
};

}  // namespace frugal
