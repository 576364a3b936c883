// The run configuration: every key `frugal train` and `frugal bench --set` understand (the
// schema, also rendered into docs/config.md), and its conversion into typed settings.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "frugal/io/config.h"
#include "frugal/model/config.h"
#include "frugal/optim/adamw.h"
#include "frugal/session/session.h"

namespace frugal {

struct TrainSettings {
  std::string data_dir;        // from `frugal prepare` (see data/prepare.h), or nanoGPT/llm.c files
  std::string data_tokenizer;  // "": data_dir's tokenizer file
  // The validation sets, (name, directory): ("val", data_dir) first, then data.val's entries.
  std::vector<std::pair<std::string, std::string>> val_sets;
  std::string out_dir;
  int batch_size = 12, seq_len = 0, grad_accum = 1;
  // Batch-size warm-up: the micro-batches of step s (per rank) rise linearly from
  // batch_warmup_start at step 0 to grad_accum at step batch_warmup_steps (0: off).
  int batch_warmup_steps = 0, batch_warmup_start = 1;
  int accum_at(int64_t step) const {
    if (step >= batch_warmup_steps) return grad_accum;
    return batch_warmup_start + static_cast<int>((grad_accum - batch_warmup_start) * step / batch_warmup_steps);
  }
  int64_t max_steps = 2000;
  double max_seconds = 0;  // 0: no wall-clock limit
  double max_memory_mb = 0;  // the most a rank may plan for (MiB); 0: the memory the machine has available
  // "steps": the LR schedule spans max_steps; "seconds": it spans the steps max_seconds allows,
  // estimated from the mean time of budget_probe_steps steps (after the first), then again from
  // the steps since the last estimate every budget_retime · max_seconds (0: never again).
  std::string budget = "steps";
  int budget_probe_steps = 10;
  bool budget_evals = true;  // the budget counts the evaluations' time too
  double budget_retime = 0.05;
  uint64_t seed = 1337;
  int threads = 0;
  std::string recompute = "none";  // "none" | "all" | block indices "0,1,2"
  std::string precision = "fp32";  // the block linears' GEMMs: "fp32" | "bf16" (fp32 master weights); never "auto"
  std::string bf16_rounding = "nearest";  // bf16: the weights' working copies, "nearest" | "stochastic"
  int eval_interval = 200, eval_batches = 20, log_interval = 10;
  int checkpoint_interval = 0;  // steps between checkpoints; 0: only at the end (and on a signal)
  int keep_checkpoints = 3;
};

struct SampleSettings {
  int count = 2, max_tokens = 300, top_k = 0;
  double temperature = 0.8, top_p = 1.0;
  std::string prompt;
  uint64_t seed = 1;
};

// Multi-process training (parallel/, used when launched by mpirun with more than one process).
struct ParallelSettings {
  int zero = 0;             // ZeRO stage: 0 replicates AdamW's state, 1 shards it, 2 also the gradients
  double bucket_mb = 25;    // gradient all-reduce bucket size (MiB), as PyTorch DDP's default
  double timeout = 300;     // seconds without progress from another rank before the run stops
  int pipeline_stages = 1;  // K: the ranks form K-stage pipelines, ranks / K of them (replicas)
  std::string schedule = "1f1b";  // the pipeline's schedule: "1f1b" or "gpipe"
  bool elastic = true;      // AutoPipe shortens the pipeline as layers freeze; AutoDP uses the freed ranks
  std::string autopipe_cost = "time";  // what AutoPipe balances: "time" or "parameters" (bytes held)
  int tensor = 1;           // T: the ranks of a tensor-parallel group, each holding 1/T of every split tensor
  bool sequence = false;    // sequence parallelism: with T > 1, the rows between the linears split over the group
  bool tensor_overlap = false;  // the backward's input-gradient sums run beside the weight-gradient GEMMs
  int expert = 1;           // P: the ranks of an expert-parallel group, each holding E/P of every mixture's experts
  std::string comm_dtype = "fp32";  // the messages' payload (reductions, stages, tensor rows): "fp32" or "bf16"
};

struct RunSettings {
  ModelConfig model;
  AdamWConfig optim;
  TrainSettings train;
  SampleSettings sample;
  ParallelSettings parallel;
};

io::ConfigSchema run_schema();
// docs/config.md: an introduction and the schema's reference table (a test keeps the file current).
std::string config_reference_markdown();
// train.precision as a run uses it: "auto" becomes "bf16" where this CPU computes bf16 natively
// (kernels::bf16_matmul_native), else "fp32"; the others stay.
std::string resolved_precision(const std::string& precision);
// train.precision for logs: "fp32", or "bf16 (GEMMs native (oneDNN, avx512_core_bf16))", or, on a
// CPU without bf16 dot products, "bf16 (GEMMs converted to fp32: ...)", which says what it costs.
std::string describe_precision(const TrainSettings& t);
// How this process computes products of bf16 operands, for logs: "GEMMs native (oneDNN, ISA)", or
// the converted path and what that costs (the part of describe_precision after "bf16").
std::string describe_bf16_gemms();
// The dtype of the model's GEMMs that train.precision names (every command that builds the run's
// model uses it, so a checkpoint is evaluated and sampled with the GEMMs it was trained with).
kernels::DType linear_dtype(const TrainSettings& t);
// How the bf16 working copies of the weights are rounded (train.bf16_rounding, keyed by train.seed):
// the rounding of the model's element 0.
kernels::Bf16Rounding weight_rounding(const TrainSettings& t);
// The payload dtype of the messages between ranks (parallel.comm_dtype).
kernels::DType comm_dtype(const ParallelSettings& p);

// Blocks whose activations are recomputed in backward, from train.recompute; throws for a bad spec.
std::vector<bool> recompute_blocks(const std::string& spec, int n_layer);
// Reads typed settings from a resolved config (model.vocab_size 0 stays 0: "from the tokenizer")
// and checks what no single key's range can: the model's shape (ModelConfig::validate),
// train.seq_len <= model.block_size, train.recompute, the methods' settings. Everything
// `frugal train` checks before it reads data, so `frugal config` refuses the same configs.
RunSettings run_settings(const io::Config& config);
// The session a run of these settings trains: its model, AdamW, (train.batch_size, train.seq_len),
// train.recompute for any depth, and the warm-up + cosine schedule over train.max_steps.
SessionOptions session_options(const RunSettings& settings);

}  // namespace frugal
