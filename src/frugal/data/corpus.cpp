// Corpus reading for `frugal prepare`: input expansion, streaming decompression (zlib, liblzma,
// libzstd), JSONL documents, and cutting documents into units at encode boundaries.
#include "frugal/data/corpus.h"

#include <glob.h>
#include <lzma.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "frugal/core/error.h"
#include "frugal/data/text.h"
#include "frugal/data/tokenizer.h"

namespace frugal::data {
namespace fs = std::filesystem;
namespace {

constexpr size_t kInBytes = size_t{1} << 16;  // compressed bytes read at a time

std::string strip_compression_suffix(const std::string& path) {
  for (const char* suffix : {".gz", ".xz", ".zst"})
    if (path.ends_with(suffix)) return path.substr(0, path.size() - std::strlen(suffix));
  return path;
}

bool is_corpus_file_name(const std::string& name) {
  const std::string base = strip_compression_suffix(name);
  return base.ends_with(".txt") || base.ends_with(".jsonl") || base.ends_with(".json");
}

// The file and a buffer of its raw bytes, shared by the decoders.
class RawInput {
 public:
  RawInput(const std::string& path) : path_(path), buffer_(kInBytes) {
    if (path == "-") {
      file_ = stdin;
    } else {
      file_ = std::fopen(path.c_str(), "rb");
      FRUGAL_CHECK(file_, "cannot open input '{}': {}; check the path", path, std::strerror(errno));
      owned_ = true;
    }
  }
  ~RawInput() {
    if (owned_) std::fclose(file_);
  }
  // Refills the buffer when it is used up; false at the end of the file.
  bool fill() {
    if (pos_ < size_) return true;
    pos_ = 0;
    size_ = std::fread(buffer_.data(), 1, buffer_.size(), file_);
    FRUGAL_CHECK(!std::ferror(file_), "cannot read '{}': {}; check the file is readable", path_,
                 std::strerror(errno));
    return size_ > 0;
  }
  const char* data() const { return buffer_.data() + pos_; }
  size_t available() const { return size_ - pos_; }
  void consume(size_t n) { pos_ += n; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  bool owned_ = false;
  std::vector<char> buffer_;
  size_t pos_ = 0, size_ = 0;
};

class PlainStream final : public ByteStream {
 public:
  explicit PlainStream(std::unique_ptr<RawInput> in) : in_(std::move(in)) {}
  size_t read(char* out, size_t capacity) override {
    if (!in_->fill()) return 0;
    const size_t n = std::min(capacity, in_->available());
    std::memcpy(out, in_->data(), n);
    in_->consume(n);
    return n;
  }

 private:
  std::unique_ptr<RawInput> in_;
};

class GzStream final : public ByteStream {
 public:
  explicit GzStream(std::unique_ptr<RawInput> in) : in_(std::move(in)) {
    FRUGAL_CHECK(inflateInit2(&z_, 15 + 16) == Z_OK, "cannot start the gzip decoder for '{}'", in_->path());
  }
  ~GzStream() override { inflateEnd(&z_); }
  size_t read(char* out, size_t capacity) override {
    z_.next_out = reinterpret_cast<Bytef*>(out);
    z_.avail_out = static_cast<uInt>(std::min<size_t>(capacity, 1u << 30));
    while (z_.avail_out > 0) {
      if (!in_->fill()) {
        FRUGAL_CHECK(member_done_, "'{}' ends inside a gzip stream (truncated); download or "
                     "compress it again", in_->path());
        break;
      }
      if (member_done_) {  // another gzip member follows
        inflateReset(&z_);
        member_done_ = false;
      }
      z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in_->data()));
      z_.avail_in = static_cast<uInt>(in_->available());
      const int rc = inflate(&z_, Z_NO_FLUSH);
      in_->consume(in_->available() - z_.avail_in);
      if (rc == Z_STREAM_END) {
        member_done_ = true;
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        fail("'{}' is not a valid gzip file ({}); download it again or check it with `gzip -t`",
             in_->path(), z_.msg ? z_.msg : "zlib error");
      }
    }
    return capacity - z_.avail_out;
  }

