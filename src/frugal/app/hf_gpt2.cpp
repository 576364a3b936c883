// Hugging Face GPT-2 export and import; see hf_gpt2.h.
#include "frugal/app/hf_gpt2.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "frugal/app/hf_shared.h"
#include "frugal/core/error.h"
#include "frugal/io/atomic_file.h"
#include "frugal/io/config.h"
#include "frugal/io/safetensors.h"

namespace frugal::io {

using nlohmann::json;

namespace {

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

}  // namespace

void check_hf_gpt2_exportable(const ModelConfig& c) {
  FRUGAL_CHECK(!c.encoder(),
               "model.objective = \"mlm\" cannot be exported in the Hugging Face GPT-2 format: "
               "GPT2LMHeadModel is a causal decoder; an encoder exports as BertForMaskedLM (hf_bert.h)");
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
      {"torch_dtype", hf_torch_dtype(dtype)},
  };
  if (eos_token_id >= 0) cfg["bos_token_id"] = cfg["eos_token_id"] = eos_token_id;
  write_file_atomic(out_dir + "/config.json", cfg.dump(2) + "\n");

  SafeTensors st;
  std::vector<float> scratch;
  for (const HfTensor& t : hf_layout(model)) {
    const float* src = model.params() + t.param->offset;
    if (t.conv1d) {
      scratch.resize(t.param->numel);
      transpose(src, t.param->shape[0], t.param->shape[1], scratch.data());
      src = scratch.data();
    }
    put_hf_tensor(st, t.param->name, t.shape, src, dtype);  // vocabulary tensors: the first V rows
  }
  write_hf_weights(out_dir, st);
}

ModelConfig read_hf_gpt2_config(const std::string& path) {
  const json j = read_hf_config_json(path);
  const HfConfigReader r(j, path, "GPT-2", "GPT2Config");
  r.expect_model_type("gpt2", "gpt2");
  r.expect_tanh_gelu("activation_function", "gelu_new");
  r.expect_bool("scale_attn_weights", true, "frugal always scales attention scores by 1/sqrt(head size)");
  r.expect_bool("scale_attn_by_inverse_layer_idx", false, "frugal has no per-layer attention scaling");
  r.expect_bool("add_cross_attention", false, "frugal has no cross-attention");

  ModelConfig m;
  m.vocab_size = r.count("vocab_size");
  const int64_t n_ctx = r.integer("n_ctx", std::optional<int64_t>(1024));
  m.block_size = r.count("n_positions", n_ctx);
  m.n_layer = r.count("n_layer");
  m.n_head = r.count("n_head");
  m.n_embd = r.count("n_embd");
  m.ffn_mult = r.ffn_mult("n_inner", int64_t(4) * m.n_embd, "n_embd", m.n_embd);
  m.mlp = MlpKind::Gelu;
  m.bias = true;
  m.tied_head = r.boolean("tie_word_embeddings", true);
  m.dropout = 0.0f;  // inference default; a fine-tuning run config sets its own
  m.layernorm_eps = static_cast<float>(r.number("layer_norm_epsilon", 1e-5));
  m.init_std = static_cast<float>(r.number("initializer_range", 0.02));
  r.validate(m);
  return m;
}

std::unique_ptr<GPT> read_hf_gpt2(const std::string& hf_dir) {
  const ModelConfig config = read_hf_gpt2_config(hf_dir + "/config.json");
  const std::string st_path = hf_dir + "/model.safetensors";
  const SafeTensors st = read_hf_weights(hf_dir);
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
    const std::vector<float> values = read_hf_tensor(st, st_path, *found, t.shape);
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

}  // namespace frugal::io
