// The multi-level operators (Zou et al., ICLR 2024) between two adjacent levels of a GPT: width
// and depth coalescing (large model -> small model), de-coalescing (the reverse map) and
// interpolation. Pure functions over flat buffers laid out by ParamTable::build(config); applied
// to weights and, as an option of the V-cycle, to AdamW's moments.
//
// Width. The residual stream is cut into n_head chunks of head_size (HS) features, the MLP hidden
// layer into n_head chunks of ffn_mult·HS; each large chunk belongs to one small chunk (group).
// A linear W (OC, IC) coalesces to W'[o', i'] = mean over the output group of o' of the sum over
// the input group of i' of W[o, i] (output rows averaged, input columns summed); biases and
// LayerNorm parameters are averaged. De-coalescing copies output rows and divides input columns by
// the group size k. Heads keep their size, so the attention's softmax scale is unchanged.
// The embeddings' feature columns are averaged / copied (never scaled); with a tied head the
// final LayerNorm's γ and β are summed over the group when coalescing and divided by k when
// de-coalescing, which makes width de-coalescing exactly function-preserving (an untied head is a
// linear like any other: its input columns are summed / split).
// Depth. Each small layer is the mean of its group of large layers (after width coalescing);
// de-coalescing copies a small layer into every large layer of its group.
// coalesce(decoalesce(x)) == x for every small model x (up to float rounding).
#pragma once
#include <span>
#include <string>
#include <vector>

#include "frugal/model/config.h"
#include "frugal/model/param_table.h"

namespace frugal::multilevel {

// How large chunks (heads) or layers are grouped onto small ones, n_large -> n_small:
//   Stride:   j -> j mod n_small           (the paper's width default: heads i and i + H/2)
//   Adjacent: j -> j * n_small / n_large   (the paper's depth default: layers 2i and 2i+1)
enum class Grouping { Stride, Adjacent };
const char* grouping_name(Grouping g);
Grouping parse_grouping(const std::string& name, const std::string& key);  // throws Error naming key

// One level transition. width_factor must divide n_head (equal groups: exactness needs them);
// the small model has ceil(n_layer / depth_factor) layers (groups may then be unequal).
struct CoalesceSpec {
  int width_factor = 2;
  int depth_factor = 2;
  Grouping width = Grouping::Stride;
  Grouping depth = Grouping::Adjacent;
};

// The map between a large model and its coalesced small model.
struct LevelMap {
  ModelConfig large, small;
  std::vector<int> head_group;   // large head (chunk) -> small head; size large.n_head
  std::vector<int> layer_group;  // large layer -> small layer; size large.n_layer
  // Throws Error (naming the config field) when the spec does not fit the model.
  static LevelMap make(const ModelConfig& large, const CoalesceSpec& spec);
};

// The small model's configuration: n_head / width_factor heads of the same size, the layers of
// the spec, everything else (vocabulary, block size, MLP kind, head tying, biases) unchanged.
ModelConfig coalesced_config(const ModelConfig& large, const CoalesceSpec& spec);

// small (ParamTable::build(map.small).total() floats) from large; every float of small is
// written (alignment padding included, as zero).
void coalesce(const LevelMap& map, std::span<const float> large, std::span<float> small);
// large from small, the reverse map; every float of large is written.
void decoalesce(const LevelMap& map, std::span<const float> small, std::span<float> large);
// x <- (1 - alpha) * before + alpha * x, elementwise (before and x of one size).
void interpolate(float alpha, std::span<const float> before, std::span<float> x);

}  // namespace frugal::multilevel
