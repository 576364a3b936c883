// safetensors reading (validate the header against the buffer before copying any tensor bytes)
// and writing (sorted JSON header padded to 8 bytes, streamed through AtomicFileWriter).
#include "frugal/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "frugal/core/error.h"
#include "frugal/io/atomic_file.h"

namespace frugal::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian bytes; frugal supports little-endian hosts only");

namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // larger headers are corruption, not models
constexpr const char* kMetadataKey = "__metadata__";
constexpr const char* kCorrupt = "the file is corrupt or not a safetensors file";
constexpr const char* kTruncated = "the file is truncated or not a safetensors file";

struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::F32, "F32", 4}, {DType::F64, "F64", 8},   {DType::I32, "I32", 4},
    {DType::I64, "I64", 8}, {DType::U16, "U16", 2},   {DType::U32, "U32", 4},
    {DType::U8, "U8", 1},   {DType::F16, "F16", 2},   {DType::BF16, "BF16", 2},
    {DType::I8, "I8", 1},   {DType::I16, "I16", 2},   {DType::U64, "U64", 8},
    {DType::BOOL, "BOOL", 1},
};

const DTypeInfo& info(DType d) {
  for (const DTypeInfo& i : kDTypes)
    if (i.dtype == d) return i;
  fail("invalid DType value {}; this is a bug in the caller", static_cast<int>(d));
}

std::string known_dtypes() {
  std::string out;
  for (const DTypeInfo& i : kDTypes) out += (out.empty() ? "" : ", ") + std::string(i.name);
  return out;
}

// numel * dtype size, or false when a dimension is negative or the product overflows.
bool checked_nbytes(const std::vector<int64_t>& shape, size_t elem_size, size_t* out) {
  size_t n = elem_size;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  }
  *out = n;
  return true;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
    float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  uint32_t bits = exponent == 31 ? (sign | 0x7f800000u | (mantissa << 13))
                                 : (sign | ((exponent + 112) << 23) | (mantissa << 13));
  return std::bit_cast<float>(bits);
}

// One validated header entry.
struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;  // byte range within the data section
};

// The error for a damaged file: what is wrong, what that means (kCorrupt, kTruncated) and the
// caller's remedy.
[[noreturn]] void damaged(const std::string& what, const std::string& problem, const char* meaning,
                          const DamageRemedy& remedy) {
  fail("{}: {}; {}; {}", what, problem, meaning, remedy());
}

class HeaderParser {
 public:
  HeaderParser(const std::string& what, uint64_t data_size, const DamageRemedy& remedy)
      : what_(what), data_size_(data_size), remedy_(remedy) {}

  [[noreturn]] void corrupt(const std::string& problem, const char* meaning = kCorrupt) const {
    damaged(what_, problem, meaning, remedy_);
  }

  uint64_t unsigned_field(const json& v, const std::string& tensor, const std::string& field) const {
    if (!v.is_number_unsigned())
      corrupt(fmt::format("tensor '{}' {} is {}, not a non-negative integer", tensor, field, v.dump()));
    return v.get<uint64_t>();
  }

