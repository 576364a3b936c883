// The training loop; see trainer.h.
#include "frugal/train/trainer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <nlohmann/json.hpp>

#include "frugal/core/error.h"
#include "frugal/core/memory.h"
#include "frugal/core/rng.h"
#include "frugal/core/threading.h"
#include "frugal/core/timer.h"
#include "frugal/data/prepare.h"
#include "frugal/io/atomic_file.h"
#include "frugal/io/stdout.h"
#include "frugal/kernels/cpu/blas_peak.h"
#include "frugal/kernels/cpu/gemm.h"
#include "frugal/kernels/dispatch.h"
#include "frugal/model/flops.h"
#include "frugal/train/checkpoint.h"
#include "frugal/train/evaluate.h"
#include "frugal/train/fill_mask.h"
#include "frugal/train/sampler.h"

// The encoder head's FLOP count assumes the masking's share of predicted rows.
static_assert(frugal::data::kMaskRate == frugal::kMlmPredictedShare);

namespace frugal {
namespace fs = std::filesystem;

namespace {

// A time budget's timing of consecutive steps (a probe's, a re-timing's): wall-clock from start(),
// the evaluations and checkpoints among the steps taken out (pause).
class StepClock {
 public:
  void start() {
    timer_.reset();
    paused_ = 0;
  }
  void pause(double seconds) { paused_ += seconds; }
  double seconds() const { return timer_.seconds() - paused_; }

 private:
  Timer timer_;
  double paused_ = 0;
};

// On resume, forget the log lines of the steps about to be redone (resuming from an older
// checkpoint) and any line a crash cut off.
void drop_metrics_after(const std::string& path, int64_t step) {
  std::ifstream in(path);
  std::string line, kept;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;  // a line cut off by a crash: `frugal report` would reject it
    if (j.contains("step") && j["step"].get<int64_t>() > step) break;
    kept += line + "\n";
  }
  in.close();
  io::write_file_atomic(path, kept);
}

// The keys a resumed run must share with its checkpoint: the model (the tensor shapes do not show
// e.g. n_head) and what defines the batches. One "key: stored vs now" line per difference.
// train.grad_accum may differ when the number of ranks does: what must stay is the global batch,
// data-parallel ranks × grad_accum micro-batches (grad_accum alone in a pipeline, where it counts
// all ranks'; ranks / parallel.tensor replicas under tensor parallelism, whose groups run the same
// micro-batches).
std::vector<std::string> resume_differences(const io::Config& stored, int stored_ranks,
                                            const io::Config& now, int ranks,
                                            int resolved_vocab_size) {
  std::vector<std::string> out;
  const auto data_ranks = [](const io::Config& c, int n) {
    return c.get_int("parallel.pipeline_stages") > 1 ? 1 : n / static_cast<int>(c.get_int("parallel.tensor"));
  };
  stored_ranks = data_ranks(stored, stored_ranks);
  ranks = data_ranks(now, ranks);
  const int64_t stored_micro = stored_ranks * stored.get_int("train.grad_accum");
  const int64_t micro = ranks * now.get_int("train.grad_accum");
  if (stored_micro != micro)
    out.push_back(fmt::format("micro-batches per step (ranks × train.grad_accum, or train.grad_accum "
                              "alone with parallel.pipeline_stages > 1; ranks / parallel.tensor with "
                              "parallel.tensor > 1) = {} × {} in the "
                              "checkpoint, {} × {} now: keep their product", stored_ranks,
                              stored_micro / stored_ranks, ranks, micro / ranks));
  for (const io::ConfigKey& key : now.schema().keys()) {
    const std::string& k = key.name;
    if (!k.starts_with("model.") && k != "train.seq_len" && k != "train.batch_size" && k != "train.seed")
      continue;
    io::ConfigValue now_value = now.get(k);
    if (k == "model.vocab_size" && std::get<int64_t>(now_value) == 0) now_value = int64_t{resolved_vocab_size};
    if (stored.get(k) != now_value)
      out.push_back(fmt::format("{} = {} in the checkpoint, {} now", k, io::toml_value(stored.get(k)),
                                io::toml_value(now_value)));
  }
  return out;
}

std::string format_duration(double s) {
  const int total = static_cast<int>(s + 0.5);
  return total >= 3600 ? fmt::format("{}:{:02}:{:02}", total / 3600, total / 60 % 60, total % 60)
                       : fmt::format("{}:{:02}", total / 60, total % 60);
}

}  // namespace

