// Checkpoints. A run directory holds `config.toml`, `metrics.jsonl` and `checkpoints/`; each
// checkpoint is a directory `checkpoints/step_NNNNNNNN/` with
//   model.safetensors        parameters under Hugging Face GPT-2 names, frugal's (OC, IC) layout
//                            (`frugal export --format hf` converts to GPT-2's Conv1D layout);
//                            metadata: "format" = "frugal-v1", "config" = the resolved TOML,
//                            "model" = the model's current shape (JSON; a method may have
//                            reshaped it mid-run, so it can differ from the config's model.*)
//   train_state.safetensors  AdamW moments m and v over the flat buffer; metadata "state" = JSON
//                            with step, optimizer step count, data-loader position, method
//                            states, the session's state (LR scale, reshape count), and
//                            "optimizer_shards" = N when the moments were sharded over N ranks
//                            (ZeRO): they are then in
//   optimizer.rankNNNNN.safetensors  one per rank: adamw.m / adamw.v of its range of the flat
//                            buffer, metadata "shard" = {begin, end, total}; a resume with any
//                            number of ranks reads the ranges it needs
//   methods.safetensors      methods' state too large for JSON (Method::state_tensors), named
//                            "<method>/<tensor>"; only when a method has any (the state's
//                            "method_tensors" lists them, so a lost file is named as such)
//   model.rankNNNNN.safetensors  a sharded checkpoint's (written under tensor parallelism and
//                            pipeline × tensor): one per rank of the first data replica, its part of
//                            the weights under their names with its local shapes and, as
//                            "adamw.m/<name>" and "adamw.v/<name>", its moments; metadata "shard" =
//                            {tensor_rank, tensor_size, blocks}. model.safetensors then holds no
//                            tensors and its metadata "shards" is the manifest: the layout (tensor
//                            degree, the stages' blocks) and which file holds which rank's slice
//                            of which tensors. Every reader assembles the whole model from them
//                            (one file at a time), so a sharded checkpoint resumes at any layout
//                            and in one process, and eval, sample and export read it as any other.
//   frugal_tokenizer.json    the tokenizer of the data the model was trained on (data/tokenizer.h's
//                            kTokenizerFile; checkpoints of earlier versions: tokenizer.json)
// A checkpoint is written into a temporary directory, every file fsync'ed (each rank's shards once
// every rank has written them), then renamed into place, and `checkpoints/latest` (the directory name) is replaced atomically last: a crash or a
// full disk at any point leaves the previous checkpoint intact and `latest` pointing at it.
// Each checkpoint also holds the lock file `.lock` (io/dir_lock.h): a process reading the
// checkpoint holds it shared (pin_checkpoint), and pruning skips a checkpoint so held.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "frugal/data/tokenizer.h"
#include "frugal/io/config.h"
#include "frugal/io/dir_lock.h"
#include "frugal/model/gpt.h"
#include "frugal/optim/adamw.h"
#include "frugal/session/session.h"
#include "frugal/train/process_group.h"
#include "frugal/train/step.h"