  Entry entry(const std::string& name, const json& e) const {
    if (!e.is_object())
      corrupt(fmt::format("tensor '{}' is a JSON {}, not an object with dtype, shape and "
                          "data_offsets", name, e.type_name()));
    for (const char* field : {"dtype", "shape", "data_offsets"})
      if (!e.contains(field)) corrupt(fmt::format("tensor '{}' has no '{}'", name, field));
    Entry out;
    out.name = name;
    const json& dtype = e["dtype"];
    if (!dtype.is_string() || !parse_dtype(dtype.get<std::string>(), &out.dtype))
      fail("{}: tensor '{}' has unknown dtype {}; frugal reads {}; convert the file to one of them",
           what_, name, dtype.dump(), known_dtypes());
    const json& shape = e["shape"];
    if (!shape.is_array())
      corrupt(fmt::format("tensor '{}' shape is {}, not an array", name, shape.dump()));
    for (size_t i = 0; i < shape.size(); ++i) {
      uint64_t d = unsigned_field(shape[i], name, fmt::format("shape[{}]", i));
      if (d > static_cast<uint64_t>(INT64_MAX))
        corrupt(fmt::format("tensor '{}' shape[{}] = {} is too large", name, i, d));
      out.shape.push_back(static_cast<int64_t>(d));
    }
    size_t nbytes = 0;
    if (!checked_nbytes(out.shape, dtype_size(out.dtype), &nbytes))
      corrupt(fmt::format("tensor '{}' shape {} overflows the size of any file", name,
                          shape_string(out.shape)));
    const json& offsets = e["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2)
      corrupt(fmt::format("tensor '{}' data_offsets is {}, not [begin, end]", name, offsets.dump()));
    out.begin = unsigned_field(offsets[0], name, "data_offsets[0]");
    out.end = unsigned_field(offsets[1], name, "data_offsets[1]");
    if (out.begin > out.end)
      corrupt(fmt::format("tensor '{}' data_offsets [{}, {}] end before they begin", name,
                          out.begin, out.end));
    if (out.end - out.begin != nbytes)
      corrupt(fmt::format("tensor '{}' data_offsets [{}, {}] hold {} bytes but dtype {} shape {} "
                          "needs {}", name, out.begin, out.end, out.end - out.begin,
                          dtype_name(out.dtype), shape_string(out.shape), nbytes));
    if (out.end > data_size_)
      corrupt(fmt::format("tensor '{}' data_offsets [{}, {}] run past the end of the data "
                          "({} bytes)", name, out.begin, out.end, data_size_), kTruncated);
    return out;
  }

  std::map<std::string, std::string> metadata(const json& m) const {
    if (!m.is_object())
      corrupt(fmt::format("__metadata__ is a JSON {}, not a map of strings", m.type_name()));
    std::map<std::string, std::string> out;
    for (const auto& [key, value] : m.items()) {
      if (!value.is_string())
        corrupt(fmt::format("__metadata__ '{}' is a JSON {}, not a string", key, value.type_name()));
      out[key] = value.get<std::string>();
    }
    return out;
  }

  // Every data byte must belong to exactly one tensor: sorted ranges must tile [0, data_size).
  void check_tiling(std::vector<Entry>& entries) const {
    std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t covered = 0;
    const Entry* previous = nullptr;
    for (const Entry& e : entries) {
      if (e.begin < covered)
        corrupt(fmt::format("tensors '{}' and '{}' overlap (data_offsets [{}, {}] and [{}, {}])",
                            previous->name, e.name, previous->begin, previous->end, e.begin, e.end));
      if (e.begin > covered)
        corrupt(fmt::format("data bytes [{}, {}) before tensor '{}' belong to no tensor", covered,
                            e.begin, e.name));
      covered = e.end;
      previous = &e;
    }
    if (covered != data_size_)
      corrupt(fmt::format("data bytes [{}, {}) at the end belong to no tensor", covered, data_size_));
  }

 private:
  const std::string& what_;
  uint64_t data_size_;
  const DamageRemedy& remedy_;
};

// The header JSON for `tensors` with the byte offsets of each tensor in name order, padded with
// spaces so that 8 + header length is a multiple of 8.
std::string encode_header(const std::map<std::string, std::string>& metadata,
                          const std::map<std::string, TensorView>& tensors) {
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    FRUGAL_CHECK(name != kMetadataKey, "a tensor may not be named '{}'; rename it", kMetadataKey);
    size_t nbytes = 0;
    FRUGAL_CHECK(checked_nbytes(t.shape, dtype_size(t.dtype), &nbytes), "tensor '{}' shape {} is "
                 "invalid (negative or overflowing); fix the code that filled it", name, shape_string(t.shape));
    header[name] = {{"dtype", dtype_name(t.dtype)},
                    {"shape", t.shape},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    fail("cannot write safetensors header: {}; tensor names and metadata must be valid UTF-8",
         e.what());
  }
  text.resize((text.size() + 7) / 8 * 8, ' ');
  return text;
}

size_t view_bytes(const TensorView& t) {
  size_t n = 0;
  checked_nbytes(t.shape, dtype_size(t.dtype), &n);  // checked by encode_header
  return n;
}

// Views of st's tensors, after checking that each holds as many bytes as its shape needs.
std::map<std::string, TensorView> views_of(const SafeTensors& st) {
  std::map<std::string, TensorView> views;
  for (const auto& [name, t] : st.tensors) {
    size_t nbytes = 0;
    FRUGAL_CHECK(checked_nbytes(t.shape, dtype_size(t.dtype), &nbytes) && nbytes == t.bytes.size(),
                 "tensor '{}' holds {} bytes but dtype {} shape {} needs {}; fix the code that "
                 "filled it", name, t.bytes.size(), dtype_name(t.dtype), shape_string(t.shape),
                 nbytes);
    views[name] = {t.dtype, t.shape, t.bytes.data()};
  }
  return views;
}

std::array<uint8_t, 8> length_prefix(uint64_t n) {
  std::array<uint8_t, 8> out;
  std::memcpy(out.data(), &n, 8);
  return out;
}

// Read-only mapping of a whole file, unmapped on destruction.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      fail("cannot open safetensors file '{}': {}; check the path", path, std::strerror(err));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      fail("'{}' is not a regular file; pass the path of a .safetensors file", path);
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      int err = errno;
      ::close(fd);
      if (p == MAP_FAILED) fail("cannot map '{}': {}; check free memory", path, std::strerror(err));
      data_ = static_cast<const uint8_t*>(p);
    } else {
      ::close(fd);
    }
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // Gives back the pages of [p, p + n) that were read: they count in the process's memory until
  // unmapped, and read from the file again if touched.
  void drop_pages(const uint8_t* p, size_t n) const {
    const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const uintptr_t begin = reinterpret_cast<uintptr_t>(p) / page * page;
    const uintptr_t end = reinterpret_cast<uintptr_t>(p + n);
    if (n > 0) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace

const char* dtype_name(DType d) { return info(d).name; }
size_t dtype_size(DType d) { return info(d).size; }

bool parse_dtype(const std::string& name, DType* out) {
  for (const DTypeInfo& i : kDTypes) {
    if (name == i.name) {
      *out = i.dtype;
      return true;
    }
  }
  return false;
}

namespace {
size_t numel_of(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}
}  // namespace

size_t TensorData::numel() const { return numel_of(shape); }

std::vector<float> TensorData::to_f32(const std::string& name) const {
  size_t n = numel();
  FRUGAL_CHECK(bytes.size() == n * dtype_size(dtype), "tensor '{}' holds {} bytes, not the {} its "
               "shape {} needs; fix the code that filled it", name, bytes.size(),
               n * dtype_size(dtype), shape_string(shape));
  std::vector<float> out(n);
  switch (dtype) {
    case DType::F32:
      if (n) std::memcpy(out.data(), bytes.data(), n * 4);
      return out;
    case DType::F16:
    case DType::BF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, bytes.data() + 2 * i, 2);
        out[i] = dtype == DType::F16 ? f16_to_f32(h)
                                     : std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
      }
      return out;
    default:
      fail("tensor '{}' has dtype {}, which does not convert to float32; use a float tensor "
           "(F32, F16 or BF16) or read its bytes directly", name, dtype_name(dtype));
  }
}

