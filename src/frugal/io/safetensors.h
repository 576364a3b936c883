// safetensors: the ecosystem's tensor file format (8-byte little-endian header length, a JSON
// header mapping names to {dtype, shape, data_offsets}, then the raw bytes). Reading validates
// everything against the file size before any byte is trusted; writing is atomic.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace frugal::io {

enum class DType { F32, F64, I32, I64, U16, U32, U8 };
const char* dtype_name(DType d);  // safetensors spelling: "F32", "I32", ...
size_t dtype_size(DType d);

struct TensorData {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // little-endian, row-major
  size_t numel() const;
  // Copies out as float32 (F32 only; throws for other dtypes, naming the tensor).
  std::vector<float> to_f32(const std::string& name) const;
};

struct SafeTensors {
  std::map<std::string, TensorData> tensors;
  std::map<std::string, std::string> metadata;  // the optional "__metadata__" string map
  const TensorData& at(const std::string& name) const;  // throws Error naming what is missing
  void put_f32(const std::string& name, std::vector<int64_t> shape, const float* data);
};

// Throws frugal::Error with the path and what is wrong (truncated, bad header JSON, offsets out
// of range or overlapping, unknown dtype, shape/size mismatch).
SafeTensors read_safetensors(const std::string& path);
SafeTensors parse_safetensors(const uint8_t* data, size_t size, const std::string& what);
// Written to a temporary file in the same directory, fsync'ed, then renamed over `path`.
void write_safetensors(const std::string& path, const SafeTensors& st);

}  // namespace frugal::io
