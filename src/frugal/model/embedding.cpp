// Token and position embeddings; see embedding.h.
#include "frugal/model/embedding.h"

#include "frugal/kernels/ops.h"

namespace frugal {

void TokenEmbedding::declare(ModelSpec& spec) {
  const ModelConfig& c = spec.config();
  spec.add({.name = "transformer.wte.weight", .shape = {c.padded_vocab(), c.n_embd},
            .placement = Placement::sharded(0), .role = ParamRole::Embedding, .layer = -1,
            .used_rows = c.vocab_size, .features = {Features::None, Features::Residual}});
  spec.add({.name = "transformer.wpe.weight", .shape = {c.block_size, c.n_embd},
            .role = ParamRole::Embedding, .layer = -1,
            .features = {Features::None, Features::Residual}});
}

TokenEmbedding::TokenEmbedding(const ModelConfig& config, const ParamTable& table) : C_(config.n_embd) {
  wte_ = table.offset_of("transformer.wte.weight");
  wpe_ = table.offset_of("transformer.wpe.weight");
}

void TokenEmbedding::forward(const float* params, float* out, const int32_t* tokens, int B, int T,
                             int pos0) const {
  kernels::encoder_forward(out, tokens, params + wte_, params + wpe_ + size_t(pos0) * C_, B, T, C_);
}

void TokenEmbedding::backward(float* grads, const float* dout, const int32_t* tokens, int B, int T,
                              bool token_grad) const {
  kernels::encoder_backward(token_grad ? grads + wte_ : nullptr, grads + wpe_, dout, tokens, B, T, C_);
}

}  // namespace frugal
