// Hugging Face BERT (BertForMaskedLM) export and import; see hf_bert.h.
#include "frugal/app/hf_bert.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "frugal/app/hf_shared.h"
#include "frugal/core/error.h"
#include "frugal/io/atomic_file.h"
#include "frugal/io/config.h"

namespace frugal::io {

using nlohmann::json;

namespace {

constexpr const char* kPrefix = "bert.";  // BertForMaskedLM's encoder; BertModel's names lack it
constexpr const char* kTokenTypes = "bert.embeddings.token_type_embeddings.weight";
constexpr const char* kDecoderWeight = "cls.predictions.decoder.weight";  // tied: the word embeddings
constexpr const char* kDecoderBias = "cls.predictions.decoder.bias";      // tied: cls.predictions.bias
constexpr const char* kWordEmbeddings = "bert.embeddings.word_embeddings.weight";
constexpr const char* kOutputBias = "cls.predictions.bias";

// One BERT tensor: rows [first_row, first_row + shape[0]) of a frugal tensor (elements, when 1-D).
struct BertTensor {
  std::string hf, frugal;
  int64_t first_row;
  std::vector<int64_t> shape;  // in the BERT file
};

// Every BERT tensor of an encoder of config `c` but the token-type embeddings (frugal has none), in
// the order the file lists them.
std::vector<BertTensor> bert_layout(const ModelConfig& c) {
  const int64_t V = c.vocab_size, T = c.block_size, C = c.n_embd, H = c.ffn_hidden();
  std::vector<BertTensor> out;
  const auto add = [&](std::string hf, std::string frugal, std::vector<int64_t> shape, int64_t first_row = 0) {
    out.push_back({std::move(hf), std::move(frugal), first_row, std::move(shape)});
  };
  const auto linear = [&](const std::string& hf, const std::string& frugal, int64_t oc, int64_t ic,
                          int64_t first_row = 0) {
    add(hf + ".weight", frugal + ".weight", {oc, ic}, first_row);
    add(hf + ".bias", frugal + ".bias", {oc}, first_row);
  };
  const auto norm = [&](const std::string& hf, const std::string& frugal) {
    add(hf + ".weight", frugal + ".weight", {C});
    add(hf + ".bias", frugal + ".bias", {C});
  };
  add(kWordEmbeddings, "transformer.wte.weight", {V, C});  // the real rows, not the padding
  add("bert.embeddings.position_embeddings.weight", "transformer.wpe.weight", {T, C});
  norm("bert.embeddings.LayerNorm", "transformer.ln_emb");
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string b = fmt::format("bert.encoder.layer.{}.", l), f = fmt::format("transformer.h.{}.", l);
    const char* parts[] = {"query", "key", "value"};  // c_attn's rows [0, C), [C, 2C), [2C, 3C)
    for (int i = 0; i < 3; ++i) linear(b + "attention.self." + parts[i], f + "attn.c_attn", C, C, i * C);
    linear(b + "attention.output.dense", f + "attn.c_proj", C, C);
    norm(b + "attention.output.LayerNorm", f + "ln_1");
    linear(b + "intermediate.dense", f + "mlp.c_fc", H, C);
    linear(b + "output.dense", f + "mlp.c_proj", C, H);
    norm(b + "output.LayerNorm", f + "ln_2");
  }
  linear("cls.predictions.transform.dense", "lm_head.dense", C, C);
  norm("cls.predictions.transform.LayerNorm", "lm_head.layer_norm");
  add(kOutputBias, "lm_head.bias", {V});
  return out;
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Where BERT tensor t starts in the model's parameters.
size_t slice_offset(const GPT& model, const BertTensor& t) {
  return model.table().at(t.frugal).offset + size_t(t.first_row * (numel_of(t.shape) / t.shape[0]));
}

// Throws unless the layout holds every real element of every tensor of the model, once: a tensor
// frugal adds that BERT has no place for must not be dropped silently.
void check_covers(const GPT& model, const std::vector<BertTensor>& layout) {
  std::map<std::string, int64_t> covered;
  for (const BertTensor& t : layout) covered[t.frugal] += numel_of(t.shape);
  FRUGAL_CHECK(covered.size() == model.table().entries().size(), "internal: the BERT layout names {} tensors, "
               "the model has {}", covered.size(), model.table().entries().size());
  for (const ParamInfo& p : model.table().entries()) {
    const int64_t used = p.used_rows >= 0 ? p.used_rows * int64_t(p.numel / p.shape[0]) : int64_t(p.numel);
    FRUGAL_CHECK(covered.count(p.name) && covered[p.name] == used,
                 "internal: the BERT layout covers {} of the {} elements of '{}'", covered[p.name], used, p.name);
  }
}

std::string refusal(const std::string& setting, const char* why, const char* supported) {
  return fmt::format("{} cannot be exported in the Hugging Face BERT format: {}; only models with {} can "
                     "be exported", setting, why, supported);
}

struct BertConfigFile {
  ModelConfig model;
  int type_vocab_size;
};

BertConfigFile read_config(const std::string& path) {
  const json j = read_hf_config_json(path);
  const HfConfigReader r(j, path, "BERT", "BertConfig");
  r.expect_model_type("bert", "");
  r.expect_tanh_gelu("hidden_act", "gelu");  // BertConfig's default is the erf GELU
  const std::string position = r.string("position_embedding_type", "absolute");
  FRUGAL_CHECK(position == "absolute", "{}: position_embedding_type \"{}\" is not supported; frugal learns "
               "absolute positions only (\"absolute\")", path, position);
  r.expect_bool("is_decoder", false, "frugal's encoder attends in both directions");
  r.expect_bool("add_cross_attention", false, "frugal has no cross-attention");
  r.expect_bool("tie_word_embeddings", true, "frugal's masked-LM decoder is tied to the word embeddings");

  BertConfigFile out;
  ModelConfig& m = out.model;
  m.objective = ObjectiveKind::Mlm;
  m.norm = NormPlacement::Post;
  m.mlp = MlpKind::Gelu;
  m.bias = true;
  m.tied_head = true;
  m.vocab_size = r.count("vocab_size");
  m.block_size = r.count("max_position_embeddings", 512);
  m.n_layer = r.count("num_hidden_layers");
  m.n_head = r.count("num_attention_heads");
  m.n_embd = r.count("hidden_size");
  m.ffn_mult = r.ffn_mult("intermediate_size", std::nullopt, "hidden_size", m.n_embd);
  out.type_vocab_size = r.count("type_vocab_size", 2);
  FRUGAL_CHECK(out.type_vocab_size >= 1, "{}: type_vocab_size = 0; BERT adds token-type row 0 to every "
               "position, so it needs at least one", path);
  m.dropout = 0.0f;  // inference default; a fine-tuning run config sets its own
  m.layernorm_eps = static_cast<float>(r.number("layer_norm_eps", 1e-12));
  m.init_std = static_cast<float>(r.number("initializer_range", 0.02));
  r.validate(m);
  return out;
}

// Names in a BERT file that are no part of the masked-LM function: the position-id buffer older
// transformers saved, BertForPreTraining's pooler and next-sentence head.
bool is_ignorable(const std::string& name) {
  std::string_view n = name;
  if (n.starts_with(kPrefix)) n.remove_prefix(std::string_view(kPrefix).size());
  return n == "embeddings.position_ids" || n.starts_with("pooler.") || n.starts_with("cls.seq_relationship.");
}

}  // namespace

void check_hf_bert_exportable(const ModelConfig& c) {
  FRUGAL_CHECK(c.encoder(), "{}", refusal("model.objective = \"causal\"", "BertForMaskedLM is a masked-LM "
               "encoder (a causal decoder exports as GPT2LMHeadModel)", "model.objective = \"mlm\""));
  FRUGAL_CHECK(c.norm == NormPlacement::Post, "{}", refusal("model.norm = \"pre\"", "BERT's blocks are post-LN "
               "(a LayerNorm after each residual sum)", "model.norm = \"post\""));
  FRUGAL_CHECK(c.moe.experts == 0, "{}", refusal(fmt::format("model.moe.experts = {}", c.moe.experts),
               "BertForMaskedLM has no mixture-of-experts MLP", "dense MLPs"));
  FRUGAL_CHECK(c.mlp == MlpKind::Gelu, "{}", refusal(fmt::format("model.mlp = \"{}\"", mlp_kind_name(c.mlp)),
               "BERT's MLP is GELU, ungated", "model.mlp = \"gelu\""));
  FRUGAL_CHECK(c.bias, "{}", refusal("model.bias = false", "BERT has biases in every linear and LayerNorm",
                                     "model.bias = true"));
  FRUGAL_CHECK(!c.rotary(), "{}", refusal("model.position = \"rotary\"", "BERT learns absolute positions",
                                          "model.position = \"learned\""));
  FRUGAL_CHECK(!c.qk_norm, "{}", refusal("model.qk_norm = true", "BERT's attention does not normalise its "
                                         "queries and keys", "model.qk_norm = false"));
  FRUGAL_CHECK(c.logit_softcap == 0, "{}", refusal(fmt::format("model.logit_softcap = {}", c.logit_softcap),
               "BertForMaskedLM's logits are not capped", "model.logit_softcap = 0"));
  FRUGAL_CHECK(c.tied_head, "{}", refusal("model.tied_head = false", "BERT's decoder is tied to the word "
                                          "embeddings", "model.tied_head = true"));
}

void export_hf_bert(const GPT& model, const std::string& out_dir, DType dtype) {
  const ModelConfig& c = model.config();
  check_hf_bert_exportable(c);
  const std::vector<BertTensor> layout = bert_layout(c);
  check_covers(model, layout);
  create_directories(out_dir, "the export directory");

  const json cfg = {
      {"model_type", "bert"},
      {"architectures", json::array({"BertForMaskedLM"})},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.n_embd},
      {"num_hidden_layers", c.n_layer},
      {"num_attention_heads", c.n_head},
      {"intermediate_size", c.ffn_hidden()},
      {"hidden_act", "gelu_new"},  // the tanh GELU, in the blocks and the head
      {"hidden_dropout_prob", decimal_value(c.dropout)},
      {"attention_probs_dropout_prob", 0.0},  // frugal drops out the residual branches only
      {"max_position_embeddings", c.block_size},
      {"type_vocab_size", 1},
      {"initializer_range", decimal_value(c.init_std)},
      {"layer_norm_eps", decimal_value(c.layernorm_eps)},
      {"position_embedding_type", "absolute"},
      {"is_decoder", false},
      {"add_cross_attention", false},
      {"tie_word_embeddings", true},
      {"pad_token_id", nullptr},  // no padding token: every row of the word embeddings trains
      {"torch_dtype", hf_torch_dtype(dtype)},
  };
  write_file_atomic(out_dir + "/config.json", cfg.dump(2) + "\n");

