// The Hugging Face interchange of any frugal model, the one place that tells the layouts apart:
// an export by the model's objective (a causal decoder as GPT2LMHeadModel, hf_gpt2.h; a masked-LM
// encoder as BertForMaskedLM, hf_bert.h) with the tokenizer files, and an import by config.json's
// model_type ("gpt2", "bert") into a frugal checkpoint.
#pragma once
#include <memory>
#include <string>

#include "frugal/data/tokenizer.h"
#include "frugal/io/safetensors.h"
#include "frugal/model/gpt.h"

namespace frugal::io {

struct HfExport {
  std::string architecture;  // "GPT2LMHeadModel" or "BertForMaskedLM"
  bool tokenizer_files;      // AutoTokenizer's files were written (export_hf_tokenizer)
  std::string dropped;       // what --allow-lossy dropped (hf_gpt2_inexpressible), empty when nothing
};

// Writes config.json, model.safetensors (F32 or BF16) and the tokenizer files of `model`, trained
// with `tokenizer`, into out_dir (created). An encoder's vocabulary must hold the tokenizer's tokens
// and the mask after them (data::encoder_vocab_size). allow_lossy: a decoder's sparse attention is
// exported as dense causal attention (export_hf_gpt2); an encoder's export is never lossy.
HfExport export_hf(const GPT& model, const data::Tokenizer& tokenizer, const std::string& out_dir,
                   bool allow_lossy = false, DType dtype = DType::F32);

// Writes the tokenizer files next to an export: frugal_tokenizer.json (the tokenizer itself, which
// `frugal import` picks up) and, for byte-level BPE (GPT-2's or a trained one), vocab.json +
// merges.txt + tokenizer.json + tokenizer_config.json so transformers' AutoTokenizer loads it.
// mask_token >= 0 (an encoder's: the tokenizer's vocab_size()): data::kMaskToken is added there as
// a special token and named the mask_token, so pipeline("fill-mask") works. Returns false when
// transformers has no equivalent (char).
bool export_hf_tokenizer(const data::Tokenizer& tokenizer, int model_max_length, const std::string& out_dir,
                         int mask_token = -1);

// The model of hf_dir (config.json + model.safetensors), read by config.json's model_type: "gpt2"
// (or none) with read_hf_gpt2, "bert" with read_hf_bert; throws Error naming the file for others.
std::unique_ptr<GPT> read_hf(const std::string& hf_dir);

// read_hf, then saves it as a frugal checkpoint (model only) under the run directory out_dir and
// returns the checkpoint's path. tokenizer_spec as for data::load_tokenizer; empty:
// hf_dir/frugal_tokenizer.json when present, else "gpt2" when the vocabulary is GPT-2's (an
// encoder's: GPT-2's and the mask). The model's vocabulary must hold the tokenizer's tokens (and an
// encoder's the mask after them); it may be larger (a padded vocabulary). Holds out_dir's run-directory lock
// (io/dir_lock.h) throughout: a directory in use is refused.
std::string import_hf(const std::string& hf_dir, const std::string& out_dir, const std::string& tokenizer_spec = "");

}  // namespace frugal::io