const TensorData& SafeTensors::at(const std::string& name) const {
  auto it = tensors.find(name);
  FRUGAL_CHECK(it != tensors.end(), "tensor '{}' is not in the file ({} tensors); check the name "
               "or that the file comes from a matching model", name, tensors.size());
  return it->second;
}

void SafeTensors::put(const std::string& name, DType dtype, std::vector<int64_t> shape,
                      const void* data) {
  FRUGAL_CHECK(name != kMetadataKey, "a tensor may not be named '{}'; rename it", kMetadataKey);
  size_t nbytes = 0;
  FRUGAL_CHECK(checked_nbytes(shape, dtype_size(dtype), &nbytes), "tensor '{}' shape {} is "
               "invalid (negative or overflowing); pass non-negative dimensions", name,
               shape_string(shape));
  TensorData& t = tensors[name];
  t.dtype = dtype;
  t.shape = std::move(shape);
  const uint8_t* p = static_cast<const uint8_t*>(data);
  t.bytes.assign(p, p + nbytes);
}

void SafeTensors::put_f32(const std::string& name, std::vector<int64_t> shape, const float* data) {
  put(name, DType::F32, std::move(shape), data);
}

namespace {

// A validated header: the metadata and the tensors, whose byte ranges tile the data section that
// starts at data_begin.
struct Header {
  std::map<std::string, std::string> metadata;
  std::vector<Entry> entries;
  const uint8_t* data_begin = nullptr;
};

Header parse_header(const uint8_t* data, size_t size, const std::string& what, const DamageRemedy& remedy) {
  if (size < 8)
    damaged(what, fmt::format("only {} bytes, shorter than the 8-byte header length", size),
            kTruncated, remedy);
  uint64_t header_len;
  std::memcpy(&header_len, data, 8);
  if (header_len > kMaxHeaderBytes)
    damaged(what, fmt::format("header length {} is absurd (more than {} bytes)", header_len,
                              kMaxHeaderBytes), kCorrupt, remedy);
  if (header_len > size - 8)
    damaged(what, fmt::format("header length {} is larger than the file ({} bytes)", header_len,
                              size), kTruncated, remedy);
  const uint8_t* header_begin = data + 8;
  json header;
  try {
    header = json::parse(header_begin, header_begin + header_len);
  } catch (const json::parse_error& e) {
    damaged(what, fmt::format("header is not valid JSON (error at header byte {})", e.byte),
            kCorrupt, remedy);
  } catch (const json::exception& e) {  // e.g. a number too large for a double
    damaged(what, fmt::format("header is not valid JSON ({})", e.what()), kCorrupt, remedy);
  }
  if (!header.is_object())
    damaged(what, fmt::format("header is a JSON {}, not an object", header.type_name()), kCorrupt,
            remedy);

  Header out;
  out.data_begin = header_begin + header_len;
  HeaderParser parser(what, size - 8 - header_len, remedy);
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey) {
      out.metadata = parser.metadata(value);
    } else {
      out.entries.push_back(parser.entry(name, value));
    }
  }
  parser.check_tiling(out.entries);
  return out;
}

}  // namespace

