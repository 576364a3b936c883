// `frugal prepare`: text files -> DIR/train.bin, DIR/val.bin (token shards) and DIR/tokenizer.json.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace frugal::data {

struct PrepareOptions {
  std::string tokenizer = "gpt2";       // "gpt2", "gpt2:DIR", or "char" (vocabulary built from the inputs)
  std::vector<std::string> inputs;      // training text files (UTF-8, .xz allowed), in order
  std::vector<std::string> val_inputs;  // validation files; when empty, val = the last val_fraction of the tokens
  std::string out_dir;
  double val_fraction = 0.1;
  bool special_eot = true;  // gpt2: the literal "<|endoftext|>" is the special token (else plain text)
  int threads = 0;          // encoding threads; 0 = OpenMP's setting
};

struct PrepareResult {
  int64_t input_bytes = 0;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  int vocab_size = 0;
  double encode_seconds = 0;  // tokenization only
  double total_seconds = 0;   // reading, tokenization and writing
};

// Files are joined in order; with gpt2, consecutive files are separated by <|endoftext|>.
PrepareResult prepare(const PrepareOptions& options);

}  // namespace frugal::data
