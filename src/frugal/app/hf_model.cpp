// The Hugging Face export/import dispatch, tokenizer files and checkpoint writing; see hf_model.h.
#include "frugal/app/hf_model.h"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "frugal/app/hf_bert.h"
#include "frugal/app/hf_gpt2.h"
#include "frugal/app/hf_shared.h"
#include "frugal/core/error.h"
#include "frugal/data/byte_level.h"
#include "frugal/data/masking.h"
#include "frugal/data/text.h"
#include "frugal/io/atomic_file.h"
#include "frugal/io/dir_lock.h"
#include "frugal/train/checkpoint.h"
#include "frugal/train/run_config.h"

namespace frugal::io {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;  // the tokenizer files keep their keys' order

namespace {

constexpr int kGpt2VocabSize = 50257;  // GPT-2's BPE vocabulary, <|endoftext|> included

// A special token as tokenizer.json's added_tokens and tokenizer_config.json's added_tokens_decoder
// list it. lstrip: it takes the space before it (the mask stands for a word with its leading space).
json special_token(const std::string& content, bool lstrip) {
  return {{"content", content}, {"single_word", false}, {"lstrip", lstrip}, {"rstrip", false},
          {"normalized", false}, {"special", true}};
}

// Adds the mask token at id `mask` to the fast tokenizer's tokenizer.json in dir.
void add_mask_token(const std::string& dir, int mask) {
  const std::string path = (fs::path(dir) / "tokenizer.json").string();
  json j = json::parse(data::read_text_file(path));
  json token = {{"id", mask}};
  token.update(special_token(std::string(data::kMaskToken), true));
  j["added_tokens"].push_back(token);
  write_file_atomic(path, j.dump(1) + "\n");
}

void set_model_keys(Config& config, const ModelConfig& m) {
  config.set("model.vocab_size", std::to_string(m.vocab_size));
  config.set("model.block_size", std::to_string(m.block_size));
  config.set("model.n_layer", std::to_string(m.n_layer));
  config.set("model.n_head", std::to_string(m.n_head));
  config.set("model.n_embd", std::to_string(m.n_embd));
  config.set("model.ffn_mult", std::to_string(m.ffn_mult));
  config.set("model.mlp", mlp_kind_name(m.mlp));
  config.set("model.norm", norm_placement_name(m.norm));
  config.set("model.objective", objective_kind_name(m.objective));
  config.set("model.tied_head", m.tied_head ? "true" : "false");
  config.set("model.bias", m.bias ? "true" : "false");
  config.set("model.dropout", fmt::format("{}", m.dropout));
  config.set("model.layernorm_eps", fmt::format("{}", m.layernorm_eps));
  config.set("model.init_std", fmt::format("{}", m.init_std));
}

}  // namespace

HfExport export_hf(const GPT& model, const data::Tokenizer& tokenizer, const std::string& out_dir, bool allow_lossy,
                   DType dtype) {
  const ModelConfig& c = model.config();
  HfExport out;
  int mask = -1;
  if (c.encoder()) {
    FRUGAL_CHECK(c.vocab_size >= data::encoder_vocab_size(tokenizer),
                 "the encoder's vocabulary has {} ids, too few for its tokenizer's {} tokens and {}; the "
                 "checkpoint's tokenizer is not the one it was trained with", c.vocab_size, tokenizer.vocab_size(),
                 data::kMaskToken);
    mask = data::encoder_masking(tokenizer).mask_id;
    export_hf_bert(model, out_dir, dtype);
    out.architecture = "BertForMaskedLM";
  } else {
    export_hf_gpt2(model, out_dir, tokenizer.eot_token(), allow_lossy, dtype);
    out.architecture = "GPT2LMHeadModel";
    out.dropped = hf_gpt2_inexpressible(model);
  }
  out.tokenizer_files = export_hf_tokenizer(tokenizer, c.block_size, out_dir, mask);
  return out;
}

bool export_hf_tokenizer(const data::Tokenizer& tokenizer, int model_max_length, const std::string& out_dir,
                         int mask_token) {
  create_directories(out_dir, "the export directory");
  write_file_atomic((fs::path(out_dir) / data::kTokenizerFile).string(), tokenizer.to_json());
  const data::BpeModel* bpe = tokenizer.bpe_model();
  if (!bpe) return false;
  // vocab.json + merges.txt (GPT2Tokenizer) and tokenizer.json (the fast tokenizer).
  data::write_bpe_files(*bpe, out_dir);
  const std::string eot(data::kEndOfText);
  json tok_cfg = {{"tokenizer_class", "GPT2Tokenizer"}, {"model_max_length", model_max_length},
                  {"bos_token", eot}, {"eos_token", eot}, {"unk_token", eot}, {"add_prefix_space", false}};
  if (mask_token >= 0) {
    add_mask_token(out_dir, mask_token);
    tok_cfg["mask_token"] = data::kMaskToken;
    tok_cfg["added_tokens_decoder"] = {{std::to_string(mask_token), special_token(std::string(data::kMaskToken), true)}};
    if (bpe->eot >= 0) tok_cfg["added_tokens_decoder"][std::to_string(bpe->eot)] = special_token(eot, false);
  }
  write_file_atomic(out_dir + "/tokenizer_config.json", tok_cfg.dump(2) + "\n");
  return true;
}

std::unique_ptr<GPT> read_hf(const std::string& hf_dir) {
  const std::string path = hf_dir + "/config.json";
  const nlohmann::json j = read_hf_config_json(path);
  const std::string type = j.contains("model_type") && j["model_type"].is_string()
                               ? j["model_type"].get<std::string>() : "gpt2";  // older GPT-2 configs lack it
  if (type == "bert") return read_hf_bert(hf_dir);
  FRUGAL_CHECK(type == "gpt2", "{}: model_type \"{}\" is not supported; frugal imports GPT-2 (\"gpt2\", "
               "GPT2LMHeadModel) and BERT (\"bert\", BertForMaskedLM) models", path, type);
  return read_hf_gpt2(hf_dir);
}

std::string import_hf(const std::string& hf_dir, const std::string& out_dir, const std::string& tokenizer_spec) {
  const DirLock lock = DirLock::exclusive(out_dir, "run directory",
                                         "wait for that process to end or import into another directory");
  FRUGAL_CHECK(!run_has_checkpoints(out_dir), "{} already holds checkpoints; `frugal import` "
               "writes a new run: give it an empty or new directory", out_dir);
  const std::unique_ptr<GPT> model = read_hf(hf_dir);
  const ModelConfig& m = model->config();
  std::string spec = tokenizer_spec;
  // Only frugal's own file name: an HF directory's tokenizer.json is Hugging Face's format.
  const std::string frugal_tokenizer = (fs::path(hf_dir) / data::kTokenizerFile).string();
  if (spec.empty() && fs::exists(frugal_tokenizer)) spec = frugal_tokenizer;
  if (spec.empty()) {
    const int beyond = m.encoder() ? 1 : 0;  // an encoder's mask, after the tokenizer's tokens
    FRUGAL_CHECK(m.vocab_size == kGpt2VocabSize + beyond,
                 "cannot tell the tokenizer of '{}' (vocab_size {} is not GPT-2's {}{}); pass it "
                 "with --tokenizer SPEC (gpt2, gpt2:DIR or char:VOCAB_FILE)", hf_dir, m.vocab_size,
                 kGpt2VocabSize + beyond, beyond ? " and the mask" : "");
    spec = "gpt2";
  }
  const std::unique_ptr<data::Tokenizer> tokenizer = data::load_tokenizer(spec);
  const int needed = m.encoder() ? data::encoder_vocab_size(*tokenizer) : tokenizer->vocab_size();
  FRUGAL_CHECK(needed <= m.vocab_size, "tokenizer '{}' has {} tokens{} but the model's vocabulary only {}; pass the "
               "tokenizer the model was trained with (--tokenizer SPEC)", spec, tokenizer->vocab_size(),
               m.encoder() ? fmt::format(" (and the encoder's {} after them)", data::kMaskToken) : "", m.vocab_size);

  Config config(run_schema());
  set_model_keys(config, m);
  config.set("train.out_dir", out_dir);
  return save_checkpoint(out_dir, config, *model, nullptr, TrainState{}, tokenizer->to_json(), 1);
}

}  // namespace frugal::io