Trainer::Trainer(const io::Config& config, const TrainerOptions& options)
    : config_(config), options_(options),
      group_(options.group ? *options.group : single_process()), settings_(run_settings(config)) {
  const bool writer = group_.is_writer();
  if (!writer) options_.quiet = true;
  FRUGAL_CHECK(options.resume.empty() || options.init_from.empty(),
               "--resume and --init-from exclude each other: resume continues a run, init-from "
               "starts a new one from a checkpoint's weights");
  TrainSettings& t = settings_.train;
  FRUGAL_CHECK(!t.out_dir.empty(), "train.out_dir is empty; set it to the directory this run "
               "should write, e.g. --set train.out_dir=runs/my-run");
  // Before anything in the run directory is read or written (--overwrite's deleting included).
  if (writer)
    run_lock_.emplace(io::DirLock::exclusive(t.out_dir, "run directory",
                                             "wait for that run to end or set another train.out_dir"));
  set_num_threads(t.threads);
  FRUGAL_CHECK(!t.data_dir.empty(), "data.dir is not set; point it at a directory made by `frugal prepare`");
  tokenizer_ = data::load_prepared_tokenizer(t.data_dir, t.data_tokenizer);
  ModelConfig& m = settings_.model;
  // An encoder's vocabulary has <mask> after the tokenizer's tokens.
  const int data_vocab = m.encoder() ? data::encoder_vocab_size(*tokenizer_) : tokenizer_->vocab_size();
  if (m.vocab_size == 0) m.vocab_size = data_vocab;
  FRUGAL_CHECK(m.vocab_size >= data_vocab,
               "model.vocab_size = {} is smaller than the {}vocabulary ({}); set it to 0 to take the "
               "tokenizer's", m.vocab_size, m.encoder() ? "tokenizer's plus <mask>: the encoder's " : "tokenizer's ",
               data_vocab);
  if (m.encoder()) masking_ = data::encoder_masking(*tokenizer_);
  check_memory_available(settings_);
  auto train = data::open_prepared_split(t.data_dir, "train", *tokenizer_);
  train_loader_ = std::make_unique<data::BatchLoader>(train, t.seq_len, data::LoaderOrder::Shuffled, t.seed);
  for (const auto& [name, dir] : t.val_sets) {
    // A directory with its own tokenizer must have the training data's vocabulary.
    if (dir != t.data_dir && std::filesystem::exists(data::tokenizer_file(dir))) {
      const std::string diff = data::vocabulary_difference(*tokenizer_, "the training data's tokenizer",
                                                           *data::load_prepared_tokenizer(dir), data::tokenizer_file(dir));
      FRUGAL_CHECK(diff.empty(), "data.val set {} ({}) was prepared with another tokenizer than "
                   "data.dir: {}; prepare it with `frugal prepare --tokenizer {}/{}`", name, dir, diff,
                   t.data_dir, data::kTokenizerFile);
    }
    val_sets_.push_back({name, std::make_unique<data::BatchLoader>(data::open_prepared_split(dir, "val", *tokenizer_),
                                                                   t.seq_len, data::LoaderOrder::Sequential)});
  }
  token_bytes_ = data::token_text_bytes(*tokenizer_);

  // Resuming: the model has the checkpoint's shape, which a method may have changed mid-run.
  std::optional<PinnedCheckpoint> resume;
  if (!options.resume.empty()) resume.emplace(pin_checkpoint(options.resume));
  SessionOptions session = session_options(settings_);
  if (resume) session.model = checkpoint_model_config(resume->dir);
  session_ = std::make_unique<Session>(session);
  methods_ = MethodSet::from_config(config_);
  step_ = options.step_strategy(*session_, methods_, settings_);
  step_->set_num_samples(train_loader_->num_samples());
  // A strategy that splits the model may hold this rank's part from now on, before any weight is
  // written: the whole model's pages then never take memory, and each rank initialises (or a
  // resume reads, below) its part only. Not from another run's weights (--init-from reads the
  // whole model).
  if (!resume && options.init_from.empty()) step_->enter_parts();
  // A resume without methods reads every weight; with methods, their Init sees the initial weights
  // as at the run's start.
  if (!resume || !methods_.empty()) session_->model().init_weights(t.seed);
  {
    TrainContext ctx = step_->context(0);
    methods_.fire(Event::Init, ctx);
  }
  if (!options.init_from.empty()) {
    const PinnedCheckpoint checkpoint = pin_checkpoint(options.init_from);
    check_data_tokenizer(checkpoint.dir, *tokenizer_, t.data_dir);
    const std::vector<std::string> notes = init_from_checkpoint(checkpoint.dir, session_->model());
    if (!options_.quiet)
      for (const std::string& note : notes)
        io::print("--init-from {}: {} (this run starts from the weights that computed it, under "
                  "its own methods)\n", checkpoint.dir, note);
  }
  bool continues_out_dir = false;  // resuming the run that lives in out_dir
  if (resume) {
    const std::string& dir = resume->dir;
    check_data_tokenizer(dir, *tokenizer_, t.data_dir);
    const std::vector<std::string> changed =
        resume_differences(checkpoint_config(dir, config_.schema()), checkpoint_ranks(dir), config_,
                           group_.size(), m.vocab_size);
    FRUGAL_CHECK(changed.empty(), "--resume {}: the config differs from the one the checkpoint was "
                 "trained with ({}); resume with the run's own config (frugal train RUN/config.toml "
                 "--resume RUN), or start a new run from its weights with --init-from",
                 dir, fmt::join(changed, "; "));
    continues_out_dir = checkpoint_run_dir(dir) == fs::weakly_canonical(fs::path(t.out_dir)).string();
    {
      const TrainState saved = read_checkpoint_state(dir);
      if (!saved.session.is_null()) session_->load_state(saved.session);
      step_->load_state(saved.strategy);
    }
    // A sharded checkpoint at this run's tensor degree: each rank reads the weights and moments of
    // its own part.
    if (checkpoint_tensor_degree(dir) == settings_.parallel.tensor) step_->enter_parts();
    load_checkpoint_params(dir, session_->model());
    TrainState state = load_checkpoint_state(dir, session_->optim());
    start_step_ = state.step;
    flops_executed_ = state.flops;
    flops_dense_ = state.dense_flops;
    wall_offset_ = state.wall_seconds;
    methods_.load_state_tensors(std::move(state.loaded_method_tensors));
    const std::vector<std::string> started = methods_.load_state(state.methods, dir);
    train_loader_->restore({state.loader_epoch, state.loader_position});
    FRUGAL_CHECK(start_step_ < t.max_steps, "the checkpoint {} is at step {} and train.max_steps "
                 "is {}: nothing is left to train; raise it (--set train.max_steps=N) to continue",
                 dir, start_step_, t.max_steps);
    if (!options_.quiet) {
      io::print("resumed from {} at step {}\n", dir, start_step_);
      for (const std::string& name : started)
        io::print("methods.{} starts at step {}: the checkpoint was trained without it\n", name, start_step_);
    }
    resume.reset();  // unpinned: later saves may prune it
  }

  metrics_path_ = (fs::path(t.out_dir) / "metrics.jsonl").string();
  // Whether out_dir holds another run: the writer looks and tells the others (a rank that looked
  // itself could find the writer's deleting half done, and fail on a directory that vanished).
  const bool holds_run = !continues_out_dir && group_.sum(std::vector<double>{
      writer && (run_has_checkpoints(t.out_dir) || (fs::exists(metrics_path_) && fs::file_size(metrics_path_) > 0))
          ? 1.0 : 0.0})[0] > 0;
  if (holds_run) {
    FRUGAL_CHECK(options.overwrite, "train.out_dir = {0} already holds a run (checkpoints or "
                 "metrics.jsonl); continue it with --resume {0}, choose another train.out_dir, or "
                 "pass --overwrite to delete that run's checkpoints and metrics and start over",
                 t.out_dir);
    if (writer) fs::remove_all(fs::path(t.out_dir) / "checkpoints");
  }
  // Keep the model.vocab_size actually used in the saved config, and the precision "auto" chose.
  config_.set("model.vocab_size", std::to_string(m.vocab_size));
  if (config_.get_string("train.precision") == "auto") {
    const std::vector<double> chose_bf16 = group_.sum(std::vector<double>{t.precision == "bf16" ? 1.0 : 0.0});
    FRUGAL_CHECK(chose_bf16[0] == 0 || chose_bf16[0] == group_.size(), "train.precision = \"auto\" chose bf16 on "
                 "{} of the {} ranks (their CPUs differ in native bf16 compute); set train.precision = \"bf16\" "
                 "or \"fp32\"", chose_bf16[0], group_.size());
    config_.set("train.precision", t.precision);
  }
  const std::string toml = config_.to_toml();
  if (writer) {
    io::write_file_atomic((fs::path(t.out_dir) / "config.toml").string(), toml);
    if (continues_out_dir)
      drop_metrics_after(metrics_path_, start_step_);
    else
      io::write_file_atomic(metrics_path_, "");
  }
  group_.barrier();  // no rank starts before the run directory is ready
}

