// Evaluation: the mean cross-entropy loss of a model over a token shard's sequences, in order.
// Shared by the trainer's periodic validation and `frugal eval`.
#pragma once
#include <cstdint>

#include "frugal/data/loader.h"
#include "frugal/model/gpt.h"

namespace frugal {

struct EvalResult {
  int64_t sequences = 0;  // evaluated
  int64_t tokens = 0;     // predicted target tokens
  double loss = 0;        // mean over those tokens (nats)
  double perplexity = 0;  // exp(loss)
  double seconds = 0;
};

// Rewinds `loader` (Sequential order) and runs the model over its sequences in batches of
// batch_size, at most max_batches of them (0: all). Every target token weighs the same (a short
// last batch counts for its rows only). Plans the model for (batch_size, loader.seq_len()) when
// it is planned otherwise. No dropout (evaluation).
EvalResult evaluate_loss(GPT& model, data::BatchLoader& loader, int batch_size, int64_t max_batches);

}  // namespace frugal
