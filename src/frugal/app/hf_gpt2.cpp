// Hugging Face GPT-2 export and import; see hf_gpt2.h.
#include "frugal/app/hf_gpt2.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "frugal/core/error.h"
#include "frugal/data/byte_level.h"
#include "frugal/data/text.h"
#include "frugal/io/atomic_file.h"
#include "frugal/io/dir_lock.h"
#include "frugal/kernels/ops.h"
#include "frugal/io/safetensors.h"
#include "frugal/train/checkpoint.h"
#include "frugal/train/run_config.h"

namespace frugal::io {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kGpt2VocabSize = 50257;  // GPT-2's BPE vocabulary, <|endoftext|> included

// One parameter as GPT-2 stores it.
struct HfTensor {
  const ParamInfo* param;
  std::vector<int64_t> shape;  // in the GPT-2 file
  bool conv1d;                 // stored (IC, OC): the transpose of frugal's (OC, IC)
};

// Every parameter of `model` with its GPT-2 shape, as its spec declares: only the used (not
// padded) vocabulary rows, Conv1D linears transposed.
std::vector<HfTensor> hf_layout(const GPT& model) {
  std::vector<HfTensor> out;
  for (const ParamInfo& p : model.table().entries()) {
    if (p.used_rows >= 0) {
      out.push_back({&p, {p.used_rows, p.shape[1]}, false});
    } else if (p.hf_conv1d) {
      out.push_back({&p, {p.shape[1], p.shape[0]}, true});
    } else {
      out.push_back({&p, p.shape, false});
    }
  }
  return out;
}

// src (rows, cols) -> dst (cols, rows)
void transpose(const float* src, int64_t rows, int64_t cols, float* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
}

std::string shape_str(const std::vector<int64_t>& shape) { return fmt::format("({})", fmt::join(shape, ", ")); }

// Typed access to config.json keys; errors name the file and key.
class ConfigReader {
 public:
  ConfigReader(const json& j, std::string path) : j_(j), path_(std::move(path)) {}

