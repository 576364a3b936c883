// Hugging Face BERT (BertForMaskedLM) export/import of frugal's masked-LM encoder: transformers'
// own logits on a BertForMaskedLM it created and saved (a committed fixture, never skipped; the
// test shows it fails on a swapped query and key or unfolded token types); frugal's export loaded
// by transformers, with its tokenizer files and fill-mask (skipped without .venv-torch); bit-exact
// round trips; the names, layout and config written; files as transformers writes them
// (BertModel's un-prefixed names, BF16, a tied decoder present, pooler and position-id buffers);
// every refusal; the CLI.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "error_of.h"
#include "frugal/app/hf_bert.h"
#include "frugal/app/hf_gpt2.h"
#include "frugal/app/hf_model.h"
#include "frugal/data/text.h"
#include "frugal/io/safetensors.h"
#include "frugal/kernels/ref/bf16_ref.h"
#include "frugal/train/checkpoint.h"
#include "hf_testing.h"
#include "paths.h"
#include "run_cli.h"
#include "run_metrics.h"
#include "temp_dir.h"
#include "torch_python.h"
#include "train_data.h"

using namespace frugal;
using frugal::testing::contains;
using frugal::testing::error_of;
using frugal::testing::expect_same_params;
using frugal::testing::perturbed_model;
using frugal::testing::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kFixture = std::string(test_paths::test_data()) + "/fixtures/bert_mlm";

// A post-LN encoder: vocabulary 69 (a 68-token tokenizer and the mask), padded to 128 rows.
ModelConfig encoder_config() {
  ModelConfig c;
  c.objective = ObjectiveKind::Mlm;
  c.norm = NormPlacement::Post;
  c.vocab_size = 69;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.ffn_mult = 3;
  c.layernorm_eps = 1e-6f;
  c.init_std = 0.2f;  // attention far from uniform: a swapped query and key shows in the logits
  c.dropout = 0.1f;
  return c;
}

json read_json(const std::string& path) { return json::parse(data::read_text_file(path)); }
void write_json(const std::string& path, const json& j) { std::ofstream(path) << j.dump(); }

// A char tokenizer of exactly n characters saved under dir; returns it.
std::unique_ptr<data::Tokenizer> char_tokenizer(const TempDir& dir, int n) {
  std::vector<uint32_t> chars;
  for (int i = 0; i < n; ++i) chars.push_back(uint32_t('!' + i));
  data::CharTokenizer tok(chars);
  tok.save(dir.file("chars.json"));
  return data::load_tokenizer(tok.spec());
}

// frugal's logits (B, T, V) of `ids`.
std::vector<float> frugal_logits(GPT& model, const std::vector<int32_t>& ids, int B, int T) {
  std::vector<float> out(size_t(B) * T * model.config().vocab_size);
  model.logits(ids.data(), B, T, out.data());
  return out;
}

// max |a - b| / max |b|
double relative_error(const std::vector<float>& a, const std::vector<double>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / scale;
}

// The fixture's input ids and transformers' float64 logits.
struct Golden {
  std::vector<int32_t> ids;
  std::vector<double> logits;
  int B, T;
};

Golden read_golden() {
  const io::SafeTensors st = io::read_safetensors(kFixture + "/golden.safetensors");
  const io::TensorData& ids = st.at("input_ids");
  const io::TensorData& logits = st.at("logits");
  Golden g;
  g.B = static_cast<int>(ids.shape[0]);
  g.T = static_cast<int>(ids.shape[1]);
  g.ids.resize(ids.numel());
  std::memcpy(g.ids.data(), ids.bytes.data(), ids.bytes.size());
  g.logits.resize(logits.numel());
  std::memcpy(g.logits.data(), logits.bytes.data(), logits.bytes.size());
  return g;
}

// The fixture's files copied into dir, its weights file edited by `edit`.
void edited_fixture(const std::string& dir, const std::function<void(io::SafeTensors&)>& edit) {
  fs::create_directories(dir);
  fs::copy_file(kFixture + "/config.json", dir + "/config.json");
  io::SafeTensors st = io::read_safetensors(kFixture + "/model.safetensors");
  edit(st);
  io::write_safetensors(dir + "/model.safetensors", st);
}

