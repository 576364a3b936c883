// GPT: the single-device model, or one BlockRange of it (a pipeline stage). Owns the flat
// parameter and gradient buffers of its range (laid out by the ParamTable from the ModelSpec) and
// an activation arena planned once per (B, T). It is the executor of its components — the
// TokenEmbedding, one TransformerBlock per layer and the Objective (model/embedding.h, block.h,
// objective.h), which define what is computed — and runs them over micro-batches, slots and the
// frozen prefix. It knows nothing of parallelism or methods; those act through its narrow interface:
// the ParamTable, the frozen-prefix boundary, linear formats, per-block activation recomputation,
// and the range API (forward_range / backward_range), which a pipeline chains across processes
// and which the whole-model forward() / backward() run over one range. A plan may also execute
// only a stage, a sub-range of the allocated range (parameters and gradients stay whole), with
// several activation slots: the micro-batches a pipeline schedule keeps in flight. Under tensor
// parallelism a GPT is one rank's shard: its tables hold the rank's parts of the placed tensors
// (ModelSpec), and its components meet the group's other ranks through the TensorCollectives it
// is given. Under sequence parallelism (ShardCoord::sequence) the residual stream between the
// blocks — the embeddings' output, every block's output, a stage's input and output and their
// gradients — holds only this rank's N / T rows of a micro-batch's N (rank t: rows t·N/T ..), and
// the components join and split the rows around their linears (block.h).
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "frugal/core/memory.h"
#include "frugal/kernels/attention_pattern.h"
#include "frugal/model/block.h"
#include "frugal/model/collectives.h"
#include "frugal/model/config.h"
#include "frugal/model/embedding.h"
#include "frugal/model/linear_format.h"
#include "frugal/model/objective.h"
#include "frugal/model/param_table.h"

namespace frugal {

// Bytes held by each part of a training step, for the memory plan print-out.
struct MemoryPlan {
  size_t parameters = 0, gradients = 0, activations = 0, scratch = 0;
  size_t working_copies = 0;  // the weights' bf16 working copies (train.precision = "bf16")
  // BF16: the linears' inputs among the activations are kept in bf16 (BlockActs)
  kernels::DType activation_dtype = kernels::DType::F32;
  std::string describe(size_t optimizer_state_bytes) const;
};

class GPT {
 public:
  static constexpr size_t kAbsent = ParamTable::kAbsent;
  explicit GPT(const ModelConfig& config);
  // `tensor`: the tensor-parallel group this model is one rank's shard of (null: a group of one,
  // the whole model); it must outlive the model.
  GPT(const ModelConfig& config, const BlockRange& range, TensorCollectives* tensor = nullptr);

  const ModelConfig& config() const { return config_; }
  const BlockRange& range() const { return range_; }
  const ParamTable& table() const { return table_; }
  float* params() { return mark_stale(), params_.data(); }
  const float* params() const { return params_.data(); }
  float* grads() { return grads_.data(); }
  size_t num_floats() const { return table_.total(); }
  float* param(const std::string& name) { return params_.data() + table_.at(name).offset; }

  // Each tensor as its TensorSpec says (GPT-2's: N(0, init_std) for weights and embeddings,
  // residual projections scaled by 1/sqrt(2L), zero biases, unit LayerNorm gains); the vocabulary
  // padding rows stay zero. Each tensor draws from its own stream keyed by (seed, name):
  // independent of layout.
  void init_weights(uint64_t seed);

