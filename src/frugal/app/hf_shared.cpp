// The pieces both Hugging Face layouts share; see hf_shared.h.
#include "frugal/app/hf_shared.h"

#include <fmt/format.h>

#include <filesystem>

#include "frugal/core/error.h"
#include "frugal/data/text.h"
#include "frugal/kernels/ops.h"

namespace frugal::io {

namespace fs = std::filesystem;
using nlohmann::json;

json read_hf_config_json(const std::string& path) {
  FRUGAL_CHECK(fs::exists(path), "'{}' is missing; a Hugging Face model directory needs config.json "
               "(save the model with save_pretrained or `frugal export --format hf`)", path);
  json j;
  try {
    j = json::parse(data::read_text_file(path));
  } catch (const json::exception& e) {
    fail("'{}' is not valid JSON ({}); fix it or save the model again with save_pretrained", path, e.what());
  }
  FRUGAL_CHECK(j.is_object(), "'{}' is not a JSON object; it is not a transformers config.json", path);
  return j;
}

HfConfigReader::HfConfigReader(const json& j, std::string path, std::string family, std::string config_class)
    : j_(j), path_(std::move(path)), family_(std::move(family)), config_class_(std::move(config_class)) {}

const json* HfConfigReader::find(const char* key) const {
  auto it = j_.find(key);
  return it == j_.end() || it->is_null() ? nullptr : &*it;
}

int64_t HfConfigReader::integer(const char* key, std::optional<int64_t> fallback) const {
  const json* v = find(key);
  if (!v) {
    FRUGAL_CHECK(fallback.has_value(), "{}: \"{}\" is missing; a {} config.json needs it (write it with "
                 "transformers' {}.save_pretrained)", path_, key, family_, config_class_);
    return *fallback;
  }
  FRUGAL_CHECK(v->is_number_integer(), "{}: \"{}\" is {}, expected an integer; fix the file", path_, key, v->dump());
  return v->get<int64_t>();
}

int HfConfigReader::count(const char* key, std::optional<int64_t> fallback) const {
  const int64_t v = integer(key, fallback);
  FRUGAL_CHECK(v >= 0 && v <= (int64_t(1) << 30), "{}: \"{}\" = {} is out of range; fix the file", path_, key, v);
  return static_cast<int>(v);
}

double HfConfigReader::number(const char* key, double fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  FRUGAL_CHECK(v->is_number(), "{}: \"{}\" is {}, expected a number; fix the file", path_, key, v->dump());
  return v->get<double>();
}

bool HfConfigReader::boolean(const char* key, bool fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  FRUGAL_CHECK(v->is_boolean(), "{}: \"{}\" is {}, expected true or false; fix the file", path_, key, v->dump());
  return v->get<bool>();
}

std::string HfConfigReader::string(const char* key, const std::string& fallback) const {
  const json* v = find(key);
  if (!v) return fallback;
  FRUGAL_CHECK(v->is_string(), "{}: \"{}\" is {}, expected a string; fix the file", path_, key, v->dump());
  return v->get<std::string>();
}

void HfConfigReader::expect_model_type(const char* type, const char* fallback) const {
  const std::string found = string("model_type", fallback);
  FRUGAL_CHECK(found == type, "{}: model_type \"{}\" is not supported; only {} models (model_type \"{}\") can be "
               "imported", path_, found, family_, type);
}

void HfConfigReader::expect_tanh_gelu(const char* key, const char* fallback) const {
  const std::string act = string(key, fallback);
  FRUGAL_CHECK(act != "gelu", "{}: {} \"gelu\" is the exact (erf) GELU, which frugal does not compute (its "
               "GELU is the tanh form, \"gelu_new\"), so the imported model would compute another function; "
               "only {} models with {} \"gelu_new\" or \"gelu_pytorch_tanh\" can be imported", path_, key, family_, key);
  FRUGAL_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh", "{}: {} \"{}\" is not supported; frugal uses the "
               "tanh GELU (\"gelu_new\" or \"gelu_pytorch_tanh\")", path_, key, act);
}

int HfConfigReader::ffn_mult(const char* hidden_key, std::optional<int64_t> fallback, const char* width_key,
                             int width) const {
  const int hidden = count(hidden_key, fallback);
  FRUGAL_CHECK(width > 0 && hidden % width == 0, "{}: {} = {} is not a multiple of {} = {}; frugal's MLP width "
               "is ffn_mult * n_embd", path_, hidden_key, hidden, width_key, width);
  return hidden / width;
}

void HfConfigReader::validate(const ModelConfig& m) const {
  try {
    m.validate();
  } catch (const Error& e) {
    fail("{} describes a model frugal cannot hold: {}", path_, e.what());
  }
}

void HfConfigReader::expect_bool(const char* key, bool supported, const char* why) const {
  FRUGAL_CHECK(boolean(key, supported) == supported,
               "{}: \"{}\" = {} is not supported: {}; only {} models with \"{}\" = {} can be imported", path_,
               key, !supported, why, family_, key, supported);
}

std::string shape_str(const std::vector<int64_t>& shape) { return fmt::format("({})", fmt::join(shape, ", ")); }

SafeTensors read_hf_weights(const std::string& hf_dir) {
  const std::string path = hf_dir + "/model.safetensors";
  if (!fs::exists(path)) {
    FRUGAL_CHECK(!fs::exists(hf_dir + "/model.safetensors.index.json"),
                 "'{}' is a sharded checkpoint, which frugal cannot import; save it as one file with "
                 "save_pretrained(dir, max_shard_size=\"100GB\")", hf_dir);
    fail("'{}' is missing; frugal imports safetensors weights only (save the model with "
         "save_pretrained(dir, safe_serialization=True))", path);
  }
  return read_safetensors(path);
}

std::vector<float> read_hf_tensor(const SafeTensors& st, const std::string& st_path, const std::string& name,
                                  const std::vector<int64_t>& shape) {
  const TensorData& data = st.tensors.at(name);
  FRUGAL_CHECK(data.shape == shape, "{}: tensor '{}' has shape {}, but config.json implies {}; "
               "the weights do not belong to this config.json", st_path, name, shape_str(data.shape),
               shape_str(shape));
  return data.to_f32(name);
}

void put_hf_tensor(SafeTensors& st, const std::string& name, const std::vector<int64_t>& shape,
                   const float* values, DType dtype) {
  if (dtype == DType::F32) {
    st.put_f32(name, shape, values);
    return;
  }
  FRUGAL_CHECK(dtype == DType::BF16, "internal: an export in {}", dtype_name(dtype));
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  std::vector<kernels::bf16> rounded(static_cast<size_t>(numel));
  kernels::f32_to_bf16(rounded.data(), values, rounded.size());
  st.put(name, DType::BF16, shape, rounded.data());
}

void write_hf_weights(const std::string& out_dir, SafeTensors& st) {
  st.metadata["format"] = "pt";  // transformers refuses safetensors files without it
  write_safetensors(out_dir + "/model.safetensors", st);
}

const char* hf_torch_dtype(DType dtype) { return dtype == DType::BF16 ? "bfloat16" : "float32"; }

}  // namespace frugal::io
