// Evaluation: the mean cross-entropy loss of a model over a token shard's sequences, in order.
// Shared by the trainer's periodic validation and `frugal eval`.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "frugal/data/loader.h"
#include "frugal/data/masking.h"
#include "frugal/model/gpt.h"
#include "frugal/train/process_group.h"

namespace frugal {

struct EvalResult {
  int64_t sequences = 0;  // evaluated
  int64_t tokens = 0;     // predicted target tokens
  double loss = 0;        // mean over those tokens (nats)
  double perplexity = 0;  // exp(loss)
  int64_t bytes = 0;            // UTF-8 bytes the target tokens stand for (with token_bytes)
  double bits_per_byte = NAN;   // Σ loss / bytes / ln 2 (with token_bytes and bytes > 0)
  int64_t correct = 0;      // an encoder's: masked tokens predicted right (GPT::correct_predictions)
  double accuracy = NAN;    // an encoder's: correct / tokens
  double seconds = 0;
  int64_t batches = 0;      // evaluated, by all ranks
  int64_t batches_run = 0;  // of them, by this rank
};

// One batch's forward for evaluate_loss where the model is not run by model.forward (a pipeline's
// stages chain theirs): the batch's mean loss over its targets on the rank that computes it, nullopt
// on the others.
using EvalForward = std::function<std::optional<double>(const int32_t* inputs, const int32_t* targets)>;
// Which batches a rank runs and how: batches i with i % count == index, with `forward` (null:
// model.forward). Ranks sharing an index run the same batches together (a tensor group, a
// pipeline's stages); the sums still add over the whole group passed to evaluate_loss.
struct EvalShare {
  int index = 0, count = 1;
  EvalForward forward;
};

// Rewinds `loader` (Sequential order) and runs the model over its sequences in batches of
// batch_size, at most max_batches of them (0: all). Every target token weighs the same (a short
// last batch counts for its rows only). Plans the model for (batch_size, loader.seq_len()), the
// whole range and one slot, keeping its recompute policy, when it is planned otherwise (a
// pipeline stage's plan, say, which its strategy then restores). No dropout (evaluation). Over the ranks of `group` (each with the same
// model): rank r runs batches r, r + N, ...; every rank gets the result, which is the one
// process's to the bit (the per-batch sums are added in batch order). With token_bytes (per token
// id, the text bytes it stands for: data::token_text_bytes), also the bytes of the evaluated target
// tokens and bits per byte, the loss in nats per token × tokens per byte / ln 2 over them.
// With `share`, the batches are dealt by it instead (and with share->forward the model keeps its
// own plan).
// An encoder (model.objective = mlm) needs `masking`: every sequence is masked with its validation
// key (data::validation_masking_key: the same positions in every run), the loss is over the masked
// tokens, and the result has their accuracy.
EvalResult evaluate_loss(GPT& model, data::BatchLoader& loader, int batch_size, int64_t max_batches,
                         ProcessGroup& group = single_process(),
                         const std::vector<int32_t>* token_bytes = nullptr,
                         const data::MaskingSpec* masking = nullptr, const EvalShare* share = nullptr);

// The bytes evaluate_loss allocates for batches of batch_size sequences of T tokens on the whole
// `model` (its activation plan and the token buffers), computed without allocating, in double so
// that absurd sizes do not overflow: compare it with the memory available before evaluating.
double evaluation_bytes(const GPT& model, int batch_size, int T);

}  // namespace frugal
