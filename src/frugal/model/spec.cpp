// ModelSpec: the declarations, local shapes and the declaration helpers; see spec.h.
#include "frugal/model/spec.h"

#include <algorithm>

#include "frugal/core/error.h"
#include "frugal/model/block.h"
#include "frugal/model/embedding.h"
#include "frugal/model/objective.h"

namespace frugal {

size_t TensorSpec::global_numel() const {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

std::vector<int64_t> TensorSpec::local_shape(const ShardCoord& coord) const {
  std::vector<int64_t> local = shape;
  const ShardCoord shard = coord.group_of(placement);
  if (shard.size == 1) return local;
  const int64_t n = shape.at(placement.axis), pieces = int64_t(placement.parts) * shard.size;
  FRUGAL_CHECK(n % pieces == 0, "{} has {} rows along axis {}, which do not split into {} equal "
               "parts over {} {}-parallel ranks", name, n, placement.axis, placement.parts, shard.size,
               placement.kind == Placement::Kind::Experts ? "expert" : "tensor");
  local[placement.axis] = n / shard.size;
  return local;
}

namespace {

// Calls f(global offset, local offset, n) for each contiguous run of this rank's part of t.
template <class F>
void for_each_local_run(const TensorSpec& t, const ShardCoord& coord, F&& f) {
  const std::vector<int64_t> local = t.local_shape(coord);
  int64_t numel = 1;
  for (int64_t d : local) numel *= d;
  const ShardCoord shard = coord.group_of(t.placement);
  if (shard.size == 1) {
    f(size_t{0}, size_t{0}, size_t(numel));
    return;
  }
  // The split axis as (outer, axis, inner): axis = parts blocks of `piece` rows per rank.
  const int axis = t.placement.axis;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= t.shape[d];
  for (size_t d = axis + 1; d < t.shape.size(); ++d) inner *= t.shape[d];
  const int64_t n = t.shape[axis], block = n / t.placement.parts, piece = block / shard.size;
  size_t local_offset = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t p = 0; p < t.placement.parts; ++p) {
      const int64_t first = p * block + int64_t(shard.rank) * piece;
      f(size_t((o * n + first) * inner), local_offset, size_t(piece * inner));
      local_offset += size_t(piece * inner);
    }
}

}  // namespace

void TensorSpec::copy_local(const float* global, float* local, const ShardCoord& shard) const {
  for_each_local_run(*this, shard, [&](size_t g, size_t l, size_t n) { std::copy_n(global + g, n, local + l); });
}

void TensorSpec::copy_local(const uint8_t* global, uint8_t* local, const ShardCoord& shard) const {
  for_each_local_run(*this, shard, [&](size_t g, size_t l, size_t n) { std::copy_n(global + g, n, local + l); });
}

std::vector<int32_t> TensorSpec::whole_rows(const ShardCoord& shard) const {
  const std::vector<int64_t> local = local_shape(shard);
  size_t local_row = 1, whole_row = 1;
  for (size_t d = 1; d < shape.size(); ++d) {
    local_row *= size_t(local[d]);
    whole_row *= size_t(shape[d]);
  }
  // Every run starts a local slice: a split on axis 0 runs over whole slices, one on a later axis
  // over one slice's part.
  std::vector<int32_t> rows(static_cast<size_t>(local[0]));
  for_each_local_run(*this, shard, [&](size_t g, size_t l, size_t n) {
    for (size_t k = 0; k < n; k += local_row) rows[(l + k) / local_row] = int32_t((g + k) / whole_row);
  });
  return rows;
}

void TensorSpec::copy_global(const float* local, float* global, const ShardCoord& shard) const {
  for_each_local_run(*this, shard, [&](size_t g, size_t l, size_t n) { std::copy_n(local + l, n, global + g); });
}

LocalSizes LocalSizes::of(const ModelConfig& c, const ShardCoord& shard) {
  FRUGAL_CHECK(c.n_head % shard.size == 0 && c.ffn_hidden() % shard.size == 0,
               "model.n_head = {} and the MLP's {} hidden units must divide over {} tensor-parallel "
               "ranks; set parallel.tensor to a divisor of both", c.n_head, c.ffn_hidden(), shard.size);
  const int heads = c.n_head / shard.size;
  return {heads, c.head_size(), heads * c.head_size(), c.ffn_hidden() / shard.size};
}

ModelSpec ModelSpec::build(const ModelConfig& config) {
  config.validate();
  ModelSpec spec;
  spec.config_ = config;
  TokenEmbedding::declare(spec);
  for (int l = 0; l < config.n_layer; ++l) TransformerBlock::declare(spec, l);
  declare_objective(spec);
  return spec;
}

const TensorSpec* ModelSpec::find(std::string_view name) const {
  for (const TensorSpec& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

void declare_linear(ModelSpec& spec, const std::string& prefix, int layer, int64_t oc, int64_t ic,
                    Parallel parallel, std::array<Features, 2> features, Init init, int parts) {
  const bool column = parallel == Parallel::Column;
  spec.add({.name = prefix + ".weight", .shape = {oc, ic},
            .placement = Placement::sharded(column ? 0 : 1, column ? parts : 1),
            .role = ParamRole::Weight, .layer = layer, .init = init, .hf_conv1d = true,
            .features = features, .hidden_matrix = true});
  if (spec.config().bias)
    spec.add({.name = prefix + ".bias", .shape = {oc},
              .placement = column ? Placement::sharded(0, parts) : Placement::replicated(),
              .role = ParamRole::Bias, .layer = layer, .init = Init::Zeros,
              .features = {features[0], Features::None}});
}

void declare_expert_linear(ModelSpec& spec, const std::string& prefix, int layer, int64_t experts,
                           int64_t oc, int64_t ic, Init init) {
  spec.add({.name = prefix + ".weight", .shape = {experts, oc, ic}, .placement = Placement::experts(),
            .role = ParamRole::Weight, .layer = layer, .init = init, .experts = experts, .hidden_matrix = true});
  if (spec.config().bias)
    spec.add({.name = prefix + ".bias", .shape = {experts, oc}, .placement = Placement::experts(),
              .role = ParamRole::Bias, .layer = layer, .init = Init::Zeros, .experts = experts});
}

void declare_norm(ModelSpec& spec, const std::string& prefix, int layer) {
  const int64_t C = spec.config().n_embd;
  spec.add({.name = prefix + ".weight", .shape = {C}, .role = ParamRole::NormWeight, .layer = layer,
            .init = Init::Ones, .features = {Features::Residual, Features::None}});
  if (spec.config().bias)
    spec.add({.name = prefix + ".bias", .shape = {C}, .role = ParamRole::NormBias, .layer = layer,
              .init = Init::Zeros, .features = {Features::Residual, Features::None}});
}

}  // namespace frugal
