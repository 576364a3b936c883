// The multi-level operators; see coalescing.h. Every tensor is a 2-D (rows, cols) array (a vector
// has one column) whose two axes are each described by the features they index and how a group of
// them merges; coalescing and de-coalescing are then the same index maps for every tensor.
#include "frugal/methods/multilevel/coalescing.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "frugal/core/error.h"
#include "frugal/model/objective.h"

namespace frugal::multilevel {

const char* grouping_name(Grouping g) {
  switch (g) {
    case Grouping::Stride: return "stride";
    case Grouping::Adjacent: return "adjacent";
  }
  return "?";
}

Grouping parse_grouping(const std::string& name, const std::string& key) {
  if (name == "stride") return Grouping::Stride;
  if (name == "adjacent") return Grouping::Adjacent;
  fail("{} = \"{}\" is not a grouping; use \"stride\" or \"adjacent\"", key, name);
}

ModelConfig coalesced_config(const ModelConfig& large, const CoalesceSpec& spec) {
  large.validate();
  FRUGAL_CHECK(spec.width_factor >= 1, "methods.multilevel.width_factor = {} must be at least 1",
               spec.width_factor);
  FRUGAL_CHECK(spec.depth_factor >= 1, "methods.multilevel.depth_factor = {} must be at least 1",
               spec.depth_factor);
  FRUGAL_CHECK(large.n_head % spec.width_factor == 0,
               "methods.multilevel.width_factor = {} must divide model.n_head = {} (heads merge in "
               "equal groups)",
               spec.width_factor, large.n_head);
  ModelConfig small = large;
  small.n_head = large.n_head / spec.width_factor;
  small.n_embd = small.n_head * large.head_size();
  small.n_layer = (large.n_layer + spec.depth_factor - 1) / spec.depth_factor;
  FRUGAL_CHECK(!(small == large),
               "methods.multilevel.width_factor = {} and methods.multilevel.depth_factor = {} leave a "
               "model of {} heads and {} layers unchanged; set one of them above 1",
               spec.width_factor, spec.depth_factor, large.n_head, large.n_layer);
  small.validate();
  return small;
}

namespace {

// n_large -> n_small: the small index large index j belongs to.
int group_of(Grouping g, int j, int n_large, int n_small) {
  return g == Grouping::Stride ? j % n_small : static_cast<int>(int64_t(j) * n_small / n_large);
}

// What an axis indexes is declared with each tensor (TensorSpec::features): the residual stream,
// the MLP hidden units, the q|k|v rows of c_attn, or nothing grouped by heads.
// How coalescing merges a group along an axis; de-coalescing copies (Mean) or splits by k (Sum).
enum class Merge { Mean, Sum };

struct Axis {
  Features features = Features::None;
  Merge merge = Merge::Mean;
};

// One axis of a tensor between the levels, for `n` large indices.
struct AxisIndex {
  std::vector<int> small_of;            // large index -> small index
  std::vector<std::vector<int>> group;  // small index -> its large indices
  int k = 1;                            // group size
  float coalesce_scale = 1, decoalesce_scale = 1;

  AxisIndex(const LevelMap& map, Axis axis, int64_t n) {
    const int HS = map.large.head_size();
    // A part (q, k or v for c_attn, else the whole axis) is n_head chunks of `chunk` features.
    const int64_t parts = axis.features == Features::Qkv ? 3 : 1;
    const int64_t chunk = axis.features == Features::Hidden ? int64_t(map.large.ffn_mult) * HS : HS;
    const int64_t part_large = n / parts, part_small = part_large / map.large.n_head * map.small.n_head;
    if (axis.features != Features::None) k = map.large.n_head / map.small.n_head;
    small_of.resize(n);
    group.resize(n / k);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t p = j / part_large, r = j % part_large;
      small_of[j] = axis.features == Features::None
                        ? static_cast<int>(j)
                        : static_cast<int>(p * part_small + map.head_group[r / chunk] * chunk + r % chunk);
      group[small_of[j]].push_back(static_cast<int>(j));
    }
    (axis.merge == Merge::Mean ? coalesce_scale : decoalesce_scale) = 1.0f / k;
  }
};

// The (rows, cols) axes of a tensor, with the features its spec declares: a linear averages its
// output rows and sums its input columns; biases and LayerNorms average; the embeddings average
// their feature columns; the head reads its input features summed: an untied head's columns, or
// with a tied head the LayerNorm before it (head_input_norm: ln_f, or an encoder's head LayerNorm).
std::pair<Axis, Axis> axes_of(const ParamInfo& e, const ModelConfig& c) {
  const bool norm = e.role == ParamRole::NormWeight || e.role == ParamRole::NormBias;
  const bool tied_head_input = norm && c.tied_head && e.name.starts_with(head_input_norm(c) + ".");
  const Axis rows{e.features[0], tied_head_input ? Merge::Sum : Merge::Mean};
  const Axis cols{e.features[1], e.role == ParamRole::Weight ? Merge::Sum : Merge::Mean};
  return {rows, cols};
}

// Below this many floats a tensor is mapped without a parallel region.
constexpr int64_t kParallelMin = 1 << 15;

// One tensor between the levels: its (rows, cols) index maps, used in both directions. A tensor of
// a block pairs one small tensor with the large tensors of its layer group.
class TensorMap {
 public:
  TensorMap(const LevelMap& map, const ParamInfo& small, const ParamInfo& large)
      : TensorMap(map, small, large, axes_of(large, map.large)) {}