void swap_tensors(io::SafeTensors& st, const std::string& a, const std::string& b) {
  std::swap(st.tensors.at(a), st.tensors.at(b));
}

}  // namespace

// The committed fixture: a BertForMaskedLM transformers created and saved (float16, two token
// types), and the logits transformers computed from it in float64 on ids with masks among them.
TEST(HfBertFixture, ImportedModelGivesTransformersLogits) {
  const Golden g = read_golden();
  const auto model = io::read_hf(kFixture);
  const ModelConfig& c = model->config();
  EXPECT_TRUE(c.encoder());
  EXPECT_EQ(c.norm, NormPlacement::Post);
  EXPECT_EQ(c.vocab_size, 66);
  EXPECT_EQ(c.ffn_mult, 2);
  EXPECT_EQ(c.layernorm_eps, 1e-5f);
  int masks = 0;
  for (int32_t id : g.ids) masks += id == c.vocab_size - 1;
  EXPECT_EQ(masks, 6);
  const double err = relative_error(frugal_logits(*model, g.ids, g.B, g.T), g.logits);
  EXPECT_LT(err, 1e-4) << "max |frugal - transformers| / max |logit|";
  std::printf("fixture: max |frugal - transformers| / max |logit| = %.3g\n", err);
}

// The parity test above fails when the mapping is broken: a query swapped with its key, or BERT's
// token-type row 0 not added to the positions.
TEST(HfBertFixture, ParityCatchesASwappedQueryAndKeyAndUnfoldedTokenTypes) {
  TempDir dir;
  const Golden g = read_golden();
  edited_fixture(dir.file("qk"), [](io::SafeTensors& st) {
    swap_tensors(st, "bert.encoder.layer.0.attention.self.query.weight", "bert.encoder.layer.0.attention.self.key.weight");
    swap_tensors(st, "bert.encoder.layer.0.attention.self.query.bias", "bert.encoder.layer.0.attention.self.key.bias");
  });
  EXPECT_GT(relative_error(frugal_logits(*io::read_hf(dir.file("qk")), g.ids, g.B, g.T), g.logits), 1e-3);
  edited_fixture(dir.file("types"), [](io::SafeTensors& st) {
    io::TensorData& types = st.tensors.at("bert.embeddings.token_type_embeddings.weight");
    std::fill(types.bytes.begin(), types.bytes.end(), 0);
  });
  EXPECT_GT(relative_error(frugal_logits(*io::read_hf(dir.file("types")), g.ids, g.B, g.T), g.logits), 1e-3);
}

TEST(HfBertRoundTrip, ExportThenImportIsBitIdentical) {
  TempDir dir;
  const auto model = perturbed_model(encoder_config());
  io::export_hf_bert(*model, dir.file("hf"));
  const auto back = io::read_hf(dir.file("hf"));
  EXPECT_EQ(back->config().objective, ObjectiveKind::Mlm);
  EXPECT_EQ(back->config().norm, NormPlacement::Post);
  EXPECT_EQ(back->config().layernorm_eps, 1e-6f);
  EXPECT_EQ(back->config().init_std, 0.2f);
  EXPECT_EQ(back->config().ffn_mult, 3);
  expect_same_params(*model, *back);
}

TEST(HfBertRoundTrip, Bf16ExportHoldsTheRoundedWeights) {
  TempDir dir;
  const auto model = perturbed_model(encoder_config());
  io::export_hf_bert(*model, dir.file("hf"), io::DType::BF16);
  EXPECT_EQ(read_json(dir.file("hf/config.json"))["torch_dtype"], "bfloat16");
  EXPECT_EQ(io::read_safetensors(dir.file("hf/model.safetensors")).at("cls.predictions.bias").dtype, io::DType::BF16);
  const auto back = io::read_hf(dir.file("hf"));
  for (const ParamInfo& p : model->table().entries()) {
    const float* a = model->params() + p.offset;
    const float* b = back->params() + p.offset;
    for (size_t i = 0; i < p.numel; ++i)
      ASSERT_EQ(b[i], kernels::ref::to_f32(kernels::ref::to_bf16(a[i]))) << p.name << "[" << i << "]";
  }
}