namespace frugal {

struct TrainState {
  int64_t step = 0;            // optimizer steps completed
  int64_t optimizer_steps = 0; // AdamW's bias-correction counter
  uint64_t loader_epoch = 0;
  int64_t loader_position = 0;
  double flops = 0, dense_flops = 0;  // cumulative executed / dense-equivalent model FLOPs
  double wall_seconds = 0;           // cumulative training wall-clock
  nlohmann::json methods = nlohmann::json::object();  // name -> that method's saved state
  nlohmann::json session;  // Session::save_state(); null in checkpoints written before it existed
  nlohmann::json strategy; // StepStrategy::save_state(); null when the strategy keeps none
  int ranks = 1;           // processes the run spanned (data parallel)
  int optimizer_shards = 0;  // read: the rank files the moments are sharded over (0: whole)
  // Methods' state tensors ("<method>/<tensor>"): views written by save_checkpoint; values read
  // by load_checkpoint_state.
  std::vector<std::pair<std::string, std::span<const float>>> method_tensors;
  std::map<std::string, std::vector<float>> loaded_method_tensors;
};

// Writes a checkpoint of `model` (and, when optim is non-null, its moments) into
// run_dir/checkpoints/step_<step>/ (replacing one of the same step) and keeps it and the newest
// keep_last - 1 older ones (keep_last >= 1); newer ones are never deleted, nor older ones pinned
// by a reader at that moment (a later save deletes them). Returns its path. The caller holds the
// run directory's lock. Every rank of `group` calls it: rank 0 writes everything but a sharded
// optimizer's moments, which each rank writes as its own file (the run directory must be shared
// between machines); an error on any rank makes every rank throw, and the previous checkpoint
// stays the latest. With role.sharded, `model` is this rank's part of the layout (its tensor shard
// of its stage's blocks) and `optim` holds its moments whole: the ranks with role.writes each
// write their part (model.rankNNNNN.safetensors) and rank 0 the manifest; the ranks' parts
// together must cover the model.
std::string save_checkpoint(const std::string& run_dir, const io::Config& config, const GPT& model,
                            const AdamW* optim, const TrainState& state,
                            const std::string& tokenizer_json, int keep_last,
                            ProcessGroup& group = single_process(), const CheckpointRole& role = {});

// Tests only: with FRUGAL_TEST_EXIT_AFTER_PART=R in the environment, rank R of a sharded
// checkpoint's writers ends its process (std::_Exit, no clean-up) right after writing its part,
// before the others have agreed that every part is written: a rank killed between shard writes.
constexpr const char* kExitAfterPartVariable = "FRUGAL_TEST_EXIT_AFTER_PART";

// The tensor degree of a sharded checkpoint (model.rankNNNNN.safetensors files and a manifest), 0
// for a whole one.
int checkpoint_tensor_degree(const std::string& checkpoint_dir);

// Whether run_dir already holds checkpoints (a run that new training must not silently replace).
bool run_has_checkpoints(const std::string& run_dir);

// Resolves a run directory (its latest checkpoint) or a checkpoint directory to the checkpoint
// directory. Throws Error saying what to do when there is none.
std::string resolve_checkpoint(const std::string& path);

// The run directory that checkpoint directory `checkpoint_dir` belongs to (RUN for
// RUN/checkpoints/step_*, as an absolute path), or "" for a checkpoint outside a run's checkpoints/.
std::string checkpoint_run_dir(const std::string& checkpoint_dir);

// A checkpoint directory that pruning leaves alone while this lives (a shared lock on it). `lock`
// is empty for a checkpoint written before checkpoints had lock files: it is read unprotected.
struct PinnedCheckpoint {
  std::string dir;
  std::optional<io::DirLock> lock;
};

// resolve_checkpoint, then pins the checkpoint; when pruning deleted it in between, resolves again
// (the run's `latest` has moved on). Readers pin what they load: eval, sample, export, --resume
// and --init-from.
PinnedCheckpoint pin_checkpoint(const std::string& path);

// The resolved config stored in a checkpoint.
io::Config checkpoint_config(const std::string& checkpoint_dir, const io::ConfigSchema& schema);

// The shape of the model a checkpoint holds (the "model" metadata; for checkpoints written before
// it, the stored config's model.* keys).
ModelConfig checkpoint_model_config(const std::string& checkpoint_dir);

// Loads parameters into `model`, whose config must have the same shapes: a mismatch is an Error
// naming the tensor and both shapes. A sharded checkpoint's are assembled from its rank files.
void load_checkpoint_params(const std::string& checkpoint_dir, GPT& model);

// The training state without the optimizer's moments: step, loader position, the session's,
// the strategy's and the methods' states and the methods' state tensors. A listed
// methods.safetensors that is missing, or lacks a listed tensor, is an Error saying so.
TrainState read_checkpoint_state(const std::string& checkpoint_dir);

// read_checkpoint_state, and optim's moments (its shard of them, from full or sharded ones, or
// assembled from a sharded checkpoint's rank files). An optimizer of a rank's part (a tensor shard
// of a stage, at the checkpoint's tensor degree) reads its own slices only, from the files that
// hold them.
TrainState load_checkpoint_state(const std::string& checkpoint_dir, AdamW& optim);

// How many processes the run that wrote a checkpoint spanned (1 before that was recorded).
int checkpoint_ranks(const std::string& checkpoint_dir);

// A checkpoint's model computing the function its run was training at that step.
struct CheckpointModel {
  std::unique_ptr<Session> session;  // owns the model; its optimizer holds no state
  // One line per method that makes the model compute more than its dense causal weights at their
  // shape ("methods.mst: ... strided(w=16,s=16) attention ..."): what the commands tell the user.
  std::vector<std::string> notes;
  GPT& model() const { return session->model(); }
  GPT* operator->() const { return &model(); }  // used like the model it holds
  GPT& operator*() const { return model(); }
};

// The one path by which every command that runs a checkpoint without resuming it loads the model
// (eval, sample, export, and --init-from's weights): the checkpoint's model shape (a V-cycle's
// current level) with its parameters; then the methods of its config, with their saved state,
// install what shaped the function the run was training (Method::restore_trained_function:
// masks as linear formats, attention patterns), and the weights the masks drop are zeroed in
// params() (GPT::write_effective_weights), so params() are the weights the model computes with.
// A method that cannot restore its state throws Error with the reason.
CheckpointModel load_checkpoint_model(const std::string& checkpoint_dir);

// --init-from: copies into `model` the weights of load_checkpoint_model(checkpoint_dir), the ones
// its model computes with (masks applied: a sparse phase's pruned weights are zero); `model` must
// have the checkpoint's tensors (else an Error names the first that differs). Returns the
// checkpoint's notes; the new run's own methods choose its formats and attention patterns.
std::vector<std::string> init_from_checkpoint(const std::string& checkpoint_dir, GPT& model);

// The tokenizer the checkpoint's model was trained with (its tokenizer file, data::tokenizer_file).
std::unique_ptr<data::Tokenizer> load_checkpoint_tokenizer(const std::string& checkpoint_dir);

// Throws Error unless `data_tokenizer`, the tokenizer of the prepared directory data_dir, gives
// every token id the bytes the checkpoint's tokenizer gives it: with another vocabulary the
// model's ids would silently mean other text (resume, --init-from, eval).
void check_data_tokenizer(const std::string& checkpoint_dir, const data::Tokenizer& data_tokenizer,
                          const std::string& data_dir);

}  // namespace frugal
