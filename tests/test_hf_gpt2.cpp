// Hugging Face GPT-2 export/import: bit-identical round trips (tied and untied head), GPT-2's
// Conv1D layout and names in the written file, files as transformers writes them (un-prefixed
// names, BF16, mask buffers), refusals of models GPT-2 cannot hold, and errors for bad inputs
// (an import into a run directory in use included).
#include "error_of.h"
#include "frugal/app/hf_gpt2.h"
#include "frugal/app/hf_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "frugal/core/error.h"
#include "frugal/data/text.h"
#include "frugal/io/dir_lock.h"
#include "frugal/io/safetensors.h"
#include "frugal/kernels/ref/bf16_ref.h"
#include "frugal/train/checkpoint.h"
#include "hf_testing.h"
#include "run_cli.h"
#include "temp_dir.h"

using namespace frugal;
using frugal::testing::CliResult;
using frugal::testing::contains;
using frugal::testing::expect_same_params;
using frugal::testing::run_frugal;
using frugal::testing::TempDir;
using nlohmann::json;

namespace {

using frugal::testing::error_of;

ModelConfig small_config(bool tied) {
  ModelConfig c;
  c.vocab_size = 70;  // padded to 128 rows: the export must drop 58 of them
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.ffn_mult = 3;
  c.tied_head = tied;
  c.layernorm_eps = 1e-6f;
  c.init_std = 0.03f;
  return c;
}

std::unique_ptr<GPT> random_model(const ModelConfig& c) { return frugal::testing::perturbed_model(c); }

void expect_same_config(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.block_size, b.block_size);
  EXPECT_EQ(a.n_layer, b.n_layer);
  EXPECT_EQ(a.n_head, b.n_head);
  EXPECT_EQ(a.n_embd, b.n_embd);
  EXPECT_EQ(a.ffn_mult, b.ffn_mult);
  EXPECT_EQ(a.mlp, b.mlp);
  EXPECT_EQ(a.tied_head, b.tied_head);
  EXPECT_EQ(a.bias, b.bias);
  EXPECT_EQ(a.layernorm_eps, b.layernorm_eps);
  EXPECT_EQ(a.init_std, b.init_std);
}


json read_json(const std::string& path) { return json::parse(data::read_text_file(path)); }
void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// A char tokenizer (fewer tokens than small_config's 70) saved under dir; returns its spec.
std::string char_tokenizer_spec(const TempDir& dir) {
  data::CharTokenizer tok = data::CharTokenizer::from_text("To be, or not to be: that is the question.\n");
  tok.save(dir.file("chars.json"));
  return tok.spec();
}

class HfRoundTrip : public ::testing::TestWithParam<bool> {};

}  // namespace

TEST_P(HfRoundTrip, ExportThenImportIsBitIdentical) {
  TempDir dir;
  const auto model = random_model(small_config(GetParam()));
  io::export_hf_gpt2(*model, dir.file("hf"));
  const auto back = io::read_hf_gpt2(dir.file("hf"));
  expect_same_config(model->config(), back->config());
  expect_same_params(*model, *back);
}

// A bf16 export holds each weight rounded to nearest even (what import reads back, widened) and
// says so in config.json.
TEST_P(HfRoundTrip, Bf16ExportHoldsTheRoundedWeights) {
  TempDir dir;
  const auto model = random_model(small_config(GetParam()));
  io::export_hf_gpt2(*model, dir.file("hf"), -1, false, io::DType::BF16);
  EXPECT_EQ(read_json(dir.file("hf/config.json"))["torch_dtype"], "bfloat16");
  const auto back = io::read_hf_gpt2(dir.file("hf"));
  size_t changed = 0;
  for (const ParamInfo& p : model->table().entries()) {
    const float* a = model->params() + p.offset;
    const float* b = back->params() + back->table().at(p.name).offset;
    for (size_t i = 0; i < p.numel; ++i) {
      ASSERT_EQ(b[i], kernels::ref::to_f32(kernels::ref::to_bf16(a[i]))) << p.name << "[" << i << "]";
      changed += a[i] != b[i];
    }
  }
  EXPECT_GT(changed, 0u);
}

