// Whole-file reading (plain, .xz via liblzma, or stdin), UTF-8 validation, and where the bundled
// data is (next to an installed binary, or the source tree).
#include "frugal/data/text.h"

#include <lzma.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "frugal/core/error.h"

namespace frugal::data {
namespace {

constexpr unsigned char kXzMagic[6] = {0xFD, '7', 'z', 'X', 'Z', 0x00};

std::string read_stream(std::FILE* f, const std::string& path) {
  std::string out;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  FRUGAL_CHECK(!std::ferror(f), "cannot read '{}': {}; check the file is readable", path,
               std::strerror(errno));
  return out;
}

std::string read_raw(const std::string& path) {
  if (path == "-") return read_stream(stdin, "<stdin>");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  FRUGAL_CHECK(f, "cannot open '{}': {}; check the path", path, std::strerror(errno));
  return read_stream(f.get(), path);
}

std::string xz_decompress(const std::string& compressed, const std::string& path) {
  lzma_stream strm = LZMA_STREAM_INIT;
  lzma_ret ret = lzma_stream_decoder(&strm, UINT64_MAX, LZMA_CONCATENATED);
  FRUGAL_CHECK(ret == LZMA_OK, "cannot start the xz decoder for '{}' (lzma error {})", path,
               static_cast<int>(ret));
  std::string out;
  out.resize(compressed.size() * 4 + (1 << 16));
  strm.next_in = reinterpret_cast<const uint8_t*>(compressed.data());
  strm.avail_in = compressed.size();
  size_t produced = 0;
  while (true) {
    if (produced == out.size()) out.resize(out.size() * 2);
    strm.next_out = reinterpret_cast<uint8_t*>(out.data() + produced);
    strm.avail_out = out.size() - produced;
    ret = lzma_code(&strm, LZMA_FINISH);
    produced = out.size() - strm.avail_out;
    if (ret == LZMA_STREAM_END) break;
    if (ret != LZMA_OK) {
      lzma_end(&strm);
      fail("'{}' is not a valid .xz file (lzma error {}); re-download it or decompress it with "
           "`xz -dk` to see the problem", path, static_cast<int>(ret));
    }
  }
  lzma_end(&strm);
  out.resize(produced);
  return out;
}

}  // namespace

std::string data_dir() {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (const char* env = std::getenv("FRUGAL_DATA_DIR"); env && *env) {
    FRUGAL_CHECK(fs::is_directory(env, ec), "FRUGAL_DATA_DIR is '{}', which is not a directory; "
                 "point it at a directory holding gpt2-bpe/ (an install's share/frugal or the "
                 "source tree's data) or unset it", env);
    return env;
  }
  // An installed binary: PREFIX/bin/frugal finds PREFIX/share/frugal, wherever PREFIX is.
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  const fs::path installed = (exe.parent_path() / FRUGAL_DATA_DIR_FROM_BIN).lexically_normal();
  if (!ec && fs::is_directory(installed, ec)) return installed.string();
  // The build tree's binary (and the tests) read the source tree's data.
  const fs::path source = fs::path(FRUGAL_SOURCE_DIR) / "data";
  FRUGAL_CHECK(fs::is_directory(source, ec), "frugal's bundled data is missing: neither {} (next "
               "to the binary) nor {} (the source tree it was built from) exists; reinstall "
               "(cmake --install) or set FRUGAL_DATA_DIR to a directory holding gpt2-bpe/",
               installed.string(), source.string());
  return source.string();
}

std::string read_text_file(const std::string& path) {
  std::string raw = read_raw(path);
  if (raw.size() >= sizeof(kXzMagic) && std::memcmp(raw.data(), kXzMagic, sizeof(kXzMagic)) == 0)
    return xz_decompress(raw, path);
  FRUGAL_CHECK(!path.ends_with(".xz"), "'{}' ends in .xz but is not an xz file; rename it or "
               "re-compress it with `xz`", path);
  return raw;
}

std::optional<size_t> find_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    // Fast path: 8 ASCII bytes at a time.
    if (i + 8 <= n) {
      uint64_t word;
      std::memcpy(&word, s + i, 8);
      if ((word & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    const unsigned char b = s[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    int len;
    uint32_t min_cp;
    if ((b & 0xE0) == 0xC0) {
      len = 2, min_cp = 0x80;
    } else if ((b & 0xF0) == 0xE0) {
      len = 3, min_cp = 0x800;
    } else if ((b & 0xF8) == 0xF0) {
      len = 4, min_cp = 0x10000;
    } else {
      return i;
    }
    if (i + len > n) return i;
    uint32_t cp = b & (0x7F >> len);
    for (int k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::nullopt;
}

void check_utf8(std::string_view text, std::string_view what, int64_t base) {
  if (auto bad = find_invalid_utf8(text)) {
    fail("{} is not valid UTF-8: bad byte 0x{:02X} at byte offset {}; convert it to UTF-8 first "
         "(e.g. `iconv -f latin1 -t utf-8`)", what, static_cast<unsigned char>(text[*bad]),
         base + static_cast<int64_t>(*bad));
  }
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace frugal::data
