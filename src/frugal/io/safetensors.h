// safetensors: the ecosystem's tensor file format (8-byte little-endian header length, a JSON
// header mapping names to {dtype, shape, data_offsets}, then the raw bytes). Reading validates
// everything against the file size before any byte is trusted; writing is atomic.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace frugal::io {

// F32..U8 first (stable values), then the other dtypes found in Hugging Face checkpoints.
enum class DType { F32, F64, I32, I64, U16, U32, U8, F16, BF16, I8, I16, U64, BOOL };
const char* dtype_name(DType d);  // safetensors spelling: "F32", "I32", ...
size_t dtype_size(DType d);
// Parses a safetensors dtype spelling; false when unknown.
bool parse_dtype(const std::string& name, DType* out);

struct TensorData {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // little-endian, row-major
  size_t numel() const;
  // Copies out as float32 (F32, F16 and BF16; throws for other dtypes, naming the tensor).
  std::vector<float> to_f32(const std::string& name) const;
};

struct SafeTensors {
  std::map<std::string, TensorData> tensors;
  std::map<std::string, std::string> metadata;  // the optional "__metadata__" string map
  const TensorData& at(const std::string& name) const;  // throws Error naming what is missing
  // data: numel(shape) elements of the dtype (replaces any tensor of that name).
  void put(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data);
  void put_f32(const std::string& name, std::vector<int64_t> shape, const float* data);
};

// A tensor to be written, by reference: its bytes stay where they are until they are written.
struct TensorView {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // numel(shape) elements of the dtype
  static TensorView f32(std::vector<int64_t> shape, const float* data) { return {DType::F32, std::move(shape), data}; }
};

// What to read: everything, or the header's metadata only (the header is validated in full, but
// no tensor bytes are copied: a checkpoint's stored config without copying its weights).
enum class SafeTensorsPart { All, Metadata };
// What the error for a damaged file tells the user to do, unless the caller knows better (a
// checkpoint names the previous intact one). Called only when a file is damaged: finding the
// remedy may itself read files.
using DamageRemedy = std::function<std::string()>;
inline std::string reexport_remedy() { return "re-export it"; }
// Throws frugal::Error with the path and what is wrong (truncated, bad header JSON, offsets out
// of range or overlapping, unknown dtype, shape/size mismatch), ending in remedy() when the file
// is damaged.
SafeTensors read_safetensors(const std::string& path, SafeTensorsPart part = SafeTensorsPart::All,
                             const DamageRemedy& remedy = reexport_remedy);
// `what` names the source in error messages (a path, "buffer", ...).
SafeTensors parse_safetensors(const uint8_t* data, size_t size, const std::string& what,
                              SafeTensorsPart part = SafeTensorsPart::All,
                              const DamageRemedy& remedy = reexport_remedy);
// The complete file image: header (keys sorted, padded with spaces to a multiple of 8 bytes)
// followed by the tensors' bytes in name order. Deterministic for equal inputs.
std::vector<uint8_t> serialize_safetensors(const SafeTensors& st);
// Written to a temporary file in the same directory, fsync'ed, then renamed over `path`;
// streams the tensors, so the file image is never held in memory twice.
void write_safetensors(const std::string& path, const SafeTensors& st);
// The same from tensors by reference (a model's weights and moments written without a copy).
void write_safetensors(const std::string& path, const std::map<std::string, std::string>& metadata,
                       const std::map<std::string, TensorView>& tensors);

// A safetensors file opened to read tensor by tensor: the header is validated in full when it is
// opened (errors as read_safetensors'); read() copies one tensor's bytes and gives back the pages of
// the file it touched, so the process holds one tensor of the file at a time where
// read_safetensors holds them all.
class SafeTensorsReader {
 public:
  explicit SafeTensorsReader(const std::string& path, const DamageRemedy& remedy = reexport_remedy);
  ~SafeTensorsReader();
  SafeTensorsReader(const SafeTensorsReader&) = delete;
  SafeTensorsReader& operator=(const SafeTensorsReader&) = delete;
  const std::map<std::string, std::string>& metadata() const;
  bool contains(const std::string& name) const;
  size_t size() const;  // tensors
  // The elements of tensor `name` (from the header: nothing is read); throws as read() does.
  size_t numel(const std::string& name) const;
  // Throws Error naming the tensor and the file when it is not there.
  TensorData read(const std::string& name) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace frugal::io