std::string Trainer::save(int64_t step) {
  const CheckpointRole role = step_->prepare_checkpoint();
  TrainContext ctx = step_->context(step);
  methods_.fire(Event::Checkpoint, ctx);
  TrainState state;
  state.methods = methods_.save_state();
  state.method_tensors = methods_.state_tensors();
  state.flops = flops_executed_;
  state.dense_flops = flops_dense_;
  state.wall_seconds = wall_offset_ + (wall_started_ ? wall_started_->seconds() : 0.0);
  state.step = step;
  state.optimizer_steps = session_->optim().steps_taken();
  state.session = session_->save_state();
  state.strategy = step_->save_state();
  const data::LoaderState loader = train_loader_->state();
  state.loader_epoch = loader.epoch;
  state.loader_position = loader.position;
  state.ranks = group_.size();
  std::string saved = save_checkpoint(settings_.train.out_dir, config_, session_->model(), &session_->optim(), state,
                                      tokenizer_->to_json(), settings_.train.keep_checkpoints, group_, role);
  step_->after_checkpoint();
  return saved;
}

Trainer::~Trainer() = default;

double Trainer::largest_peak_rss_mib() {
  const double mine = double(peak_rss_bytes()) / 1048576.0;
  std::vector<double> each(group_.size());
  group_.allgather(&mine, 1, each.data());
  return *std::ranges::max_element(each);
}

