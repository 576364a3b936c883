// What the Hugging Face layouts (hf_gpt2.h: GPT2LMHeadModel, hf_bert.h: BertForMaskedLM) share:
// config.json read with errors that name the file and key, and the weights file read and written
// (F32 or BF16). hf_model.h dispatches between the layouts.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "frugal/io/safetensors.h"
#include "frugal/model/config.h"

namespace frugal::io {

// The JSON object in `path` (a transformers config.json); throws Error naming the file when it is
// missing, malformed or not an object.
nlohmann::json read_hf_config_json(const std::string& path);

// Typed access to config.json keys; errors name the file and key. `family` ("GPT-2") and
// `config_class` ("GPT2Config") are what its messages tell the user to write.
class HfConfigReader {
 public:
  HfConfigReader(const nlohmann::json& j, std::string path, std::string family, std::string config_class);

  const nlohmann::json* find(const char* key) const;  // nullptr when absent or null
  int64_t integer(const char* key, std::optional<int64_t> fallback = std::nullopt) const;
  // integer(), in [0, 2^30]: a count or size frugal holds in an int.
  int count(const char* key, std::optional<int64_t> fallback = std::nullopt) const;
  double number(const char* key, double fallback) const;
  bool boolean(const char* key, bool fallback) const;
  std::string string(const char* key, const std::string& fallback) const;
  // Throws unless model_type (absent: fallback) is `type`.
  void expect_model_type(const char* type, const char* fallback) const;
  // Throws unless the activation `key` (absent: fallback) is the tanh GELU frugal computes:
  // "gelu_new" or "gelu_pytorch_tanh" ("gelu", the erf form, is refused saying so).
  void expect_tanh_gelu(const char* key, const char* fallback) const;
  // The MLP's ffn_mult: count(hidden_key) / width, where width is n_embd's value (key width_key);
  // throws unless it divides.
  int ffn_mult(const char* hidden_key, std::optional<int64_t> fallback, const char* width_key, int width) const;
  // m.validate(), its error naming the file.
  void validate(const ModelConfig& m) const;
  // Throws unless `key` is absent or has the value frugal computes.
  void expect_bool(const char* key, bool supported, const char* why) const;
  const std::string& path() const { return path_; }

 private:
  const nlohmann::json& j_;
  std::string path_, family_, config_class_;
};

std::string shape_str(const std::vector<int64_t>& shape);  // "(3, 4)"

// hf_dir/model.safetensors; throws Error saying what to do when it is absent (or sharded).
SafeTensors read_hf_weights(const std::string& hf_dir);
// The tensor `name` of the weights file at st_path, as fp32; throws Error naming both when its
// shape is not `shape` (what config.json implies).
std::vector<float> read_hf_tensor(const SafeTensors& st, const std::string& st_path, const std::string& name,
                                  const std::vector<int64_t>& shape);
// Adds values (shape) to st in `dtype`: F32 as they are, BF16 rounded to nearest, ties to even.
void put_hf_tensor(SafeTensors& st, const std::string& name, const std::vector<int64_t>& shape,
                   const float* values, DType dtype);
// Writes st as out_dir/model.safetensors with the metadata transformers requires (format "pt").
void write_hf_weights(const std::string& out_dir, SafeTensors& st);
// config.json's torch_dtype of an export in `dtype` (F32 or BF16).
const char* hf_torch_dtype(DType dtype);

}  // namespace frugal::io
