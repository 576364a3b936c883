// libFuzzer target: parse_safetensors on arbitrary bytes. Throwing frugal::Error is the expected
// answer to bad input; any other exception, crash, leak or sanitizer report is a bug. Accepted
// inputs must serialize and re-parse to the same tensors.
#include <cstdint>
#include <cstdlib>

#include "frugal/core/error.h"
#include "frugal/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  frugal::io::SafeTensors st;
  try {
    st = frugal::io::parse_safetensors(data, size, "fuzz input");
  } catch (const frugal::Error&) {
    return 0;
  }
  std::vector<uint8_t> image = frugal::io::serialize_safetensors(st);
  frugal::io::SafeTensors again = frugal::io::parse_safetensors(image.data(), image.size(), "re-serialized");
  if (serialize_safetensors(again) != image) std::abort();
  return 0;
}