void Trainer::add_routing_metrics(nlohmann::json& record) {
  RoutingStats routing = session_->model().take_routing();
  if (routing.layers.empty()) return;
  if (group_.size() > 1) routing.set_values(group_.sum(routing.values()));
  nlohmann::json moe;
  for (const auto& [name, sum] : routing.auxiliary) moe[name] = routing.forwards > 0 ? sum / routing.forwards : 0.0;
  const int E = routing.experts;
  nlohmann::json layers = nlohmann::json::array();
  double worst = 0;
  for (size_t i = 0; i < routing.layers.size(); ++i) {
    const auto load = routing.load.begin() + i * E;
    const double total = std::accumulate(load, load + E, 0.0);
    std::vector<double> share(E);
    for (int e = 0; e < E; ++e) share[e] = total > 0 ? load[e] / total : 0.0;
    const double max_over_mean = total > 0 ? *std::max_element(load, load + E) * E / total : 0.0;
    layers.push_back({{"layer", routing.layers[i]}, {"max_over_mean_load", max_over_mean}, {"share", share}});
    worst = std::max(worst, max_over_mean);
  }
  moe["layers"] = layers;
  record["moe"] = moe;
  record["moe_max_over_mean_load"] = worst;  // a top-level number: what `frugal report` plots
}

void Trainer::log_metrics(const std::string& json_line) {
  if (group_.is_writer()) io::append_to_file(metrics_path_, json_line + "\n");
}

void Trainer::stop_after_failed_output(int64_t steps_done, const std::exception& cause, bool every_rank) {
  std::string outcome;
  try {
    outcome = fmt::format("checkpoint {} written; once the output works again, continue with "
                          "--resume {}", save(steps_done), settings_.train.out_dir);
  } catch (const std::exception& e) {
    outcome = fmt::format("no checkpoint could be written either: {}", e.what());
  }
  const std::string message = fmt::format("{}; training stopped after step {}: {}", cause.what(), steps_done, outcome);
  if (every_rank) throw CollectiveError(message);
  throw Error(message);
}

float Trainer::evaluate() {
  const TrainSettings& t = settings_.train;
  return static_cast<float>(evaluate_loss(session_->model(), *val_sets_.front().loader, t.batch_size, t.eval_batches,
                                          group_, nullptr, masking_ ? &*masking_ : nullptr).loss);
}

std::vector<Trainer::ValScore> Trainer::evaluate_all(ProcessGroup& group, const EvalShare* share) {
  const TrainSettings& t = settings_.train;
  std::vector<ValScore> scores;
  for (const ValSet& set : val_sets_) {
    const EvalResult r = evaluate_loss(session_->model(), *set.loader, t.batch_size, t.eval_batches, group,
                                       &token_bytes_, masking_ ? &*masking_ : nullptr, share);
    scores.push_back({set.name, r.loss, r.bits_per_byte, r.accuracy});
  }
  return scores;
}

