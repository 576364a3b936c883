// Hugging Face GPT-2 interchange: a frugal model as a directory that transformers'
// GPT2LMHeadModel.from_pretrained loads (config.json + model.safetensors, optionally the GPT-2
// tokenizer files), and such a directory (ours or one transformers wrote) back into a frugal model
// (hf_model.h dispatches between it and BERT, writes the tokenizer files and the checkpoint).
//
// Differences between the two layouts, all handled here:
//   - names: frugal's are GPT2LMHeadModel's ("transformer.h.0.attn.c_attn.weight", "lm_head.weight");
//     on import, GPT2Model's un-prefixed names ("h.0.attn.c_attn.weight") are accepted too;
//   - linear weights: frugal stores (OC, IC) like nn.Linear, GPT-2's Conv1D stores (IC, OC), so
//     c_attn, c_proj and c_fc weights are transposed; embeddings and lm_head stay (V, C);
//   - vocabulary: frugal pads wte/lm_head to padded_vocab() rows, GPT-2 files hold V rows;
//   - a tied head has no lm_head.weight in the file (as transformers writes it).
// GPT2LMHeadModel has a plain GELU MLP (tanh form) with biases everywhere, so gated-MLP and
// bias-free models cannot be exported.
#pragma once
#include <memory>
#include <string>

#include "frugal/io/safetensors.h"
#include "frugal/model/config.h"
#include "frugal/model/gpt.h"

namespace frugal::io {

// Throws Error saying why when GPT2LMHeadModel cannot represent `config`.
void check_hf_gpt2_exportable(const ModelConfig& config);

// What of `model`'s function GPT2LMHeadModel cannot express, empty when nothing: the blocks whose
// attention pattern leaves out some earlier position within block_size ("blocks 0, 1 attend with
// strided(w=16,s=16)"); GPT-2 attends to every earlier position. Linear formats are no loss:
// export_hf_gpt2 writes the weights as params() holds them, so a masked weight must have been
// written there first (GPT::write_effective_weights, which load_checkpoint_model does).
std::string hf_gpt2_inexpressible(const GPT& model);

// Writes out_dir/config.json (a transformers GPT2Config) and out_dir/model.safetensors (metadata
// format "pt"); creates out_dir. eos_token_id < 0 leaves bos/eos_token_id unset. Throws Error
// naming hf_gpt2_inexpressible(model) when it is not empty, unless allow_causal_attention: the
// export then attends causally to every earlier position. dtype: F32 (the weights as trained), or
// BF16 (each rounded to nearest, ties to even; config.json's torch_dtype says "bfloat16"), half
// the bytes.
void export_hf_gpt2(const GPT& model, const std::string& out_dir, int eos_token_id = -1,
                    bool allow_causal_attention = false, DType dtype = DType::F32);

// The frugal ModelConfig a GPT-2 config.json describes. Throws Error naming the file and key for
// malformed or unsupported configs (another model_type or activation, cross-attention, ...).
ModelConfig read_hf_gpt2_config(const std::string& config_json_path);

// Loads hf_dir/config.json + hf_dir/model.safetensors (F32, F16 or BF16; prefixed or un-prefixed
// names) into a new model. Errors name the missing, mis-shaped or unexpected tensor.
std::unique_ptr<GPT> read_hf_gpt2(const std::string& hf_dir);

}  // namespace frugal::io
