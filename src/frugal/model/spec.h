// ModelSpec: every tensor of a model declared once — its name, global shape, dtype, placement over
// the ranks of a tensor-parallel group, role and initialisation — by the component that uses it
// (model/embedding.h, block.h, objective.h: the embeddings, each transformer block, the
// objective). Everything that needs to know the model's tensors derives from it: the ParamTable (offsets into the flat
// buffers, with each tensor's local shape on this rank), initialisation, parameter counts, the
// memory estimate, checkpoints and the Hugging Face mapping (hf_layout).
//
// Placements follow Megatron's tensor parallelism, so that a sharded layout needs no new
// declarations: a column-parallel linear (qkv, fc, gate) is split along its output rows, a
// row-parallel one (attention and MLP output projections) along its input columns, the token
// embedding and an untied head along the vocabulary; LayerNorms and the row-parallel linears'
// biases are replicated. In one process (a group of 1) every local shape is the global one.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "frugal/kernels/dtype.h"
#include "frugal/model/config.h"

namespace frugal {

// Element type of a tensor (the kernels' DType: fp32 today).
using kernels::DType;

// Buffer: state the model reads but training does not differentiate (a router's balancing bias):
// its gradient stays zero, so AdamW leaves it unchanged; it is not counted as a parameter.
enum class ParamRole { Embedding, Weight, Bias, NormWeight, NormBias, Buffer };

// How a tensor is laid over the ranks of its group: whole on every rank, or split along one axis.
// A split axis is `parts` equal blocks (the q, k and v rows of the attention's input projection are
// 3), each cut into one contiguous piece per rank: rank r holds piece r of every block. Sharded
// tensors split over the tensor-parallel group; Experts tensors (a mixture's (E, ...) experts)
// split their axis 0 over the expert-parallel group: rank r holds experts r·E/P .. (r+1)·E/P − 1.
struct Placement {
  enum class Kind { Replicated, Sharded, Experts };
  Kind kind = Kind::Replicated;
  int axis = 0;   // Sharded: the axis that is split
  int parts = 1;  // Sharded: blocks of the axis split separately
  static Placement replicated() { return {}; }
  static Placement sharded(int axis, int parts = 1) { return {Kind::Sharded, axis, parts}; }
  static Placement experts() { return {Kind::Experts, 0, 1}; }
  bool operator==(const Placement&) const = default;
};

// This rank's place in the groups the placements refer to: the tensor-parallel group (rank, size)
// and the expert-parallel group (expert_rank, expert_size); all {0, 1} in one process. `sequence`:
// sequence parallelism (parallel.sequence) — between the linears (LayerNorms, dropout, residual
// sums) each rank of the tensor group holds only its 1/size of a micro-batch's rows, rank r rows
// [r·N/size, (r+1)·N/size); it changes the activations' layout, not the tensors'.
struct ShardCoord {
  int rank = 0, size = 1;
  int expert_rank = 0, expert_size = 1;
  bool sequence = false;
  // Whether the rows between the linears are split (sequence parallelism over more than one rank).
  bool split_rows() const { return sequence && size > 1; }
  // The rows of N this rank holds between the linears, and the first of them.
  double local_rows(double N) const { return split_rows() ? N / size : N; }
  size_t first_row(size_t N) const { return split_rows() ? N / size * rank : 0; }
  // The rank's place in the group that `placement` splits over ({0, 1}: replicated).
  ShardCoord group_of(const Placement& placement) const {
    if (placement.kind == Placement::Kind::Sharded) return {rank, size};
    if (placement.kind == Placement::Kind::Experts) return {expert_rank, expert_size};
    return {};
  }
  bool operator==(const ShardCoord&) const = default;
};

// The sizes this rank computes with: the global ones divided over its tensor-parallel group.
struct LocalSizes {
  int n_head = 0;      // attention heads on this rank
  int head_size = 0;   // the same on every rank
  int attn_width = 0;  // n_head · head_size: this rank's columns of q, k, v and of the attention output
  int ffn_hidden = 0;  // MLP hidden units on this rank
  // Throws Error when the heads or hidden units do not divide over the group.
  static LocalSizes of(const ModelConfig& config, const ShardCoord& shard);
};

// How a tensor is initialised: zeros, ones, N(0, init_std), or N(0, init_std / sqrt(2 L)) for the
// projections that write into the residual stream (GPT-2's scaling).
enum class Init { Zeros, Ones, Normal, ResidualNormal };
// The initialisation of the residual branches' output projections: ResidualNormal, or Zeros with
// config.zero_init_proj.
inline Init projection_init(const ModelConfig& config) {
  return config.zero_init_proj ? Init::Zeros : Init::ResidualNormal;
}

// What an axis of a tensor indexes, for code that maps tensors between model widths (the
// multilevel operators): the residual stream (C), the MLP hidden units (H), the q|k|v rows of the
// attention's input projection (3 blocks of C), or nothing that is grouped by heads.
enum class Features { None, Residual, Hidden, Qkv };

struct TensorSpec {
  std::string name;            // Hugging Face GPT-2 naming, e.g. "transformer.h.3.attn.c_attn.weight"
  std::vector<int64_t> shape;  // global; row-major; linear weights are (OC, IC)
  DType dtype = DType::F32;
  Placement placement;
  ParamRole role = ParamRole::Weight;
  int layer = -1;              // block index; -1: embeddings; n_layer: final LayerNorm and head
  Init init = Init::Normal;
  int64_t used_rows = -1;      // rows holding real values (the vocabulary's, not its padding); -1: all
  bool hf_conv1d = false;      // Hugging Face GPT-2 stores it as a Conv1D: (IC, OC)
  int64_t experts = 0;         // axis 0 indexes a mixture's experts, of which top_k run per token
  std::array<Features, 2> features{};  // of axes 0 and 1 (None past the rank)
  // A hidden weight matrix: a block linear's (OC, IC), or each expert's of an (E, OC, IC) tensor —
  // what Muon orthogonalises (optim/muon.h); embeddings, the head, routers, norms and biases are not.
  bool hidden_matrix = false;
  // The untied LM head (optim.head_lr gives it its own learning rate).
  bool untied_head = false;