  // Plans activations for batches of B sequences of length T (T <= block_size). recompute[l]
  // keeps only block l's output and recomputes its internals during backward. The same as
  // plan(B, T, recompute, range(), 1).
  void plan(int B, int T, std::vector<bool> recompute = {});
  // Plans activations for batches of B sequences of length T for executing only `stage`, a
  // sub-range of range() (stage.embeddings needs range().embeddings and stage.begin ==
  // range().begin; stage.head needs range().head and stage.end == range().end; at least one
  // block), with `slots` (>= 1) independent sets of the activations a backward needs:
  // micro-batches in flight in a pipeline schedule. forward_range / backward_range / output() /
  // input_grad() / block_output() / tokens() act on the current slot (use_slot; slot 0 after
  // planning). Parameters and gradients stay those of range(); the backward scratch and the
  // recomputed blocks' internals are shared by the slots.
  void plan(int B, int T, std::vector<bool> recompute, const BlockRange& stage, int slots);
  void use_slot(int s);
  int slots() const { return static_cast<int>(slots_.size()); }  // 0 before plan()
  int slot() const { return slot_; }
  // The executed range: range() after plan(B, T, ...) (and before any plan).
  const BlockRange& stage() const { return stage_; }
  // The plan's recompute policy (size n_layer; empty before any plan).
  const std::vector<bool>& recompute() const { return recompute_; }
  // True when planned for (B, T), the whole range() and one slot (what evaluation and logits need).
  bool planned_whole(int B, int T) const;
  int batch() const { return B_; }
  int seq_len() const { return T_; }
  // The plan of the last plan(), with the bf16 working copies the linears and the head hold now.
  MemoryPlan memory_plan() const;
  // The memory plan a model of `config` would have after plan(B, T, recompute), computed without
  // building or allocating anything (absurd sizes give huge byte counts, saturated at 2^63, never
  // an overflow): to refuse a run before allocating. `range`: the part of the model allocated
  // (parameters and gradients); `stage` and `slots`: the part executed and its activation slots
  // (default: range and 1); `shard`: the rank of a tensor-parallel group (default: the whole model);
  // `dtype`: the activation dtype, the linear dtype of the model (set_linear_dtype).
  static MemoryPlan estimate_memory(const ModelConfig& config, int B, int T,
                                    const std::vector<bool>& recompute,
                                    kernels::DType dtype = kernels::DType::F32);
  static MemoryPlan estimate_memory(const ModelConfig& config, int B, int T,
                                    const std::vector<bool>& recompute, const BlockRange& range);
  static MemoryPlan estimate_memory(const ModelConfig& config, int B, int T,
                                    const std::vector<bool>& recompute, const BlockRange& range,
                                    const BlockRange& stage, int slots, const ShardCoord& shard = {},
                                    kernels::DType dtype = kernels::DType::F32);

  // Blocks [0, k) and the embeddings are frozen: no backward, no weight gradients (k = 0: none).
  // With a tied head, freezing the embedding also freezes the head.
  void set_frozen_prefix(int k);
  int frozen_prefix() const { return frozen_; }
  // The flat-buffer range [begin, end) of trainable parameters (frozen ones form a prefix).
  size_t trainable_begin() const;

  // The components: the input embeddings, block l (any l < n_layer; a block outside range() has no
  // tensors), the objective at the top.
  const TokenEmbedding& embedding() const { return embedding_; }
  const TransformerBlock& block(int l) const { return blocks_.at(l); }
  const Objective& objective() const { return *objective_; }
  // The losses of the last forward_range with the head: the objective's and the auxiliary ones
  // (the mixture-of-experts blocks' balancing losses).
  const LossTerms& loss_terms() const { return loss_terms_; }

  // The routing of the range's mixture-of-experts blocks (none: no layers) over the training
  // forwards since the last balance_experts(): what the balancing bias moves by. A data-parallel
  // strategy replaces it by the sum over its ranks before the update.
  RoutingStats& step_routing() { return step_routing_; }
  // After an optimizer step: moves the balancing bias of every trainable mixture-of-experts block
  // by its step_routing() load (when model.moe.bias_rate > 0), then clears it.
  void balance_experts();
  // The routing since the last call (of training forwards), then cleared: the metrics' window.
  RoutingStats take_routing();
  // Adds `window`, taken from a model of the same blocks that this one replaces (a re-partitioned
  // copy), to the metrics' window.
  void add_routing(const RoutingStats& window) { window_routing_.add(window); }

