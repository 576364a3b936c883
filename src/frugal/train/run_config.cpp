// The run-configuration schema and its typed view; see run_config.h.
#include "frugal/train/run_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <string>

#include "frugal/core/error.h"
#include "frugal/kernels/ops.h"
#include "frugal/methods/method.h"
#include "frugal/methods/method_set.h"
#include "frugal/model/spec.h"

namespace frugal {

using io::Range;

io::ConfigSchema run_schema() {
  io::ConfigSchema s;
  ModelConfig m;
  s.add_int("model.vocab_size", 0, "vocabulary size; 0 takes it from the data's tokenizer", Range::at_least(0))
      .add_int("model.block_size", m.block_size, "maximum sequence length (position embeddings)", Range::at_least(1))
      .add_int("model.n_layer", m.n_layer, "transformer blocks", Range::at_least(1))
      .add_int("model.n_head", m.n_head, "attention heads (n_embd must be a multiple)", Range::at_least(1))
      .add_int("model.n_embd", m.n_embd, "model width C (a multiple of 8 and of n_head)", Range::at_least(8))
      .add_int("model.ffn_mult", m.ffn_mult, "MLP hidden width as a multiple of n_embd", Range::at_least(1))
      .add_string("model.mlp", "gelu", "MLP kind: GELU, the gated GEGLU / SwiGLU, or relu2 (max(x, 0)², not gated)",
                  {"gelu", "geglu", "swiglu", "relu2"})
      .add_string("model.norm", "pre", "LayerNorms before each block branch (GPT-2) or after each residual sum (BERT)", {"pre", "post"})
      .add_string("model.objective", "causal", "training objective: the next token (a causal decoder) or masked "
                  "tokens (mlm: a BERT-style encoder with bidirectional attention; docs/mlm.md)", {"causal", "mlm"})
      .add_bool("model.tied_head", m.tied_head, "LM head shares the token embedding")
      .add_bool("model.bias", m.bias, "biases in linears and LayerNorms")
      .add_float("model.dropout", io::decimal_value(m.dropout), "dropout on the residual branches", Range::half_open(0, 1))
      .add_float("model.layernorm_eps", io::decimal_value(m.layernorm_eps), "LayerNorm epsilon", Range::above(0))
      .add_float("model.init_std", io::decimal_value(m.init_std), "std of the normal weight initialisation", Range::above(0))
      .add_bool("model.zero_init_proj", m.zero_init_proj, "the output projections of attention and MLP (and "
                "experts) start at zero: every block starts as the identity")
      .add_string("model.position", "learned", "positions: a learned embedding added to the tokens (GPT-2), or "
                  "rotary embeddings turning each head's queries and keys (no position tensor)", {"learned", "rotary"})
      .add_float("model.rope_base", io::decimal_value(m.rope_base), "rotary: pair i of a head of size HS turns by "
                 "position · rope_base^(-2i/HS)", Range::above(1))
      .add_bool("model.qk_norm", m.qk_norm, "RMS-normalise each head's queries and keys before attention (no gain)")
      .add_float("model.logit_softcap", io::decimal_value(m.logit_softcap), "> 0: the LM head's logits become "
                 "cap · tanh(logits / cap); 0: off", Range::at_least(0))
      .add_int("model.moe.experts", m.moe.experts, "experts of a mixture-of-experts MLP (model/moe.h); 0: dense MLPs", Range::at_least(0))
      .add_int("model.moe.top_k", m.moe.top_k, "experts each token is routed to (combine weights renormalised over them)", Range::at_least(2))
      .add_int("model.moe.every", m.moe.every, "the mixture of experts replaces the MLP of blocks l with (l + 1) % every == 0", Range::at_least(1))
      .add_int("model.moe.hidden", m.moe.hidden, "hidden units of each expert; 0: ffn_mult * n_embd", Range::at_least(0))
      .add_bool("model.moe.shared_expert", m.moe.shared_expert, "add a dense MLP of model.moe.hidden units every token passes through")
      .add_float("model.moe.aux_loss_coef", io::decimal_value(m.moe.aux_loss_coef), "coefficient of the Switch load-balancing loss", Range::at_least(0))
      .add_float("model.moe.z_loss_coef", io::decimal_value(m.moe.z_loss_coef), "coefficient of the router z-loss", Range::at_least(0))
      .add_float("model.moe.bias_rate", io::decimal_value(m.moe.bias_rate), "auxiliary-loss-free balancing: the per-expert bias step after each optimizer step; 0: off", Range::at_least(0));
  AdamWConfig o;
  s.add_string("optim.name", "adamw", "optimizer: \"adamw\" for every tensor, or \"muon\": Muon (momentum + "
               "Newton–Schulz orthogonalised updates, docs/optim.md) for the blocks' hidden weight matrices and "
               "AdamW (the optim.* keys below) for embeddings, head, routers, LayerNorm gains and biases",
               {"adamw", "muon"})
      .add_float("optim.lr", io::decimal_value(o.lr), "peak learning rate", Range::above(0))
      .add_float("optim.min_lr", io::decimal_value(o.min_lr), "learning rate at the end of the cosine decay", Range::at_least(0))
      .add_float("optim.beta1", io::decimal_value(o.beta1), "AdamW beta1", Range::half_open(0, 1))
      .add_float("optim.beta2", io::decimal_value(o.beta2), "AdamW beta2", Range::half_open(0, 1))
      .add_float("optim.eps", io::decimal_value(o.eps), "AdamW epsilon", Range::above(0))
      .add_float("optim.head_lr", io::decimal_value(o.head_lr), "peak learning rate of the untied LM head "
                 "(model.tied_head = false), scheduled like optim.lr; 0: optim.lr", Range::at_least(0))
      .add_float("optim.weight_decay", io::decimal_value(o.weight_decay), "decoupled weight decay on 2-D tensors", Range::at_least(0))
      .add_float("optim.grad_clip", io::decimal_value(o.grad_clip), "global gradient-norm clip; 0 disables", Range::at_least(0))
      .add_int("optim.warmup_steps", o.warmup_steps, "linear warm-up steps", Range::at_least(0))
      .add_string("optim.schedule", "cosine", "the learning rate after the warm-up: \"cosine\" down to optim.min_lr "
                  "at the end, or \"wsd\" (warm-up–stable–decay: optim.lr until the last optim.decay_fraction of "
                  "the steps, then optim.decay_shape down to optim.min_lr)", {"cosine", "wsd"})
      .add_float("optim.decay_fraction", io::decimal_value(o.decay_fraction), "wsd: the share of the steps the "
                 "final decay takes", Range::closed(0, 1))
      .add_string("optim.decay_shape", "linear", "wsd: the decay's shape over its progress p: \"linear\" (1 − p), "
                  "\"cosine\" ((1 + cos πp) / 2) or \"sqrt\" (1 − √p)", {"linear", "cosine", "sqrt"})
      .add_float("optim.muon.lr", io::decimal_value(o.muon.lr), "Muon's peak learning rate (optim.name = \"muon\"); "
                 "the schedule scales it by the same factor as optim.lr", Range::above(0))
      .add_float("optim.muon.momentum", io::decimal_value(o.muon.momentum), "Muon's momentum β: buffer = β·buffer + (1 − β)·gradient",
                 Range::half_open(0, 1))
      .add_bool("optim.muon.nesterov", o.muon.nesterov, "orthogonalise (1 − β)·gradient + β·buffer (Nesterov) "
                "instead of the buffer")
      .add_int("optim.muon.ns_steps", o.muon.ns_steps, "Newton–Schulz iterations per update", Range::closed(1, 20))
      .add_float("optim.muon.weight_decay", io::decimal_value(o.muon.weight_decay), "Muon's decoupled weight "
                 "decay: W ← (1 − lr·wd)·W", Range::at_least(0))
      .add_string("optim.muon.precision", "fp32", "Newton–Schulz's products: \"fp32\", or \"bf16\" operands "
                  "with fp32 sums (faster for widths of 384 and more where the CPU computes bf16; elsewhere "
                  "converted, no faster; docs/optim.md)",
                  {"fp32", "bf16"});
  TrainSettings t;
  s.add_string("data.dir", "", "data directory: written by `frugal prepare` (manifest.json, shards/, frugal_tokenizer.json; or an earlier version's train.bin, val.bin), or of nanoGPT/llm.c token files (*train*.bin, *val*.bin; set data.tokenizer)")
      .add_strings("data.val", {}, "more validation sets, each evaluated at every eval and logged as val_loss/NAME and val_bpb/NAME: \"NAME=DIR\" or \"DIR\" (NAME: its last path component), DIR a data directory whose val split is read (same vocabulary as data.dir); data.dir's own is always evaluated, as val_loss")
      .add_string("data.tokenizer", "", "tokenizer of data.dir when it has no frugal_tokenizer.json (nanoGPT, llm.c files): gpt2, gpt2:DIR, char:VOCAB.json or a tokenizer file; empty: the directory's")
      .add_string("train.out_dir", "runs/default", "run directory: config, metrics, checkpoints")
      .add_int("train.batch_size", t.batch_size, "sequences per micro-batch (B)", Range::at_least(1))
      .add_int("train.seq_len", t.seq_len, "tokens per sequence (T); 0 uses model.block_size", Range::at_least(0))
      .add_int("train.grad_accum", t.grad_accum, "micro-batches per optimizer step", Range::at_least(1))
      .add_int("train.batch_warmup_steps", t.batch_warmup_steps, "batch-size warm-up: the micro-batches of step s "
               "rise linearly, train.batch_warmup_start + ⌊(train.grad_accum − start)·s / steps⌋, reaching "
               "train.grad_accum at this step; 0: off", Range::at_least(0))
      .add_int("train.batch_warmup_start", t.batch_warmup_start, "batch-size warm-up: micro-batches of the first step "
               "(at most train.grad_accum)", Range::at_least(1))
      .add_int("train.max_steps", t.max_steps, "optimizer steps (the cosine schedule ends here)", Range::at_least(1))
      .add_float("train.max_seconds", t.max_seconds, "stop after this much wall-clock time; 0: no limit", Range::at_least(0))
      .add_float("train.max_memory_mb", t.max_memory_mb, "the memory (MiB) one rank's training step may plan for "
                 "(weights, gradients, AdamW's moments, activations of its part of the model): a run over it is refused "
                 "at start-up, naming a tensor × pipeline layout that fits; 0: the memory the machine has available",
                 Range::at_least(0))
      .add_string("train.budget", t.budget, "what the LR schedule spans: \"steps\" (train.max_steps) or \"seconds\" "
                  "(train.max_seconds of training: after train.budget_probe_steps steps the run fixes its number of "
                  "steps from their mean time and the evaluations' (train.budget_evals), at most train.max_steps, saves it "
                  "with its checkpoints and trains that many, decay included; a V-cycle's coarser levels, the first "
                  "evaluation and the steps since the last fix (train.budget_retime) are timed as the run reaches them "
                  "and the number fixed again; docs/optim.md)", {"steps", "seconds"})
      .add_int("train.budget_probe_steps", t.budget_probe_steps, "train.budget = \"seconds\": steps timed (after "
               "the first, and inside each V-cycle level's segment) to estimate the budget's number of steps",
               Range::at_least(1))
      .add_bool("train.budget_evals", t.budget_evals, "train.budget = \"seconds\": the budget holds the evaluations "
                "too (every train.eval_interval steps and the last; each estimated from the first probe as "
                "train.eval_batches forward passes, then timed at the first evaluation and the number of steps fixed "
                "again); false: the steps alone, the evaluations on top (as before 2026-11-28)")
      .add_float("train.budget_retime", t.budget_retime, "train.budget = \"seconds\": every this fraction of "
                 "train.max_seconds, the steps since the last fix (at least train.budget_probe_steps of one kind, the "
                 "evaluations and checkpoints among them left out) are timed and the number of steps fixed again, so "
                 "that the run ends on time on a machine whose speed drifts; 0: fixed once (per V-cycle level and "
                 "for the first evaluation), and a resume repeats the uninterrupted run bit for bit (as before "
                 "2026-11-28)", Range::closed(0, 1))
      .add_int("train.seed", static_cast<int64_t>(t.seed), "seed of initialisation, data order and dropout", Range::at_least(0))
      .add_int("train.threads", t.threads, "threads; 0 uses all cores", Range::at_least(0))
      .add_string("train.recompute", t.recompute,
                  "activation recomputation: \"none\", \"all\", or block indices like \"0,1,2\"")
      .add_string("train.precision", t.precision,
                  "what the block linears' GEMMs compute in: \"fp32\", or \"bf16\" (bf16 operands, fp32 sums, fp32 "
                  "master weights and AdamW; native on CPUs with AVX512_BF16 or AMX, converted to fp32 elsewhere), "
                  "or \"auto\": bf16 where this CPU computes it natively, else fp32 (the run's config.toml "
                  "records the choice, so a resume elsewhere computes the same)",
                  {"fp32", "bf16", "auto"})
      .add_string("train.bf16_rounding", t.bf16_rounding,
                  "train.precision = \"bf16\": how the bf16 working copies of the weights are rounded from the "
                  "fp32 masters: \"nearest\" (to nearest even) or \"stochastic\" (unbiased: up with the "
                  "probability of the cut-off fraction, the random bits a hash of train.seed, the parameter's index "
                  "and the bf16 interval of its value, so resumes and data parallelism stay bit-exact; not with "
                  "parallel.tensor or parallel.expert; docs/performance.md)",
                  {"nearest", "stochastic"})
      .add_int("train.eval_interval", t.eval_interval, "steps between validation evaluations", Range::at_least(1))
      .add_int("train.eval_batches", t.eval_batches, "validation batches per evaluation", Range::at_least(1))
      .add_int("train.log_interval", t.log_interval, "steps between log lines", Range::at_least(1))
      .add_int("train.checkpoint_interval", t.checkpoint_interval,
               "steps between checkpoints; 0 saves only at the end and on SIGINT/SIGTERM", Range::at_least(0))
      .add_int("train.keep_checkpoints", t.keep_checkpoints, "newest checkpoints kept", Range::at_least(1));
  ParallelSettings par;
  s.add_int("parallel.zero", par.zero, "under mpirun: ZeRO stage; 0 keeps AdamW's state on every "
            "rank, 1 shards it over the ranks (with parallel.tensor, each shard's over its data-parallel "
            "replicas), 2 also reduces each rank's gradients only for its shard",
            Range::closed(0, 2))
      .add_float("parallel.bucket_mb", par.bucket_mb, "under mpirun: MiB of gradients per all-reduce "
                 "bucket, started while the backward pass goes on", Range::above(0))
      .add_float("parallel.timeout", par.timeout, "under mpirun: seconds a rank waits for the others "
                 "before it stops the run, naming the rank that did not answer", Range::above(0))
      .add_int("parallel.pipeline_stages", par.pipeline_stages, "under mpirun: pipeline stages K; the "
               "ranks form ranks / K data-parallel replicas of a K-stage pipeline, and train.grad_accum "
               "is then the step's micro-batch count over all ranks; 1: data parallel only", Range::at_least(1))
      .add_string("parallel.schedule", par.schedule, "the pipeline's schedule: 1F1B (at most K "
                  "micro-batches of activations in flight) or GPipe (all of them)", {"1f1b", "gpipe"})
      .add_bool("parallel.elastic", par.elastic, "with pipeline_stages > 1: when layers freeze, shorten "
                "the pipeline while its slowest stage stays no slower than at the start, and make the "
                "freed ranks data-parallel replicas (AutoPipe + AutoDP); false keeps K stages (re-balanced)")
      .add_string("parallel.autopipe_cost", par.autopipe_cost, "what AutoPipe balances over the stages: each "
                  "unit's measured time per micro-batch, or the bytes of parameters, gradients and AdamW "
                  "moments it holds (the stages' memory)", {"time", "parameters"})
      .add_int("parallel.tensor", par.tensor, "under mpirun: tensor-parallel ranks T (Megatron-style: "
               "attention heads, MLP hidden units and the vocabulary split over T ranks, which run "
               "every micro-batch together; with parallel.pipeline_stages, each stage is such a group); "
               "model.n_head and the MLP's hidden units must divide by T; 1: none", Range::at_least(1))
      .add_bool("parallel.sequence", par.sequence, "with parallel.tensor > 1: sequence parallelism (Megatron's): "
                "between the linears (LayerNorms, dropout, residual sums) each tensor rank holds only 1/T of "
                "a micro-batch's train.batch_size × train.seq_len rows (all-gathered before the column-parallel "
                "linears and the head, reduce-scattered after the row-parallel ones), so those activations "
                "shrink by T; the rows must divide by T")
      .add_bool("parallel.tensor_overlap", par.tensor_overlap, "with parallel.tensor > 1: each block's sums of "
                "the column-parallel linears' input gradients over the group run in the background while "
                "this rank computes those linears' weight gradients, a thread of the rank waiting on the "
                "exchange (the same bits either way); off by default: where each rank's threads fill the cores, "
                "that thread costs more than it hides (docs/parallel.md)")
      .add_int("parallel.expert", par.expert, "under mpirun: expert-parallel ranks P (each holds E/P of "
               "every mixture's experts; tokens travel to their experts' ranks by all-to-all); the P "
               "ranks of a group are data-parallel for everything else, ranks / P groups; "
               "model.moe.experts must divide by P; 1: none", Range::at_least(1))
      .add_string("parallel.comm_dtype", par.comm_dtype, "under mpirun: the dtype of the messages between "
                  "ranks: data parallelism's gradient reductions (all-reduce, ZeRO-2's reduce-scatter, a "
                  "pipeline's replicas; bf16 sums in fp32 rounding every partial sum to bf16), the "
                  "activations and input gradients between pipeline stages, a tensor group's sums and "
                  "all-gathers of rows (each rank's rows rounded, added in fp32) and an expert group's "
                  "routed rows; bf16 halves their bytes (docs/parallel.md)", {"fp32", "bf16"});
  SampleSettings p;
  s.add_int("sample.count", p.count, "samples printed at the end of training", Range::at_least(0))
      .add_int("sample.max_tokens", p.max_tokens, "tokens per sample", Range::at_least(1))
      .add_float("sample.temperature", p.temperature, "softmax temperature", Range::above(0))
      .add_int("sample.top_k", p.top_k, "keep the k most likely tokens; 0 keeps all", Range::at_least(0))
      .add_float("sample.top_p", p.top_p, "nucleus sampling mass", Range::left_open(0, 1))
      .add_string("sample.prompt", p.prompt, "text the samples start from")
      .add_int("sample.seed", static_cast<int64_t>(p.seed), "sampling seed", Range::at_least(0));
  for (const MethodInfo& m : registered_methods()) {
    const std::string prefix = "methods." + m.name;
    s.add_section(prefix, m.description);
    m.add_keys(s, prefix);
  }
  return s;
}

std::string config_reference_markdown() {
  return "# Configuration reference\n\n"
         "Generated by `frugal config --reference`; `tests/test_config_docs.cpp` fails when this file\n"
         "is out of date. A run config is a TOML file whose tables are the prefixes below\n"
         "(`[model]`, `[optim]`, `[train]`, `[data]`, `[parallel]`, `[sample]`, `[methods.NAME]`); any key can be\n"
         "overridden on the command line with `--set key=value`. A method is enabled by the presence\n"
         "of its `[methods.NAME]` table (`--set methods.NAME={}` enables it with its defaults).\n"
         "Unknown keys, wrong types and out-of-range values are errors that name the key and the\n"
         "file and line (an unknown `methods.NAME` also lists the methods there are). `frugal config\n"
         "CONFIG.toml --set ...` prints the resolved config.\n\n" +
         run_schema().markdown();
}

SessionOptions session_options(const RunSettings& s) {
  const TrainSettings& t = s.train;
  return {.model = s.model, .optim = s.optim, .batch = t.batch_size, .seq_len = t.seq_len,
          .recompute = [spec = t.recompute](int n_layer) { return recompute_blocks(spec, n_layer); },
          // A time budget's steps are unknown until its probe: warm-up, then the schedule at its start.
          .max_steps = t.budget == "seconds" ? std::numeric_limits<int64_t>::max() / 4 : t.max_steps,
          .linear_dtype = linear_dtype(t),
          .weight_rounding = weight_rounding(t)};
}

std::string resolved_precision(const std::string& precision) {
  if (precision != "auto") return precision;
  return kernels::bf16_matmul_native() ? "bf16" : "fp32";
}

kernels::DType linear_dtype(const TrainSettings& t) {
  return t.precision == "bf16" ? kernels::DType::BF16 : kernels::DType::F32;
}

kernels::Bf16Rounding weight_rounding(const TrainSettings& t) {
  return {.stochastic = t.bf16_rounding == "stochastic", .seed = t.seed};
}

kernels::DType comm_dtype(const ParallelSettings& p) {
  return p.comm_dtype == "bf16" ? kernels::DType::BF16 : kernels::DType::F32;
}

std::string describe_bf16_gemms() {
  if (kernels::bf16_matmul_native()) return fmt::format("GEMMs {}", kernels::bf16_matmul_path());
  return fmt::format("GEMMs {}: this CPU has no bf16 dot-product instructions (AVX512_BF16, AMX), so the run "
                     "has bf16's rounding without its speed", kernels::bf16_matmul_path());
}

std::string describe_precision(const TrainSettings& t) {
  return t.precision == "bf16" ? fmt::format("bf16 ({})", describe_bf16_gemms()) : t.precision;
}

std::vector<bool> recompute_blocks(const std::string& spec, int n_layer) {
  if (spec == "none") return std::vector<bool>(n_layer, false);
  if (spec == "all") return std::vector<bool>(n_layer, true);
  std::vector<bool> blocks(n_layer, false);
  size_t pos = 0;
  while (pos <= spec.size()) {
    const size_t comma = std::min(spec.find(',', pos), spec.size());
    const std::string item = spec.substr(pos, comma - pos);
    size_t used = 0;
    int block = -1;
    try {
      block = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    FRUGAL_CHECK(used == item.size() && used > 0 && block >= 0 && block < n_layer,
                 "train.recompute = \"{}\": \"{}\" is not a block index in [0, {}); use \"none\", "
                 "\"all\" or indices like \"0,1\"", spec, item, n_layer);
    blocks[block] = true;
    pos = comma + 1;
  }
  return blocks;
}

RunSettings run_settings(const io::Config& c) {
  RunSettings r;
  ModelConfig& m = r.model;
  m.vocab_size = c.get_int32("model.vocab_size");
  m.block_size = c.get_int32("model.block_size");
  m.n_layer = c.get_int32("model.n_layer");
  m.n_head = c.get_int32("model.n_head");
  m.n_embd = c.get_int32("model.n_embd");
  m.ffn_mult = c.get_int32("model.ffn_mult");
  m.mlp = parse_mlp_kind(c.get_string("model.mlp"));
  m.norm = parse_norm_placement(c.get_string("model.norm"));
  m.objective = parse_objective_kind(c.get_string("model.objective"));
  m.tied_head = c.get_bool("model.tied_head");
  m.bias = c.get_bool("model.bias");
  m.dropout = static_cast<float>(c.get_float("model.dropout"));
  m.layernorm_eps = static_cast<float>(c.get_float("model.layernorm_eps"));
  m.init_std = static_cast<float>(c.get_float("model.init_std"));
  m.zero_init_proj = c.get_bool("model.zero_init_proj");
  m.position = parse_position_kind(c.get_string("model.position"));
  m.rope_base = static_cast<float>(c.get_float("model.rope_base"));
  m.qk_norm = c.get_bool("model.qk_norm");
  m.logit_softcap = static_cast<float>(c.get_float("model.logit_softcap"));
  m.moe.experts = c.get_int32("model.moe.experts");
  m.moe.top_k = c.get_int32("model.moe.top_k");
  m.moe.every = c.get_int32("model.moe.every");
  m.moe.hidden = c.get_int32("model.moe.hidden");
  m.moe.shared_expert = c.get_bool("model.moe.shared_expert");
  m.moe.aux_loss_coef = static_cast<float>(c.get_float("model.moe.aux_loss_coef"));
  m.moe.z_loss_coef = static_cast<float>(c.get_float("model.moe.z_loss_coef"));
  m.moe.bias_rate = static_cast<float>(c.get_float("model.moe.bias_rate"));
  AdamWConfig& o = r.optim;
  o.lr = static_cast<float>(c.get_float("optim.lr"));
  o.min_lr = static_cast<float>(c.get_float("optim.min_lr"));
  o.beta1 = static_cast<float>(c.get_float("optim.beta1"));
  o.beta2 = static_cast<float>(c.get_float("optim.beta2"));
  o.eps = static_cast<float>(c.get_float("optim.eps"));
  o.head_lr = static_cast<float>(c.get_float("optim.head_lr"));
  o.weight_decay = static_cast<float>(c.get_float("optim.weight_decay"));
  o.grad_clip = static_cast<float>(c.get_float("optim.grad_clip"));
  o.warmup_steps = c.get_int32("optim.warmup_steps");
  o.schedule = c.get_string("optim.schedule") == "wsd" ? ScheduleKind::Wsd : ScheduleKind::Cosine;
  o.decay_fraction = static_cast<float>(c.get_float("optim.decay_fraction"));
  const std::string decay = c.get_string("optim.decay_shape");
  o.decay_shape = decay == "cosine" ? DecayShape::Cosine : decay == "sqrt" ? DecayShape::Sqrt : DecayShape::Linear;
  o.muon.enabled = c.get_string("optim.name") == "muon";
  o.muon.lr = static_cast<float>(c.get_float("optim.muon.lr"));
  o.muon.momentum = static_cast<float>(c.get_float("optim.muon.momentum"));
  o.muon.nesterov = c.get_bool("optim.muon.nesterov");
  o.muon.ns_steps = c.get_int32("optim.muon.ns_steps");
  o.muon.weight_decay = static_cast<float>(c.get_float("optim.muon.weight_decay"));
  o.muon.bf16 = c.get_string("optim.muon.precision") == "bf16";
  TrainSettings& t = r.train;
  t.data_dir = c.get_string("data.dir");
  t.data_tokenizer = c.get_string("data.tokenizer");
  t.val_sets = {{"val", t.data_dir}};
  for (const std::string& entry : c.get_strings("data.val")) {
    const size_t eq = entry.find('=');
    std::string name = eq == std::string::npos ? "" : entry.substr(0, eq);
    const std::string dir = eq == std::string::npos ? entry : entry.substr(eq + 1);
    FRUGAL_CHECK(!dir.empty(), "data.val entry \"{}\" names no directory; write \"NAME=DIR\" or \"DIR\"", entry);
    if (name.empty()) name = std::filesystem::path(dir).lexically_normal().filename().string();
    if (name.empty() || name == ".") name = std::filesystem::path(dir).lexically_normal().parent_path().filename().string();
    FRUGAL_CHECK(!name.empty() && name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") == std::string::npos,
                 "data.val entry \"{}\": the name \"{}\" must be letters, digits, '_', '.' or '-'; write \"NAME=DIR\"", entry, name);
    for (const auto& [other, other_dir] : t.val_sets)
      FRUGAL_CHECK(name != other, "data.val entry \"{}\": the name \"{}\" is taken{}; give it another with \"NAME=DIR\"",
                   entry, name, other == "val" ? " (data.dir's validation set is \"val\")" : " by another entry");
    t.val_sets.emplace_back(name, dir);
  }
  t.out_dir = c.get_string("train.out_dir");
  t.batch_size = c.get_int32("train.batch_size");
  t.seq_len = c.get_int32("train.seq_len");
  if (t.seq_len == 0) t.seq_len = m.block_size;
  t.grad_accum = c.get_int32("train.grad_accum");
  t.batch_warmup_steps = c.get_int32("train.batch_warmup_steps");
  t.batch_warmup_start = c.get_int32("train.batch_warmup_start");
  t.max_steps = c.get_int("train.max_steps");
  t.max_seconds = c.get_float("train.max_seconds");
  t.max_memory_mb = c.get_float("train.max_memory_mb");
  t.budget = c.get_string("train.budget");
  t.budget_probe_steps = c.get_int32("train.budget_probe_steps");
  t.budget_evals = c.get_bool("train.budget_evals");
  t.budget_retime = c.get_float("train.budget_retime");
  t.seed = static_cast<uint64_t>(c.get_int("train.seed"));
  t.threads = c.get_int32("train.threads");
  t.recompute = c.get_string("train.recompute");
  t.precision = resolved_precision(c.get_string("train.precision"));
  t.bf16_rounding = c.get_string("train.bf16_rounding");
  t.eval_interval = c.get_int32("train.eval_interval");
  t.eval_batches = c.get_int32("train.eval_batches");
  t.log_interval = c.get_int32("train.log_interval");
  t.checkpoint_interval = c.get_int32("train.checkpoint_interval");
  t.keep_checkpoints = c.get_int32("train.keep_checkpoints");
  ParallelSettings& par = r.parallel;
  par.zero = c.get_int32("parallel.zero");
  par.bucket_mb = c.get_float("parallel.bucket_mb");
  par.comm_dtype = c.get_string("parallel.comm_dtype");
  par.timeout = c.get_float("parallel.timeout");
  par.pipeline_stages = c.get_int32("parallel.pipeline_stages");
  par.schedule = c.get_string("parallel.schedule");
  par.elastic = c.get_bool("parallel.elastic");
  par.autopipe_cost = c.get_string("parallel.autopipe_cost");
  par.tensor = c.get_int32("parallel.tensor");
  par.sequence = c.get_bool("parallel.sequence");
  par.tensor_overlap = c.get_bool("parallel.tensor_overlap");
  par.expert = c.get_int32("parallel.expert");
  SampleSettings& p = r.sample;
  p.count = c.get_int32("sample.count");
  p.max_tokens = c.get_int32("sample.max_tokens");
  p.temperature = c.get_float("sample.temperature");
  p.top_k = c.get_int32("sample.top_k");
  p.top_p = c.get_float("sample.top_p");
  p.prompt = c.get_string("sample.prompt");
  p.seed = static_cast<uint64_t>(c.get_int("sample.seed"));

  ModelConfig shape = m;
  if (shape.vocab_size == 0) shape.vocab_size = 2;  // the tokenizer's, checked once data is read
  shape.validate();
  FRUGAL_CHECK(t.seq_len <= m.block_size, "train.seq_len = {} exceeds model.block_size = {}",
               t.seq_len, m.block_size);
  LocalSizes::of(shape, {0, par.tensor});    // throws when the heads or hidden units do not divide
  recompute_blocks(t.recompute, m.n_layer);  // throws for a bad block list
  const MethodSet methods = MethodSet::from_config(c);  // each method checks its keys
  FRUGAL_CHECK(o.head_lr == 0 || !m.tied_head, "optim.head_lr = {} needs an untied head: with model.tied_head "
               "= true the head is the token embedding; set model.tied_head = false or optim.head_lr = 0", o.head_lr);
  if (t.batch_warmup_steps > 0) {
    FRUGAL_CHECK(t.batch_warmup_start <= t.grad_accum, "train.batch_warmup_start = {} exceeds train.grad_accum = {}: "
                 "the warm-up rises to train.grad_accum micro-batches", t.batch_warmup_start, t.grad_accum);
    FRUGAL_CHECK(par.pipeline_stages == 1, "train.batch_warmup_steps does not run with parallel.pipeline_stages = {} "
                 "(its schedule is built for one micro-batch count); set train.batch_warmup_steps = 0",
                 par.pipeline_stages);
  }
  if (t.budget == "seconds") {
    FRUGAL_CHECK(t.max_seconds > 0, "train.budget = \"seconds\" needs the budget: set train.max_seconds (> 0)");
    for (const auto& method : methods.methods())
      FRUGAL_CHECK(method->capabilities().follows_horizon, "methods.{} schedules itself over train.max_steps, "
                   "which train.budget = \"seconds\" does not know in advance; use train.budget = \"steps\"",
                   method->name());
  }
  if (par.sequence) {
    const int64_t rows = int64_t(t.batch_size) * t.seq_len;
    FRUGAL_CHECK(par.tensor > 1, "parallel.sequence = true splits a micro-batch's rows over a tensor-parallel "
                 "group: set parallel.tensor > 1, or parallel.sequence = false");
    FRUGAL_CHECK(rows % par.tensor == 0, "parallel.sequence = true: a micro-batch's {} rows (train.batch_size × "
                 "train.seq_len) do not divide over parallel.tensor = {} ranks; change either", rows, par.tensor);
    FRUGAL_CHECK(t.precision != "bf16" || m.n_embd % 2 == 0, "parallel.sequence = true with train.precision = "
                 "\"bf16\" gathers bf16 rows in pairs: model.n_embd = {} must be even", m.n_embd);
    FRUGAL_CHECK(!methods.any(&Capabilities::changes_trainable_set), "parallel.sequence = true with a method "
                 "that freezes blocks is not built yet (a frozen prefix runs and caches whole samples); "
                 "remove the method or set parallel.sequence = false");
  }
  if (t.bf16_rounding == "stochastic") {
    FRUGAL_CHECK(t.precision == "bf16", "train.bf16_rounding = \"stochastic\" rounds the bf16 working copies of "
                 "the weights, which train.precision = \"{}\"{} has none of; set train.precision = \"bf16\" or "
                 "train.bf16_rounding = \"nearest\"", t.precision,
                 c.get_string("train.precision") == "auto" ? " (what \"auto\" chose on this CPU)" : "");
    FRUGAL_CHECK(par.tensor == 1 && par.expert == 1, "train.bf16_rounding = \"stochastic\" does not run with "
                 "parallel.{} = {} yet (its random bits are keyed by each weight's index in the whole model, "
                 "which a rank holding slices of tensors does not index); use train.bf16_rounding = \"nearest\", "
                 "or data or pipeline parallelism", par.tensor > 1 ? "tensor" : "expert",
                 std::max(par.tensor, par.expert));
  }
  if (o.muon.enabled) {
    FRUGAL_CHECK(par.tensor == 1, "optim.name = \"muon\" does not run with parallel.tensor = {}: each rank "
                 "holds a slice of every matrix and Muon orthogonalises whole ones; use data parallelism or "
                 "optim.name = \"adamw\"", par.tensor);
    for (const auto& method : methods.methods())
      FRUGAL_CHECK(method->name() != "sparse24", "methods.sparse24 does not run with optim.name = \"muon\" "
                   "yet (its masked decay is a term added to the gradient, whose size Muon's orthogonalisation "
                   "would not keep); remove it or use optim.name = \"adamw\"");
  }
  if (par.expert > 1) {
    FRUGAL_CHECK(m.moe.experts > 0 && m.moe.experts % par.expert == 0, "parallel.expert = {} needs a mixture "
                 "of experts whose model.moe.experts ({}) divides by it; set parallel.expert to a divisor "
                 "of model.moe.experts (or 1)", par.expert, m.moe.experts);
    FRUGAL_CHECK(par.tensor == 1, "parallel.expert = {} with parallel.tensor = {}: tensor × expert parallelism "
                 "is not built yet; set one of them to 1", par.expert, par.tensor);
  }
  if (m.moe.experts > 0) {
    FRUGAL_CHECK(par.pipeline_stages == 1, "parallel.pipeline_stages = {} does not run a mixture of experts "
                 "yet (a stage's auxiliary losses would not reach the head); use data parallelism "
                 "(parallel.pipeline_stages = 1) or model.moe.experts = 0", par.pipeline_stages);
    for (const auto& method : methods.methods())
      FRUGAL_CHECK(method->name() == "freeze", "methods.{} does not run with a mixture of experts yet (it "
                   "acts on the dense MLP's linears or reshapes them); remove it or set model.moe.experts = 0",
                   method->name());
  }
  return r;
}

}  // namespace frugal