  // The elements of the whole tensor (shape).
  size_t global_numel() const;
  // The shape this rank holds; throws Error when the split axis does not divide by the group.
  std::vector<int64_t> local_shape(const ShardCoord& shard) const;
  // Copies this rank's part of the whole tensor `global` (shape) into `local` (local_shape), or
  // back (to_global): what loading and gathering a sharded tensor do.
  void copy_local(const float* global, float* local, const ShardCoord& shard) const;
  void copy_global(const float* local, float* global, const ShardCoord& shard) const;
  // copy_local of a 0/1 mask laid out like the tensor (a sparsity method's mask of a weight).
  void copy_local(const uint8_t* global, uint8_t* local, const ShardCoord& shard) const;
  // The whole tensor's axis-0 index of each of this rank's axis-0 slices (local_shape(shard)[0]).
  std::vector<int32_t> whole_rows(const ShardCoord& shard) const;
};

class ModelSpec {
 public:
  // Every tensor of a model of `config`, in the flat buffers' order: the embeddings' (wte, wpe),
  // each block's, the objective head's (ln_f, then lm_head when untied). Validates the config.
  static ModelSpec build(const ModelConfig& config);

  const ModelConfig& config() const { return config_; }
  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  const TensorSpec* find(std::string_view name) const;

  // Appends a tensor (what components' declare() call); numbered layers keep the order above.
  void add(TensorSpec tensor) { tensors_.push_back(std::move(tensor)); }

 private:
  ModelConfig config_;
  std::vector<TensorSpec> tensors_;
};

// Declares a linear `prefix`.weight (OC, IC) and, with config.bias, `prefix`.bias (OC), both of
// block `layer`: column-parallel (split along OC, the bias with it) or row-parallel (split along
// IC, the bias replicated), stored by Hugging Face GPT-2 as a Conv1D.
enum class Parallel { Column, Row };
// `parts`: the column-parallel output's blocks (3 for q|k|v).
void declare_linear(ModelSpec& spec, const std::string& prefix, int layer, int64_t oc, int64_t ic,
                    Parallel parallel, std::array<Features, 2> features, Init init = Init::Normal,
                    int parts = 1);
// Declares the linears `prefix`.weight (E, OC, IC) and, with config.bias, `prefix`.bias (E, OC) of
// E experts of block `layer`, split by expert over the expert-parallel group.
void declare_expert_linear(ModelSpec& spec, const std::string& prefix, int layer, int64_t experts,
                           int64_t oc, int64_t ic, Init init = Init::Normal);
// Declares a LayerNorm `prefix`.weight (C) and, with config.bias, `prefix`.bias (C), replicated.
void declare_norm(ModelSpec& spec, const std::string& prefix, int layer);

}  // namespace frugal