  // The linears of a block, in execution order.
  using Linear = BlockLinear;
  static constexpr int kLinears = kBlockLinears;
  // Installs an execution format on block `layer`'s linear (null restores the default one) and
  // refreshes it from the current weight. Every linear starts with the default: DenseFormat, or
  // Bf16Format once set_linear_dtype(BF16).
  void set_linear_format(int layer, Linear which, std::shared_ptr<LinearFormat> format);
  // The element type the block linears' GEMMs compute in by default (train.precision): F32
  // (DenseFormat) or BF16 (Bf16Format: bf16 operands, fp32 sums, fp32 master weights). Installs
  // the new default on every linear that has the old one. It is also the activation dtype of the
  // plan (BF16: the linears' inputs stored in bf16); a planned model is planned again.
  // `weight_rounding` (its first unused): how every bf16 working copy of a weight is rounded from
  // it (train.bf16_rounding), each element indexed by its place in the whole model
  // (ParamInfo::global_offset), so that a pipeline stage rounds its blocks as one process does.
  void set_linear_dtype(kernels::DType dtype, const kernels::Bf16Rounding& weight_rounding = {});
  kernels::DType linear_dtype() const { return linear_dtype_; }
  // The format block `layer`'s linear runs with; never null.
  LinearFormat& linear_format(int layer, Linear which) const;
  // How this rank's part of a linear of a tensor shard maps from the whole linear (empty when this
  // rank holds the whole linear): what a whole linear's format is cut by (LinearFormat::cut).
  std::optional<LinearCut> linear_cut(int layer, Linear which) const;
  // Changes whenever set_linear_format gives one of blocks [0, blocks) another format: what a
  // cache of those blocks' outputs (AutoCache) must be invalidated on. 0 before any change.
  uint64_t prefix_format_version(int blocks) const;
  // The parameter-buffer offset of a block linear's weight (kAbsent for Gate without a gated MLP).
  size_t linear_weight_offset(int layer, Linear which) const;
  // Shape (OC, IC) of a block linear.
  std::pair<int, int> linear_shape(Linear which) const;
  // Calls refresh() of every installed format (after the master weights changed). The non-const
  // params() marks the formats stale, and forward_range, logits and the Decoder refresh stale
  // formats first (prepare_formats), so weights written anywhere (a checkpoint, a broadcast, a
  // pipeline move) are what the formats compute with.
  void refresh_formats();
  void prepare_formats() const;
  // An optimizer update of the parameters: update(params, copies) changes them and writes the bf16
  // rounding of every parameter it changes inside `copies` there (AdamW: adamw_update_bf16). The
  // copies are the current bf16 working copies of the Bf16Format linears and of the head (none
  // when they are stale), so that the next forward rounds none of them again: on a bf16 model this
  // replaces a pass over the weights a step. The other formats and a mixture's copies are
  // refreshed as after params().
  using ParamUpdate = std::function<void(float* params, const std::vector<WorkingCopy>& copies)>;
  void update_params(const ParamUpdate& update);
  // Writes into every block linear's weight the weight its format computes with (W ⊙ M for a
  // masked format: LinearFormat::write_effective_weight), then refreshes the formats: params()
  // then hold the weights of the function the model computes, which dense formats compute too.
  void write_effective_weights();

  // Which keys block `layer`'s attention lets each query see (default Causal; Bidirectional in an encoder); read by the block
  // forward and backward, the Decoder and the FLOP count. A change counts as a format change of
  // the block for prefix_format_version (it changes the block's output).
  void set_attention_pattern(int layer, const kernels::AttentionPattern& pattern);
  const kernels::AttentionPattern& attention_pattern(int layer) const;

  // What enters a range's forward for one micro-batch: the tokens (B,T), which the embeddings
  // read, or `activations` (B,T,C; this rank's rows under sequence parallelism, as every (B,T,C)
  // of the residual stream below), the output of block first_block - 1 (the previous pipeline
  // stage's output(), or cached activations of a frozen prefix): blocks before first_block and
  // the embeddings are then not run. "The range" from here on is the executed stage().
  struct RangeInput {
    const int32_t* tokens = nullptr;
    const float* activations = nullptr;
    int first_block = 0;
  };
  // Runs the range forward. grad_scale != 0 is a training step: dropout applies (its masks vary
  // with dropout_key) and backward_range() may follow; grad_scale == 0 is evaluation. A range with
  // the head returns the objective's mean loss over targets (B,T) != -1 (the auxiliary losses,
  // which training adds to it, are in loss_terms()) and, when training, already starts the
  // backward pass at the head (d loss/d logits scaled by grad_scale); other ranges return 0 and
  // leave their result in output().
  float forward_range(const RangeInput& in, const int32_t* targets, float grad_scale,
                      uint64_t dropout_key);
  // (B,T,C) output of the range's last block from the last forward_range into the current slot,
  // valid until the next one into that slot.
  const float* output() const { return block_output(stage_.end - 1); }
  // Back-propagates the last training forward_range into grads() (accumulating). A range with
  // the head starts from its loss (doutput null); the others take doutput (B,T,C), d loss/d
  // output() (the next stage's input_grad(), null when every block of this range is frozen).
  void backward_range(const float* doutput = nullptr);
  // (B,T,C) d loss / d the range's input after backward_range, for a range without the embeddings
  // (what the previous stage's backward_range takes); null when nothing below trains. It lives in
  // the backward scratch, which the slots share: valid only until the next backward_range on
  // any slot.
  const float* input_grad() const;

