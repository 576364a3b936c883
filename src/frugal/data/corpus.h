// Reading a corpus in bounded memory for `frugal prepare`: which files the inputs name (files,
// directories, globs), decompression as a stream (.gz, .xz, .zst, recognised by their magic
// bytes), and documents: a text file is one document, a JSONL file one document per line (a
// string field of each line's object). Documents come out in pieces ("units") of about
// kUnitBytes, cut only where every tokenizer may cut its input (is_encode_boundary), so encoding
// the units one by one gives the tokens of encoding each document whole.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace frugal::data {

// The files the inputs name, in order: a file as it is; a directory, every file below it whose
// name ends in .txt, .jsonl or .json, optionally followed by .gz, .xz or .zst, sorted by path; a
// pattern with * ? or [ (glob(3)), its matches sorted. "-" is standard input. Error for an input
// that does not exist or a directory or pattern that names no file, saying which.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs, const std::string& what);

// True when `path` (without a .gz/.xz/.zst suffix) ends in .jsonl or .json: one JSON object per line.
bool is_jsonl_path(const std::string& path);

// Decompressed bytes of a file, read as a stream: .gz (zlib, concatenated members), .xz (liblzma,
// concatenated streams), .zst (libzstd, concatenated frames) by their magic bytes, else as they are.
class ByteStream {
 public:
  static std::unique_ptr<ByteStream> open(const std::string& path);
  virtual ~ByteStream();
  // Up to `capacity` bytes into out; 0 at the end. Throws Error naming the file when it is damaged.
  virtual size_t read(char* out, size_t capacity) = 0;
};

// Size of the pieces documents are cut into (a piece is longer only when a document has no
// boundary in that much text).
inline constexpr size_t kUnitBytes = size_t{1} << 18;

struct TextUnit {
  std::string text;           // valid UTF-8
  bool starts_document = false;
};

struct SourceStats {
  std::string path;
  int64_t documents = 0;
  int64_t bytes = 0;  // of document text (the JSONL field's, not the JSON's)
};

// Reads the files in order and calls `emit` with each unit. JSONL files: each non-blank line must
// be a JSON object whose `text_field` is a string; a blank line or an empty string is skipped.
// Errors name the file and line (JSONL) or byte offset (invalid UTF-8). Returns per-file counts.
std::vector<SourceStats> read_units(const std::vector<std::string>& files, const std::string& text_field,
                                    const std::function<void(TextUnit&&)>& emit);

}  // namespace frugal::data