TEST(HfBertRoundTrip, ImportWritesALoadableEncoderCheckpoint) {
  TempDir dir;
  const auto model = perturbed_model(encoder_config());
  const auto tokenizer = char_tokenizer(dir, 68);
  const io::HfExport exported = io::export_hf(*model, *tokenizer, dir.file("hf"));
  EXPECT_EQ(exported.architecture, "BertForMaskedLM");
  EXPECT_FALSE(exported.tokenizer_files);  // char: transformers has no equivalent
  const std::string checkpoint = io::import_hf(dir.file("hf"), dir.file("run"));  // frugal_tokenizer.json
  const auto loaded = load_checkpoint_model(checkpoint);
  EXPECT_TRUE(loaded.model().config().encoder());
  EXPECT_EQ(loaded.model().config().norm, NormPlacement::Post);
  expect_same_params(*model, loaded.model());
  EXPECT_EQ(load_checkpoint_tokenizer(checkpoint)->vocab_size(), 68);
}

TEST(HfBertExport, WritesBertNamesLayoutAndConfig) {
  TempDir dir;
  const ModelConfig c = encoder_config();
  const auto model = perturbed_model(c);
  io::export_hf_bert(*model, dir.file("hf"));
  const io::SafeTensors st = io::read_safetensors(dir.file("hf/model.safetensors"));
  EXPECT_EQ(st.metadata.at("format"), "pt");
  std::set<std::string> names;
  for (const auto& [name, t] : st.tensors) names.insert(name);
  std::set<std::string> expected = {"bert.embeddings.word_embeddings.weight",
                                    "bert.embeddings.position_embeddings.weight",
                                    "bert.embeddings.token_type_embeddings.weight",
                                    "bert.embeddings.LayerNorm.weight", "bert.embeddings.LayerNorm.bias",
                                    "cls.predictions.transform.dense.weight", "cls.predictions.transform.dense.bias",
                                    "cls.predictions.transform.LayerNorm.weight",
                                    "cls.predictions.transform.LayerNorm.bias", "cls.predictions.bias"};
  for (int l = 0; l < 2; ++l)
    for (const char* part : {"attention.self.query", "attention.self.key", "attention.self.value",
                             "attention.output.dense", "attention.output.LayerNorm", "intermediate.dense",
                             "output.dense", "output.LayerNorm"})
      for (const char* kind : {".weight", ".bias"})
        expected.insert("bert.encoder.layer." + std::to_string(l) + "." + part + kind);
  EXPECT_EQ(names, expected);  // no decoder: tied, as transformers writes it

  const auto values = [&](const std::string& name) { return st.at(name).to_f32(name); };
  const auto frugal = [&](const std::string& name) { return model->params() + model->table().at(name).offset; };
  // query / key / value: c_attn's rows [0, C), [C, 2C), [2C, 3C) (16 x 16 each), and the biases.
  const float* qkv = frugal("transformer.h.1.attn.c_attn.weight");
  const float* qkv_bias = frugal("transformer.h.1.attn.c_attn.bias");
  const char* parts[] = {"query", "key", "value"};
  for (int i = 0; i < 3; ++i) {
    const std::string p = std::string("bert.encoder.layer.1.attention.self.") + parts[i];
    EXPECT_EQ(st.at(p + ".weight").shape, (std::vector<int64_t>{16, 16}));
    EXPECT_EQ(values(p + ".weight"), std::vector<float>(qkv + i * 256, qkv + (i + 1) * 256)) << p;
    EXPECT_EQ(values(p + ".bias"), std::vector<float>(qkv_bias + i * 16, qkv_bias + (i + 1) * 16)) << p;
  }
  // Post-LN: ln_1 after attention, ln_2 after the MLP; intermediate (48, 16), output (16, 48).
  const float* ln1 = frugal("transformer.h.0.ln_1.weight");
  EXPECT_EQ(values("bert.encoder.layer.0.attention.output.LayerNorm.weight"), std::vector<float>(ln1, ln1 + 16));
  const float* ln2 = frugal("transformer.h.0.ln_2.bias");
  EXPECT_EQ(values("bert.encoder.layer.0.output.LayerNorm.bias"), std::vector<float>(ln2, ln2 + 16));
  EXPECT_EQ(st.at("bert.encoder.layer.0.intermediate.dense.weight").shape, (std::vector<int64_t>{48, 16}));
  EXPECT_EQ(st.at("bert.encoder.layer.0.output.dense.weight").shape, (std::vector<int64_t>{16, 48}));
  const float* emb_ln = frugal("transformer.ln_emb.bias");
  EXPECT_EQ(values("bert.embeddings.LayerNorm.bias"), std::vector<float>(emb_ln, emb_ln + 16));
  // Vocabulary tensors: the 69 real rows; the token types one zero row.
  EXPECT_EQ(st.at("bert.embeddings.word_embeddings.weight").shape, (std::vector<int64_t>{69, 16}));
  const float* bias = frugal("lm_head.bias");
  EXPECT_EQ(values("cls.predictions.bias"), std::vector<float>(bias, bias + 69));
  EXPECT_EQ(values("bert.embeddings.token_type_embeddings.weight"), std::vector<float>(16, 0.0f));

  const json cfg = read_json(dir.file("hf/config.json"));
  EXPECT_EQ(cfg["model_type"], "bert");
  EXPECT_EQ(cfg["architectures"], json::array({"BertForMaskedLM"}));
  EXPECT_EQ(cfg["hidden_act"], "gelu_new");
  EXPECT_EQ(cfg["vocab_size"], 69);
  EXPECT_EQ(cfg["hidden_size"], 16);
  EXPECT_EQ(cfg["intermediate_size"], 48);
  EXPECT_EQ(cfg["max_position_embeddings"], 16);
  EXPECT_EQ(cfg["type_vocab_size"], 1);
  EXPECT_EQ(cfg["layer_norm_eps"].get<double>(), 1e-6);
  EXPECT_EQ(cfg["hidden_dropout_prob"].get<double>(), 0.1);
  EXPECT_EQ(cfg["position_embedding_type"], "absolute");
  EXPECT_EQ(cfg["tie_word_embeddings"], true);
  EXPECT_EQ(cfg["torch_dtype"], "float32");
}