  // The whole model (a range with embeddings and head): forward from tokens, optionally starting
  // at `prefix_blocks` with `prefix_output` (B,T,C), the cached output of a frozen prefix of at
  // most frozen_prefix() blocks (0: the embeddings' output).
  float forward(const int32_t* inputs, const int32_t* targets, float grad_scale,
                uint64_t dropout_key = 0, const float* prefix_output = nullptr,
                int prefix_blocks = 0);
  // Output (B,T,C) of block l from the last forward into the current slot (l = stage().begin - 1:
  // the range's input; -1 is the embeddings' output), valid until the next one into that slot.
  const float* block_output(int l) const { return slots_[slot_].output(l, stage_.begin); }
  void backward() { backward_range(nullptr); }
  void zero_grad();
  // Called by backward_range each time the gradients of [from, num_floats()) are final for that
  // backward: after ln_f and an untied head, after each block (top down), after the embeddings
  // (from = 0; a tied head's wte gradient is final only then). A data-parallel strategy starts
  // reducing those gradients while the rest of the backward runs. Null: no calls.
  using GradReadyHook = std::function<void(size_t from)>;
  void set_grad_ready_hook(GradReadyHook hook) { grad_ready_ = std::move(hook); }
  // While set, backward leaves the token embedding's gradient out of grads() (wte still gets a
  // tied head's, which is final once the forward ran): a data-parallel strategy reduces wte's
  // large dense part during the backward and adds the sparse embedding part of every rank
  // afterwards, from embedding_output_grad() and tokens() (kernels::encoder_backward).
  void set_defer_token_embedding_grad(bool defer) { defer_wte_grad_ = defer; }
  // (B,T,C) d loss / d the embeddings' output after a backward of the whole model, and the
  // (B,T) tokens of the last forward into the current slot.
  const float* embedding_output_grad() const { return embedding_.normalised() ? dsum_ : dres_; }
  const int32_t* tokens() const { return slots_[slot_].tokens.data(); }
  // [begin, end) of the token embedding in params() / grads().
  std::pair<size_t, size_t> token_embedding_range() const;
  // lm_head.weight, or the token embedding when tied.
  size_t head_offset() const { return objective_->head_offset(); }
  // Logits (B, T, V) of the last position only is what sampling needs; this gives all positions.
  // Re-plans for (B, T), the whole range and one slot (keeping the recompute policy) unless
  // planned_whole(B, T). A model that is not a tensor-parallel shard only.
  void logits(const int32_t* inputs, int B, int T, float* out);
  // An encoder's masked-token accuracy: of the rows of the last forward whose target (B·T of them,
  // the forward's) is not -1, how many have their target as the most likely token (the largest
  // logit over the real vocabulary, ties to the lower id). Forms the logits of those rows only, a
  // few at a time. A whole model (not a pipeline stage or a tensor-parallel shard) only.
  int64_t correct_predictions(const int32_t* targets);