FitResult Trainer::fit() {
  const TrainSettings& t = settings_.train;
  const ModelConfig& m = session_->model().config();  // the checkpoint's shape when resuming
  const bool print = !options_.quiet;
  // The progress bar only on a terminal of one process: under mpirun, ranks' stdout is a pty too,
  // but it ends in logs.
  const bool tty = print && group_.size() == 1 && isatty(STDOUT_FILENO);
  if (!stop_signals_) stop_signals_.emplace();  // fit() again on this Trainer

  if (print) {
    const ParamTable& table = session_->model().table();
    io::print("model: {:.2f}M parameters{} ({} layers, {} heads, n_embd {}, vocab {}), {} threads{}\n",
              table.num_parameters() / 1e6,
              m.moe.experts > 0 ? fmt::format(", {:.2f}M active per token ({} of {} experts)",
                                              table.num_active_parameters(m.moe.top_k) / 1e6, m.moe.top_k,
                                              m.moe.experts) : "",
              m.n_layer, m.n_head, m.n_embd, m.vocab_size, num_threads(),
              group_.size() > 1 ? fmt::format(" per rank, {} ranks ({})", group_.size(), step_->name()) : "");
    io::print("kernels: {} (FRUGAL_ISA), dense GEMM {}, precision {}\n", kernels::kernel_backend_name(),
              kernels::cpu::gemm_backend_name(kernels::cpu::gemm_backend()), describe_precision(settings_.train));
    if (const MuonConfig& muon = settings_.optim.muon; muon.enabled && muon.bf16)
      io::print("optim: Muon's Newton–Schulz products on bf16 operands ({})\n", describe_bf16_gemms());
    const MemoryPlan plan = step_->memory_plan();
    const size_t optimizer = step_->optimizer_bytes();
    io::print("{}{}\n", plan.describe(optimizer),
              group_.size() > 1
                  ? fmt::format(" per rank; weights, gradients and optimizer state {:.2f} bytes per "
                                "parameter between steps", double(plan.parameters + step_->resident_gradient_bytes() +
                                                                  optimizer) / (plan.parameters / sizeof(float)))
                  : "");
    io::print("data: {} train / {} val sequences of {} tokens; run directory {}\n",
              train_loader_->num_samples(), val_sets_.front().loader->num_samples(), t.seq_len, t.out_dir);
    for (size_t i = 1; i < val_sets_.size(); ++i)
      io::print("data: validation set {}: {} sequences ({})\n", val_sets_[i].name, val_sets_[i].loader->num_samples(),
                t.val_sets[i].second);
    for (const auto& method : methods_.methods()) io::print("method: {}\n", method->name());
  }
  // MFU's denominator: the FMA peak, timed in each thread's CPU time so that other load cannot
  // inflate MFU (a GEMM timed by the wall clock at a busy second did: 147-431% were seen). Every
  // rank measures its own share of the machine at once: the run's peak is their sum.
  // With bf16 GEMMs on bf16 hardware, of the bf16 dot products' peak.
  const bool bf16 = t.precision == "bf16" && kernels::bf16_matmul_native();
  const double peak = kernels::cpu::measure_fma_peak_flops(bf16) * group_.size();
  if (print)
    io::print("MFU: of the FMA peak, {:.1f} GFLOP/s ({}, {} thread{}{})\n", peak / 1e9, kernels::cpu::fma_peak_isa(bf16),
              num_threads(), num_threads() == 1 ? "" : "s",
              group_.size() > 1 ? fmt::format(" × {} ranks", group_.size()) : "");
  {
    TrainContext ctx = step_->context(start_step_);
    methods_.fire(Event::FitStart, ctx);
  }

  FitResult result;
  Timer wall;
  wall_started_ = &wall;
  // Training time, executed model FLOPs and tokens of the steps since the last log line (evaluation
  // and checkpoints excluded): MFU and tokens/s over the window, as the FLOPs per step change with
  // the methods and the tokens with the batch warm-up.
  double window_seconds = 0, window_flops = 0, window_tokens = 0;
  int64_t window_steps = 0;
  float val_loss = NAN;
  std::vector<ValScore> scores;
  int64_t step = start_step_;
  // An encoder's micro-batches are masked as they are drawn, from the step's key (the same masks
  // for a sample whichever rank or micro-batch draws it).
  const BatchSource next_batch = [&](int32_t* inputs, int32_t* targets, int64_t* ids) {
    train_loader_->next(t.batch_size, inputs, targets, ids);
    if (masking_) data::mask_batch(*masking_, t.seed, step, inputs, targets, ids, t.batch_size, t.seq_len);
  };
  // Rank 0's log or progress output failed at a logged step (other ranks learn it at the next
  // step's agreement, and all stop together with a checkpoint).
  std::string output_failure;
  // The run ends after step end_step: train.max_steps, or a time budget's horizon once it is fixed
  // (at the end of each probe, then saved with the session).
  const bool time_budget = t.budget == "seconds";
  int64_t end_step = run_horizon(*session_, t);
  std::optional<BudgetProbe> probe = time_budget ? next_budget_probe(start_step_ + 1) : std::nullopt;
  StepClock probe_clock;
  // train.budget_retime: the steps since the last fix, from step `retime_first` on (not the first
  // of this fit, which builds its kernels), timed like a probe's, re-time the budget once
  // train.budget_retime · train.max_seconds of the run have passed since that fix.
  const double retime_every = time_budget ? t.budget_retime * t.max_seconds : 0;
  double next_retime = wall_offset_ + retime_every;
  int64_t retime_first = start_step_ + 1;
  StepClock retime_clock;
  std::optional<StepPlan> plan = retime_every > 0 ? methods_.step_plan(end_step) : std::nullopt;
  const auto after_fix = [&] {
    end_step = run_horizon(*session_, t);
    retime_first = step + 1;
    next_retime = wall_offset_ + wall.seconds() + retime_every;
    if (retime_every > 0) plan = methods_.step_plan(end_step);
  };
  // An evaluation or a checkpoint after step `step`: not step time for the clocks that run.
  const auto pause_clocks = [&](const Timer& work) {
    if (probe && step >= probe->first) probe_clock.pause(work.seconds());
    if (step >= retime_first) retime_clock.pause(work.seconds());
  };
  for (; step < end_step; ++step) {
    if (probe && step == probe->first) probe_clock.start();
    if (step == retime_first) retime_clock.start();
    nlohmann::json record{{"step", step + 1}};
    Timer step_timer;
    const StepResult r = step_->run(step, next_batch, &record);
    if (probe && step + 1 == probe->first + t.budget_probe_steps) {
      record["budget"] = fix_time_budget({BudgetTiming::What::Probe, probe->kind, probe->first, t.budget_probe_steps,
                                          probe_clock.seconds()},
                                         step + 1, wall_offset_ + wall.seconds());
      after_fix();
      probe = next_budget_probe(step + 1);
    }
    // A window that left its kind's steady steps (a V-cycle's level change) starts again after them.
    if (retime_every > 0 && !steady_steps(plan, retime_first, step)) retime_first = step + 1;
    const int kind = plan ? step_kind(*plan, step) : 0;
    const std::optional<TimeBudget>& fixed = session_->time_budget();
    // The same on every rank; only the time may differ, so the ranks agree on it below.
    const bool retime_ready = retime_every > 0 && fixed && !record.contains("budget") &&
                              is_timed(fixed->step_seconds, kind) && step + 1 - retime_first >= t.budget_probe_steps;
    const float lr = r.lr;
    window_seconds += step_timer.seconds();
    window_tokens += step_->tokens_per_step(step);
    const double loss = r.loss;
    const PhaseFlops& executed = r.executed;
    flops_executed_ += executed.model();
    window_flops += executed.model();
    flops_dense_ += r.dense.model();
    ++window_steps;
    result.final_train_loss = static_cast<float>(loss);
    result.losses.push_back(static_cast<float>(loss));
    // Ranks stop together: a signal, the time limit or a failed output may reach them at
    // different steps.
    const std::vector<double> agreed =
        group_.sum({stop_requested() || (t.max_seconds > 0 && !time_budget && wall.seconds() >= t.max_seconds) ? 1.0 : 0.0,
                    output_failure.empty() ? 0.0 : 1.0,
                    retime_ready && wall_offset_ + wall.seconds() >= next_retime ? 1.0 : 0.0});
    if (retime_ready && agreed[2] > 0) {
      record["budget"] = fix_time_budget({BudgetTiming::What::Retime, kind, retime_first, step + 1 - retime_first,
                                          retime_clock.seconds()},
                                         step + 1, wall_offset_ + wall.seconds());
      after_fix();
      if (probe && probe->first > step) probe = next_budget_probe(step + 1);
    }
    if (agreed[1] > 0)
      stop_after_failed_output(step + 1, Error(output_failure.empty() ? "rank 0 could not write the run's log or "
                                                                       "progress (see its error)" : output_failure),
                               /*every_rank=*/true);
    const bool last = step + 1 == end_step || agreed[0] > 0;
    const bool eval_now = (step + 1) % t.eval_interval == 0 || last;
    if (eval_now) {
      Timer eval_timer;
      // On the session as it is where the strategy evaluates its parts (tensor parallelism),
      // else on the whole model.
      const std::optional<StepStrategy::Evaluation> evaluation = step_->evaluation();
      if (!evaluation) step_->synchronize();
      TrainContext ctx = step_->context(step, &record);
      methods_.fire(Event::Eval, ctx);
      scores = evaluation ? evaluate_all(*evaluation->group, &evaluation->share) : evaluate_all(group_);
      val_loss = static_cast<float>(scores.front().loss);
      pause_clocks(eval_timer);
      // The budget's first timed evaluation (after the first probe's fix, and not at another fix)
      // replaces the estimate and fixes the horizon again.
      const std::optional<TimeBudget>& budget = session_->time_budget();
      if (time_budget && t.budget_evals && !last && budget && budget->eval_ratio == 0 && !record.contains("budget")) {
        record["budget"] = fix_time_budget({.what = BudgetTiming::What::Evaluation, .seconds = eval_timer.seconds()},
                                           step + 1, wall_offset_ + wall.seconds());
        after_fix();
        if (probe && probe->first > step) probe = next_budget_probe(step + 1);
      }
    }
    if (t.checkpoint_interval > 0 && (step + 1) % t.checkpoint_interval == 0 && !last) {
      Timer save_timer;
      save(step + 1);
      pause_clocks(save_timer);
    }
    if ((step + 1) % t.log_interval == 0 || eval_now || record.contains("event") || record.contains("budget")) {
      const double dt = window_seconds / window_steps;
      const double tok_s = window_tokens / window_seconds;
      const double mfu = window_flops / window_seconds / peak;
      record.update({{"loss", loss}, {"lr", lr}, {"grad_norm", r.grad_norm}, {"tokens_per_s", tok_s},
                     {"ms_per_step", dt * 1e3}, {"mfu", mfu}, {"flops", flops_executed_},
                     {"dense_flops", flops_dense_}, {"wall_s", wall_offset_ + wall.seconds()},
                     {"step_flops", {{"forward", executed.forward}, {"backward_input", executed.backward_input},
                                     {"backward_weight", executed.backward_weight}, {"optimizer", executed.optimizer}}}});
      if (eval_now) {
        // data.dir's set as val_loss and val_bpb, as before; the others under their names.
        for (const ValScore& s : scores) {
          const std::string suffix = s.name == "val" ? "" : "/" + s.name;
          record["val_loss" + suffix] = static_cast<float>(s.loss);
          record["val_bpb" + suffix] = static_cast<float>(s.bits_per_byte);
          if (masking_) record["val_accuracy" + suffix] = static_cast<float>(s.accuracy);
        }
      }
      add_routing_metrics(record);
      record["peak_rss_mib"] = largest_peak_rss_mib();
      const std::string warning = record.value("warning", "");
      // A run whose log or progress cannot be written stops, with a checkpoint if the disk allows.
      try {
        log_metrics(record.dump());
        if (print && !warning.empty()) io::print("{}warning: {}\n", tty ? "\r\033[K" : "", warning);
        if (print) {
          const double eta = dt * double(end_step - step - 1);
          std::string val = std::isnan(val_loss) ? "" : fmt::format(" val {:.4f}", val_loss);
          for (const ValScore& s : scores)
            val += s.name == "val" ? fmt::format(" bpb {:.3f}{}", s.bits_per_byte,
                                                 masking_ ? fmt::format(" acc {:.3f}", s.accuracy) : "")
                                   : fmt::format(" {} {:.4f}", s.name, s.loss);
          if (tty) {
            const int width = 24, filled = static_cast<int>(width * double(step + 1) / end_step);
            io::print("\r\033[K[{}{}] {}/{} loss {:.4f}{} lr {:.2e} {:.0f} tok/s MFU {:.0f}% ETA {}",
                      std::string(filled, '#'), std::string(width - filled, '-'), step + 1, end_step,
                      loss, val, lr, tok_s, 100 * mfu, format_duration(eta));
            if (eval_now) io::print("\n");
          } else {
            // A log line shows the validation loss of its own step only (a stale one would read as new).
            io::print("step {}/{} loss {:.4f}{} lr {:.2e} grad_norm {:.3f} {:.1f} ms/step {:.0f} tok/s MFU {:.1f}% "
                      "elapsed {} ETA {}{}\n", step + 1, end_step, loss, eval_now ? val : "", lr, r.grad_norm,
                      dt * 1e3, tok_s, 100 * mfu, format_duration(wall.seconds()), format_duration(eta),
                      step_->status());
          }
          io::flush_stdout();
        }
      } catch (const Error& e) {
        // One process stops now; ranks stop together at the next step's agreement (at the last
        // step every rank writes its final checkpoint below, this one here).
        if (group_.size() == 1 || last) stop_after_failed_output(step + 1, e, /*every_rank=*/group_.size() == 1);
        output_failure = e.what();
      }
      window_seconds = window_flops = window_tokens = 0;
      window_steps = 0;
    }
    if (last) {
      ++step;
      break;
    }
  }
  if (tty) io::print("\n");
  {
    TrainContext ctx = step_->context(step);
    methods_.fire(Event::FitEnd, ctx);
  }
  result.interrupted = group_.any(stop_requested());
  const std::string saved = step > start_step_ ? save(step) : "";
  // The whole model on every rank for the samples after fit() (rank 0's print_samples); without
  // samples a strategy's ranks keep their parts (no rank then ever holds the whole model).
  if (settings_.sample.count > 0) step_->synchronize();
  if (print && result.interrupted) io::print("stopped by signal after step {}; checkpoint {}\n", step, saved);
  else if (print && !saved.empty()) io::print("checkpoint {}\n", saved);
  if (!result.interrupted) result.unfinished = methods_.unfinished_at_end();
  for (const std::string& line : result.unfinished)
    if (print) io::print("note: {}\n", line);
  result.first_step = start_step_;
  result.steps = step;
  result.final_val_loss = val_loss;
  result.seconds = wall.seconds();
  result.run_seconds = wall_offset_ + result.seconds;
  result.peak_rss_mib = largest_peak_rss_mib();
  wall_started_ = nullptr;
  stop_signals_.reset();
  return result;
}