 private:
  std::unique_ptr<RawInput> in_;
  z_stream z_{};
  bool member_done_ = false;
};

class XzStream final : public ByteStream {
 public:
  explicit XzStream(std::unique_ptr<RawInput> in) : in_(std::move(in)) {
    FRUGAL_CHECK(lzma_stream_decoder(&s_, UINT64_MAX, LZMA_CONCATENATED) == LZMA_OK,
                 "cannot start the xz decoder for '{}'", in_->path());
  }
  ~XzStream() override { lzma_end(&s_); }
  size_t read(char* out, size_t capacity) override {
    s_.next_out = reinterpret_cast<uint8_t*>(out);
    s_.avail_out = capacity;
    while (s_.avail_out > 0 && !done_) {
      const bool more = in_->fill();
      s_.next_in = reinterpret_cast<const uint8_t*>(in_->data());
      s_.avail_in = in_->available();
      const lzma_ret rc = lzma_code(&s_, more ? LZMA_RUN : LZMA_FINISH);
      in_->consume(in_->available() - s_.avail_in);
      if (rc == LZMA_STREAM_END) {
        done_ = true;
      } else if (rc != LZMA_OK) {
        fail("'{}' is not a valid .xz file (lzma error {}); download it again or check it with "
             "`xz -t`", in_->path(), static_cast<int>(rc));
      }
    }
    return capacity - s_.avail_out;
  }

 private:
  std::unique_ptr<RawInput> in_;
  lzma_stream s_ = LZMA_STREAM_INIT;
  bool done_ = false;
};

class ZstdStream final : public ByteStream {
 public:
  explicit ZstdStream(std::unique_ptr<RawInput> in) : in_(std::move(in)), ctx_(ZSTD_createDCtx()) {
    FRUGAL_CHECK(ctx_, "cannot start the zstd decoder for '{}'", in_->path());
  }
  ~ZstdStream() override { ZSTD_freeDCtx(ctx_); }
  size_t read(char* out, size_t capacity) override {
    ZSTD_outBuffer o{out, capacity, 0};
    while (o.pos < o.size) {
      if (!in_->fill()) {
        FRUGAL_CHECK(frame_done_, "'{}' ends inside a zstd frame (truncated); download or "
                     "compress it again", in_->path());
        break;
      }
      ZSTD_inBuffer i{in_->data(), in_->available(), 0};
      const size_t rc = ZSTD_decompressStream(ctx_, &o, &i);
      in_->consume(i.pos);
      FRUGAL_CHECK(!ZSTD_isError(rc), "'{}' is not a valid .zst file ({}); download it again or "
                   "check it with `zstd -t`", in_->path(), ZSTD_getErrorName(rc));
      frame_done_ = rc == 0;
    }
    return o.pos;
  }

 private:
  std::unique_ptr<RawInput> in_;
  ZSTD_DCtx* ctx_;
  bool frame_done_ = true;
};

// Cuts the text of one document into units: each ends at the first encode boundary at least
// kUnitBytes after its start (or at the document's end), whatever sizes the text arrives in.
// Text files are checked to be UTF-8 here (offsets count from the file's start); JSON strings
// are UTF-8 already (nlohmann's parser refuses anything else).
class UnitCutter {
 public:
  UnitCutter(const std::string& file, const std::function<void(TextUnit&&)>& emit)
      : file_(file), emit_(emit) {}
  void feed(std::string_view text) {
    pending_.append(text);
    while (true) {
      size_t p = std::max(scan_, kUnitBytes);
      while (p < pending_.size() && !is_encode_boundary(pending_, p)) ++p;
      if (p >= pending_.size()) {
        scan_ = std::max<size_t>(pending_.size(), 1);
        return;
      }
      emit_unit(pending_.substr(0, p));
      pending_.erase(0, p);
      scan_ = 1;
    }
  }
  // Emits what is left (the document's only unit, perhaps empty, when nothing was cut).
  void finish() {
    if (!pending_.empty() || first_) emit_unit(std::move(pending_));
    pending_.clear();
    scan_ = 1;
    first_ = true;
  }
 private:
  void emit_unit(std::string text) {
    check_utf8(text, "input file '" + file_ + "'", offset_);
    offset_ += static_cast<int64_t>(text.size());
    emit_(TextUnit{std::move(text), first_});
    first_ = false;
  }

