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