TEST(HfBertExport, RefusesWhatBertForMaskedLmCannotCompute) {
  TempDir dir;
  const auto refusal = [&](const std::function<void(ModelConfig&)>& change) {
    ModelConfig c = encoder_config();
    change(c);
    return error_of([&] { io::export_hf_bert(GPT(c), dir.file("x")); });
  };
  std::string msg = refusal([](ModelConfig& c) { c.objective = ObjectiveKind::Causal; });
  EXPECT_TRUE(contains(msg, "model.objective = \"causal\"") && contains(msg, "GPT2LMHeadModel")) << msg;
  msg = refusal([](ModelConfig& c) { c.norm = NormPlacement::Pre; });
  EXPECT_TRUE(contains(msg, "model.norm = \"pre\"") && contains(msg, "post-LN")) << msg;
  msg = refusal([](ModelConfig& c) { c.bias = false; });
  EXPECT_TRUE(contains(msg, "model.bias = false") && contains(msg, "biases in every linear")) << msg;
  msg = refusal([](ModelConfig& c) { c.mlp = MlpKind::Geglu; });
  EXPECT_TRUE(contains(msg, "model.mlp = \"geglu\"") && contains(msg, "ungated")) << msg;
  msg = refusal([](ModelConfig& c) { c.mlp = MlpKind::Relu2; });
  EXPECT_TRUE(contains(msg, "model.mlp = \"relu2\"")) << msg;
  msg = refusal([](ModelConfig& c) { c.position = PositionKind::Rotary; });
  EXPECT_TRUE(contains(msg, "model.position = \"rotary\"") && contains(msg, "absolute positions")) << msg;
  msg = refusal([](ModelConfig& c) { c.qk_norm = true; });
  EXPECT_TRUE(contains(msg, "model.qk_norm = true")) << msg;
  msg = refusal([](ModelConfig& c) { c.logit_softcap = 30; });
  EXPECT_TRUE(contains(msg, "model.logit_softcap = 30") && contains(msg, "not capped")) << msg;
  msg = refusal([](ModelConfig& c) { c.moe.experts = 4; });
  EXPECT_TRUE(contains(msg, "model.moe.experts = 4") && contains(msg, "mixture-of-experts")) << msg;
  EXPECT_FALSE(fs::exists(dir.file("x")));  // refused before anything is written
  // The GPT-2 layout refuses an encoder, pre-LN ones too.
  ModelConfig pre = encoder_config();
  pre.norm = NormPlacement::Pre;
  msg = error_of([&] { io::export_hf_gpt2(GPT(pre), dir.file("g")); });
  EXPECT_TRUE(contains(msg, "model.objective = \"mlm\"") && contains(msg, "BertForMaskedLM")) << msg;
  // An encoder's vocabulary must hold its tokenizer's tokens and the mask after them.
  const auto tokenizer = char_tokenizer(dir, 69);
  msg = error_of([&] { io::export_hf(GPT(encoder_config()), *tokenizer, dir.file("t")); });
  EXPECT_TRUE(contains(msg, "has 69 ids, too few for its tokenizer's 69 tokens and <mask>")) << msg;
}

