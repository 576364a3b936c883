// Hugging Face BERT interchange: a frugal encoder (model.objective = "mlm", post-LN) as a directory
// that transformers' BertForMaskedLM.from_pretrained loads (config.json + model.safetensors), and
// such a directory (ours or one transformers' save_pretrained wrote) back into a frugal encoder
// (hf_model.h dispatches between it and GPT-2, writes the tokenizer files and the checkpoint).
//
// The mapping (frugal name -> BERT name; "bert." prefixed as BertForMaskedLM writes it):
//   transformer.wte / wpe        -> bert.embeddings.word_embeddings / position_embeddings (V / T rows)
//   (none: zero)                 -> bert.embeddings.token_type_embeddings (1, C)
//   transformer.ln_emb           -> bert.embeddings.LayerNorm
//   transformer.h.L.attn.c_attn  -> bert.encoder.layer.L.attention.self.query / key / value (its
//                                   rows [0, C), [C, 2C), [2C, 3C), weight and bias)
//   transformer.h.L.attn.c_proj  -> bert.encoder.layer.L.attention.output.dense
//   transformer.h.L.ln_1         -> bert.encoder.layer.L.attention.output.LayerNorm (post-LN: after
//                                   the attention's residual sum)
//   transformer.h.L.mlp.c_fc     -> bert.encoder.layer.L.intermediate.dense
//   transformer.h.L.mlp.c_proj   -> bert.encoder.layer.L.output.dense
//   transformer.h.L.ln_2         -> bert.encoder.layer.L.output.LayerNorm
//   lm_head.dense / layer_norm   -> cls.predictions.transform.dense / LayerNorm
//   lm_head.bias (V)             -> cls.predictions.bias; the decoder is tied to the word
//                                   embeddings (no cls.predictions.decoder.* in the file)
// Both store linears (OC, IC) (nn.Linear); nothing is transposed. BERT's functions match frugal's:
// post-LN blocks, attention scores scaled by 1/sqrt(head size), one LayerNorm epsilon, and the
// tanh GELU in the MLP and the head when hidden_act is "gelu_new" (BertForMaskedLM's head takes
// hidden_act too). BERT adds token_type_embeddings[0] to every position (frugal has no token
// types): an import folds that row into the position embeddings.
#pragma once
#include <memory>
#include <string>

#include "frugal/io/safetensors.h"
#include "frugal/model/config.h"
#include "frugal/model/gpt.h"

namespace frugal::io {

// Throws Error saying why when BertForMaskedLM cannot compute what `config` does (a causal or
// pre-LN model, no biases, a gated or relu2 MLP, rotary positions, QK-norm, soft-capped logits,
// a mixture of experts).
void check_hf_bert_exportable(const ModelConfig& config);

// Writes out_dir/config.json (a transformers BertConfig, architectures BertForMaskedLM) and
// out_dir/model.safetensors in `dtype` (F32 or BF16, rounded to nearest even); creates out_dir.
// Throws Error (check_hf_bert_exportable) when the export would compute another function. An
// encoder's attention is bidirectional in every block (GPT::set_attention_pattern refuses others),
// as BERT's.
void export_hf_bert(const GPT& model, const std::string& out_dir, DType dtype = DType::F32);

// The frugal ModelConfig a BERT config.json describes (an encoder: objective mlm, post-LN, tied).
// Throws Error naming the file and key for what frugal cannot compute: another model_type,
// hidden_act other than the tanh GELU ("gelu" is the erf form), relative positions, a decoder or
// cross-attention, an untied decoder, an intermediate_size that is not a multiple of hidden_size.
ModelConfig read_hf_bert_config(const std::string& config_json_path);

// Loads hf_dir/config.json + hf_dir/model.safetensors (F32, F16 or BF16; "bert."-prefixed names
// or BertModel's un-prefixed ones; a tied decoder absent, or present and equal to what it is tied
// to; BertForPreTraining's pooler and next-sentence head ignored) into a new encoder. Errors name
// the file and the missing, mis-shaped, unequal or unexpected tensor.
std::unique_ptr<GPT> read_hf_bert(const std::string& hf_dir);

}  // namespace frugal::io