  const json* find(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  int64_t integer(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    const json* v = find(key);
    if (!v) return require(key, fallback);
    FRUGAL_CHECK(v->is_number_integer(), "{}: \"{}\" is {}, expected an integer; fix the file",
                 path_, key, v->dump());
    return v->get<int64_t>();
  }
  double number(const char* key, double fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    FRUGAL_CHECK(v->is_number(), "{}: \"{}\" is {}, expected a number; fix the file", path_, key, v->dump());
    return v->get<double>();
  }
  bool boolean(const char* key, bool fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    FRUGAL_CHECK(v->is_boolean(), "{}: \"{}\" is {}, expected true or false; fix the file", path_,
                 key, v->dump());
    return v->get<bool>();
  }
  std::string string(const char* key, const std::string& fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    FRUGAL_CHECK(v->is_string(), "{}: \"{}\" is {}, expected a string; fix the file", path_, key, v->dump());
    return v->get<std::string>();
  }
  // Throws unless `key` is absent or has the value frugal's GPT-2 computes.
  void expect_bool(const char* key, bool supported, const char* why) const {
    FRUGAL_CHECK(boolean(key, supported) == supported,
                 "{}: \"{}\" = {} is not supported: {}; only GPT-2 models with \"{}\" = {} can be imported",
                 path_, key, !supported, why, key, supported);
  }

 private:
  int64_t require(const char* key, std::optional<int64_t> fallback) const {
    FRUGAL_CHECK(fallback.has_value(), "{}: \"{}\" is missing; a GPT-2 config.json needs it (write it "
                 "with transformers' GPT2Config.save_pretrained)", path_, key);
    return *fallback;
  }
  const json& j_;
  std::string path_;
};

int to_int(int64_t v, const char* key, const std::string& path) {
  FRUGAL_CHECK(v >= 0 && v <= (int64_t(1) << 30), "{}: \"{}\" = {} is out of range; fix the file", path, key, v);
  return static_cast<int>(v);
}

// Where a frugal parameter is in a GPT-2 file: under its own name (GPT2LMHeadModel) or without
// the "transformer." prefix (GPT2Model, e.g. the original gpt2 checkpoint). nullptr if neither.
const std::string* find_hf_name(const SafeTensors& st, const std::string& name,
                                std::string* unprefixed) {
  if (st.tensors.count(name)) return &name;
  constexpr std::string_view prefix = "transformer.";
  if (!name.starts_with(prefix)) return nullptr;
  *unprefixed = name.substr(prefix.size());
  return st.tensors.count(*unprefixed) ? unprefixed : nullptr;
}

// Tensors GPT-2 files may hold that are not parameters: the attention mask buffers.
bool is_ignorable(const std::string& name) {
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
}

void set_model_keys(Config& config, const ModelConfig& m) {
  config.set("model.vocab_size", std::to_string(m.vocab_size));
  config.set("model.block_size", std::to_string(m.block_size));
  config.set("model.n_layer", std::to_string(m.n_layer));
  config.set("model.n_head", std::to_string(m.n_head));
  config.set("model.n_embd", std::to_string(m.n_embd));
  config.set("model.ffn_mult", std::to_string(m.ffn_mult));
  config.set("model.mlp", mlp_kind_name(m.mlp));
  config.set("model.tied_head", m.tied_head ? "true" : "false");
  config.set("model.bias", m.bias ? "true" : "false");
  config.set("model.dropout", fmt::format("{}", m.dropout));
  config.set("model.layernorm_eps", fmt::format("{}", m.layernorm_eps));
  config.set("model.init_std", fmt::format("{}", m.init_std));
}

}  // namespace

void check_hf_gpt2_exportable(const ModelConfig& c) {
  FRUGAL_CHECK(c.moe.experts == 0,
               "model.moe.experts = {} cannot be exported in the Hugging Face GPT-2 format: "
               "GPT2LMHeadModel has no mixture-of-experts MLP; only dense models can be exported",
               c.moe.experts);
  FRUGAL_CHECK(c.mlp == MlpKind::Gelu,
               "model.mlp = \"{}\" cannot be exported in the Hugging Face GPT-2 format: "
               "GPT2LMHeadModel's MLP is GELU, ungated; only models with model.mlp = \"gelu\" can be exported",
               mlp_kind_name(c.mlp));
  FRUGAL_CHECK(c.norm == NormPlacement::Pre,
               "model.norm = \"post\" cannot be exported in the Hugging Face GPT-2 format: "
               "GPT2LMHeadModel's blocks are pre-LN; only models with model.norm = \"pre\" can be exported");
  FRUGAL_CHECK(c.bias,
               "model.bias = false cannot be exported in the Hugging Face GPT-2 format: "
               "GPT2LMHeadModel has biases in every linear and LayerNorm; only models trained "
               "with model.bias = true can be exported");
  FRUGAL_CHECK(!c.rotary(),
               "model.position = \"rotary\" cannot be exported in the Hugging Face GPT-2 format: "
               "GPT2LMHeadModel learns its positions (wpe); only models with model.position = \"learned\" "
               "can be exported");
  FRUGAL_CHECK(!c.qk_norm,
               "model.qk_norm = true cannot be exported in the Hugging Face GPT-2 format: GPT-2's attention "
               "does not normalise its queries and keys; only models trained without it can be exported");
  FRUGAL_CHECK(c.logit_softcap == 0,
               "model.logit_softcap = {} cannot be exported in the Hugging Face GPT-2 format: "
               "GPT2LMHeadModel's logits are not capped; only models with model.logit_softcap = 0 can be "
               "exported", c.logit_softcap);
}

std::string hf_gpt2_inexpressible(const GPT& model) {
  const int T = model.config().block_size;
  const int64_t causal_pairs = kernels::AttentionPattern::causal().pairs(T);
  std::vector<std::pair<std::string, std::vector<int>>> blocks_by_pattern;
  for (int l = 0; l < model.config().n_layer; ++l) {
    const kernels::AttentionPattern& p = model.attention_pattern(l);
    if (p.pairs(T) == causal_pairs) continue;  // every earlier position within the context
    auto it = std::find_if(blocks_by_pattern.begin(), blocks_by_pattern.end(),
                           [&](const auto& g) { return g.first == p.name(); });
    if (it == blocks_by_pattern.end()) it = blocks_by_pattern.insert(it, {p.name(), {}});
    it->second.push_back(l);
  }
  std::vector<std::string> parts;
  for (const auto& [name, blocks] : blocks_by_pattern)
    parts.push_back(fmt::format("block{} {} attend{} with {}", blocks.size() > 1 ? "s" : "",
                                fmt::join(blocks, ", "), blocks.size() > 1 ? "" : "s", name));
  return fmt::format("{}", fmt::join(parts, "; "));
}

void export_hf_gpt2(const GPT& model, const std::string& out_dir, int eos_token_id,
                    bool allow_causal_attention, DType dtype) {
  FRUGAL_CHECK(dtype == DType::F32 || dtype == DType::BF16, "internal: an export in {}", dtype_name(dtype));
  const ModelConfig& c = model.config();
  check_hf_gpt2_exportable(c);
  const std::string inexpressible = hf_gpt2_inexpressible(model);
  FRUGAL_CHECK(inexpressible.empty() || allow_causal_attention, "{}, which the Hugging Face GPT-2 "
               "format cannot express (GPT2LMHeadModel attends to every earlier position), so the "
               "export would compute another function; pass --allow-lossy to export it anyway "
               "with dense causal attention", inexpressible);
  create_directories(out_dir, "the export directory");

  json cfg = {
      {"model_type", "gpt2"},
      {"architectures", json::array({"GPT2LMHeadModel"})},
      {"vocab_size", c.vocab_size},
      {"n_positions", c.block_size},
      {"n_ctx", c.block_size},
      {"n_embd", c.n_embd},
      {"n_layer", c.n_layer},
      {"n_head", c.n_head},
      {"n_inner", c.ffn_hidden()},
      {"activation_function", "gelu_new"},
      {"layer_norm_epsilon", decimal_value(c.layernorm_eps)},
      {"initializer_range", decimal_value(c.init_std)},
      {"resid_pdrop", 0.0},
      {"embd_pdrop", 0.0},
      {"attn_pdrop", 0.0},
      {"scale_attn_weights", true},
      {"scale_attn_by_inverse_layer_idx", false},
      {"reorder_and_upcast_attn", false},
      {"tie_word_embeddings", c.tied_head},
      {"use_cache", true},
      {"torch_dtype", dtype == DType::BF16 ? "bfloat16" : "float32"},
  };
  if (eos_token_id >= 0) cfg["bos_token_id"] = cfg["eos_token_id"] = eos_token_id;
  write_file_atomic(out_dir + "/config.json", cfg.dump(2) + "\n");

  SafeTensors st;
  st.metadata["format"] = "pt";  // transformers refuses safetensors files without it
  std::vector<float> scratch;
  std::vector<kernels::bf16> rounded;
  for (const HfTensor& t : hf_layout(model)) {
    const float* src = model.params() + t.param->offset;
    if (t.conv1d) {
      scratch.resize(t.param->numel);
      transpose(src, t.param->shape[0], t.param->shape[1], scratch.data());
      src = scratch.data();
    }
    // vocabulary tensors: the first V rows
    if (dtype == DType::F32) {
      st.put_f32(t.param->name, t.shape, src);
      continue;
    }
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    rounded.resize(static_cast<size_t>(numel));
    kernels::f32_to_bf16(rounded.data(), src, rounded.size());
    st.put(t.param->name, DType::BF16, t.shape, rounded.data());
  }
  write_safetensors(out_dir + "/model.safetensors", st);
}

bool export_hf_tokenizer(const data::Tokenizer& tokenizer, int model_max_length,
                         const std::string& out_dir) {
  create_directories(out_dir, "the export directory");
  write_file_atomic((fs::path(out_dir) / data::kTokenizerFile).string(), tokenizer.to_json());
  const data::BpeModel* bpe = tokenizer.bpe_model();
  if (!bpe) return false;
  // vocab.json + merges.txt (GPT2Tokenizer) and tokenizer.json (the fast tokenizer).
  data::write_bpe_files(*bpe, out_dir);
  const std::string eot(data::kEndOfText);
  const json tok_cfg = {{"tokenizer_class", "GPT2Tokenizer"}, {"model_max_length", model_max_length},
                        {"bos_token", eot}, {"eos_token", eot}, {"unk_token", eot},
                        {"add_prefix_space", false}};
  write_file_atomic(out_dir + "/tokenizer_config.json", tok_cfg.dump(2) + "\n");
  return true;
}

ModelConfig read_hf_gpt2_config(const std::string& path) {
  FRUGAL_CHECK(fs::exists(path), "'{}' is missing; a Hugging Face model directory needs config.json "
               "(save the model with save_pretrained or `frugal export --format hf`)", path);
  json j;
  try {
    j = json::parse(data::read_text_file(path));
  } catch (const json::exception& e) {
    fail("'{}' is not valid JSON ({}); fix it or save the model again with save_pretrained", path, e.what());
  }
  FRUGAL_CHECK(j.is_object(), "'{}' is not a JSON object; it is not a transformers config.json", path);
  const ConfigReader r(j, path);
  const std::string type = r.string("model_type", "gpt2");
  FRUGAL_CHECK(type == "gpt2", "{}: model_type \"{}\" is not supported; only GPT-2 models (model_type "
               "\"gpt2\") can be imported", path, type);
  const std::string act = r.string("activation_function", "gelu_new");
  FRUGAL_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh",
               "{}: activation_function \"{}\" is not supported; frugal's MLP uses the tanh GELU "
               "(\"gelu_new\" or \"gelu_pytorch_tanh\")", path, act);
  r.expect_bool("scale_attn_weights", true, "frugal always scales attention scores by 1/sqrt(head size)");
  r.expect_bool("scale_attn_by_inverse_layer_idx", false, "frugal has no per-layer attention scaling");
  r.expect_bool("add_cross_attention", false, "frugal has no cross-attention");

