// Checked stdout writes; see stdout.h.
#include "frugal/io/stdout.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "frugal/core/error.h"

namespace frugal::io {
namespace {

[[noreturn]] void fail_stdout(int err) {
  fail("could not write to standard output: {}", err != 0 ? std::strerror(err) : "an earlier write failed");
}

}  // namespace

void write_stdout(std::string_view bytes) {
  errno = 0;
  if (std::fwrite(bytes.data(), 1, bytes.size(), stdout) != bytes.size()) fail_stdout(errno);
}

void flush_stdout() {
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) fail_stdout(errno);
}

}  // namespace frugal::io
