// `frugal prepare`: a corpus (text and JSONL files, plain or compressed, named by files,
// directories or globs) -> a directory of token shards plus manifest.json and the tokenizer file
// DIR/frugal_tokenizer.json, streamed in bounded memory and encoded on all threads; and the
// reading side: a prepared directory's splits as TokenSets, including directories of earlier
// versions (train.bin, val.bin) and of nanoGPT and llm.c (see docs/data.md).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "frugal/data/shard.h"
#include "frugal/data/token_set.h"
#include "frugal/data/tokenizer.h"

namespace frugal::data {

inline constexpr std::string_view kManifestFile = "manifest.json";
inline constexpr std::string_view kShardDir = "shards";
inline constexpr int kManifestVersion = 1;

struct PrepareOptions {
  // "gpt2", "gpt2:DIR", "char" (vocabulary built from the inputs), or an existing vocabulary:
  // "char:VOCAB_FILE" or a tokenizer file (e.g. a checkpoint's, to prepare more data for it)
  std::string tokenizer = "gpt2";
  std::vector<std::string> inputs;      // training corpus: files, directories, globs (expand_inputs)
  std::vector<std::string> val_inputs;  // validation corpus; when empty, val = the last val_fraction of the tokens
  std::string out_dir;
  double val_fraction = 0.1;
  bool special_eot = true;  // gpt2: the literal "<|endoftext|>" is the special token (else plain text)
  int threads = 0;          // encoding threads; 0 = OpenMP's setting. The output never depends on it.
  std::string text_field = "text";        // JSONL: the field of each line's object holding the text
  int64_t shard_tokens = 100'000'000;     // tokens per shard file (the last one of a stream holds fewer)
  bool overwrite = false;                 // replace an existing or interrupted preparation in out_dir
};

struct PrepareResult {
  int64_t input_bytes = 0;  // document text read (decompressed; JSONL: the text fields)
  int64_t documents = 0;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  int64_t shards = 0;
  int vocab_size = 0;
  double encode_seconds = 0;  // reading and tokenizing the corpus (the streaming pass)
  double total_seconds = 0;   // everything, the char vocabulary pass and writing included
};

// Documents are joined in order; tokenizers with an end-of-text token (gpt2) put it between
// consecutive documents, the char tokenizer (which has none) joins them as they are.
PrepareResult prepare(const PrepareOptions& options);

// The tokenizer of a data directory: `spec` (load_tokenizer) when given, which must then have the
// vocabulary of the directory's own tokenizer file if it has one; else tokenizer_file(DIR), an
// Error saying to run `frugal prepare` (or, for nanoGPT or llm.c token files, to name their
// tokenizer in data.tokenizer) when absent.
std::unique_ptr<Tokenizer> load_prepared_tokenizer(const std::string& dir, const std::string& spec = "");

// Split `split` ("train" or "val") of a data directory, checked to hold ids of `tokenizer`'s
// vocabulary (shards and tokenizer file from different `prepare` runs are an Error):
// - manifest.json (frugal prepare): the split's range of its token stream, over its shards;
// - train.bin / val.bin in frugal's shard format (earlier versions of frugal prepare);
// - otherwise a directory of other programs' files: the .bin files whose name, split at '_' and
//   '.', has the word `split` (nanoGPT's train.bin, llm.c's fineweb_train_000001.bin), sorted,
//   each read by TokenShard::open_foreign.
std::shared_ptr<const TokenSet> open_prepared_split(const std::string& dir, const std::string& split,
                                                    const Tokenizer& tokenizer);

// Per token id, the UTF-8 bytes of text it stands for (its piece; the end-of-text token: none).
std::vector<int32_t> token_text_bytes(const Tokenizer& tokenizer);
// UTF-8 bytes of the text the tokens decode to, the end-of-text token counting none: the byte
// count behind bits per byte.
int64_t text_bytes(const TokenSet& tokens, const Tokenizer& tokenizer);

}  // namespace frugal::data
