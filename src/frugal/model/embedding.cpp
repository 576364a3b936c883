// Token and position embeddings; see embedding.h.
#include "frugal/model/embedding.h"

#include <algorithm>

#include "frugal/core/error.h"
#include "frugal/kernels/ops.h"

namespace frugal {

void TokenEmbedding::declare(ModelSpec& spec) {
  const ModelConfig& c = spec.config();
  spec.add({.name = "transformer.wte.weight", .shape = {c.padded_vocab(), c.n_embd},
            .placement = Placement::sharded(0), .role = ParamRole::Embedding, .layer = -1,
            .used_rows = c.vocab_size, .features = {Features::None, Features::Residual}});
  if (c.rotary()) return;  // positions enter through attention's queries and keys
  spec.add({.name = "transformer.wpe.weight", .shape = {c.block_size, c.n_embd},
            .role = ParamRole::Embedding, .layer = -1,
            .features = {Features::None, Features::Residual}});
  if (c.encoder()) declare_norm(spec, "transformer.ln_emb", -1);
}

void TokenEmbedding::lay_out(const ModelConfig& config, double N, const Take& take, EmbeddingActs& acts) {
  acts = {};
  if (!config.encoder()) return;
  acts.sum = take(N * config.n_embd);
  acts.mean = take(N);
  acts.rstd = take(N);
}

TokenEmbedding::TokenEmbedding(const ModelConfig& config, const ParamTable& table)
    : split_(table.shard().size > 1), shard_(table.shard()), first_(0), rows_(config.padded_vocab()), C_(config.n_embd),
      eps_(config.layernorm_eps) {
  wte_ = table.offset_of("transformer.wte.weight");
  wpe_ = table.offset_of("transformer.wpe.weight");
  norm_w_ = table.offset_of("transformer.ln_emb.weight");
  norm_b_ = table.offset_of("transformer.ln_emb.bias");
  if (split_ && wte_ != kAbsent) {
    rows_ = static_cast<int>(table.at("transformer.wte.weight").local[0]);
    first_ = table.shard().rank * rows_;
  }
}

void TokenEmbedding::forward(const float* params, float* out, const int32_t* tokens, int B, int T,
                             TensorCollectives& comm, int pos0, const EmbeddingActs& acts) const {
  const float* wpe = wpe_ == kAbsent ? nullptr : params + wpe_ + size_t(pos0) * C_;
  if (normalised()) {
    FRUGAL_CHECK(acts.sum && !split_, "internal: the embedding LayerNorm needs its acts and the whole vocabulary");
    kernels::encoder_forward(acts.sum, tokens, params + wte_, wpe, B, T, C_);
    kernels::layernorm_forward(out, acts.mean, acts.rstd, acts.sum, params + norm_w_,
                               norm_b_ == kAbsent ? nullptr : params + norm_b_, B * T, C_, eps_);
    return;
  }
  if (!split_) {
    kernels::encoder_forward(out, tokens, params + wte_, wpe, B, T, C_);
    return;
  }
  // This rank's rows, zeros for the tokens other ranks hold: the group's sum is wte[tokens]
  // exactly (x + 0 is x), and adding wpe after it gives one process's bits. Under sequence
  // parallelism the lookup takes the joined room and the sum leaves this rank's rows in out.
  const size_t N = size_t(B) * T;
  FRUGAL_CHECK(!shard_.split_rows() || acts.joined, "internal: a sequence-parallel embedding needs its joined room");
  float* whole = shard_.split_rows() ? acts.joined : out;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < N; ++i) {
    const int row = tokens[i] - first_;
    float* o = whole + i * C_;
    if (row >= 0 && row < rows_)
      std::copy_n(params + wte_ + size_t(row) * C_, C_, o);
    else
      std::fill_n(o, C_, 0.0f);
  }
  comm.sum_rows(whole, N, C_, out);
  const size_t n = static_cast<size_t>(shard_.local_rows(double(N))), first = shard_.first_row(N);
  if (wpe)
    for (size_t j = 0; j < n; ++j)
      kernels::residual_forward(out + j * C_, out + j * C_, wpe + ((first + j) % T) * C_, C_);
}

void TokenEmbedding::backward(const float* params, float* grads, const float* dout, const int32_t* tokens, int B,
                              int T, bool token_grad, TensorCollectives& comm, const EmbeddingActs& acts,
                              float* dsum) const {
  if (normalised()) {
    FRUGAL_CHECK(acts.sum && dsum, "internal: the embedding LayerNorm's backward needs its acts and dsum");
    const size_t N = size_t(B) * T;
    std::fill_n(dsum, N * C_, 0.0f);  // layernorm_backward adds
    kernels::layernorm_backward(dsum, grads + norm_w_, norm_b_ == kAbsent ? nullptr : grads + norm_b_, dout,
                                acts.sum, params + norm_w_, acts.mean, acts.rstd, int(N), C_);
    dout = dsum;
  }
  if (shard_.split_rows()) {
    // this rank's rows' position gradients, summed over the group (the same bits on every rank);
    // then every rank's rows of dout for the token embedding's
    const size_t N = size_t(B) * T, n = N / shard_.size, first = shard_.first_row(N), TC = size_t(T) * C_;
    if (wpe_ != kAbsent) {
      float* part = acts.joined;  // (T, C)
      std::fill_n(part, TC, 0.0f);
      for (size_t j = 0; j < n; ++j) {
        float* p = part + ((first + j) % T) * C_;
        kernels::residual_forward(p, p, dout + j * C_, C_);
      }
      comm.all_reduce_sum(part, TC);
      kernels::residual_forward(grads + wpe_, grads + wpe_, part, TC);
    }
    if (!token_grad) return;
    comm.gather_rows(dout, n * C_, acts.joined);
    dout = acts.joined;
  } else {
    kernels::encoder_backward(token_grad && !split_ ? grads + wte_ : nullptr,
                              wpe_ == kAbsent ? nullptr : grads + wpe_, dout, tokens, B, T, C_);
    if (!token_grad || !split_) return;
  }
  // This rank's rows, each token's gradient added in row order as the whole kernel adds them.
  for (size_t i = 0; i < size_t(B) * T; ++i) {
    const int row = tokens[i] - first_;
    float* g = grads + wte_ + size_t(row) * C_;
    if (row >= 0 && row < rows_) kernels::residual_forward(g, g, dout + i * C_, C_);
  }
}

}  // namespace frugal