  std::string file_;
  const std::function<void(TextUnit&&)>& emit_;
  std::string pending_;
  size_t scan_ = 1;  // positions below it were looked at
  bool first_ = true;
  int64_t offset_ = 0;  // bytes emitted so far
};

SourceStats read_text_file_units(const std::string& path, const std::function<void(TextUnit&&)>& emit) {
  SourceStats st{path, 1, 0};
  auto stream = ByteStream::open(path);
  UnitCutter cutter(path, emit);
  std::vector<char> buf(kUnitBytes);
  while (const size_t n = stream->read(buf.data(), buf.size())) {
    cutter.feed({buf.data(), n});
    st.bytes += static_cast<int64_t>(n);
  }
  cutter.finish();
  return st;
}

SourceStats read_jsonl_units(const std::string& path, const std::string& field,
                             const std::function<void(TextUnit&&)>& emit) {
  SourceStats st{path, 0, 0};
  auto stream = ByteStream::open(path);
  UnitCutter cutter(path, emit);
  std::string pending;
  std::vector<char> buf(kUnitBytes);
  int64_t line_no = 0;
  auto take_line = [&](std::string_view line) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) return;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail("{} line {} is not JSON ({}); JSONL needs one JSON object per line", path, line_no, e.what());
    }
    FRUGAL_CHECK(j.is_object(), "{} line {} is not a JSON object; JSONL needs one object per line "
                 "with a \"{}\" string", path, line_no, field);
    const auto it = j.find(field);
    FRUGAL_CHECK(it != j.end() && it->is_string(), "{} line {} has no string field \"{}\"; name "
                 "the field holding the text with --text-field", path, line_no, field);
    const std::string& text = it->get_ref<const std::string&>();
    if (text.empty()) return;
    cutter.feed(text);
    cutter.finish();
    ++st.documents;
    st.bytes += static_cast<int64_t>(text.size());
  };
  while (const size_t n = stream->read(buf.data(), buf.size())) {
    pending.append(buf.data(), n);
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1)
      take_line(std::string_view(pending).substr(start, nl - start));
    pending.erase(0, start);
  }
  if (!pending.empty()) take_line(pending);
  return st;
}

}  // namespace

ByteStream::~ByteStream() = default;

std::unique_ptr<ByteStream> ByteStream::open(const std::string& path) {
  auto in = std::make_unique<RawInput>(path);
  static constexpr unsigned char kGz[2] = {0x1F, 0x8B}, kXz[6] = {0xFD, '7', 'z', 'X', 'Z', 0x00},
                                 kZstd[4] = {0x28, 0xB5, 0x2F, 0xFD};
  const bool any = in->fill();
  auto starts = [&](const unsigned char* magic, size_t n) {
    return any && in->available() >= n && std::memcmp(in->data(), magic, n) == 0;
  };
  if (starts(kXz, sizeof(kXz))) return std::make_unique<XzStream>(std::move(in));
  if (starts(kZstd, sizeof(kZstd))) return std::make_unique<ZstdStream>(std::move(in));
  if (starts(kGz, sizeof(kGz))) return std::make_unique<GzStream>(std::move(in));
  for (const char* suffix : {".gz", ".xz", ".zst"})
    FRUGAL_CHECK(!path.ends_with(suffix), "'{}' ends in {} but is not such a file (its first bytes "
                 "are not the format's); rename it or compress it again", path, suffix);
  return std::make_unique<PlainStream>(std::move(in));
}

bool is_jsonl_path(const std::string& path) {
  const std::string base = strip_compression_suffix(path);
  return base.ends_with(".jsonl") || base.ends_with(".json");
}

std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs, const std::string& what) {
  std::vector<std::string> files;
  for (const std::string& input : inputs) {
    std::error_code ec;
    if (input == "-" || fs::is_regular_file(input, ec)) {
      files.push_back(input);
    } else if (fs::is_directory(input, ec)) {
      std::vector<std::string> found;
      for (const auto& e : fs::recursive_directory_iterator(input, ec))
        if (e.is_regular_file() && is_corpus_file_name(e.path().filename().string()))
          found.push_back(e.path().string());
      FRUGAL_CHECK(!ec, "cannot list {} '{}': {}", what, input, ec.message());
      FRUGAL_CHECK(!found.empty(), "{} directory '{}' holds no .txt, .jsonl or .json file "
                   "(optionally .gz, .xz or .zst); point it at the corpus", what, input);
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (input.find_first_of("*?[") != std::string::npos) {
      glob_t g{};
      const int rc = ::glob(input.c_str(), 0, nullptr, &g);
      std::vector<std::string> found;
      for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i)
        if (fs::is_regular_file(g.gl_pathv[i], ec)) found.emplace_back(g.gl_pathv[i]);
      globfree(&g);
      FRUGAL_CHECK(!found.empty(), "{} pattern '{}' matches no file; check it (quote it so the "
                   "shell does not expand it first)", what, input);
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      fail("{} '{}' does not exist (not a file, directory or pattern); check the path", what, input);
    }
  }
  return files;
}

std::vector<SourceStats> read_units(const std::vector<std::string>& files, const std::string& text_field,
                                    const std::function<void(TextUnit&&)>& emit) {
  std::vector<SourceStats> stats;
  for (const std::string& file : files)
    stats.push_back(is_jsonl_path(file) ? read_jsonl_units(file, text_field, emit)
                                        : read_text_file_units(file, emit));
  return stats;
}

}  // namespace frugal::data