TEST_P(HfRoundTrip, ImportWritesALoadableCheckpoint) {
  TempDir dir;
  const auto model = random_model(small_config(GetParam()));
  io::export_hf_gpt2(*model, dir.file("hf"));
  const std::string checkpoint =
      io::import_hf(dir.file("hf"), dir.file("run"), char_tokenizer_spec(dir));
  EXPECT_EQ(resolve_checkpoint(dir.file("run")), checkpoint);
  const auto loaded = load_checkpoint_model(checkpoint);
  expect_same_config(model->config(), loaded->config());
  expect_same_params(*model, *loaded);
  // A second import into the same run would replace (and once deleted) its checkpoints.
  const std::string again = error_of([&] {
    io::import_hf(dir.file("hf"), dir.file("run"), char_tokenizer_spec(dir));
  });
  EXPECT_NE(again.find("already holds checkpoints"), std::string::npos) << again;
  EXPECT_EQ(resolve_checkpoint(dir.file("run")), checkpoint);
}

TEST(HfImport, RefusesARunDirectoryInUse) {
  TempDir dir;
  io::export_hf_gpt2(*random_model(small_config(true)), dir.file("hf"));
  const io::DirLock training = io::DirLock::exclusive(dir.file("run"), "run directory", "wait");
  const std::string msg = error_of([&] {
    io::import_hf(dir.file("hf"), dir.file("run"), char_tokenizer_spec(dir));
  });
  EXPECT_TRUE(contains(msg, "run directory " + dir.file("run") + " is in use by frugal pid " +
                                std::to_string(::getpid()))) << msg;
  EXPECT_TRUE(contains(msg, "import into another directory")) << msg;
  EXPECT_FALSE(run_has_checkpoints(dir.file("run")));
}

INSTANTIATE_TEST_SUITE_P(Head, HfRoundTrip, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "Tied" : "Untied"; });

TEST(HfExport, WritesGpt2NamesConv1dLayoutAndConfig) {
  TempDir dir;
  const ModelConfig c = small_config(false);
  const auto model = random_model(c);
  io::export_hf_gpt2(*model, dir.file("hf"), 42);
  const io::SafeTensors st = io::read_safetensors(dir.file("hf/model.safetensors"));
  EXPECT_EQ(st.metadata.at("format"), "pt");
  EXPECT_EQ(st.tensors.size(), model->table().entries().size());

  // c_fc: frugal (H, C) = (48, 16); GPT-2 Conv1D (C, H) = (16, 48). Element [i][o] = frugal [o][i].
  const auto& fc = st.at("transformer.h.1.mlp.c_fc.weight");
  ASSERT_EQ(fc.shape, (std::vector<int64_t>{16, 48}));
  const std::vector<float> fc_hf = fc.to_f32("fc");
  const float* fc_frugal = model->params() + model->table().at("transformer.h.1.mlp.c_fc.weight").offset;
  const int i = 5, o = 31;
  EXPECT_EQ(fc_hf[i * 48 + o], fc_frugal[o * 16 + i]);
  EXPECT_NE(fc_hf[i * 48 + o], fc_frugal[i * 48 + o]);  // not merely reshaped
  EXPECT_EQ(st.at("transformer.h.0.attn.c_attn.weight").shape, (std::vector<int64_t>{16, 48}));

  // Vocabulary tensors keep (V, C) with the real V rows only.
  EXPECT_EQ(st.at("transformer.wte.weight").shape, (std::vector<int64_t>{70, 16}));
  EXPECT_EQ(st.at("lm_head.weight").shape, (std::vector<int64_t>{70, 16}));

  const json cfg = read_json(dir.file("hf/config.json"));
  EXPECT_EQ(cfg["model_type"], "gpt2");
  EXPECT_EQ(cfg["architectures"], json::array({"GPT2LMHeadModel"}));
  EXPECT_EQ(cfg["vocab_size"], 70);
  EXPECT_EQ(cfg["n_positions"], 16);
  EXPECT_EQ(cfg["n_inner"], 48);
  EXPECT_EQ(cfg["activation_function"], "gelu_new");
  EXPECT_EQ(cfg["layer_norm_epsilon"].get<double>(), 1e-6);
  EXPECT_EQ(cfg["tie_word_embeddings"], false);
  EXPECT_EQ(cfg["eos_token_id"], 42);
}

