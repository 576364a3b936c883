// ParamTable: every parameter of a model as a named view (Hugging Face GPT-2 names) into one flat
// float buffer, built from the model's ModelSpec (model/spec.h): each entry is a declared tensor
// with this rank's local shape and its offset. Gradients and AdamW moments use the same offsets, so zeroing, clipping, the
// optimizer step and checkpoint I/O are flat loops. Layout, in order: wte, wpe, block 0 .. L-1
// (each block contiguous, so a frozen prefix is one contiguous range), ln_f, lm_head (untied only).
// Every tensor starts on a 64-byte boundary. A table may cover only part of the model (a
// BlockRange: what one pipeline stage holds); its tensors keep their names and relative order.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "frugal/kernels/bf16_rounding.h"
#include "frugal/kernels/dtype.h"
#include "frugal/model/config.h"
#include "frugal/model/spec.h"

namespace frugal {

// The bf16 working copy of the parameters [offset, offset + numel) of the flat buffer (a bf16
// linear's weight, the LM head's): GPT::update_params hands the current ones to the optimizer,
// which writes there the rounding of every parameter it changes (kernels::adamw_update_bf16), as
// `rounding` (that of the copy's first element) says.
struct WorkingCopy {
  size_t offset = 0, numel = 0;
  kernels::bf16* data = nullptr;
  kernels::Bf16Rounding rounding;
};

// How the bf16 working copy of the weight at an offset of the flat buffer is rounded from it (its
// first element's rounding; GPT::set_linear_dtype).
using WeightRounding = std::function<kernels::Bf16Rounding(size_t offset)>;

// The part of a model one process runs: the embeddings (first stage), blocks [begin, end), and the
// final LayerNorm with the LM head and loss (last stage). The whole model is one range; a pipeline
// splits it into consecutive ranges, and running them one after the other is the whole model.
struct BlockRange {
  int begin = 0, end = 0;
  bool embeddings = true, head = true;
  static BlockRange whole(const ModelConfig& config) { return {0, config.n_layer, true, true}; }
  bool contains(int layer) const { return layer >= begin && layer < end; }
  // Whether a process running this range holds tensor t: the embeddings' with the embeddings (and
  // the token embedding with a tied head, which reads it), a block's with its block, the
  // objective's with the head.
  bool holds(const TensorSpec& t, const ModelConfig& config) const {
    if (t.layer == -1)
      return embeddings || (head && config.tied_head && t.name == "transformer.wte.weight");
    return t.layer == config.n_layer ? head : contains(t.layer);
  }
  bool operator==(const BlockRange&) const = default;
  // Throws Error unless 0 <= begin <= end <= n_layer, the embeddings go with begin == 0, the head
  // with end == n_layer, and the range holds something.
  void validate(const ModelConfig& config) const;
};

// A declared tensor (TensorSpec: name, global shape, dtype, placement, role, layer, init...) as
// this rank holds it.
struct ParamInfo : TensorSpec {
  std::vector<int64_t> local;  // this rank's shape (the global one unless sharded)
  size_t offset = 0;           // in floats, into the flat buffer
  // In floats, into the flat buffer of the whole model in one process (ParamTable::build(config)):
  // the tensor's place whatever part of the model this table holds (a pipeline stage's blocks).
  // Of a tensor-parallel shard's local tensor, the whole tensor's place.
  size_t global_offset = 0;
  size_t numel = 0;            // of the local shape
  // Decoupled weight decay applies to 2-D tensors only (weights and embeddings).
  bool decays() const { return role == ParamRole::Weight || role == ParamRole::Embedding; }
  // Elements of the local tensor that hold real values, at its start (the rest: vocabulary
  // padding rows, kept zero).
  size_t used_numel(const ShardCoord& shard) const;
};

class ParamTable {
 public:
  // The offset of a tensor the table does not hold.
  static constexpr size_t kAbsent = ~size_t(0);
  // The tensors of `range`, in the order of the whole model's table: wte and wpe (embeddings; a
  // last stage without them holds its own copy of wte when the head is tied), the range's blocks,
  // ln_f and lm_head (head).
  static ParamTable build(const ModelConfig& config);
  static ParamTable build(const ModelConfig& config, const BlockRange& range);
  // The same for the rank at `shard` of a tensor-parallel group (local shapes).
  static ParamTable build(const ModelConfig& config, const BlockRange& range, const ShardCoord& shard);

  const std::vector<ParamInfo>& entries() const { return entries_; }
  const ShardCoord& shard() const { return shard_; }
  const ParamInfo* find(std::string_view name) const;
  const ParamInfo& at(std::string_view name) const;  // throws Error when absent
  size_t offset_of(std::string_view name) const;      // kAbsent when absent
  // The global_offset of the element at `offset` of the buffer, within a tensor the table holds.
  size_t global_offset(size_t offset) const;
  size_t total() const { return total_; }             // floats, including alignment padding
  // Where the tensors this range updates begin: past a tied head's copy of wte on a last stage
  // without the embeddings (the first stage owns and updates it), else 0. The optimizer's moments
  // cover [owned_begin(), total()).
  size_t owned_begin() const { return owned_begin_; }
  // Parameters this table really holds (no alignment padding, no vocabulary padding rows, no
  // buffers), and of those the ones a token runs through when each mixture of experts sends it to
  // top_k of its experts.
  size_t num_parameters() const;
  size_t num_active_parameters(int top_k) const;
  // [begin, end) float offsets covering block `layer`; layer == -1 gives the embeddings,
  // layer == n_layer the final LayerNorm and untied head.
  std::pair<size_t, size_t> layer_range(int layer) const;

 private:
  std::vector<ParamInfo> entries_;
  size_t total_ = 0, owned_begin_ = 0;
  ShardCoord shard_;
};

}  // namespace frugal
