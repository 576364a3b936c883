// safetensors: round trips through files and one test per kind of malformed input.
#include "frugal/io/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "frugal/core/error.h"
#include "temp_dir.h"

using namespace frugal::io;
using frugal::Error;
using frugal::testing::TempDir;

namespace {

// A file image: 8-byte length of `header`, `header`, then `data_bytes` zero bytes.
std::vector<uint8_t> image(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> out(8 + header.size() + data_bytes, 0);
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

// Parsing `bytes` must throw one line naming the source, containing `problem` and `advice`.
void expect_rejected(const std::vector<uint8_t>& bytes, const std::string& problem,
                     const std::string& advice = "re-export it") {
  try {
    parse_safetensors(bytes.data(), bytes.size(), "bad.safetensors");
    FAIL() << "accepted a malformed file; expected: " << problem;
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind("bad.safetensors: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(problem), std::string::npos) << msg;
    EXPECT_NE(msg.find(advice), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
         ",\"data_offsets\":" + offsets + "}";
}

template <class T>
std::vector<T> values_of(const TensorData& t) {
  std::vector<T> out(t.numel());
  std::memcpy(out.data(), t.bytes.data(), t.bytes.size());
  return out;
}

SafeTensors sample() {
  SafeTensors st;
  std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f};
  std::vector<double> d = {3.141592653589793, -1e300};
  std::vector<int32_t> i = {-1, 2, 2147483647};
  std::vector<int64_t> l = {-9000000000LL};
  std::vector<uint8_t> u = {0, 255, 7};
  std::vector<uint16_t> bf = {0x3f80, 0xc040};  // bf16 1.0, -3.0
  st.put_f32("transformer.wte.weight", {2, 3}, w.data());
  st.put("f64", DType::F64, {2}, d.data());
  st.put("i32", DType::I32, {3}, i.data());
  st.put("scalar_i64", DType::I64, {}, l.data());
  st.put("u8", DType::U8, {1, 3, 1}, u.data());
  st.put("bf16", DType::BF16, {2}, bf.data());
  st.put("empty", DType::F32, {0, 4}, nullptr);
  st.metadata = {{"format", "pt"}, {"config", "[model]\nn_layer = 2\n"}};
  return st;
}

void expect_same(const SafeTensors& a, const SafeTensors& b) {
  EXPECT_EQ(a.metadata, b.metadata);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const auto& [name, t] : a.tensors) {
    const TensorData& u = b.at(name);
    EXPECT_EQ(t.dtype, u.dtype) << name;
    EXPECT_EQ(t.shape, u.shape) << name;
    EXPECT_EQ(t.bytes, u.bytes) << name;
  }
}

}  // namespace

TEST(SafeTensors, RoundTripThroughFile) {
  TempDir dir;
  std::string path = dir.file("m.safetensors");
  SafeTensors st = sample();
  write_safetensors(path, st);
  SafeTensors back = read_safetensors(path);
  expect_same(st, back);
  EXPECT_EQ(values_of<double>(back.at("f64"))[0], 3.141592653589793);
  EXPECT_EQ(values_of<int32_t>(back.at("i32"))[2], 2147483647);
  EXPECT_EQ(values_of<int64_t>(back.at("scalar_i64"))[0], -9000000000LL);
  EXPECT_EQ(back.at("transformer.wte.weight").to_f32("w")[4], 1e-30f);
  EXPECT_EQ(back.at("empty").numel(), 0u);
  // The file is exactly the serialized image, and serialization is deterministic.
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> file{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  EXPECT_EQ(file, serialize_safetensors(st));
  EXPECT_EQ(serialize_safetensors(back), serialize_safetensors(st));
  // Metadata only: the same metadata, no tensor bytes copied.
  const SafeTensors header = read_safetensors(path, SafeTensorsPart::Metadata);
  EXPECT_EQ(header.metadata, st.metadata);
  EXPECT_TRUE(header.tensors.empty());
}

// Written from views (a model's buffers, not copied): the same file as from the copies.
TEST(SafeTensors, WritingFromViewsGivesTheSameFile) {
  TempDir dir;
  const SafeTensors st = sample();
  std::map<std::string, TensorView> views;
  for (const auto& [name, t] : st.tensors) views[name] = {t.dtype, t.shape, t.bytes.data()};
  write_safetensors(dir.file("v.safetensors"), st.metadata, views);
  std::ifstream in(dir.file("v.safetensors"), std::ios::binary);
  EXPECT_EQ((std::vector<uint8_t>{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()}),
            serialize_safetensors(st));
}

// Tensor by tensor: the same metadata and tensors as read_safetensors, one at a time; a missing
// tensor names the file; a damaged file fails as it does for read_safetensors, when opened.
TEST(SafeTensors, ReaderReadsEachTensorAsTheWholeFileReadDoes) {
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  const SafeTensors st = sample();
  write_safetensors(path, st);
  const SafeTensorsReader reader(path);
  EXPECT_EQ(reader.metadata(), st.metadata);
  EXPECT_EQ(reader.size(), st.tensors.size());
  SafeTensors back;
  back.metadata = reader.metadata();
  for (const auto& [name, t] : st.tensors) {
    ASSERT_TRUE(reader.contains(name)) << name;
    back.tensors[name] = reader.read(name);
  }
  back.tensors["bf16"] = reader.read("bf16");  // read again after its pages were given back
  expect_same(st, back);
  EXPECT_FALSE(reader.contains("nope"));
  try {
    reader.read("nope");
    FAIL() << "read a missing tensor";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'nope' is not in " + path), std::string::npos) << e.what();
  }
  std::vector<uint8_t> bytes = serialize_safetensors(st);
  bytes.resize(bytes.size() - 3);
  std::ofstream(dir.file("cut.safetensors"), std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                                      std::streamsize(bytes.size()));
  EXPECT_THROW(SafeTensorsReader{dir.file("cut.safetensors")}, Error);
}

TEST(SafeTensors, HeaderIsSortedAndPaddedToEightBytes) {
  for (int extra = 0; extra < 8; ++extra) {
    SafeTensors st;
    float x = 1.0f;
    st.put_f32(fmt::format("b{:x<{}}", "", extra), {1}, &x);
    st.put_f32("a", {1}, &x);
    std::vector<uint8_t> bytes = serialize_safetensors(st);
    uint64_t n;
    std::memcpy(&n, bytes.data(), 8);
    EXPECT_EQ(n % 8, 0u);
    std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<ptrdiff_t>(n));
    EXPECT_LT(header.find("\"a\""), header.find("\"b"));
    EXPECT_EQ(header.find_last_not_of(' '), header.find_last_of('}'));
    EXPECT_EQ(bytes.size(), 8 + n + 8);
  }
}

TEST(SafeTensors, HalfPrecisionConvertsToFloat) {
  SafeTensors st;
  std::vector<uint16_t> h = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00, 0x8000};
  st.put("h", DType::F16, {6}, h.data());
  std::vector<float> f = st.at("h").to_f32("h");
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], -2.0f);
  EXPECT_EQ(f[2], 65504.0f);
  EXPECT_EQ(f[3], 0x1p-24f);
  EXPECT_TRUE(std::isinf(f[4]));
  EXPECT_TRUE(std::signbit(f[5]));
  EXPECT_EQ(sample().at("bf16").to_f32("bf16"), (std::vector<float>{1.0f, -3.0f}));
  EXPECT_THROW(sample().at("i32").to_f32("i32"), Error);
}