  ModelConfig m;
  m.vocab_size = to_int(r.integer("vocab_size"), "vocab_size", path);
  const int64_t n_ctx = r.integer("n_ctx", std::optional<int64_t>(1024));
  m.block_size = to_int(r.integer("n_positions", n_ctx), "n_positions", path);
  m.n_layer = to_int(r.integer("n_layer"), "n_layer", path);
  m.n_head = to_int(r.integer("n_head"), "n_head", path);
  m.n_embd = to_int(r.integer("n_embd"), "n_embd", path);
  const int hidden = to_int(r.integer("n_inner", int64_t(4) * m.n_embd), "n_inner", path);
  FRUGAL_CHECK(m.n_embd > 0 && hidden % m.n_embd == 0,
               "{}: n_inner = {} is not a multiple of n_embd = {}; frugal's MLP width is "
               "ffn_mult * n_embd", path, hidden, m.n_embd);
  m.ffn_mult = m.n_embd > 0 ? hidden / m.n_embd : 0;
  m.mlp = MlpKind::Gelu;
  m.bias = true;
  m.tied_head = r.boolean("tie_word_embeddings", true);
  m.dropout = 0.0f;  // inference default; a fine-tuning run config sets its own
  m.layernorm_eps = static_cast<float>(r.number("layer_norm_epsilon", 1e-5));
  m.init_std = static_cast<float>(r.number("initializer_range", 0.02));
  try {
    m.validate();
  } catch (const Error& e) {
    fail("{} describes a model frugal cannot hold: {}", path, e.what());
  }
  return m;
}