TEST(HfBertExport, Gpt2TokenizerFilesNameTheMask) {
  TempDir dir;
  const auto gpt2 = data::load_tokenizer("gpt2");
  ASSERT_TRUE(io::export_hf_tokenizer(*gpt2, 16, dir.file("hf"), 50257));
  const json cfg = read_json(dir.file("hf/tokenizer_config.json"));
  EXPECT_EQ(cfg["mask_token"], "<mask>");
  EXPECT_EQ(cfg["added_tokens_decoder"]["50257"]["content"], "<mask>");
  EXPECT_EQ(cfg["added_tokens_decoder"]["50256"]["content"], "<|endoftext|>");
  const json added = read_json(dir.file("hf/tokenizer.json"))["added_tokens"];
  ASSERT_EQ(added.size(), 2u);
  EXPECT_EQ(added[1]["id"], 50257);
  EXPECT_EQ(added[1]["content"], "<mask>");
  EXPECT_EQ(added[1]["special"], true);
  // A decoder's files have no mask.
  ASSERT_TRUE(io::export_hf_tokenizer(*gpt2, 16, dir.file("dec")));
  EXPECT_FALSE(read_json(dir.file("dec/tokenizer_config.json")).contains("mask_token"));
  EXPECT_EQ(read_json(dir.file("dec/tokenizer.json"))["added_tokens"].size(), 1u);
}

// What transformers may write: BertModel's un-prefixed names, BF16, the tied decoder kept, the
// position-id buffer, BertForPreTraining's pooler and next-sentence head.
TEST(HfBertImport, AcceptsUnprefixedNamesBf16TiedCopiesAndExtras) {
  TempDir dir;
  const auto model = perturbed_model(encoder_config());
  io::export_hf_bert(*model, dir.file("hf"), io::DType::BF16);
  const io::SafeTensors ours = io::read_safetensors(dir.file("hf/model.safetensors"));
  io::SafeTensors theirs;
  for (const auto& [name, t] : ours.tensors)
    theirs.tensors[name.starts_with("bert.") ? name.substr(5) : name] = t;
  theirs.tensors["cls.predictions.decoder.weight"] = ours.at("bert.embeddings.word_embeddings.weight");
  theirs.tensors["cls.predictions.decoder.bias"] = ours.at("cls.predictions.bias");
  const std::vector<float> extra(16 * 16, 0.5f);
  theirs.put_f32("embeddings.position_ids", {1, 16}, extra.data());
  theirs.put_f32("pooler.dense.weight", {16, 16}, extra.data());
  theirs.put_f32("cls.seq_relationship.weight", {2, 16}, extra.data());
  io::write_safetensors(dir.file("hf/model.safetensors"), theirs);
  const auto back = io::read_hf(dir.file("hf"));
  for (const ParamInfo& p : model->table().entries())
    for (size_t i = 0; i < p.numel; ++i)
      ASSERT_EQ(back->params()[p.offset + i], kernels::ref::to_f32(kernels::ref::to_bf16(model->params()[p.offset + i])))
          << p.name;
}