SafeTensors parse_safetensors(const uint8_t* data, size_t size, const std::string& what,
                              SafeTensorsPart part, const DamageRemedy& remedy) {
  Header header = parse_header(data, size, what, remedy);
  SafeTensors st;
  st.metadata = std::move(header.metadata);
  if (part == SafeTensorsPart::Metadata) return st;
  for (Entry& e : header.entries) {
    TensorData& t = st.tensors[e.name];
    t.dtype = e.dtype;
    t.shape = std::move(e.shape);
    t.bytes.assign(header.data_begin + e.begin, header.data_begin + e.end);
  }
  return st;
}

SafeTensors read_safetensors(const std::string& path, SafeTensorsPart part, const DamageRemedy& remedy) {
  MappedFile file(path);
  return parse_safetensors(file.data(), file.size(), path, part, remedy);
}

struct SafeTensorsReader::Impl {
  explicit Impl(const std::string& path) : path(path), file(path) {}
  std::string path;
  MappedFile file;
  Header header;
  std::map<std::string, const Entry*> by_name;
  const Entry& entry(const std::string& name) const;  // throws naming the file when it is not there
};

SafeTensorsReader::SafeTensorsReader(const std::string& path, const DamageRemedy& remedy)
    : impl_(std::make_unique<Impl>(path)) {
  impl_->header = parse_header(impl_->file.data(), impl_->file.size(), path, remedy);
  for (const Entry& e : impl_->header.entries) impl_->by_name[e.name] = &e;
}

SafeTensorsReader::~SafeTensorsReader() = default;

const std::map<std::string, std::string>& SafeTensorsReader::metadata() const { return impl_->header.metadata; }

bool SafeTensorsReader::contains(const std::string& name) const { return impl_->by_name.count(name) > 0; }

size_t SafeTensorsReader::size() const { return impl_->by_name.size(); }

const Entry& SafeTensorsReader::Impl::entry(const std::string& name) const {
  const auto it = by_name.find(name);
  FRUGAL_CHECK(it != by_name.end(), "tensor '{}' is not in {} ({} tensors); check the name or that the "
               "file comes from a matching model", name, path, by_name.size());
  return *it->second;
}

size_t SafeTensorsReader::numel(const std::string& name) const { return numel_of(impl_->entry(name).shape); }

TensorData SafeTensorsReader::read(const std::string& name) const {
  const Entry& e = impl_->entry(name);
  TensorData t;
  t.dtype = e.dtype;
  t.shape = e.shape;
  const uint8_t* begin = impl_->header.data_begin + e.begin;
  t.bytes.assign(begin, begin + (e.end - e.begin));
  impl_->file.drop_pages(begin, e.end - e.begin);
  return t;
}

std::vector<uint8_t> serialize_safetensors(const SafeTensors& st) {
  const std::map<std::string, TensorView> views = views_of(st);
  std::string header = encode_header(st.metadata, views);
  size_t total = 8 + header.size();
  for (const auto& [name, t] : st.tensors) total += t.bytes.size();
  std::vector<uint8_t> out(total);
  uint8_t* p = out.data();
  auto prefix = length_prefix(header.size());
  std::memcpy(p, prefix.data(), 8);
  std::memcpy(p + 8, header.data(), header.size());
  p += 8 + header.size();
  for (const auto& [name, t] : st.tensors) {
    if (!t.bytes.empty()) std::memcpy(p, t.bytes.data(), t.bytes.size());
    p += t.bytes.size();
  }
  return out;
}

void write_safetensors(const std::string& path, const SafeTensors& st) {
  write_safetensors(path, st.metadata, views_of(st));
}

void write_safetensors(const std::string& path, const std::map<std::string, std::string>& metadata,
                       const std::map<std::string, TensorView>& tensors) {
  std::string header = encode_header(metadata, tensors);
  AtomicFileWriter writer(path);
  auto prefix = length_prefix(header.size());
  writer.write(prefix);
  writer.write(header.data(), header.size());
  for (const auto& [name, t] : tensors)
    if (const size_t n = view_bytes(t)) writer.write(t.data, n);
  writer.commit();
}

}  // namespace frugal::io