std::unique_ptr<GPT> read_hf_gpt2(const std::string& hf_dir) {
  const ModelConfig config = read_hf_gpt2_config(hf_dir + "/config.json");
  const std::string st_path = hf_dir + "/model.safetensors";
  if (!fs::exists(st_path)) {
    FRUGAL_CHECK(!fs::exists(hf_dir + "/model.safetensors.index.json"),
                 "'{}' is a sharded checkpoint, which frugal cannot import; save it as one file with "
                 "save_pretrained(dir, max_shard_size=\"100GB\")", hf_dir);
    fail("'{}' is missing; frugal imports safetensors weights only (save the model with "
         "save_pretrained(dir, safe_serialization=True))", st_path);
  }
  const SafeTensors st = read_safetensors(st_path);
  auto model = std::make_unique<GPT>(config);
  std::fill(model->params(), model->params() + model->num_floats(), 0.0f);

  std::set<std::string> used;
  for (const HfTensor& t : hf_layout(*model)) {
    const std::string& name = t.param->name;
    std::string unprefixed;
    const std::string* found = find_hf_name(st, name, &unprefixed);
    FRUGAL_CHECK(found, "{}: tensor '{}' is missing{}; the file does not hold this GPT-2 model "
                 "(save it again with save_pretrained)", st_path, name,
                 name == "lm_head.weight" ? " (config.json says tie_word_embeddings = false)" : "");
    const TensorData& data = st.tensors.at(*found);
    FRUGAL_CHECK(data.shape == t.shape, "{}: tensor '{}' has shape {}, but config.json implies {}; "
                 "the weights do not belong to this config.json", st_path, *found,
                 shape_str(data.shape), shape_str(t.shape));
    const std::vector<float> values = data.to_f32(*found);
    float* dst = model->params() + t.param->offset;
    if (t.conv1d) {
      transpose(values.data(), t.shape[0], t.shape[1], dst);
    } else {
      std::copy(values.begin(), values.end(), dst);  // vocabulary tensors: padding rows stay zero
    }
    used.insert(*found);
  }
  for (const auto& [name, data] : st.tensors) {
    // A tied model's lm_head.weight (some files keep it) is the token embedding again.
    const bool tied_copy = name == "lm_head.weight" && config.tied_head;
    FRUGAL_CHECK(used.count(name) || is_ignorable(name) || tied_copy,
                 "{}: tensor '{}' has no place in a GPT-2 model of this config.json; only "
                 "GPT2LMHeadModel / GPT2Model weights can be imported", st_path, name);
  }
  return model;
}

