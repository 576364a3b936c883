// Key/value-cached inference over a GPT's weights; see decoder.h.
#include "frugal/model/decoder.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "frugal/core/error.h"

namespace frugal {

int Decoder::kind(int layer) const { return model_.block(layer).moe() ? 1 : 0; }

Decoder::Decoder(const GPT& model) : model_(model) {
  const ModelConfig& m = model.config();
  FRUGAL_CHECK(!m.encoder(), "this model is an encoder (model.objective = \"mlm\"): it fills masked "
               "positions (frugal fill-mask) and does not generate text token by token");
  const LocalSizes sizes = LocalSizes::of(m, model.table().shard());
  const size_t T = m.block_size, C = m.n_embd;
  for (int l = 0; l < m.n_layer; ++l) {
    k_cache_.emplace_back(T * sizes.attn_width);
    v_cache_.emplace_back(T * sizes.attn_width);
  }
  x_.resize(T * C);
  branch_.resize(T * C);
  logits_.resize(m.vocab_size);
  head_scratch_.resize(C + 2);
  // One set of internals for every block of a kind (they run one after the other), the residual
  // in place.
  allocate_layout(internals_, [&](const Take& take) {
    std::array<bool, 2> laid_out{};
    for (int l = 0; l < m.n_layer; ++l)
      if (!std::exchange(laid_out[kind(l)], true))
        model.block(l).lay_out_internals(double(T), take, acts_[kind(l)], kernels::DType::F32);
  });
  for (BlockActs& a : acts_) a.res_mid = a.res_out = x_.data();
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
  for (int i = 0; i < n; ++i)
    FRUGAL_CHECK(tokens[i] >= 0 && tokens[i] < m.vocab_size,
                 "token id {} is outside the model's vocabulary [0, {}); use the tokenizer the "
                 "model was trained with", tokens[i], m.vocab_size);
  model_.prepare_formats();
  model_.embedding().forward(model_.params(), x_.data(), tokens, 1, n, solo_, pos0);
  BlockScratch scratch{};  // the forward works in the branch only
  scratch.branch = branch_.data();
  for (int l = 0; l < m.n_layer; ++l) {
    const KvCache cache{k_cache_[l].data(), v_cache_[l].data(), pos0};
    model_.block(l).forward(model_.params(), acts_[kind(l)], x_.data(), scratch, 1, n, {}, solo_, &cache);
  }
  // Only the last row's logits are wanted.
  model_.objective().row_logits(model_.params(), x_.data() + size_t(n - 1) * m.n_embd, logits_.data(),
                                head_scratch_.data());
}

}  // namespace frugal