TEST(HfExport, TiedHeadHasNoLmHeadTensor) {
  TempDir dir;
  io::export_hf_gpt2(*random_model(small_config(true)), dir.file("hf"));
  const io::SafeTensors st = io::read_safetensors(dir.file("hf/model.safetensors"));
  EXPECT_FALSE(st.tensors.count("lm_head.weight"));
  EXPECT_EQ(read_json(dir.file("hf/config.json"))["tie_word_embeddings"], true);
}

TEST(HfExport, RefusesModelsGpt2CannotHold) {
  TempDir dir;
  ModelConfig gated = small_config(true);
  gated.mlp = MlpKind::Swiglu;
  std::string msg = error_of([&] { io::export_hf_gpt2(GPT(gated), dir.file("a")); });
  EXPECT_TRUE(contains(msg, "model.mlp = \"swiglu\"") && contains(msg, "MLP is GELU, ungated")) << msg;
  ModelConfig relu2 = small_config(true);
  relu2.mlp = MlpKind::Relu2;
  msg = error_of([&] { io::export_hf_gpt2(GPT(relu2), dir.file("r")); });
  EXPECT_TRUE(contains(msg, "model.mlp = \"relu2\"") && contains(msg, "MLP is GELU, ungated")) << msg;
  ModelConfig no_bias = small_config(true);
  no_bias.bias = false;
  msg = error_of([&] { io::export_hf_gpt2(GPT(no_bias), dir.file("b")); });
  EXPECT_TRUE(contains(msg, "model.bias = false") && contains(msg, "biases in every linear")) << msg;
  ModelConfig rotary = small_config(true);
  rotary.position = frugal::PositionKind::Rotary;
  msg = error_of([&] { io::export_hf_gpt2(GPT(rotary), dir.file("p")); });
  EXPECT_TRUE(contains(msg, "model.position = \"rotary\"") && contains(msg, "learns its positions")) << msg;
  ModelConfig qk_norm = small_config(true);
  qk_norm.qk_norm = true;
  msg = error_of([&] { io::export_hf_gpt2(GPT(qk_norm), dir.file("q")); });
  EXPECT_TRUE(contains(msg, "model.qk_norm = true")) << msg;
  ModelConfig capped = small_config(true);
  capped.logit_softcap = 15;
  msg = error_of([&] { io::export_hf_gpt2(GPT(capped), dir.file("s")); });
  EXPECT_TRUE(contains(msg, "model.logit_softcap = 15") && contains(msg, "not capped")) << msg;
  ModelConfig post_ln = small_config(true);
  post_ln.norm = NormPlacement::Post;
  msg = error_of([&] { io::export_hf_gpt2(GPT(post_ln), dir.file("c")); });
  EXPECT_TRUE(contains(msg, "model.norm = \"post\"") && contains(msg, "pre-LN")) << msg;
  EXPECT_FALSE(std::filesystem::exists(dir.file("a/model.safetensors")));
}

TEST(HfExport, Gpt2TokenizerFilesAreTheBundledOnes) {
  TempDir dir;
  const auto gpt2 = data::load_tokenizer("gpt2");
  EXPECT_TRUE(io::export_hf_tokenizer(*gpt2, 16, dir.file("hf")));
  const std::string bpe = data::data_dir() + "/gpt2-bpe/";
  // Written from the tokenizer: the bundled files' contents (vocab.json's keys in id order).
  EXPECT_EQ(read_json(dir.file("hf/vocab.json")), read_json(bpe + "encoder.json"));
  EXPECT_EQ(data::read_text_file(dir.file("hf/merges.txt")), data::read_text_file(bpe + "vocab.bpe"));
  EXPECT_EQ(read_json(dir.file("hf/tokenizer_config.json"))["model_max_length"], 16);
  const auto back = data::load_tokenizer_json(dir.file("hf/frugal_tokenizer.json"));
  EXPECT_EQ(back->spec(), "gpt2");
  // The export's own vocab.json + merges.txt are a gpt2:DIR tokenizer, GPT-2's.
  EXPECT_EQ(data::vocabulary_difference(*data::load_tokenizer("gpt2:" + dir.file("hf")), "the export's", *gpt2,
                                        "the bundled"), "");

  const auto chars = data::load_tokenizer(char_tokenizer_spec(dir));
  EXPECT_FALSE(io::export_hf_tokenizer(*chars, 16, dir.file("char")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("char/vocab.json")));
  EXPECT_EQ(data::load_tokenizer_json(dir.file("char/frugal_tokenizer.json"))->vocab_size(), chars->vocab_size());
}