TEST(SafeTensors, MissingTensorAndReservedNameAreErrors) {
  EXPECT_THROW(sample().at("nope"), Error);
  SafeTensors st;
  float x = 0;
  EXPECT_THROW(st.put_f32("__metadata__", {1}, &x), Error);
  EXPECT_THROW(st.put_f32("neg", {-1}, &x), Error);
  st.tensors["inconsistent"] = TensorData{DType::F32, {2}, {1, 2, 3}};
  EXPECT_THROW(serialize_safetensors(st), Error);
}

TEST(SafeTensors, MissingFileNamesThePath) {
  try {
    read_safetensors("/nonexistent/x.safetensors");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/x.safetensors"), std::string::npos);
  }
}

TEST(SafeTensorsMalformed, ShorterThanEightBytes) {
  expect_rejected({1, 0, 0}, "only 3 bytes", "truncated");
  expect_rejected({}, "only 0 bytes", "truncated");
}

TEST(SafeTensorsMalformed, HeaderLongerThanFile) {
  std::vector<uint8_t> bytes = image("{}", 0);
  bytes[0] = 200;
  expect_rejected(bytes, "header length 200 is larger than the file", "truncated");
}

TEST(SafeTensorsMalformed, AbsurdHeaderLength) {
  std::vector<uint8_t> bytes = image("{}", 0);
  uint64_t huge = ~uint64_t{0};
  std::memcpy(bytes.data(), &huge, 8);
  expect_rejected(bytes, "is absurd");
}

