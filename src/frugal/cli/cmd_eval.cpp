// `frugal eval CHECKPOINT_OR_RUN_DIR [--data DIR] [--split val|train] ...`: the loss and
// perplexity of a trained model on a prepared token shard (an encoder's: the masked-LM loss and
// accuracy on fixed masks), as text or one JSON object; the model computes what its run trained
// (load_checkpoint_model), which the output says beyond dense weights.
#include <fmt/format.h>

#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>

#include "frugal/cli/commands.h"
#include "frugal/core/error.h"
#include "frugal/core/memory.h"
#include "frugal/core/threading.h"
#include "frugal/data/loader.h"
#include "frugal/data/masking.h"
#include "frugal/data/prepare.h"
#include "frugal/io/stdout.h"
#include "frugal/train/checkpoint.h"
#include "frugal/train/evaluate.h"
#include "frugal/train/run_config.h"

namespace frugal::cli {
namespace {

struct EvalArgs {
  std::string path;
  std::string data_dir;  // "": the checkpoint config's data.dir
  std::string split = "val";
  int batch_size = 8;
  int64_t max_batches = 0;
  int seq_len = 0;  // 0: the checkpoint config's train.seq_len (or model.block_size)
  int threads = 0;
  bool json = false;
};

void run_eval(const EvalArgs& a) {
  FRUGAL_CHECK(a.batch_size >= 1, "--batch-size {} must be at least 1", a.batch_size);
  FRUGAL_CHECK(a.max_batches >= 0, "--max-batches {} must be 0 (all) or positive", a.max_batches);
  set_num_threads(a.threads);
  const PinnedCheckpoint checkpoint = pin_checkpoint(a.path);  // no run prunes it while we read
  const std::string& dir = checkpoint.dir;
  const RunSettings settings = run_settings(checkpoint_config(dir, run_schema()));
  const std::string data_dir = a.data_dir.empty() ? settings.train.data_dir : a.data_dir;
  FRUGAL_CHECK(!data_dir.empty(), "the checkpoint's config has no data.dir; pass --data DIR (a "
               "directory made by `frugal prepare`)");
  const auto tokenizer = data::load_prepared_tokenizer(data_dir, settings.train.data_tokenizer);
  check_data_tokenizer(dir, *tokenizer, data_dir);
  const auto shard = data::open_prepared_split(data_dir, a.split, *tokenizer);

  const CheckpointModel loaded = load_checkpoint_model(dir);
  GPT& model = loaded.model();
  const ModelConfig& m = model.config();
  const int trained_T = settings.train.seq_len > 0 ? settings.train.seq_len : m.block_size;
  const int T = a.seq_len > 0 ? a.seq_len : trained_T;
  FRUGAL_CHECK(T <= m.block_size, "--seq-len {} exceeds the model's block_size {}", T, m.block_size);
  data::BatchLoader loader(shard, T, data::LoaderOrder::Sequential);
  const double needed = evaluation_bytes(model, a.batch_size, T), available = double(available_memory_bytes());
  FRUGAL_CHECK(needed <= available, "--batch-size {} of {}-token sequences needs {:.1f} MiB to evaluate, "
               "{:.1f} MiB are available; lower --batch-size (or --seq-len)", a.batch_size, T,
               needed / (1 << 20), available / (1 << 20));

  const std::vector<int32_t> token_bytes = data::token_text_bytes(*tokenizer);
  // An encoder is scored on the masked tokens of the validation masks every run uses.
  std::optional<data::MaskingSpec> masking;
  if (m.encoder()) masking = data::encoder_masking(*tokenizer);
  const EvalResult r = evaluate_loss(model, loader, a.batch_size, a.max_batches, single_process(), &token_bytes,
                                     masking ? &*masking : nullptr);
  if (a.json) {
    nlohmann::json j{{"checkpoint", dir},        {"data", shard->name()},
                     {"split", a.split},         {"seq_len", T},
                     {"batch_size", a.batch_size}, {"sequences", r.sequences},
                     {"tokens", r.tokens},       {"loss", r.loss},
                     {"perplexity", r.perplexity}, {"bytes", r.bytes},
                     {"bits_per_byte", r.bits_per_byte}, {"seconds", r.seconds},
                     {"objective", objective_kind_name(m.objective)}, {"methods", loaded.notes}};
    if (masking) j["accuracy"] = r.accuracy;
    io::print("{}\n", j.dump());
    return;
  }
  io::print("checkpoint: {}\n", dir);
  for (const std::string& note : loaded.notes) io::print("{}\n", note);
  io::print("data: {}, {} of {} sequences of {} tokens\n", shard->name(), r.sequences,
            loader.num_samples(), T);
  io::print("{} loss {:.4f}, perplexity {:.3f}, {:.4f} bits per byte ({} tokens, {} bytes, in {:.2f} s, "
            "{:.0f} tokens/s, {} threads)\n", a.split, r.loss, r.perplexity, r.bits_per_byte, r.tokens,
            r.bytes, r.seconds, r.tokens / r.seconds, num_threads());
  if (masking)
    io::print("masked-LM: {} masked tokens (the fixed validation masks), accuracy {:.4f}\n", r.tokens, r.accuracy);
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* cmd =
      app.add_subcommand("eval", "loss and perplexity of a trained model on prepared data");
  cmd->add_option("checkpoint", args->path,
                  "a checkpoint directory, or a run directory (its latest checkpoint)")->required();
  cmd->add_option("--data", args->data_dir,
                  "directory made by `frugal prepare` (default: the checkpoint's data.dir)");
  cmd->add_option("--split", args->split, "which shard: val or train")
      ->check(CLI::IsMember({"val", "train"}))->capture_default_str();
  cmd->add_option("--batch-size", args->batch_size,
                  "sequences per forward pass")->capture_default_str();
  cmd->add_option("--max-batches", args->max_batches,
                  "stop after this many batches; 0: every sequence")->capture_default_str();
  cmd->add_option("--seq-len", args->seq_len,
                  "tokens per sequence; 0: the checkpoint's train.seq_len")->capture_default_str();
  cmd->add_option("--threads", args->threads,
                  "threads; 0 keeps the default (all cores)")->capture_default_str();
  cmd->add_flag("--json", args->json, "print one JSON object instead of text");
  cmd->callback([args] { run_eval(*args); });
}

}  // namespace frugal::cli