TEST(HfImport, AcceptsUnprefixedNamesBf16AndMaskBuffers) {
  // What GPT2Model / older transformers write: "h.0..." names, half precision, attn.bias buffers.
  TempDir dir;
  const auto model = random_model(small_config(true));
  io::export_hf_gpt2(*model, dir.file("hf"));
  const io::SafeTensors ours = io::read_safetensors(dir.file("hf/model.safetensors"));
  io::SafeTensors theirs;
  for (const auto& [name, t] : ours.tensors) {
    const std::vector<float> v = t.to_f32(name);
    std::vector<uint16_t> bf16(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      uint32_t bits;
      std::memcpy(&bits, &v[i], 4);
      bf16[i] = static_cast<uint16_t>(bits >> 16);
    }
    theirs.put(name.substr(std::string("transformer.").size()), io::DType::BF16, t.shape, bf16.data());
  }
  const std::vector<float> mask(16 * 16, 1.0f);
  theirs.put_f32("h.0.attn.bias", {1, 1, 16, 16}, mask.data());
  theirs.put_f32("h.1.attn.masked_bias", {}, mask.data());
  io::write_safetensors(dir.file("hf/model.safetensors"), theirs);

  const auto back = io::read_hf_gpt2(dir.file("hf"));
  for (const ParamInfo& p : model->table().entries()) {
    const float* a = model->params() + p.offset;
    const float* b = back->params() + p.offset;
    for (size_t i = 0; i < p.numel; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &a[i], 4);
      bits &= 0xFFFF0000u;
      float truncated;
      std::memcpy(&truncated, &bits, 4);
      ASSERT_EQ(b[i], truncated) << p.name << "[" << i << "]";
    }
  }
}

TEST(HfImport, MissingMisshapedAndUnexpectedTensorsAreNamed) {
  TempDir dir;
  io::export_hf_gpt2(*random_model(small_config(false)), dir.file("hf"));
  const std::string path = dir.file("hf/model.safetensors");
  const io::SafeTensors good = io::read_safetensors(path);

  io::SafeTensors st = good;
  st.tensors.erase("transformer.h.1.ln_2.bias");
  io::write_safetensors(path, st);
  std::string msg = error_of([&] { io::read_hf_gpt2(dir.file("hf")); });
  EXPECT_TRUE(contains(msg, "tensor 'transformer.h.1.ln_2.bias' is missing")) << msg;

  st = good;
  st.tensors.erase("lm_head.weight");
  io::write_safetensors(path, st);
  msg = error_of([&] { io::read_hf_gpt2(dir.file("hf")); });
  EXPECT_TRUE(contains(msg, "'lm_head.weight' is missing") && contains(msg, "tie_word_embeddings")) << msg;

  st = good;
  const std::vector<float> zeros(48 * 16);
  st.put_f32("transformer.h.0.attn.c_attn.weight", {48, 16}, zeros.data());  // frugal's layout
  io::write_safetensors(path, st);
  msg = error_of([&] { io::read_hf_gpt2(dir.file("hf")); });
  EXPECT_TRUE(contains(msg, "'transformer.h.0.attn.c_attn.weight' has shape (48, 16)") &&
              contains(msg, "implies (16, 48)")) << msg;

  st = good;
  st.put_f32("transformer.h.2.ln_1.weight", {16}, zeros.data());
  io::write_safetensors(path, st);
  msg = error_of([&] { io::read_hf_gpt2(dir.file("hf")); });
  EXPECT_TRUE(contains(msg, "'transformer.h.2.ln_1.weight' has no place")) << msg;

  std::filesystem::remove(path);
  msg = error_of([&] { io::read_hf_gpt2(dir.file("hf")); });
  EXPECT_TRUE(contains(msg, "model.safetensors' is missing") && contains(msg, "safe_serialization")) << msg;
}