  SafeTensors st;
  for (const BertTensor& t : layout) put_hf_tensor(st, t.hf, t.shape, model.params() + slice_offset(model, t), dtype);
  const std::vector<float> no_token_type(size_t(c.n_embd), 0.0f);
  put_hf_tensor(st, kTokenTypes, {1, c.n_embd}, no_token_type.data(), dtype);
  write_hf_weights(out_dir, st);
}

ModelConfig read_hf_bert_config(const std::string& path) { return read_config(path).model; }

std::unique_ptr<GPT> read_hf_bert(const std::string& hf_dir) {
  const BertConfigFile file = read_config(hf_dir + "/config.json");
  const ModelConfig& c = file.model;
  const std::string st_path = hf_dir + "/model.safetensors";
  const SafeTensors st = read_hf_weights(hf_dir);
  auto model = std::make_unique<GPT>(c);
  std::fill(model->params(), model->params() + model->num_floats(), 0.0f);

  // The file's name of BERT tensor `name`: as BertForMaskedLM writes it or, for the encoder's,
  // without "bert." (BertModel); "" when neither is there.
  const auto file_name = [&](const std::string& name) -> std::string {
    if (st.tensors.count(name)) return name;
    if (name.starts_with(kPrefix) && st.tensors.count(name.substr(std::string_view(kPrefix).size())))
      return name.substr(std::string_view(kPrefix).size());
    return "";
  };
  std::set<std::string> used;
  const auto load = [&](const std::string& name, const std::vector<int64_t>& shape) {
    const std::string found = file_name(name);
    FRUGAL_CHECK(!found.empty(), "{}: tensor '{}' is missing; the file does not hold this BertForMaskedLM model{} "
                 "(save it again with save_pretrained)", st_path, name,
                 name.starts_with("cls.") ? " (a BertModel without the masked-LM head cannot be imported)" : "");
    used.insert(found);
    return read_hf_tensor(st, st_path, found, shape);
  };
  for (const BertTensor& t : bert_layout(c)) {
    const std::vector<float> values = load(t.hf, t.shape);
    std::copy(values.begin(), values.end(), model->params() + slice_offset(*model, t));
  }
  // BERT adds token-type row 0 to every position (token_type_ids default to 0): fold it into wpe.
  // Zeros (an export's row) are skipped: -0 + 0 would be +0, and a round trip is bit-exact.
  const int C = c.n_embd;
  const std::vector<float> types = load(kTokenTypes, {file.type_vocab_size, C});
  float* wpe = model->params() + model->table().at("transformer.wpe.weight").offset;
  for (int t = 0; t < c.block_size; ++t)
    for (int i = 0; i < C; ++i)
      if (types[i] != 0.0f) wpe[size_t(t) * C + i] += types[i];

  // A tied decoder some files keep: it must be what it is tied to.
  const auto expect_tied = [&](const char* name, const char* tied_to, const std::vector<int64_t>& shape) {
    if (!st.tensors.count(name)) return;
    FRUGAL_CHECK(load(name, shape) == load(tied_to, shape), "{}: tensor '{}' differs from '{}', which it is tied "
                 "to in frugal's masked-LM head; a model with an untied decoder cannot be imported", st_path,
                 name, tied_to);
  };
  expect_tied(kDecoderWeight, kWordEmbeddings, {c.vocab_size, C});
  expect_tied(kDecoderBias, kOutputBias, {c.vocab_size});
  for (const auto& [name, data] : st.tensors)
    FRUGAL_CHECK(used.count(name) || is_ignorable(name), "{}: tensor '{}' has no place in a BertForMaskedLM "
                 "model of this config.json; only BertForMaskedLM / BertForPreTraining weights can be imported",
                 st_path, name);
  return model;
}

}  // namespace frugal::io