// BERT adds token-type row 0 to every position: the import folds it into the position embeddings.
TEST(HfBertImport, FoldsTokenTypeRowZeroIntoThePositions) {
  TempDir dir;
  const auto model = perturbed_model(encoder_config());
  io::export_hf_bert(*model, dir.file("hf"));
  io::SafeTensors st = io::read_safetensors(dir.file("hf/model.safetensors"));
  std::vector<float> types(2 * 16);
  for (size_t i = 0; i < types.size(); ++i) types[i] = 0.25f * float(i % 7) - 0.5f;
  st.put_f32("bert.embeddings.token_type_embeddings.weight", {2, 16}, types.data());
  io::write_safetensors(dir.file("hf/model.safetensors"), st);
  json cfg = read_json(dir.file("hf/config.json"));
  cfg["type_vocab_size"] = 2;
  write_json(dir.file("hf/config.json"), cfg);
  const auto back = io::read_hf(dir.file("hf"));
  const size_t wpe = model->table().at("transformer.wpe.weight").offset;
  for (int t = 0; t < 16; ++t)
    for (int i = 0; i < 16; ++i)
      ASSERT_EQ(back->params()[wpe + t * 16 + i], model->params()[wpe + t * 16 + i] + types[i]) << t << "," << i;
}

TEST(HfBertImport, MissingMisshapedUntiedAndUnexpectedTensorsAreNamed) {
  TempDir dir;
  io::export_hf_bert(*perturbed_model(encoder_config()), dir.file("hf"));
  const std::string path = dir.file("hf/model.safetensors");
  const io::SafeTensors good = io::read_safetensors(path);
  const auto error_with = [&](const std::function<void(io::SafeTensors&)>& edit) {
    io::SafeTensors st = good;
    edit(st);
    io::write_safetensors(path, st);
    return error_of([&] { io::read_hf(dir.file("hf")); });
  };
  std::string msg = error_with([](io::SafeTensors& st) { st.tensors.erase("bert.encoder.layer.1.attention.self.key.bias"); });
  EXPECT_TRUE(contains(msg, path) && contains(msg, "'bert.encoder.layer.1.attention.self.key.bias' is missing")) << msg;
  msg = error_with([](io::SafeTensors& st) { st.tensors.erase("cls.predictions.transform.dense.weight"); });
  EXPECT_TRUE(contains(msg, "is missing") && contains(msg, "BertModel without the masked-LM head")) << msg;
  msg = error_with([](io::SafeTensors& st) {
    const std::vector<float> zeros(16 * 48);
    st.put_f32("bert.encoder.layer.0.intermediate.dense.weight", {16, 48}, zeros.data());
  });
  EXPECT_TRUE(contains(msg, "'bert.encoder.layer.0.intermediate.dense.weight' has shape (16, 48)") &&
              contains(msg, "implies (48, 16)")) << msg;
  msg = error_with([&](io::SafeTensors& st) {
    std::vector<float> decoder = good.at("bert.embeddings.word_embeddings.weight").to_f32("w");
    decoder[5] += 1;
    st.put_f32("cls.predictions.decoder.weight", {69, 16}, decoder.data());
  });
  EXPECT_TRUE(contains(msg, "'cls.predictions.decoder.weight' differs from 'bert.embeddings.word_embeddings.weight'") &&
              contains(msg, "untied decoder")) << msg;
  msg = error_with([&](io::SafeTensors& st) {
    const std::vector<float> zeros(69);
    st.put_f32("cls.predictions.decoder.bias", {69}, zeros.data());
  });
  EXPECT_TRUE(contains(msg, "'cls.predictions.decoder.bias' differs from 'cls.predictions.bias'")) << msg;
  msg = error_with([](io::SafeTensors& st) {
    const std::vector<float> zeros(16);
    st.put_f32("bert.encoder.layer.2.output.LayerNorm.bias", {16}, zeros.data());
  });
  EXPECT_TRUE(contains(msg, "'bert.encoder.layer.2.output.LayerNorm.bias' has no place")) << msg;
}