TEST(SafeTensorsMalformed, HeaderNotJson) {
  expect_rejected(image("{\"a\": ", 0), "not valid JSON");
  expect_rejected(image("", 0), "not valid JSON");
  expect_rejected(image("{\"w\": 1E400}", 0), "not valid JSON");  // found by the fuzzer
}

TEST(SafeTensorsMalformed, HeaderNotAnObject) {
  expect_rejected(image("[1, 2]", 0), "header is a JSON array, not an object");
}

TEST(SafeTensorsMalformed, EntryNotAnObject) {
  expect_rejected(image("{\"w\": 3}", 0), "tensor 'w' is a JSON number");
}

TEST(SafeTensorsMalformed, EntryMissingFields) {
  expect_rejected(image(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4), "'w' has no 'dtype'");
  expect_rejected(image(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", 4), "'w' has no 'shape'");
  expect_rejected(image(R"({"w":{"dtype":"F32","shape":[1]}})", 4), "'w' has no 'data_offsets'");
}

TEST(SafeTensorsMalformed, UnknownDtype) {
  expect_rejected(image("{" + entry("w", "F7", "[1]", "[0,4]") + "}", 4),
                  "unknown dtype \"F7\"", "convert the file");
}

TEST(SafeTensorsMalformed, NegativeOrNonIntegerShape) {
  expect_rejected(image("{" + entry("w", "F32", "[-1]", "[0,4]") + "}", 4),
                  "shape[0] is -1, not a non-negative integer");
  expect_rejected(image("{" + entry("w", "F32", "[1.5]", "[0,4]") + "}", 4), "shape[0] is 1.5");
  expect_rejected(image("{" + entry("w", "F32", "3", "[0,4]") + "}", 4), "shape is 3, not an array");
}

TEST(SafeTensorsMalformed, OverflowingShape) {
  expect_rejected(image("{" + entry("w", "F32", "[4294967296, 4294967296]", "[0,4]") + "}", 4),
                  "overflows");
  expect_rejected(image("{" + entry("w", "U8", "[9223372036854775808]", "[0,4]") + "}", 4),
                  "too large");
}

TEST(SafeTensorsMalformed, OffsetsNotMatchingSize) {
  expect_rejected(image("{" + entry("w", "F32", "[2]", "[0,4]") + "}", 4),
                  "hold 4 bytes but dtype F32 shape [2] needs 8");
  expect_rejected(image("{" + entry("w", "F32", "[1]", "[4,0]") + "}", 4), "end before they begin");
  expect_rejected(image("{" + entry("w", "F32", "[1]", "[0]") + "}", 4), "not [begin, end]");
  expect_rejected(image("{" + entry("w", "F32", "[1]", "[0,-4]") + "}", 4), "data_offsets[1] is -4");
}

TEST(SafeTensorsMalformed, OffsetsOutOfRange) {
  expect_rejected(image("{" + entry("w", "F32", "[2]", "[0,8]") + "}", 4),
                  "run past the end of the data (4 bytes)", "truncated");
}

TEST(SafeTensorsMalformed, OverlappingTensors) {
  expect_rejected(image("{" + entry("a", "F32", "[2]", "[0,8]") + "," +
                        entry("b", "F32", "[1]", "[4,8]") + "}", 8),
                  "tensors 'a' and 'b' overlap");
}

TEST(SafeTensorsMalformed, GapsInTheData) {
  expect_rejected(image("{" + entry("a", "F32", "[1]", "[0,4]") + "," +
                        entry("b", "F32", "[1]", "[8,12]") + "}", 12),
                  "data bytes [4, 8) before tensor 'b' belong to no tensor");
  expect_rejected(image("{" + entry("a", "F32", "[1]", "[0,4]") + "}", 6),
                  "data bytes [4, 6) at the end belong to no tensor");
}

TEST(SafeTensorsMalformed, MetadataNotAStringMap) {
  expect_rejected(image(R"({"__metadata__":["x"]})", 0), "__metadata__ is a JSON array");
  expect_rejected(image(R"({"__metadata__":{"step":3}})", 0), "__metadata__ 'step' is a JSON number");
}

TEST(SafeTensorsMalformed, ValidMinimalFilesAreAccepted) {
  // The malformed cases above differ from these only in the one broken detail.
  SafeTensors st = parse_safetensors(image("{}", 0).data(), 8 + 2, "ok");
  EXPECT_TRUE(st.tensors.empty());
  std::vector<uint8_t> bytes = image("{" + entry("w", "F32", "[1]", "[0,4]") + "}   ", 4);
  EXPECT_EQ(parse_safetensors(bytes.data(), bytes.size(), "ok").at("w").shape,
            (std::vector<int64_t>{1}));
}
