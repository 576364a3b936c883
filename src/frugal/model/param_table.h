// ParamTable: every parameter of a model as a named view (Hugging Face GPT-2 names) into one flat
// float buffer. Gradients and AdamW moments use the same offsets, so zeroing, clipping, the
// optimizer step and checkpoint I/O are flat loops. Layout, in order: wte, wpe, block 0 .. L-1
// (each block contiguous, so a frozen prefix is one contiguous range), ln_f, lm_head (untied only).
// Every tensor starts on a 64-byte boundary. A table may cover only part of the model (a
// BlockRange: what one pipeline stage holds); its tensors keep their names and relative order.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "frugal/model/config.h"

namespace frugal {

// The part of a model one process runs: the embeddings (first stage), blocks [begin, end), and the
// final LayerNorm with the LM head and loss (last stage). The whole model is one range; a pipeline
// splits it into consecutive ranges, and running them one after the other is the whole model.
struct BlockRange {
  int begin = 0, end = 0;
  bool embeddings = true, head = true;
  static BlockRange whole(const ModelConfig& config) { return {0, config.n_layer, true, true}; }
  bool contains(int layer) const { return layer >= begin && layer < end; }
  bool operator==(const BlockRange&) const = default;
  // Throws Error unless 0 <= begin <= end <= n_layer, the embeddings go with begin == 0, the head
  // with end == n_layer, and the range holds something.
  void validate(const ModelConfig& config) const;
};

enum class ParamRole { Embedding, Weight, Bias, NormWeight, NormBias };

struct ParamInfo {
  std::string name;            // e.g. "transformer.h.3.attn.c_attn.weight"
  std::vector<int64_t> shape;  // row-major; linear weights are (OC, IC)
  size_t offset = 0;           // in floats, into the flat buffer
  size_t numel = 0;
  ParamRole role = ParamRole::Weight;
  int layer = -1;              // block index; -1 for embeddings, n_layer for ln_f and lm_head
  // Decoupled weight decay applies to 2-D tensors only (weights and embeddings).
  bool decays() const { return role == ParamRole::Weight || role == ParamRole::Embedding; }
};

class ParamTable {
 public:
  // The tensors of `range`, in the order of the whole model's table: wte and wpe (embeddings; a
  // last stage without them holds its own copy of wte when the head is tied), the range's blocks,
  // ln_f and lm_head (head).
  static ParamTable build(const ModelConfig& config);
  static ParamTable build(const ModelConfig& config, const BlockRange& range);

  const std::vector<ParamInfo>& entries() const { return entries_; }
  const ParamInfo* find(std::string_view name) const;
  const ParamInfo& at(std::string_view name) const;  // throws Error when absent
  size_t total() const { return total_; }             // floats, including alignment padding
  // Parameters a model really has (no alignment padding, no vocabulary padding rows).
  size_t num_parameters(const ModelConfig& config) const;
  // [begin, end) float offsets covering block `layer`; layer == -1 gives the embeddings,
  // layer == n_layer the final LayerNorm and untied head.
  std::pair<size_t, size_t> layer_range(int layer) const;

 private:
  std::vector<ParamInfo> entries_;
  size_t total_ = 0;
};

}  // namespace frugal