TEST(HfImport, MalformedOrUnsupportedConfigs) {
  TempDir dir;
  io::export_hf_gpt2(*random_model(small_config(true)), dir.file("hf"));
  const std::string path = dir.file("hf/config.json");
  const json good = read_json(path);
  auto error_for = [&](const json& j) {
    write_text(path, j.dump());
    return error_of([&] { io::read_hf_gpt2_config(path); });
  };
  auto with = [&](const char* key, const json& value) {
    json j = good;
    j[key] = value;
    return error_for(j);
  };
  json without_embd = good;
  without_embd.erase("n_embd");
  EXPECT_TRUE(contains(error_for(without_embd), "\"n_embd\" is missing"));
  EXPECT_TRUE(contains(with("n_layer", "2"), "\"n_layer\" is \"2\", expected an integer"));
  EXPECT_TRUE(contains(with("model_type", "llama"), "model_type \"llama\" is not supported"));
  EXPECT_TRUE(contains(with("activation_function", "relu"), "activation_function \"relu\" is not supported"));
  EXPECT_TRUE(contains(with("n_inner", 40), "n_inner = 40 is not a multiple of n_embd = 16"));
  EXPECT_TRUE(contains(with("scale_attn_by_inverse_layer_idx", true), "no per-layer attention scaling"));
  EXPECT_TRUE(contains(with("n_head", 3), "describes a model frugal cannot hold"));

  write_text(path, "{\"n_embd\": 16,");
  EXPECT_TRUE(contains(error_of([&] { io::read_hf_gpt2_config(path); }), "is not valid JSON"));
  std::filesystem::remove(path);
  EXPECT_TRUE(contains(error_of([&] { io::read_hf_gpt2(dir.file("hf")); }), "config.json' is missing"));
}

TEST(HfImport, UnknownVocabularyNeedsATokenizer) {
  TempDir dir;
  io::export_hf_gpt2(*random_model(small_config(true)), dir.file("hf"));
  const std::string msg = error_of([&] { io::import_hf(dir.file("hf"), dir.file("run")); });
  EXPECT_TRUE(contains(msg, "vocab_size 70 is not GPT-2's 50257") && contains(msg, "--tokenizer")) << msg;
}

TEST(HfCli, ImportThenExportReproducesTheWeightsFile) {
  TempDir dir;
  const auto model = random_model(small_config(false));
  io::export_hf_gpt2(*model, dir.file("hf"));
  const auto chars = data::load_tokenizer(char_tokenizer_spec(dir));
  io::export_hf_tokenizer(*chars, 16, dir.file("hf"));  // frugal_tokenizer.json: import's default

  const CliResult imported = run_frugal("import " + dir.file("hf") + " " + dir.file("run"));
  ASSERT_EQ(imported.rc, 0) << imported.output;
  const CliResult exported = run_frugal("export --format hf " + dir.file("run") + " " + dir.file("hf2"));
  ASSERT_EQ(exported.rc, 0) << exported.output;
  const std::string out = imported.output + exported.output;  // either may say it
  EXPECT_TRUE(contains(out, "transformers has no tokenizer matching")) << out;
  EXPECT_EQ(data::read_text_file(dir.file("hf2/model.safetensors")),
            data::read_text_file(dir.file("hf/model.safetensors")));

  const CliResult onnx = run_frugal("export --format onnx " + dir.file("run") + " " + dir.file("x"));
  EXPECT_NE(onnx.rc, 0);
  EXPECT_TRUE(contains(onnx.output, "onnx")) << onnx.output;
  const CliResult missing = run_frugal("import " + dir.file("nowhere") + " " + dir.file("run2"));
  EXPECT_EQ(missing.rc, 1);
  EXPECT_TRUE(contains(missing.output, "config.json' is missing")) << missing.output;
}