TEST(HfBertImport, RefusesConfigsFrugalCannotCompute) {
  TempDir dir;
  io::export_hf_bert(*perturbed_model(encoder_config()), dir.file("hf"));
  const std::string path = dir.file("hf/config.json");
  const json good = read_json(path);
  const auto with = [&](const char* key, const json& value) {
    json j = good;
    if (value.is_null())
      j.erase(key);
    else
      j[key] = value;
    write_json(path, j);
    return error_of([&] { io::read_hf(dir.file("hf")); });
  };
  std::string msg = with("hidden_act", "gelu");
  EXPECT_TRUE(contains(msg, path) && contains(msg, "hidden_act \"gelu\" is the exact (erf) GELU")) << msg;
  EXPECT_TRUE(contains(with("hidden_act", nullptr), "hidden_act \"gelu\""));  // BertConfig's default
  EXPECT_TRUE(contains(with("hidden_act", "relu"), "hidden_act \"relu\" is not supported"));
  EXPECT_TRUE(contains(with("position_embedding_type", "relative_key"), "position_embedding_type \"relative_key\""));
  EXPECT_TRUE(contains(with("is_decoder", true), "\"is_decoder\" = true is not supported"));
  EXPECT_TRUE(contains(with("add_cross_attention", true), "no cross-attention"));
  EXPECT_TRUE(contains(with("tie_word_embeddings", false), "tied to the word embeddings"));
  EXPECT_TRUE(contains(with("intermediate_size", 40), "intermediate_size = 40 is not a multiple of hidden_size = 16"));
  EXPECT_TRUE(contains(with("hidden_size", nullptr), "\"hidden_size\" is missing; a BERT config.json needs it"));
  EXPECT_TRUE(contains(with("type_vocab_size", 0), "type_vocab_size = 0"));
  EXPECT_TRUE(contains(with("num_attention_heads", 3), "describes a model frugal cannot hold"));
  msg = with("model_type", "roberta");
  EXPECT_TRUE(contains(msg, "model_type \"roberta\" is not supported") && contains(msg, "\"bert\"")) << msg;
  EXPECT_TRUE(contains(error_of([&] { io::read_hf_bert_config(path); }), "only BERT models (model_type \"bert\")"));
}

TEST(HfBertImport, TheVocabularyMustHoldTheTokenizerAndTheMask) {
  TempDir dir;
  io::export_hf_bert(*perturbed_model(encoder_config()), dir.file("hf"));
  std::string msg = error_of([&] { io::import_hf(dir.file("hf"), dir.file("run")); });
  EXPECT_TRUE(contains(msg, "vocab_size 69 is not GPT-2's 50258 and the mask") && contains(msg, "--tokenizer")) << msg;
  const std::string spec = char_tokenizer(dir, 69)->spec();
  msg = error_of([&] { io::import_hf(dir.file("hf"), dir.file("run"), spec); });
  EXPECT_TRUE(contains(msg, "has 69 tokens (and the encoder's <mask> after them) but the model's vocabulary only 69"))
      << msg;
  EXPECT_FALSE(run_has_checkpoints(dir.file("run")));
}

// Both commands on an encoder: the fixture imported (its tokenizer given), exported again.
TEST(HfBertCli, ImportThenExportOfTheTransformersFixture) {
  TempDir dir;
  const std::string spec = char_tokenizer(dir, 65)->spec();
  auto r = frugal::testing::run_frugal("import " + kFixture + " " + dir.file("run") + " --tokenizer " + spec);
  ASSERT_EQ(r.rc, 0) << r.output;
  r = frugal::testing::run_frugal("export --format hf " + dir.file("run") + " " + dir.file("hf"));
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "as BertForMaskedLM") && contains(r.output, "transformers has no tokenizer")) << r.output;
  // Our export computes the fixture's function: F32 now, token types folded into the positions.
  const Golden g = read_golden();
  EXPECT_LT(relative_error(frugal_logits(*io::read_hf(dir.file("hf")), g.ids, g.B, g.T), g.logits), 1e-4);
}

// The losses of metrics.jsonl, by step.
std::vector<double> logged_losses(const std::string& run) {
  std::vector<double> losses;
  for (const json& j : frugal::testing::logged_records(run))
    if (j.contains("loss")) losses.push_back(j["loss"].get<double>());
  return losses;
}

double mean(const std::vector<double>& v, size_t begin, size_t end) {
  double sum = 0;
  for (size_t i = begin; i < end; ++i) sum += v[i];
  return sum / double(end - begin);
}

