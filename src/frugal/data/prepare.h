// `frugal prepare`: text files -> DIR/train.bin, DIR/val.bin (token shards) and the tokenizer file
// DIR/frugal_tokenizer.json, and the reading side of such a directory, which checks that its parts
// belong together.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "frugal/data/shard.h"
#include "frugal/data/tokenizer.h"

namespace frugal::data {

struct PrepareOptions {
  // "gpt2", "gpt2:DIR", "char" (vocabulary built from the inputs), or an existing vocabulary:
  // "char:VOCAB_FILE" or a tokenizer file (e.g. a checkpoint's, to prepare more data for it)
  std::string tokenizer = "gpt2";
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

// The tokenizer of a prepared directory (tokenizer_file(DIR)); an Error saying to run `frugal
// prepare` when absent.
std::unique_ptr<Tokenizer> load_prepared_tokenizer(const std::string& dir);
// DIR/<split>.bin ("train" or "val") of a prepared directory, checked to be written with
// `tokenizer`'s vocabulary (shards and tokenizer file from different `prepare` runs are an Error).
std::shared_ptr<const TokenShard> open_prepared_split(const std::string& dir, const std::string& split,
                                                      const Tokenizer& tokenizer);

}  // namespace frugal::data