std::optional<BudgetProbe> Trainer::next_budget_probe(int64_t from) const {
  const TrainSettings& t = settings_.train;
  const std::optional<StepPlan> plan = methods_.step_plan(run_horizon(*session_, t));
  const std::optional<TimeBudget>& budget = session_->time_budget();
  if (!budget) return BudgetProbe{from, plan ? step_kind(*plan, from) : 0};  // the first: of whatever kind
  if (!plan) return std::nullopt;  // every step costs the same, and one kind was timed
  return frugal::next_budget_probe(*plan, from, t.budget_probe_steps, budget->step_seconds);
}

nlohmann::json Trainer::fix_time_budget(const BudgetTiming& timing, int64_t done, double run_seconds) {
  using What = BudgetTiming::What;
  const TrainSettings& t = settings_.train;
  // The ranks' means, so that every rank fixes the same horizon.
  const std::vector<double> sums = group_.sum({timing.seconds, run_seconds});
  const double timed = sums[0] / group_.size();
  const double left = t.max_seconds - sums[1] / group_.size();
  const bool steps_timed = timing.what != What::Evaluation;
  const double per_step = steps_timed ? timed / double(timing.steps) : 0;
  TimeBudget budget = session_->time_budget().value_or(TimeBudget{});
  double factor = 1;  // a re-timing's: its kind's step time against the last
  if (timing.what == What::Probe) {
    if (budget.step_seconds.size() <= static_cast<size_t>(timing.kind)) budget.step_seconds.resize(timing.kind + 1, 0.0);
    budget.step_seconds[timing.kind] = per_step;
  } else if (timing.what == What::Retime) {
    factor = per_step / budget.step_seconds.at(timing.kind);
    budget.step_seconds = retimed(budget.step_seconds, timing.kind, per_step);
  }
  const StepPlanFn plan = [&](int64_t horizon) { return methods_.step_plan(horizon); };
  const std::optional<StepPlan> now = plan(run_horizon(*session_, t));
  const std::vector<double> seconds = now ? kind_seconds(*now, budget.step_seconds) : budget.step_seconds;
  if (!steps_timed) budget.eval_ratio = timed / seconds[now ? step_kind(*now, done - 1) : 0];
  // Until an evaluation is timed: train.eval_batches forward passes per validation set, a forward
  // pass a third of a micro-batch's forward and backward.
  const double ratio = budget.eval_ratio > 0 ? budget.eval_ratio
                                             : double(val_sets_.size() * t.eval_batches) / (3.0 * t.accum_at(done));
  // Steps are timed before the evaluation after step `done`, which is then still to come.
  const EvalCost evals{t.eval_interval, steps_timed ? done : done + 1, t.budget_evals ? ratio : 0.0};
  // The schedule ends where the run does: train.max_steps caps the horizon (the time of a plan's
  // steps grows with its horizon, so the capped horizon is the smaller of the two).
  const int64_t uncapped = budget_horizon(plan, done, left, seconds, evals, std::numeric_limits<int64_t>::max() / 4);
  budget.steps = std::min(uncapped, t.max_steps);
  session_->set_time_budget(budget);
  const std::string kind = steps_timed && now ? now->names[timing.kind] : "";
  std::string estimated;
  for (size_t k = 0; timing.what == What::Probe && now && k < seconds.size(); ++k)
    if (!is_timed(budget.step_seconds, k))
      estimated += fmt::format("; {} estimated at {:.1f} ms", now->names[k], seconds[k] * 1e3);
  std::string detail = kind + estimated;
  if (timing.what == What::Retime) detail += fmt::format("{}{:.3f}× the last time", detail.empty() ? "" : "; ", factor);
  const std::string timed_what =
      steps_timed ? fmt::format("{:.1f} ms/step over steps {}-{}{}", per_step * 1e3, timing.first + 1, done,
                                detail.empty() ? "" : " (" + detail + ")")
                  : fmt::format("{:.1f} ms for the evaluation after step {}", timed * 1e3, done);
  if (!options_.quiet)
    io::print("{}budget: {}: train.max_seconds = {} is {} steps{}{}\n",
              isatty(STDOUT_FILENO) && group_.size() == 1 ? "\r\033[K" : "", timed_what, t.max_seconds, uncapped,
              !t.budget_evals ? " (evaluations not counted)"
              : timing.what == What::Probe && budget.eval_ratio == 0
                  ? fmt::format(" with {} evaluations of ~{:.0f} ms", evaluations_between(done, uncapped, t.eval_interval),
                                ratio * seconds[0] * 1e3)
                  : "",
              uncapped > t.max_steps ? fmt::format("; the schedule and the run end at train.max_steps = {}", t.max_steps)
                                     : "");
  nlohmann::json record{{"steps", budget.steps}};
  if (steps_timed) record["ms_per_step"] = per_step * 1e3;
  else record["eval_ms"] = timed * 1e3;
  if (!steps_timed || !kind.empty()) record["timed"] = steps_timed ? kind : "evaluation";
  if (timing.what == What::Retime) record["retimed"] = factor;
  return record;
}

void Trainer::print_samples() {
  const SampleSettings& s = settings_.sample;
  if (masking_) {  // an encoder fills masks instead of continuing text
    if (s.count == 0) return;
    if (s.prompt.find(data::kMaskToken) == std::string::npos)
      io::print("an encoder does not generate text; set sample.prompt to a text with {} to see its "
                "predictions (or run frugal fill-mask)\n", data::kMaskToken);
    else
      print_mask_fills(session_->model(), *tokenizer_, s.prompt, 5);
    return;
  }
  frugal::print_samples(session_->model(), *tokenizer_, s.prompt, s.count,
                        {s.max_tokens, s.temperature, s.top_k, s.top_p, s.seed});
}

}  // namespace frugal
