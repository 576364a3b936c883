// Text input helpers for the data layer: reading whole files (plain or .xz), UTF-8 validation
// and decoding, and locating the bundled data directory.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace frugal::data {

// The directory of bundled data files (gpt2-bpe/): $FRUGAL_DATA_DIR if set; else, for an installed
// binary, share/frugal beside its bin/ directory (found from /proc/self/exe, so a moved or copied
// install prefix still works); else the source tree's data/ (the build tree's binary, the tests).
// Throws Error when none exists.
std::string data_dir();

// Reads a whole file into memory. Files ending in ".xz" (or starting with the xz magic bytes) are
// decompressed with liblzma. path "-" reads standard input.
std::string read_text_file(const std::string& path);

// Byte offset of the first invalid UTF-8 sequence in text (overlong forms, surrogates and code
// points above U+10FFFF are invalid), or nullopt when the whole text is valid.
std::optional<size_t> find_invalid_utf8(std::string_view text);

// Throws frugal::Error naming `what` (e.g. the file) and the byte offset when text is not UTF-8;
// offsets count from `base` (where text starts in the file).
void check_utf8(std::string_view text, std::string_view what, int64_t base = 0);

// Decodes one code point of valid UTF-8 starting at text[pos]; advances pos past it.
inline uint32_t next_code_point(std::string_view text, size_t& pos) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  if (b0 < 0x80) {
    pos += 1;
    return b0;
  }
  const int len = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
  uint32_t cp = b0 & (0x7F >> len);
  for (int i = 1; i < len; ++i) cp = (cp << 6) | (static_cast<unsigned char>(text[pos + i]) & 0x3F);
  pos += len;
  return cp;
}

// Appends the UTF-8 encoding of code point cp to out.
void append_utf8(std::string& out, uint32_t cp);

}  // namespace frugal::data
