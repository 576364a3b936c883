// A small prepared character-level data directory (the start of Tiny Shakespeare) for tests that
// train: shards, manifest.json and frugal_tokenizer.json under <dir>/data.
#pragma once
#include <fstream>
#include <string>

#include "frugal/data/prepare.h"
#include "paths.h"
#include "temp_dir.h"

namespace frugal::testing {

inline std::string make_shakespeare_data(const TempDir& dir, size_t bytes) {
  std::ifstream in(std::string(test_paths::source_dir()) + "/data/tinyshakespeare/input.txt");
  std::string text(bytes, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  std::ofstream(dir.file("text.txt")) << text;
  data::PrepareOptions o;
  o.tokenizer = "char";
  o.inputs = {dir.file("text.txt")};
  o.out_dir = dir.file("data");
  o.overwrite = true;  // a test may make it again in the same directory
  data::prepare(o);
  return o.out_dir;
}

}  // namespace frugal::testing