  // small = the mean over `large` (the group's layers) of their width-coalesced tensors.
  void coalesce(const std::vector<const float*>& large, float* small) const {
    const float scale = rows_.coalesce_scale * cols_.coalesce_scale / static_cast<float>(large.size());
    const int64_t n = small_rows_ * small_cols_ * rows_.k * cols_.k * static_cast<int64_t>(large.size());
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (int64_t r = 0; r < small_rows_; ++r) {
      float* out = small + r * small_cols_;
      std::fill(out, out + small_cols_, 0.0f);
      for (const float* src : large)
        for (int o : rows_.group[r]) {
          const float* in = src + o * large_cols_;
          for (int64_t i = 0; i < large_cols_; ++i) out[cols_.small_of[i]] += in[i];
        }
      for (int64_t i = 0; i < small_cols_; ++i) out[i] *= scale;
    }
  }

  // large = the width-de-coalesced small tensor.
  void decoalesce(const float* small, float* large) const {
    const float scale = rows_.decoalesce_scale * cols_.decoalesce_scale;
    const int64_t large_rows = static_cast<int64_t>(rows_.small_of.size());
#pragma omp parallel for schedule(static) if (large_rows * large_cols_ >= kParallelMin)
    for (int64_t o = 0; o < large_rows; ++o) {
      const float* in = small + rows_.small_of[o] * small_cols_;
      float* out = large + o * large_cols_;
      for (int64_t i = 0; i < large_cols_; ++i) out[i] = scale * in[cols_.small_of[i]];
    }
  }

 private:
  TensorMap(const LevelMap& map, const ParamInfo& small, const ParamInfo& large, std::pair<Axis, Axis> axes)
      : rows_(map, axes.first, large.shape[0]),
        cols_(map, axes.second, cols_of(large)),
        large_cols_(cols_of(large)),
        small_cols_(cols_of(small)),
        small_rows_(small.shape[0]) {}
  static int64_t cols_of(const ParamInfo& e) { return e.shape.size() == 2 ? e.shape[1] : 1; }

  AxisIndex rows_, cols_;
  int64_t large_cols_, small_cols_, small_rows_;
};

// The large tensors a small tensor maps to and from: one per large layer of its layer group (one
// for the embeddings and the head).
using LargeTensors = std::vector<const ParamInfo*>;

// Calls f(tensor map, small tensor, its large tensors) for every tensor of the small model.
template <class F>
void for_each_tensor(const LevelMap& map, F&& f) {
  const ParamTable small = ParamTable::build(map.small), large = ParamTable::build(map.large);
  std::vector<std::vector<int>> layers(map.small.n_layer);  // small layer -> its large layers
  for (int j = 0; j < map.large.n_layer; ++j) layers[map.layer_group[j]].push_back(j);
  for (const ParamInfo& s : small.entries()) {
    LargeTensors linked;
    if (s.layer >= 0 && s.layer < map.small.n_layer) {
      const std::string prefix = fmt::format("transformer.h.{}.", s.layer);
      const std::string_view suffix = std::string_view(s.name).substr(prefix.size());
      for (int j : layers[s.layer])
        linked.push_back(&large.at(fmt::format("transformer.h.{}.{}", j, suffix)));
    } else {
      linked.push_back(&large.at(s.name));
    }
    f(TensorMap(map, s, *linked.front()), s, linked);
  }
}

// Zeroes the alignment padding between (and after) the tensors of `table` in `buffer`.
void zero_padding(const ParamTable& table, std::span<float> buffer) {
  size_t end = 0;
  for (const ParamInfo& e : table.entries()) {
    std::fill(buffer.begin() + end, buffer.begin() + e.offset, 0.0f);
    end = e.offset + e.numel;
  }
  std::fill(buffer.begin() + end, buffer.end(), 0.0f);
}

void check_size(const ModelConfig& config, size_t size, const char* what) {
  const size_t expected = ParamTable::build(config).total();
  FRUGAL_CHECK(size == expected, "internal: multilevel: the {} buffer holds {} floats, its model {}", what,
               size, expected);
}

}  // namespace

LevelMap LevelMap::make(const ModelConfig& large, const CoalesceSpec& spec) {
  LevelMap m;
  m.large = large;
  m.small = coalesced_config(large, spec);
  for (int h = 0; h < large.n_head; ++h)
    m.head_group.push_back(group_of(spec.width, h, large.n_head, m.small.n_head));
  for (int l = 0; l < large.n_layer; ++l)
    m.layer_group.push_back(group_of(spec.depth, l, large.n_layer, m.small.n_layer));
  return m;
}

void coalesce(const LevelMap& map, std::span<const float> large, std::span<float> small) {
  check_size(map.large, large.size(), "large");
  check_size(map.small, small.size(), "small");
  zero_padding(ParamTable::build(map.small), small);
  for_each_tensor(map, [&](const TensorMap& t, const ParamInfo& s, const LargeTensors& from) {
    std::vector<const float*> sources;
    for (const ParamInfo* l : from) sources.push_back(large.data() + l->offset);
    t.coalesce(sources, small.data() + s.offset);
  });
}

void decoalesce(const LevelMap& map, std::span<const float> small, std::span<float> large) {
  check_size(map.small, small.size(), "small");
  check_size(map.large, large.size(), "large");
  zero_padding(ParamTable::build(map.large), large);
  for_each_tensor(map, [&](const TensorMap& t, const ParamInfo& s, const LargeTensors& to) {
    for (const ParamInfo* l : to) t.decoalesce(small.data() + s.offset, large.data() + l->offset);
  });
}

void interpolate(float alpha, std::span<const float> before, std::span<float> x) {
  FRUGAL_CHECK(before.size() == x.size(), "internal: interpolate: {} floats before, {} now", before.size(),
               x.size());
  const int64_t n = static_cast<int64_t>(x.size());
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) x[i] = (1.0f - alpha) * before[i] + alpha * x[i];
}

}  // namespace frugal::multilevel
