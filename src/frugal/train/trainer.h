// Trainer: the training loop of `frugal train`. Builds the session (model, AdamW, activation plan,
// LR schedule) from the run config, or from a checkpoint's model shape when resuming, reads the
// prepared shards, runs the steps through a step strategy (single process by default), evaluates
// on the validation split, logs metrics (JSON lines in the run directory and a progress
// display), stops cleanly on SIGINT/SIGTERM, and prints samples at the end. Under a parallel
// strategy every rank runs a Trainer; see TrainerOptions::group. A Trainer (rank 0's) holds its
// run directory's exclusive lock (io/dir_lock.h) from construction to destruction.
#pragma once
#include <exception>
#include <memory>
#include <optional>
#include <string>

#include "frugal/data/loader.h"
#include "frugal/data/masking.h"
#include "frugal/data/tokenizer.h"
#include "frugal/core/stop_signals.h"
#include "frugal/core/timer.h"
#include "frugal/io/config.h"
#include "frugal/io/dir_lock.h"
#include "frugal/methods/method_set.h"
#include "frugal/session/session.h"
#include "frugal/train/process_group.h"
#include "frugal/train/run_config.h"
#include "frugal/train/step.h"
#include "frugal/train/time_budget.h"

namespace frugal {

struct TrainerOptions {
  std::string resume;     // run or checkpoint directory: continue bit-exactly where it stopped
  std::string init_from;  // checkpoint directory: start from its weights with a fresh optimizer
  bool quiet = false;     // no progress output (tests)
  // train.out_dir may already hold a run (checkpoints or metrics): without resume (of that run)
  // training refuses to start unless overwrite, which deletes that run's checkpoints and log.
  bool overwrite = false;
  // How each optimizer step executes (single process unless a parallel strategy is given).
  StepStrategyFactory step_strategy = make_single_process_step;
  // The processes the run spans (null: this one). Every rank constructs a Trainer with the same
  // config; rank 0 alone prints, logs and writes the run directory, and all ranks stop together.
  ProcessGroup* group = nullptr;
};

struct FitResult {
  int64_t first_step = 0;     // the step this fit() started from (a resume's checkpoint)
  int64_t steps = 0;          // the step it reached: it trained steps [first_step, steps)
  std::vector<float> losses;  // training loss of every step run by this fit()
  float final_train_loss = 0, final_val_loss = 0;
  double seconds = 0;         // this fit()'s wall time
  double run_seconds = 0;     // the run's, over every session (metrics.jsonl's wall_s)
  bool interrupted = false;
  double peak_rss_mib = 0;    // the largest rank's peak resident memory over the run's process, at the end
  // The methods' lines when the run ended with a plan unfinished (Method::unfinished_at_end),
  // printed as notes; empty after a signal (a resume finishes the plan).
  std::vector<std::string> unfinished;
};

class Trainer {
 public:
  explicit Trainer(const io::Config& config, const TrainerOptions& options = {});
  ~Trainer();

  FitResult fit();
  // Mean validation loss over up to train.eval_batches batches, in order from the start, of
  // data.dir's validation split.
  float evaluate();
  // Every validation set (data.dir's "val", then data.val's, by name): its loss and bits per
  // byte, the same way.
  struct ValScore {
    std::string name;
    double loss = 0, bits_per_byte = 0;
    double accuracy = 0;  // an encoder's masked-token accuracy
  };
  // Over `group`'s ranks (the run's, or the strategy's evaluation(), with its share).
  std::vector<ValScore> evaluate_all(ProcessGroup& group, const EvalShare* share = nullptr);
  // Prints sample.count samples (streamed as they are generated) to stdout.
  void print_samples();

  Session& session() { return *session_; }
  GPT& model() { return session_->model(); }
  const MethodSet& methods() const { return methods_; }
  const RunSettings& settings() const { return settings_; }

 private:
  void log_metrics(const std::string& json_line);
  // The mixture-of-experts routing since the last log line (over every rank) as record["moe"]:
  // each auxiliary loss's mean, and per block the max/mean expert load and each expert's share
  // of the routed rows; and the worst block's max/mean load as "moe_max_over_mean_load". Nothing
  // for a dense model.
  void add_routing_metrics(nlohmann::json& record);
  // The peak resident memory (VmHWM) of the run's largest rank so far, in MiB (metrics'
  // peak_rss_mib at each log line, FitResult's at the end). Every rank calls it.
  double largest_peak_rss_mib();
  std::string save(int64_t step);
  // After a failed write of metrics.jsonl or of the progress output: saves a checkpoint if it can,
  // then throws Error with the cause and how the run ended: a CollectiveError when every rank
  // stops here together (they agreed to), so that each reports it before the job ends.
  [[noreturn]] void stop_after_failed_output(int64_t steps_done, const std::exception& cause, bool every_rank);
  // train.budget = "seconds": the next steps to time at or after step `from` — the first probe
  // (whatever kind its steps are), then one for each kind of step the methods' plan has not timed.
  std::optional<BudgetProbe> next_budget_probe(int64_t from) const;
  // After the steps or the evaluation `timing` timed, the last of them after step `done`: records
  // their kind's step time (a re-timing scales the other kinds alike: retimed) or the evaluation's
  // (the ranks' mean) and fixes the session's horizon again — the most steps whose time and
  // evaluations' (train.budget_evals) the time left allows after the run's mean elapsed time
  // (run_seconds, resumed parts included), kinds not timed yet at their estimates, capped at
  // train.max_steps. Returns the log record's "budget" entry.
  nlohmann::json fix_time_budget(const BudgetTiming& timing, int64_t done, double run_seconds);

  // First, so that from construction until fit() returns SIGINT and SIGTERM only ask the loop to
  // stop after the current step (after the first one when they come earlier) and never reach a
  // thread that runs kernels (see core/stop_signals.h).
  std::optional<StopSignals> stop_signals_{std::in_place};
  io::Config config_;
  TrainerOptions options_;
  ProcessGroup& group_;
  RunSettings settings_;
  // Declared before everything that may write into the run directory, so released after it.
  std::optional<io::DirLock> run_lock_;
  int64_t start_step_ = 0;
  std::unique_ptr<data::Tokenizer> tokenizer_;
  std::unique_ptr<data::BatchLoader> train_loader_;
  struct ValSet {
    std::string name;  // "val": data.dir's; else data.val's NAME
    std::unique_ptr<data::BatchLoader> loader;
  };
  std::vector<ValSet> val_sets_;
  std::vector<int32_t> token_bytes_;  // per token id, its text bytes (bits per byte)
  std::optional<data::MaskingSpec> masking_;  // an encoder's (model.objective = mlm)
  std::unique_ptr<Session> session_;
  MethodSet methods_;
  std::unique_ptr<StepStrategy> step_;
  double flops_executed_ = 0, flops_dense_ = 0;  // cumulative model FLOPs, also across resumes
  double wall_offset_ = 0;                       // training seconds before a resume
  const Timer* wall_started_ = nullptr;
  std::string metrics_path_;
};

}  // namespace frugal
