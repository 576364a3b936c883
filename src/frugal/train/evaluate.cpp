// Evaluation loss over a shard; see evaluate.h.
#include "frugal/train/evaluate.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "frugal/core/error.h"
#include "frugal/core/timer.h"

namespace frugal {

EvalResult evaluate_loss(GPT& model, data::BatchLoader& loader, int batch_size, int64_t max_batches,
                         ProcessGroup& group, const std::vector<int32_t>* token_bytes,
                         const data::MaskingSpec* masking, const EvalShare* share) {
  const int B = batch_size, T = loader.seq_len();
  FRUGAL_CHECK(B >= 1, "batch size = {} must be at least 1", B);
  FRUGAL_CHECK(max_batches >= 0, "max batches = {} must be 0 (all) or positive", max_batches);
  const bool encoder = model.config().encoder();
  FRUGAL_CHECK(!encoder || masking, "internal: evaluating an encoder needs its masking");
  const EvalShare dealt = share ? *share : EvalShare{group.rank(), group.size(), {}};
  if (!dealt.forward && !model.planned_whole(B, T)) model.plan(B, T, model.recompute());
  Timer timer;
  loader.reset();
  const size_t N = size_t(B) * T;
  std::vector<int32_t> inputs(N), targets(N);
  std::vector<int64_t> ids(B);
  // Per batch: Σ per-token loss, target tokens, rows, target bytes, correct predictions; zero for
  // the other ranks' batches.
  constexpr size_t kSums = 5;
  std::vector<double> per_batch;
  int64_t batches_run = 0;
  for (int64_t batch = 0; max_batches == 0 || batch < max_batches; ++batch) {
    const int rows = loader.next(B, inputs.data(), targets.data(), ids.data());
    if (rows == 0) break;
    per_batch.insert(per_batch.end(), kSums, 0.0);
    if (batch % dealt.count != dealt.index) continue;
    ++batches_run;
    std::fill(targets.begin() + size_t(rows) * T, targets.end(), -1);  // short last batch
    std::fill(inputs.begin() + size_t(rows) * T, inputs.end(), 0);
    if (encoder)
      for (int b = 0; b < rows; ++b)
        data::mask_sample(*masking, data::validation_masking_key(ids[size_t(b)]), inputs.data() + size_t(b) * T,
                          targets.data() + size_t(b) * T, T);
    const int64_t counted =
        std::count_if(targets.begin(), targets.end(), [](int32_t t) { return t >= 0; });
    const std::optional<double> loss = dealt.forward ? dealt.forward(inputs.data(), targets.data())
                                                     : double(model.forward(inputs.data(), targets.data(), 0.0f));
    if (!loss) continue;  // another rank has this batch's loss
    double* sums = per_batch.data() + per_batch.size() - kSums;
    sums[0] = *loss * counted;
    sums[1] = double(counted);
    sums[2] = rows;
    if (token_bytes)
      for (const int32_t t : targets)
        if (t >= 0) sums[3] += (*token_bytes)[static_cast<size_t>(t)];
    if (encoder) sums[4] = double(model.correct_predictions(targets.data()));
  }
  if (group.size() > 1) per_batch = group.sum(per_batch);  // x + 0 + ... = x: exact
  EvalResult r;
  double loss_sum = 0;  // Σ per-token loss, in batch order
  for (size_t i = 0; i < per_batch.size(); i += kSums) {
    loss_sum += per_batch[i];
    r.tokens += static_cast<int64_t>(per_batch[i + 1]);
    r.sequences += static_cast<int64_t>(per_batch[i + 2]);
    r.bytes += static_cast<int64_t>(per_batch[i + 3]);
    r.correct += static_cast<int64_t>(per_batch[i + 4]);
  }
  r.batches = static_cast<int64_t>(per_batch.size() / kSums);
  r.batches_run = batches_run;
  r.loss = r.tokens > 0 ? loss_sum / r.tokens : 0.0;
  r.perplexity = std::exp(r.loss);
  if (encoder && r.tokens > 0) r.accuracy = double(r.correct) / double(r.tokens);
  if (token_bytes && r.bytes > 0) r.bits_per_byte = loss_sum / double(r.bytes) / std::log(2.0);
  r.seconds = timer.seconds();
  return r;
}

double evaluation_bytes(const GPT& model, int batch_size, int T) {
  const MemoryPlan plan = GPT::estimate_memory(model.config(), batch_size, T, model.recompute(), model.linear_dtype());
  const double B = batch_size;  // inputs and targets (B,T), sample ids (B)
  return double(plan.activations) + double(plan.scratch) + B * T * 2 * sizeof(int32_t) + B * sizeof(int64_t);
}

}  // namespace frugal