 private:
  // One micro-batch's activations and forward state: what a backward of it needs.
  struct Slot {
    std::vector<BlockActs> acts;  // per block; set for the stage's blocks (recomputed ones point
                                  // their internals at the shared set)
    // input: the stage's input (B,T,C), the embeddings' output in the first stage; with the head,
    // what the objective keeps (its training forward already starts the backward there)
    float* input = nullptr;
    EmbeddingActs embedding;  // an encoder's embedding LayerNorm's (the stage with the embeddings)
    ObjectiveActs objective{};
    std::vector<int32_t> tokens, targets;
    uint64_t dropout_key = 0;
    float dropout_p = 0.0f;  // config dropout while training, 0 in evaluation
    float grad_scale = 0.0f;  // of the forward: the auxiliary losses' gradient scale
    bool backward_ready = false;
    // block l's output (l < stage_begin: the stage's input)
    float* output(int l, int stage_begin) const { return l < stage_begin ? input : acts[l].res_out; }
  };
  Slot& cur() { return slots_[slot_]; }
  const float* block_input(int l) const { return block_output(l - 1); }
  // Block l's forward of samples [b0, b0 + nb) of the micro-batch; returns its MLP's report.
  FeedForward::Report block_forward(int l, uint64_t dropout_key, int b0, int nb);
  // The dropout masks' index of this rank's first element of the micro-batch (under sequence
  // parallelism its first row's; else 0).
  size_t dropout_first() const;
  // Calls f(format, weight, OC, IC) for every block linear of the range.
  // f(layer, which, its format, its weight's offset, OC, IC) for every block linear this range holds.
  void for_each_linear(const std::function<void(int, Linear, LinearFormat&, size_t, int, int)>& f) const;
  // The default format of the linear whose weight is at `offset`.
  std::shared_ptr<LinearFormat> default_format(size_t offset) const;
  // How the working copy of the weight at `offset` is rounded (set_linear_dtype).
  kernels::Bf16Rounding weight_rounding(size_t offset) const;
  bool is_default_format(const LinearFormat& format) const;
  // Lays out the activations and backward scratch of plan(B, T, recompute, stage, slots) through
  // `take` (counting only, for estimate_memory, when it returns null), in arena order.
  struct Layout {
    std::vector<Slot> slots;
    float* dres = nullptr;  // d loss / d the residual stream
    float* dsum = nullptr;  // d loss / d an encoder's embedding sum (before its LayerNorm)
    std::vector<BlockScratch> scratch;  // per block (one set per block kind)
  };
  static void lay_out(const ModelConfig& config, const ShardCoord& shard, const Objective& objective,
                      double N, const std::vector<bool>& recompute, const BlockRange& stage,
                      int slots, kernels::DType dtype, const Take& take_activation, const Take& take_scratch,
                      Layout& out);

  ModelConfig config_;
  BlockRange range_;
  ParamTable table_;
  Buffer<float> params_, grads_;
  std::shared_ptr<LinearFormat> dense_;  // the DenseFormat every fp32 linear starts with
  kernels::DType linear_dtype_ = kernels::DType::F32;
  kernels::Bf16Rounding weight_rounding_;
  mutable bool formats_stale_ = false;  // params() was handed out since the last refresh_formats()
  // Since then only update_params changed the weights, writing the Bf16Formats' and the head's copies.
  mutable bool copies_written_ = false;
  void mark_stale() const {
    formats_stale_ = true;
    copies_written_ = false;
  }
  TokenEmbedding embedding_;
  std::vector<TransformerBlock> blocks_;  // all n_layer; those outside range_ hold no tensors
  std::unique_ptr<Objective> objective_;
  SoloCollectives solo_;    // a tensor-parallel group of one: the whole model
  TensorCollectives* comm_;  // the model's group: solo_ unless given one
  std::vector<uint64_t> format_changed_at_;  // per block: the format_changes_ of its last change
  uint64_t format_changes_ = 0;
  LossTerms loss_terms_;
  RoutingStats step_routing_, window_routing_;

  int B_ = 0, T_ = 0, frozen_ = 0;
  BlockRange stage_;  // the executed part of range_
  std::vector<bool> recompute_;
  Buffer<float> arena_;
  std::vector<Slot> slots_;
  int slot_ = 0;
  // backward scratch, shared by the slots: d loss / d the residual stream and each block's scratch
  float* dres_ = nullptr;
  float* dsum_ = nullptr;  // Layout::dsum
  std::vector<BlockScratch> scratch_;
  GradReadyHook grad_ready_;
  bool defer_wte_grad_ = false;
  MemoryPlan plan_;
};

}  // namespace frugal
