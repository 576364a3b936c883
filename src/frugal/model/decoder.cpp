// Key/value-cached inference over a GPT's weights; see decoder.h.
#include "frugal/model/decoder.h"

#include <algorithm>
#include <cstring>

#include "frugal/core/error.h"
#include "frugal/kernels/ops.h"

namespace frugal {

namespace k = kernels;

Decoder::Decoder(const GPT& model) : model_(model) {
  const ModelConfig& m = model.config();
  const size_t T = m.block_size, C = m.n_embd, H = m.ffn_hidden();
  for (int l = 0; l < m.n_layer; ++l) {
    k_cache_.emplace_back(T * C);
    v_cache_.emplace_back(T * C);
  }
  x_.resize(T * C);
  ln_.resize(T * C);
  mean_.resize(T);
  rstd_.resize(T);
  qkv_.resize(T * 3 * C);
  att_.resize(T * C);
  lse_.resize(T * m.n_head);
  branch_.resize(T * C);
  fc_.resize(T * H);
  if (m.gated()) gate_.resize(T * H);
  act_.resize(T * H);
  logits_.resize(m.vocab_size);
}

const float* Decoder::weight(size_t offset) const {
  return offset == GPT::kAbsent ? nullptr : model_.params() + offset;
}

void Decoder::reset() { window_.clear(); }

const float* Decoder::prefill(std::span<const int32_t> tokens) {
  FRUGAL_CHECK(!tokens.empty(), "decoding needs at least one context token");
  const size_t keep = std::min<size_t>(tokens.size(), model_.config().block_size);
  window_.assign(tokens.end() - keep, tokens.end());
  forward_rows(window_.data(), static_cast<int>(keep), 0);
  return logits_.data();
}

const float* Decoder::step(int32_t token) {
  FRUGAL_CHECK(!window_.empty(), "internal: Decoder::step needs a preceding prefill()");
  const int block = model_.config().block_size;
  if (static_cast<int>(window_.size()) == block) {  // slide: keep the last block/2 tokens
    window_.push_back(token);
    const size_t keep = std::max(1, block / 2);
    std::vector<int32_t> tail(window_.end() - keep, window_.end());
    return prefill(tail);
  }
  window_.push_back(token);
  const int pos = static_cast<int>(window_.size()) - 1;
  forward_rows(&window_[pos], 1, pos);
  return logits_.data();
}

void Decoder::forward_rows(const int32_t* tokens, int n, int pos0) {
  const ModelConfig& m = model_.config();
  const int C = m.n_embd;
  for (int i = 0; i < n; ++i)
    FRUGAL_CHECK(tokens[i] >= 0 && tokens[i] < m.vocab_size,
                 "token id {} is outside the model's vocabulary [0, {}); use the tokenizer the "
                 "model was trained with", tokens[i], m.vocab_size);
  const ParamTable& table = model_.table();
  const float* wpe = weight(table.at("transformer.wpe.weight").offset) + size_t(pos0) * C;
  k::encoder_forward(x_.data(), tokens, weight(table.at("transformer.wte.weight").offset), wpe, 1,
                     n, C);
  for (int l = 0; l < m.n_layer; ++l) block_rows(l, n, pos0);
  // Only the last row's logits are wanted.
  k::layernorm_forward(ln_.data(), mean_.data(), rstd_.data(), x_.data() + size_t(n - 1) * C,
                       weight(model_.final_norm_weight_offset()),
                       weight(model_.final_norm_bias_offset()), 1, C, m.layernorm_eps);
  k::lm_head_logits(logits_.data(), ln_.data(), weight(model_.head_offset()), 1, C, m.vocab_size);
}

// x (n,C) += attention and MLP branches of block l for rows at positions pos0 .. pos0+n-1.
void Decoder::block_rows(int l, int n, int pos0) {
  const ModelConfig& m = model_.config();
  const GPT::BlockOffsets& o = model_.block_offsets(l);
  const int C = m.n_embd, H = m.ffn_hidden();
  const size_t NC = size_t(n) * C, NH = size_t(n) * H;
  float *x = x_.data(), *ln = ln_.data(), *qkv = qkv_.data(), *att = att_.data(),
        *branch = branch_.data();
  float *kc = k_cache_[l].data(), *vc = v_cache_[l].data();
  k::layernorm_forward(ln, mean_.data(), rstd_.data(), x, weight(o.ln1_w), weight(o.ln1_b), n, C,
                       m.layernorm_eps);
  model_.linear_forward(l, GPT::Linear::Qkv, qkv, ln, n);
  for (int i = 0; i < n; ++i) {  // qkv row i = [q | k | v] -> cache row pos0 + i
    const float* row = qkv + size_t(i) * 3 * C;
    std::memcpy(kc + size_t(pos0 + i) * C, row + C, sizeof(float) * C);
    std::memcpy(vc + size_t(pos0 + i) * C, row + 2 * C, sizeof(float) * C);
  }
  const k::AttentionPattern& pattern = model_.attention_pattern(l);
  if (pos0 == 0) {
    k::attention_forward(att, lse_.data(), qkv, 1, n, C, m.n_head, pattern);
  } else {
    FRUGAL_CHECK(n == 1, "internal: Decoder appends one row at a time after the prefill");
    k::attention_decode(att, qkv, kc, vc, pos0 + 1, C, m.n_head, pattern);
  }
  model_.linear_forward(l, GPT::Linear::Proj, branch, att, n);
  k::residual_forward(x, x, branch, NC);
  k::layernorm_forward(ln, mean_.data(), rstd_.data(), x, weight(o.ln2_w), weight(o.ln2_b), n, C,
                       m.layernorm_eps);
  model_.linear_forward(l, GPT::Linear::Fc, fc_.data(), ln, n);
  if (m.gated()) {
    model_.linear_forward(l, GPT::Linear::Gate, gate_.data(), ln, n);
    k::gated_forward(act_.data(), gate_.data(), fc_.data(), NH,
                     m.mlp == MlpKind::Geglu ? k::GateAct::Gelu : k::GateAct::Silu);
  } else {
    k::gelu_forward(act_.data(), fc_.data(), NH);
  }
  model_.linear_forward(l, GPT::Linear::FcProj, branch, act_.data(), n);
  k::residual_forward(x, x, branch, NC);
}

}  // namespace frugal