// A model transformers saved (the fixture: 65 characters and <mask>), imported with Tiny
// Shakespeare's character tokenizer, trains on through `frugal train --init-from` (40 steps).
TEST(HfBertCli, ATransformersSavedModelTrainsOn) {
  TempDir dir;
  const std::string data = frugal::testing::make_shakespeare_data(  // the whole text: its 65 characters
      dir, fs::file_size(std::string(test_paths::source_dir()) + "/data/tinyshakespeare/input.txt"));
  auto r = frugal::testing::run_frugal("import " + kFixture + " " + dir.file("imported") + " --tokenizer " + data +
                                       "/frugal_tokenizer.json");
  ASSERT_EQ(r.rc, 0) << r.output;
  const std::string train = "train /dev/null --set data.dir=" + data +
                            " --set model.objective=mlm --set model.norm=post --set model.n_layer=2 --set model.n_head=2"
                            " --set model.n_embd=32 --set model.ffn_mult=2 --set model.block_size=16"
                            " --set model.layernorm_eps=1e-5 --set train.seq_len=16 --set train.batch_size=32"
                            " --set train.max_steps=40 --set train.log_interval=1 --set train.eval_interval=40"
                            " --set train.eval_batches=2 --set optim.lr=3e-3 --set optim.warmup_steps=0";
  r = frugal::testing::run_frugal(train + " --set train.out_dir=" + dir.file("on") + " --init-from " + dir.file("imported"));
  ASSERT_EQ(r.rc, 0) << r.output;
  const std::vector<double> on = logged_losses(dir.file("on"));
  ASSERT_EQ(on.size(), 40u);
  for (double loss : on) EXPECT_TRUE(std::isfinite(loss));
  EXPECT_LT(mean(on, 35, 40), mean(on, 0, 5) - 0.3) << "the imported model does not learn";
  // It started from the imported weights: the same masked batches, another first loss than from scratch.
  r = frugal::testing::run_frugal(train + " --set train.out_dir=" + dir.file("scratch"));
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_GT(std::abs(logged_losses(dir.file("scratch")).at(0) - on[0]), 0.1);
}

// frugal's export loaded by transformers' BertForMaskedLM (tools/check_hf_bert.py): the same
// logits on the same masked inputs; the tokenizer files (GPT-2's BPE and <mask> at 50257) load
// with AutoTokenizer and fill-mask runs. The check fails on an export with query and key swapped.
TEST(HfBertTransformers, ExportLoadsAsBertForMaskedLmWithTheSameLogits) {
  const std::string python = frugal::testing::torch_python();
  if (python.empty()) GTEST_SKIP() << "no .venv-torch with transformers: the export is not checked against it";
  TempDir dir;
  ModelConfig c = encoder_config();
  c.vocab_size = 50258;  // GPT-2's BPE and the mask
  c.n_embd = 32;
  const auto gpt2 = data::load_tokenizer("gpt2");
  const auto model = perturbed_model(c);
  io::export_hf(*model, *gpt2, dir.file("hf"));
  const int B = 2, T = 16;
  std::vector<int32_t> ids(B * T);
  for (int i = 0; i < B * T; ++i) ids[i] = i % 5 == 2 ? 50257 : (i * 7919) % 50257;  // masks among them
  const std::vector<float> logits = frugal_logits(*model, ids, B, T);
  const std::string text = "Hello world! The quick brown fox.";
  const std::vector<int32_t> text_ids = gpt2->encode(text);
  io::SafeTensors st;
  st.put("input_ids", io::DType::I32, {B, T}, ids.data());
  st.put_f32("logits", {B, T, c.vocab_size}, logits.data());
  st.put("text_ids", io::DType::I32, {int64_t(text_ids.size())}, text_ids.data());
  io::write_safetensors(dir.file("logits.safetensors"), st);
  const std::string check = python + " " + std::string(test_paths::source_dir()) + "/tools/check_hf_bert.py ";
  auto r = frugal::testing::run_shell(check + dir.file("hf") + " " + dir.file("logits.safetensors") +
                                      " --mask-id 50257 --text '" + text + "'");
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "OK")) << r.output;
  std::printf("%s", r.output.c_str());

  io::SafeTensors swapped = io::read_safetensors(dir.file("hf/model.safetensors"));
  swap_tensors(swapped, "bert.encoder.layer.0.attention.self.query.weight", "bert.encoder.layer.0.attention.self.key.weight");
  io::write_safetensors(dir.file("hf/model.safetensors"), swapped);
  r = frugal::testing::run_shell(check + dir.file("hf") + " " + dir.file("logits.safetensors"));
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "FAILED")) << r.output;
}