std::string import_hf_gpt2(const std::string& hf_dir, const std::string& out_dir,
                           const std::string& tokenizer_spec) {
  const DirLock lock = DirLock::exclusive(out_dir, "run directory",
                                         "wait for that process to end or import into another directory");
  FRUGAL_CHECK(!run_has_checkpoints(out_dir), "{} already holds checkpoints; `frugal import` "
               "writes a new run: give it an empty or new directory", out_dir);
  const std::unique_ptr<GPT> model = read_hf_gpt2(hf_dir);
  const ModelConfig& m = model->config();
  std::string spec = tokenizer_spec;
  // Only frugal's own file name: an HF directory's tokenizer.json is Hugging Face's format.
  const std::string frugal_tokenizer = (fs::path(hf_dir) / data::kTokenizerFile).string();
  if (spec.empty() && fs::exists(frugal_tokenizer)) spec = frugal_tokenizer;
  if (spec.empty()) {
    FRUGAL_CHECK(m.vocab_size == kGpt2VocabSize,
                 "cannot tell the tokenizer of '{}' (vocab_size {} is not GPT-2's {}); pass it "
                 "with --tokenizer SPEC (gpt2, gpt2:DIR or char:VOCAB_FILE)", hf_dir, m.vocab_size,
                 kGpt2VocabSize);
    spec = "gpt2";
  }
  const std::unique_ptr<data::Tokenizer> tokenizer = data::load_tokenizer(spec);
  FRUGAL_CHECK(tokenizer->vocab_size() <= m.vocab_size,
               "tokenizer '{}' has {} tokens but the model only {}; pass the tokenizer the model "
               "was trained with (--tokenizer SPEC)", spec, tokenizer->vocab_size(), m.vocab_size);

  Config config(run_schema());
  set_model_keys(config, m);
  config.set("train.out_dir", out_dir);
  return save_checkpoint(out_dir, config, *model, nullptr, TrainState{}, tokenizer->to_json(), 1);
}

}  // namespace frugal::io
