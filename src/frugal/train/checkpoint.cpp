// Checkpoint writing and loading; see checkpoint.h for the layout and the atomicity argument.
#include "frugal/train/checkpoint.h"


#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <span>

#include "frugal/core/error.h"
#include "frugal/data/text.h"
#include "frugal/io/atomic_file.h"
#include "frugal/io/safetensors.h"
#include "frugal/methods/method_set.h"
#include "frugal/train/run_config.h"
#include "frugal/train/step.h"

namespace frugal {
namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "frugal-v1";
constexpr const char* kMethodTensorsFile = "methods.safetensors";

// The step of a checkpoint directory name "step_<digits>", or -1 for anything else (temporary
// ".tmp" and ".old" directories included).
int64_t checkpoint_step(const std::string& name) {
  if (!name.starts_with("step_") || name.size() == 5 || name.size() > 5 + 18) return -1;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

// The checkpoint directories under root, by step.
std::vector<std::pair<int64_t, fs::path>> checkpoint_dirs(const fs::path& root) {
  std::vector<std::pair<int64_t, fs::path>> dirs;
  if (!fs::exists(root)) return dirs;
  for (const auto& e : fs::directory_iterator(root)) {
    const int64_t step = checkpoint_step(e.path().filename().string());
    if (e.is_directory() && step >= 0) dirs.emplace_back(step, e.path());
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

// After writing the checkpoint of `step`: keeps the newest keep_last - 1 older ones and deletes
// the rest of the older ones. The new one is never deleted, and newer ones (left by the run this
// one resumed from an earlier checkpoint of) are left alone: they are a user's data. Neither is
// one that a reader has pinned: it is deleted at the first save after the reader let it go, and
// training never waits for a reader.
void prune_checkpoints(const fs::path& root, int64_t step, int keep_last) {
  std::vector<fs::path> older;
  for (const auto& [s, dir] : checkpoint_dirs(root))
    if (s < step) older.push_back(dir);
  const size_t keep_older = static_cast<size_t>(keep_last - 1);
  for (size_t i = 0; i + keep_older < older.size(); ++i) {
    const std::optional<io::DirLock> unread = io::DirLock::try_exclusive(older[i].string());
    if (unread) fs::remove_all(older[i]);  // a reader waiting to pin it sees it deleted
  }
}

// Whether a checkpoint's files are whole: both safetensors headers parse and fit their files.
bool intact(const fs::path& checkpoint_dir) {
  try {
    for (const char* file : {"model.safetensors", "train_state.safetensors"})
      io::read_safetensors((checkpoint_dir / file).string(), io::SafeTensorsPart::Metadata);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// "the <which> intact checkpoint is DIR: pass that directory instead" for the newest intact
// checkpoint under root of a step below before_step, or `none` when there is none.
std::string intact_checkpoint_advice(const fs::path& root, int64_t before_step, std::string_view which,
                                     std::string_view none) {
  const auto dirs = checkpoint_dirs(root);
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it)
    if (it->first < before_step && intact(it->second))
      return fmt::format("the {} intact checkpoint is {}: pass that directory instead", which,
                         it->second.string());
  return std::string(none);
}

// What to do about a damaged checkpoint: use the newest intact one before it in its run.
std::string earlier_checkpoint_advice(const std::string& checkpoint_dir) {
  fs::path dir(checkpoint_dir);
  if (dir.filename().empty()) dir = dir.parent_path();  // "step_00000004/"
  return intact_checkpoint_advice(dir.parent_path(), checkpoint_step(dir.filename().string()), "previous",
                                  "there is no earlier intact checkpoint beside it: train again");
}

// Reads file `name` of a checkpoint; the error for a damaged file names what to use instead.
io::SafeTensors read_checkpoint_file(const std::string& checkpoint_dir, const char* name,
                                     io::SafeTensorsPart part = io::SafeTensorsPart::All) {
  return io::read_safetensors((fs::path(checkpoint_dir) / name).string(), part,
                              [&] { return earlier_checkpoint_advice(checkpoint_dir); });
}

// The same file opened to read a tensor at a time (the model's weights and moments).
io::SafeTensorsReader open_checkpoint_file(const std::string& checkpoint_dir, const std::string& name) {
  return io::SafeTensorsReader((fs::path(checkpoint_dir) / name).string(),
                               [&] { return earlier_checkpoint_advice(checkpoint_dir); });
}

// Throws Error naming the tensor when values, tensor `name` of file `path` in checkpoint_dir,
// hold a NaN or an infinity: such weights sample garbage and evaluate to nan.
void check_finite(const std::string& checkpoint_dir, const std::string& path,
                  const std::string& name, std::span<const float> values) {
  const auto bad =
      std::find_if(values.begin(), values.end(), [](float x) { return !std::isfinite(x); });
  FRUGAL_CHECK(bad == values.end(), "{}: tensor '{}' holds {} (element {} of {}): the checkpoint "
               "is unusable (training diverged or the file is damaged); {}", path, name, *bad,
               bad - values.begin(), values.size(), earlier_checkpoint_advice(checkpoint_dir));
}

// The model's current shape, stored next to the run's config: a method may have reshaped the
// model mid-run (Session::reshape), so the config's model.* keys give only its starting shape.
nlohmann::json model_config_json(const ModelConfig& c) {
  nlohmann::json j = {{"vocab_size", c.vocab_size}, {"block_size", c.block_size}, {"n_layer", c.n_layer},
          {"n_head", c.n_head}, {"n_embd", c.n_embd}, {"ffn_mult", c.ffn_mult},
          {"mlp", mlp_kind_name(c.mlp)}, {"norm", norm_placement_name(c.norm)},
          {"objective", objective_kind_name(c.objective)}, {"tied_head", c.tied_head}, {"bias", c.bias},
          {"dropout", c.dropout}, {"layernorm_eps", c.layernorm_eps}, {"init_std", c.init_std},
          {"position", position_kind_name(c.position)}, {"rope_base", c.rope_base}, {"qk_norm", c.qk_norm},
          {"logit_softcap", c.logit_softcap}};
  if (c.moe.experts > 0)
    j["moe"] = {{"experts", c.moe.experts}, {"top_k", c.moe.top_k}, {"every", c.moe.every},
                {"hidden", c.moe.hidden}, {"shared_expert", c.moe.shared_expert},
                {"aux_loss_coef", c.moe.aux_loss_coef}, {"z_loss_coef", c.moe.z_loss_coef},
                {"bias_rate", c.moe.bias_rate}};
  return j;
}

ModelConfig model_config_from_json(const nlohmann::json& j) {
  ModelConfig c;
  c.vocab_size = j.at("vocab_size");
  c.block_size = j.at("block_size");
  c.n_layer = j.at("n_layer");
  c.n_head = j.at("n_head");
  c.n_embd = j.at("n_embd");
  c.ffn_mult = j.at("ffn_mult");
  c.mlp = parse_mlp_kind(j.at("mlp"));
  c.norm = parse_norm_placement(j.value("norm", "pre"));  // checkpoints before model.norm: pre-LN
  c.objective = parse_objective_kind(j.value("objective", "causal"));  // before model.objective: causal
  c.tied_head = j.at("tied_head");
  c.bias = j.at("bias");
  c.dropout = j.at("dropout");
  c.layernorm_eps = j.at("layernorm_eps");
  c.init_std = j.at("init_std");
  // checkpoints before these options: learned positions, no QK-norm, no soft-capping
  c.position = parse_position_kind(j.value("position", "learned"));
  c.rope_base = j.value("rope_base", c.rope_base);
  c.qk_norm = j.value("qk_norm", false);
  c.logit_softcap = j.value("logit_softcap", 0.0f);
  if (j.contains("moe")) {  // written for a mixture of experts only
    const nlohmann::json& moe = j.at("moe");
    c.moe.experts = moe.at("experts");
    c.moe.top_k = moe.at("top_k");
    c.moe.every = moe.at("every");
    c.moe.hidden = moe.at("hidden");
    c.moe.shared_expert = moe.at("shared_expert");
    c.moe.aux_loss_coef = moe.at("aux_loss_coef");
    c.moe.z_loss_coef = moe.at("z_loss_coef");
    c.moe.bias_rate = moe.at("bias_rate");
  }
  c.validate();
  return c;
}

}  // namespace

namespace {

// The file of rank `rank`'s optimizer shard in a checkpoint written with a sharded optimizer.
std::string shard_file_name(int rank) { return fmt::format("optimizer.rank{:05}.safetensors", rank); }

// A sharded checkpoint's: the file of rank `rank`'s part, and the names of its moments.
std::string part_file_name(int rank) { return fmt::format("model.rank{:05}.safetensors", rank); }
constexpr const char* kMomentPrefixes[] = {"adamw.m/", "adamw.v/"};
constexpr const char* kManifestKey = "shards";  // model.safetensors' metadata in a sharded checkpoint

// Whether a part (its table) writes tensor e: the ones it updates (not a last stage's copy of a
// tied wte), a tensor every rank of its tensor group holds whole from tensor rank 0 only.
bool part_writes(const ParamInfo& e, const ParamTable& table) {
  return e.offset >= table.owned_begin() && (table.shard().group_of(e.placement).size > 1 || table.shard().rank == 0);
}

// A rank's part of a sharded checkpoint: its place in the layout, as the ranks exchange it.
struct PartLayout {
  bool writes = false;
  ShardCoord coord;
  BlockRange range;
  static constexpr size_t kFields = 7;
  std::vector<double> encode() const {
    return {writes ? 1.0 : 0.0, double(coord.rank),   double(coord.size),       double(range.begin),
            double(range.end),  range.embeddings ? 1.0 : 0.0, range.head ? 1.0 : 0.0};
  }
  static PartLayout decode(const double* f) {
    return {f[0] != 0, {.rank = int(f[1]), .size = int(f[2])}, {int(f[3]), int(f[4]), f[5] != 0, f[6] != 0}};
  }
};

// The manifest of a sharded checkpoint of a model of `config` whose ranks hold `parts`: the tensor
// degree, the stages' blocks and, per written file, its rank's place and the tensors it holds.
nlohmann::json part_manifest(const ModelConfig& config, const std::vector<PartLayout>& parts) {
  nlohmann::json files = nlohmann::json::array();
  std::vector<std::array<int, 2>> stages;
  for (size_t rank = 0; rank < parts.size(); ++rank) {
    const PartLayout& p = parts[rank];
    if (!p.writes) continue;
    const ParamTable table = ParamTable::build(config, p.range, p.coord);
    nlohmann::json names = nlohmann::json::array();
    for (const ParamInfo& e : table.entries())
      if (part_writes(e, table)) names.push_back(e.name);
    files.push_back({{"file", part_file_name(int(rank))}, {"rank", rank}, {"tensor_rank", p.coord.rank},
                     {"blocks", {p.range.begin, p.range.end}}, {"embeddings", p.range.embeddings},
                     {"head", p.range.head}, {"tensors", names}});
    if (std::ranges::find(stages, std::array{p.range.begin, p.range.end}) == stages.end())
      stages.push_back({p.range.begin, p.range.end});
  }
  return {{"tensor", parts.front().coord.size}, {"stages", stages}, {"files", files}};
}

// Runs `work` on every rank of `group` (it may be a no-op on some), then agrees: when it threw on
// any rank, every rank throws, the failing ranks their own error, the others one naming them.
template <typename Work>
void on_every_rank(ProcessGroup& group, const char* what, Work&& work) {
  std::exception_ptr failure;
  try {
    work();
  } catch (...) {
    failure = std::current_exception();
  }
  std::vector<double> flags(group.size());
  const double failed = failure ? 1.0 : 0.0;
  group.allgather(&failed, 1, flags.data());
  if (failure) std::rethrow_exception(failure);
  for (int r = 0; r < group.size(); ++r)
    FRUGAL_CHECK(flags[r] == 0.0, "rank {} failed while {} (its error says why)", r, what);
}

}  // namespace

std::string save_checkpoint(const std::string& run_dir, const io::Config& config, const GPT& model,
                            const AdamW* optim, const TrainState& state,
                            const std::string& tokenizer_json, int keep_last, ProcessGroup& group,
                            const CheckpointRole& role) {
  FRUGAL_CHECK(keep_last >= 1, "keep_last = {} must be at least 1", keep_last);
  const fs::path root = fs::path(run_dir) / "checkpoints";
  const std::string name = fmt::format("step_{:08}", state.step);
  const fs::path final_dir = root / name;
  const fs::path tmp_dir = root / (name + ".tmp");
  const fs::path old_dir = root / (name + ".old");  // an earlier checkpoint of the same step
  const bool writer = group.is_writer();
  const bool sharded = optim && optim->sharded();
  const ParamTable& table = model.table();
  FRUGAL_CHECK(role.sharded || table.owned_begin() == 0, "internal: a checkpoint of a pipeline stage (synchronize "
               "the whole model first)");
  FRUGAL_CHECK(!role.sharded || !sharded, "internal: a sharded checkpoint of moments sharded over the replicas "
               "(gather them over the replicas first)");
  // A sharded checkpoint: every rank's place in the layout, for the manifest.
  std::vector<PartLayout> parts;
  if (role.sharded) {
    const std::vector<double> mine = PartLayout{role.writes, table.shard(), model.range()}.encode();
    std::vector<double> all(mine.size() * group.size());
    group.allgather(mine.data(), mine.size(), all.data());
    for (int r = 0; r < group.size(); ++r) parts.push_back(PartLayout::decode(all.data() + r * PartLayout::kFields));
  }
  auto discard_tmp = [&] {
    std::error_code ignored;
    if (writer) fs::remove_all(tmp_dir, ignored);
  };
  on_every_rank(group, "preparing the checkpoint directory", [&] {
    if (!writer) return;
    fs::create_directories(root);
    fs::remove_all(tmp_dir);
    fs::create_directories(tmp_dir);
  });
  try {
    // A sharded checkpoint: each writing rank its part of the weights and their moments.
    on_every_rank(group, "writing its part of the checkpoint", [&] {
      if (!role.sharded || !role.writes) return;
      const std::map<std::string, std::string> metadata{
          {"format", kFormat},
          {"shard", nlohmann::json{{"tensor_rank", table.shard().rank}, {"tensor_size", table.shard().size},
                                   {"blocks", {model.range().begin, model.range().end}}}.dump()}};
      std::map<std::string, io::TensorView> part;  // written from where they are: no copy of the part
      for (const ParamInfo& e : table.entries()) {
        if (!part_writes(e, table)) continue;
        part[e.name] = io::TensorView::f32(e.local, model.params() + e.offset);
        if (!optim) continue;
        AdamW& moments = const_cast<AdamW&>(*optim);
        const size_t at = e.offset - optim->shard_begin();
        part[kMomentPrefixes[0] + e.name] = io::TensorView::f32(e.local, moments.m() + at);
        part[kMomentPrefixes[1] + e.name] = io::TensorView::f32(e.local, moments.v() + at);
      }
      io::write_safetensors((tmp_dir / part_file_name(group.rank())).string(), metadata, part);
      if (const char* kill = std::getenv(kExitAfterPartVariable); kill && std::atoi(kill) == group.rank())
        std::_Exit(9);
    });
    // Each rank writes the moments it owns into the shared temporary directory.
    on_every_rank(group, "writing its optimizer shard", [&] {
      if (!sharded) return;
      const std::string range = nlohmann::json{{"begin", optim->shard_begin()}, {"end", optim->shard_end()},
                                               {"total", model.table().total()}}.dump();
      const int64_t n = static_cast<int64_t>(optim->shard_end() - optim->shard_begin());
      io::write_safetensors((tmp_dir / shard_file_name(group.rank())).string(), {{"format", kFormat}, {"shard", range}},
                            {{"adamw.m", io::TensorView::f32({n}, const_cast<AdamW*>(optim)->m())},
                             {"adamw.v", io::TensorView::f32({n}, const_cast<AdamW*>(optim)->v())}});
    });
  } catch (...) {
    discard_tmp();
    throw;
  }
  on_every_rank(group, "writing the checkpoint", [&] {
    if (!writer) return;
    bool replaced = false;
    try {
      std::map<std::string, std::string> metadata{
          {"format", kFormat}, {"config", config.to_toml()}, {"model", model_config_json(model.config()).dump()}};
      std::map<std::string, io::TensorView> weights;
      if (role.sharded)  // the weights are in the ranks' files
        metadata[kManifestKey] = part_manifest(model.config(), parts).dump();
      else
        for (const ParamInfo& e : table.entries()) weights[e.name] = io::TensorView::f32(e.shape, model.params() + e.offset);
      io::write_safetensors((tmp_dir / "model.safetensors").string(), metadata, weights);

      nlohmann::json js{{"step", state.step},
                        {"optimizer_steps", state.optimizer_steps},
                        {"loader_epoch", state.loader_epoch},
                        {"loader_position", state.loader_position},
                        {"flops", state.flops},
                        {"dense_flops", state.dense_flops},
                        {"wall_seconds", state.wall_seconds},
                        {"methods", state.methods},
                        {"session", state.session},
                        {"strategy", state.strategy},
                        {"ranks", state.ranks}};
      if (sharded) js["optimizer_shards"] = group.size();
      if (!state.method_tensors.empty()) {
        nlohmann::json& names = js["method_tensors"] = nlohmann::json::array();
        for (const auto& [name, values] : state.method_tensors) names.push_back(name);
      }
      std::map<std::string, io::TensorView> moments;
      if (optim && !sharded && !role.sharded) {
        const int64_t n = static_cast<int64_t>(table.total());
        moments["adamw.m"] = io::TensorView::f32({n}, const_cast<AdamW*>(optim)->m());
        moments["adamw.v"] = io::TensorView::f32({n}, const_cast<AdamW*>(optim)->v());
      }
      io::write_safetensors((tmp_dir / "train_state.safetensors").string(),
                            {{"format", kFormat}, {"state", js.dump()}}, moments);
      if (!state.method_tensors.empty()) {
        io::SafeTensors method_state;
        method_state.metadata["format"] = kFormat;
        for (const auto& [name, values] : state.method_tensors)
          method_state.put_f32(name, {static_cast<int64_t>(values.size())}, values.data());
        io::write_safetensors((tmp_dir / kMethodTensorsFile).string(), method_state);
      }
      io::write_file_atomic((tmp_dir / data::kTokenizerFile).string(), tokenizer_json);
      io::write_file_atomic((tmp_dir / io::kLockFileName).string(), "");
      io::fsync_directory(tmp_dir.string());
      // Replacing a checkpoint of the same step (a resumed run redoing steps): move the old one
      // aside first, so that at every instant one complete copy exists under a known name.
      if (fs::exists(final_dir)) {
        fs::remove_all(old_dir);
        fs::rename(final_dir, old_dir);
        replaced = true;
      }
      fs::rename(tmp_dir, final_dir);
      io::fsync_directory(root.string());
      io::write_file_atomic((root / "latest").string(), name + "\n");
    } catch (...) {
      std::error_code ignored;
      if (replaced && !fs::exists(final_dir)) fs::rename(old_dir, final_dir, ignored);
      discard_tmp();
      throw;
    }
    fs::remove_all(old_dir);
    prune_checkpoints(root, state.step, keep_last);
  });
  return final_dir.string();
}

namespace {

// A sharded checkpoint's manifest (model.safetensors' "shards"), or null for a whole checkpoint.
nlohmann::json part_manifest_of(const std::string& checkpoint_dir) {
  const io::SafeTensors st =
      read_checkpoint_file(checkpoint_dir, "model.safetensors", io::SafeTensorsPart::Metadata);
  const auto it = st.metadata.find(kManifestKey);
  if (it == st.metadata.end()) return nullptr;
  const nlohmann::json manifest = nlohmann::json::parse(it->second, nullptr, false);
  FRUGAL_CHECK(manifest.is_object() && manifest.contains("files") && manifest.contains("tensor"),
               "{}/model.safetensors: the manifest of the sharded checkpoint is unreadable: the file is "
               "damaged; {}", checkpoint_dir, earlier_checkpoint_advice(checkpoint_dir));
  return manifest;
}

// Reads a sharded checkpoint's rank files one at a time and hands the parts of the tensors of
// `table` stored under `prefix` ("" for the weights, kMomentPrefixes) to put(e, part, coord), coord
// the part's place in its tensor group; then checks that every tensor got all of them. `table` is
// the whole model's (every part of every tensor), or one rank's part at the checkpoint's tensor
// degree (the slices of its tensor rank of the tensors it holds — of the moments, of those it
// updates: not a last stage's copy of a tied wte — files holding none of them are not opened). The
// files are read one tensor at a time. Errors name the file and what to do.
void read_parts(const std::string& checkpoint_dir, const nlohmann::json& manifest, const ParamTable& table,
                const std::string& prefix,
                const std::function<void(const ParamInfo&, std::span<const float>, const ShardCoord&)>& put) {
  const ModelConfig written_config = checkpoint_model_config(checkpoint_dir);
  const int T = manifest.at("tensor");
  const ShardCoord held = table.shard();
  const bool part = held.size > 1;
  FRUGAL_CHECK(!part || held.size == T, "internal: a part at tensor degree {} read from a checkpoint at {}",
               held.size, T);
  // The tensor `name` of a file of tensor rank r: the table's entry to put it into, or null.
  const auto wanted = [&](const std::string& name, int r) -> const ParamInfo* {
    const ParamInfo* e = table.find(name);
    if (!part || !e) return e;
    if (!prefix.empty() && e->offset < table.owned_begin()) return nullptr;  // a tied wte's copy has no moments
    return e->placement.kind != Placement::Kind::Sharded || r == held.rank ? e : nullptr;
  };
  std::map<std::string, int> parts;  // per tensor: the parts read
  for (const nlohmann::json& f : manifest.at("files")) {
    const std::string name = f.at("file");
    const int r = f.at("tensor_rank");
    const std::vector<std::string> tensors = f.at("tensors");
    if (part && std::ranges::none_of(tensors, [&](const std::string& t) { return wanted(t, r) != nullptr; }))
      continue;
    const std::string path = (fs::path(checkpoint_dir) / name).string();
    FRUGAL_CHECK(fs::exists(path), "{} is missing: the checkpoint is sharded over {} files and needs every one; "
                 "copy it back, or {}", path, manifest.at("files").size(), earlier_checkpoint_advice(checkpoint_dir));
    const io::SafeTensorsReader file = open_checkpoint_file(checkpoint_dir, name);
    const ShardCoord coord{.rank = r, .size = T};
    const BlockRange range{f.at("blocks")[0], f.at("blocks")[1], f.at("embeddings"), f.at("head")};
    const ParamTable written = ParamTable::build(written_config, range, coord);
    for (const std::string& tensor : tensors) {
      FRUGAL_CHECK(table.find(tensor) == nullptr || table.find(tensor)->shape == written.at(tensor).shape,
                   "{} holds tensor '{}' [{}] which this model has at another shape: the checkpoint is from a "
                   "different model shape; use the checkpoint's model settings", path, tensor,
                   fmt::join(written.at(tensor).shape, ", "));
      const ParamInfo* e = wanted(tensor, r);
      FRUGAL_CHECK(part || e != nullptr, "{} holds tensor '{}' which this model does not have: the checkpoint is "
                   "from a different model shape; use the checkpoint's model settings", path, tensor);
      if (!e) continue;  // another rank's
      const std::string key = prefix + tensor;
      FRUGAL_CHECK(file.contains(key), "{} has no tensor '{}' though the manifest lists it{}: the file is "
                   "damaged; {}", path, key, prefix.empty() ? "" : " (resume needs the moments; --init-from "
                   "starts a new run from the weights)", earlier_checkpoint_advice(checkpoint_dir));
      const io::TensorData data = file.read(key);
      const std::vector<int64_t>& local = written.at(tensor).local;
      FRUGAL_CHECK(data.shape == local, "{}: tensor '{}' has shape [{}] but tensor rank {} of {} of this model "
                   "holds [{}]: the checkpoint is from a different model shape; use the checkpoint's model "
                   "settings", path, key, fmt::join(data.shape, ", "), coord.rank, T, fmt::join(local, ", "));
      const std::vector<float> values = data.to_f32(key);
      check_finite(checkpoint_dir, path, key, values);
      put(*e, values, coord);
      ++parts[tensor];
    }
  }
  for (const ParamInfo& e : table.entries()) {
    if (part && !prefix.empty() && e.offset < table.owned_begin()) continue;
    const int needed = !part && e.placement.kind == Placement::Kind::Sharded ? T : 1;
    FRUGAL_CHECK(parts[e.name] == needed, "{}: the sharded checkpoint holds {} of the {} parts of tensor '{}': "
                 "the manifest is damaged or the checkpoint is of another model shape; {}", checkpoint_dir,
                 parts[e.name], needed, e.name, earlier_checkpoint_advice(checkpoint_dir));
  }
}

}  // namespace

int checkpoint_tensor_degree(const std::string& checkpoint_dir) {
  const nlohmann::json manifest = part_manifest_of(checkpoint_dir);
  return manifest.is_null() ? 0 : manifest.at("tensor").get<int>();
}

bool run_has_checkpoints(const std::string& run_dir) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  return fs::exists(root / "latest") || !checkpoint_dirs(root).empty();
}

std::string checkpoint_run_dir(const std::string& checkpoint_dir) {
  const fs::path checkpoints = fs::weakly_canonical(fs::path(checkpoint_dir)).parent_path();
  return checkpoints.filename() == "checkpoints" ? checkpoints.parent_path().string() : "";
}

std::string resolve_checkpoint(const std::string& path) {
  const fs::path p(path);
  FRUGAL_CHECK(fs::exists(p), "{} does not exist; give a run directory or a checkpoint directory", path);
  if (fs::exists(p / "model.safetensors")) return p.string();
  const fs::path latest = p / "checkpoints" / "latest";
  FRUGAL_CHECK(fs::exists(latest), "{} holds no checkpoint (no model.safetensors and no "
               "checkpoints/latest); give a run directory that has saved one", path);
  std::string name = data::read_text_file(latest.string());
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r')) name.pop_back();
  FRUGAL_CHECK(checkpoint_step(name) >= 0,  // not printed: it may be any bytes
               "{} does not hold a checkpoint name like step_00000100 (the file is damaged); {}",
               latest.string(),
               intact_checkpoint_advice(p / "checkpoints", INT64_MAX, "newest",
                                        "the run holds no intact checkpoint: train again"));
  const fs::path dir = p / "checkpoints" / name;
  const fs::path old_copy = p / "checkpoints" / (name + ".old");
  FRUGAL_CHECK(fs::exists(dir / "model.safetensors"),
               "{} names checkpoint {} but it is missing; {}", latest.string(), name,
               fs::exists(old_copy / "model.safetensors")
                   ? fmt::format("the run stopped while replacing it and its earlier copy is {}: "
                                 "rename that to {} and retry", old_copy.string(), dir.string())
                   : fmt::format("pass one of the step_* directories under {} instead",
                                 (p / "checkpoints").string()));
  return dir.string();
}

PinnedCheckpoint pin_checkpoint(const std::string& path) {
  constexpr int kAttempts = 10;
  for (int attempt = 1;; ++attempt) {
    std::string dir = resolve_checkpoint(path);
    std::optional<io::DirLock> lock = io::DirLock::shared(dir);
    // Without a lock file, either the checkpoint predates them or pruning just deleted it.
    if (lock || fs::exists(fs::path(dir) / "model.safetensors")) return {std::move(dir), std::move(lock)};
    FRUGAL_CHECK(attempt < kAttempts, "the checkpoints of {} were deleted {} times while being "
                 "opened; a run is pruning them faster than they can be read: retry, or read a "
                 "checkpoint it keeps", path, kAttempts);
  }
}

io::Config checkpoint_config(const std::string& checkpoint_dir, const io::ConfigSchema& schema) {
  const std::string path = (fs::path(checkpoint_dir) / "model.safetensors").string();
  io::SafeTensors st =
      read_checkpoint_file(checkpoint_dir, "model.safetensors", io::SafeTensorsPart::Metadata);
  auto it = st.metadata.find("config");
  FRUGAL_CHECK(it != st.metadata.end() && st.metadata["format"] == kFormat,
               "{} is not a frugal checkpoint (no frugal-v1 metadata); for Hugging Face files use "
               "`frugal import`", path);
  io::Config config(schema);
  config.merge_toml(it->second, path + " (stored config)");
  return config;
}

void load_checkpoint_params(const std::string& checkpoint_dir, GPT& model) {
  const std::string path = (fs::path(checkpoint_dir) / "model.safetensors").string();
  if (const nlohmann::json manifest = part_manifest_of(checkpoint_dir); !manifest.is_null()) {
    // The whole model assembles every tensor from its parts; a rank's part at the checkpoint's
    // degree (a resume that starts in parts, StepStrategy::enter_parts) takes its own.
    const ParamTable& table = model.table();
    const bool part = table.shard().size > 1;
    FRUGAL_CHECK(part || (table.owned_begin() == 0 && model.range() == BlockRange::whole(model.config())),
                 "internal: a sharded checkpoint is read into a pipeline stage without tensor shards");
    float* params = model.params();
    read_parts(checkpoint_dir, manifest, table, "", [&](const ParamInfo& e, std::span<const float> values,
                                                       const ShardCoord& coord) {
      if (part)
        std::ranges::copy(values, params + e.offset);
      else
        e.copy_global(values.data(), params + e.offset, coord);
    });
    return;
  }
  FRUGAL_CHECK(model.table().shard().size == 1 && model.range() == BlockRange::whole(model.config()),
               "internal: a whole checkpoint is read into a part of the model");
  const io::SafeTensorsReader file = open_checkpoint_file(checkpoint_dir, "model.safetensors");
  for (const ParamInfo& e : model.table().entries()) {
    FRUGAL_CHECK(file.contains(e.name), "{} has no tensor '{}': the checkpoint is from a different "
                 "model shape; use a config matching the checkpoint's", path, e.name);
    const io::TensorData data = file.read(e.name);
    FRUGAL_CHECK(data.shape == e.shape,
                 "{}: tensor '{}' has shape [{}] but this model needs [{}]: the checkpoint is from a "
                 "different model shape; use the checkpoint's model settings",
                 path, e.name, fmt::join(data.shape, ", "), fmt::join(e.shape, ", "));
    const std::vector<float> v = data.to_f32(e.name);
    check_finite(checkpoint_dir, path, e.name, v);
    std::copy(v.begin(), v.end(), model.params() + e.offset);
  }
  FRUGAL_CHECK(file.size() == model.table().entries().size(),
               "{} has {} tensors but this model has {}: the checkpoint is from a different model "
               "shape; use the checkpoint's model settings", path, file.size(),
               model.table().entries().size());
}

TrainState read_checkpoint_state(const std::string& checkpoint_dir) {
  const std::string path = (fs::path(checkpoint_dir) / "train_state.safetensors").string();
  const io::SafeTensors st =
      read_checkpoint_file(checkpoint_dir, "train_state.safetensors", io::SafeTensorsPart::Metadata);
  auto it = st.metadata.find("state");
  FRUGAL_CHECK(it != st.metadata.end(), "{} has no training state; it cannot be resumed (use "
               "--init-from to start a new run from its weights)", path);
  nlohmann::json js = nlohmann::json::parse(it->second);
  TrainState s;
  s.step = js.at("step");
  s.optimizer_steps = js.at("optimizer_steps");
  s.loader_epoch = js.at("loader_epoch");
  s.loader_position = js.at("loader_position");
  s.flops = js.value("flops", 0.0);
  s.dense_flops = js.value("dense_flops", 0.0);
  s.wall_seconds = js.value("wall_seconds", 0.0);
  s.methods = js.value("methods", nlohmann::json::object());
  s.session = js.value("session", nlohmann::json());
  s.strategy = js.value("strategy", nlohmann::json());
  s.ranks = js.value("ranks", 1);
  s.optimizer_shards = js.value("optimizer_shards", 0);
  // Checkpoints written before the list existed have none: a missing file reads as no tensors.
  const std::vector<std::string> listed = js.value("method_tensors", std::vector<std::string>{});
  const std::string methods_path = (fs::path(checkpoint_dir) / kMethodTensorsFile).string();
  FRUGAL_CHECK(listed.empty() || fs::exists(methods_path), "{} is missing: the checkpoint keeps "
               "methods' state in it ({}); copy the file back into the checkpoint directory, or {}",
               methods_path, fmt::join(listed, ", "), earlier_checkpoint_advice(checkpoint_dir));
  if (fs::exists(methods_path)) {
    const io::SafeTensors file = read_checkpoint_file(checkpoint_dir, kMethodTensorsFile);
    for (const std::string& name : listed)
      FRUGAL_CHECK(file.tensors.count(name), "{} has no tensor '{}' though the checkpoint's state "
                   "lists it: the file is damaged; {}", methods_path, name,
                   earlier_checkpoint_advice(checkpoint_dir));
    for (const auto& [name, tensor] : file.tensors) {
      std::vector<float> values = tensor.to_f32(name);
      check_finite(checkpoint_dir, methods_path, name, values);
      s.loaded_method_tensors.emplace(name, std::move(values));
    }
  }
  return s;
}

TrainState load_checkpoint_state(const std::string& checkpoint_dir, AdamW& optim) {
  const std::string path = (fs::path(checkpoint_dir) / "train_state.safetensors").string();
  TrainState s = read_checkpoint_state(checkpoint_dir);
  // The moments of optim's shard, from the full tensors or from the shards of the world size
  // that wrote them (any world size: each shard file gives its range of the flat buffer).
  const size_t begin = optim.shard_begin(), end = optim.shard_end();
  size_t covered = 0;
  auto take = [&](const io::SafeTensorsReader& file, const std::string& file_path, size_t file_begin,
                  size_t file_end) {
    const size_t lo = std::max(begin, file_begin), hi = std::min(end, file_end);
    if (lo >= hi) return;
    for (auto [name, dst] : {std::pair{"adamw.m", optim.m()}, std::pair{"adamw.v", optim.v()}}) {
      FRUGAL_CHECK(file.contains(name), "{} has no optimizer moments '{}'; it cannot be "
                   "resumed (use --init-from to start a new run from its weights)", file_path, name);
      const std::vector<float> v = file.read(name).to_f32(name);
      FRUGAL_CHECK(v.size() == file_end - file_begin, "{}: optimizer state '{}' has {} values "
                   "where {} were expected; the file is damaged", file_path, name, v.size(),
                   file_end - file_begin);
      check_finite(checkpoint_dir, file_path, name, v);
      std::copy(v.begin() + (lo - file_begin), v.begin() + (hi - file_begin), dst + (lo - begin));
    }
    covered += hi - lo;
  };
  const size_t model_total = optim.model_floats();
  if (const nlohmann::json manifest = part_manifest_of(checkpoint_dir); !manifest.is_null()) {
    // Each tensor's parts into the moments of this process's range; the few tensors the range
    // cuts through are assembled whole first.
    const bool part = optim.table().shard().size > 1;  // a rank's part: its own slices as they are
    FRUGAL_CHECK(!part || !optim.sharded(), "internal: a part's moments sharded over replicas read from a checkpoint");
    for (size_t which = 0; which < 2; ++which) {
      float* dst = which == 0 ? optim.m() : optim.v();
      std::map<std::string, std::vector<float>> cut;  // tensors crossing the range's ends
      read_parts(checkpoint_dir, manifest, optim.table(), kMomentPrefixes[which],
                 [&](const ParamInfo& e, std::span<const float> values, const ShardCoord& coord) {
                   if (part) return std::ranges::copy(values, dst + (e.offset - begin)), void();
                   const size_t lo = e.offset, hi = e.offset + e.numel;
                   if (hi <= begin || lo >= end) return;
                   if (lo >= begin && hi <= end) return e.copy_global(values.data(), dst + (lo - begin), coord);
                   std::vector<float>& whole = cut[e.name];
                   whole.resize(e.numel);
                   e.copy_global(values.data(), whole.data(), coord);
                 });
      for (const auto& [name, whole] : cut) {
        const size_t offset = optim.table().at(name).offset;
        const size_t lo = std::max(begin, offset), hi = std::min(end, offset + whole.size());
        std::copy(whole.begin() + (lo - offset), whole.begin() + (hi - offset), dst + (lo - begin));
      }
    }
    covered = end - begin;
  } else if (s.optimizer_shards == 0) {
    const io::SafeTensorsReader st = open_checkpoint_file(checkpoint_dir, "train_state.safetensors");
    const size_t n = st.contains("adamw.m") ? st.numel("adamw.m") : model_total;
    FRUGAL_CHECK(n == model_total, "{}: optimizer state 'adamw.m' has {} values but this model "
                 "needs {}; the checkpoint is from a different model shape", path, n, model_total);
    take(st, path, 0, model_total);
  } else {
    const int shards = s.optimizer_shards;
    for (int r = 0; r < shards; ++r) {
      const std::string file_path = (fs::path(checkpoint_dir) / shard_file_name(r)).string();
      FRUGAL_CHECK(fs::exists(file_path), "{} is missing: the checkpoint was written by {} "
                   "processes with a sharded optimizer and needs every shard; {}", file_path,
                   shards, earlier_checkpoint_advice(checkpoint_dir));
      const io::SafeTensorsReader file = open_checkpoint_file(checkpoint_dir, shard_file_name(r));
      FRUGAL_CHECK(file.metadata().count("shard"), "{} has no shard range in its metadata: the file is damaged; {}",
                   file_path, earlier_checkpoint_advice(checkpoint_dir));
      const nlohmann::json range = nlohmann::json::parse(file.metadata().at("shard"));
      FRUGAL_CHECK(range.at("total").get<size_t>() == model_total, "{}: the optimizer shard is of "
                   "a model of {} parameters but this model has {}; the checkpoint is from a "
                   "different model shape", file_path, range.at("total").get<size_t>(), model_total);
      take(file, file_path, range.at("begin").get<size_t>(), range.at("end").get<size_t>());
    }
  }
  FRUGAL_CHECK(covered == end - begin, "{}: the optimizer shards cover {} of the {} moments this "
               "process needs; the checkpoint is damaged: {}", checkpoint_dir, covered, end - begin,
               earlier_checkpoint_advice(checkpoint_dir));
  optim.set_steps_taken(s.optimizer_steps);
  return s;
}

ModelConfig checkpoint_model_config(const std::string& checkpoint_dir) {
  const std::string path = (fs::path(checkpoint_dir) / "model.safetensors").string();
  io::SafeTensors st =
      read_checkpoint_file(checkpoint_dir, "model.safetensors", io::SafeTensorsPart::Metadata);
  const auto it = st.metadata.find("model");
  if (it == st.metadata.end())  // written before the model's shape was stored: the config's
    return run_settings(checkpoint_config(checkpoint_dir, run_schema())).model;
  const nlohmann::json j = nlohmann::json::parse(it->second, nullptr, false);
  try {
    FRUGAL_CHECK(!j.is_discarded(), "not JSON");
    return model_config_from_json(j);
  } catch (const std::exception& e) {
    fail("{}: the stored model shape is unreadable ({}): the file is damaged; {}", path, e.what(),
         earlier_checkpoint_advice(checkpoint_dir));
  }
}

int checkpoint_ranks(const std::string& checkpoint_dir) {
  const io::SafeTensors st =
      read_checkpoint_file(checkpoint_dir, "train_state.safetensors", io::SafeTensorsPart::Metadata);
  const auto it = st.metadata.find("state");
  if (it == st.metadata.end()) return 1;
  const nlohmann::json js = nlohmann::json::parse(it->second, nullptr, false);
  return js.is_object() ? js.value("ranks", 1) : 1;
}

CheckpointModel load_checkpoint_model(const std::string& checkpoint_dir) {
  const io::Config config = checkpoint_config(checkpoint_dir, run_schema());
  const TrainSettings train = run_settings(config).train;
  SessionOptions options;
  options.model = checkpoint_model_config(checkpoint_dir);
  options.linear_dtype = linear_dtype(train);  // a bf16 run's function has its GEMMs on rounded operands
  options.weight_rounding = weight_rounding(train);
  CheckpointModel out{std::make_unique<Session>(options), {}};
  MethodSet methods = MethodSet::from_config(config);
  if (methods.empty()) {
    load_checkpoint_params(checkpoint_dir, out.model());
    return out;
  }
  // As a resume restores them (Init, the weights, the saved state), then the trained function.
  TrainState state = read_checkpoint_state(checkpoint_dir);
  TrainContext ctx = run_context(*out.session, train, state.step);
  methods.fire(Event::Init, ctx);
  load_checkpoint_params(checkpoint_dir, out.model());
  methods.load_state_tensors(std::move(state.loaded_method_tensors));
  methods.load_state(state.methods, checkpoint_dir);  // the checkpoint's own methods: none is added
  out.notes = methods.restore_trained_function(ctx);
  out.model().write_effective_weights();
  return out;
}

std::vector<std::string> init_from_checkpoint(const std::string& checkpoint_dir, GPT& model) {
  const CheckpointModel from = load_checkpoint_model(checkpoint_dir);
  const std::vector<ParamInfo>&have = from->table().entries(), &need = model.table().entries();
  for (size_t i = 0; i < need.size(); ++i) {
    const std::string have_shape = i < have.size() ? fmt::format("[{}]", fmt::join(have[i].shape, ", ")) : "none";
    FRUGAL_CHECK(i < have.size() && have[i].name == need[i].name && have[i].shape == need[i].shape,
                 "{}: the checkpoint is from a different model shape ({} layers, {} heads, n_embd {}): "
                 "this model's tensor '{}' [{}] is {} there; use the checkpoint's model settings",
                 checkpoint_dir, from->config().n_layer, from->config().n_head, from->config().n_embd,
                 need[i].name, fmt::join(need[i].shape, ", "),
                 i < have.size() && have[i].name == need[i].name ? have_shape : "missing");
  }
  FRUGAL_CHECK(have.size() == need.size(), "{}: the checkpoint has {} tensors but this model has {}: "
               "the checkpoint is from a different model shape; use the checkpoint's model settings",
               checkpoint_dir, have.size(), need.size());
  std::copy(from->params(), from->params() + model.num_floats(), model.params());
  return from.notes;
}

std::unique_ptr<data::Tokenizer> load_checkpoint_tokenizer(const std::string& checkpoint_dir) {
  return data::load_tokenizer_json(data::tokenizer_file(checkpoint_dir));
}

void check_data_tokenizer(const std::string& checkpoint_dir, const data::Tokenizer& data_tokenizer,
                          const std::string& data_dir) {
  const std::string difference = data::vocabulary_difference(
      data_tokenizer, "the data's", *load_checkpoint_tokenizer(checkpoint_dir), "the checkpoint's");
  FRUGAL_CHECK(difference.empty(), "the data in {} was prepared with another tokenizer than "
               "checkpoint {} ({}): the model's token ids would mean other text; use data "
               "prepared with the checkpoint's tokenizer (frugal prepare --tokenizer {} ...)",
               data_dir, checkpoint_dir, difference, data::tokenizer_file(checkpoint_dir));
}

}  // namespace frugal
