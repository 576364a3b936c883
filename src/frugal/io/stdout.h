// Checked writes to standard output. Everything frugal prints to stdout goes through print() or
// write_stdout(), and every command ends with flush_stdout(), so a failed write (a full disk, a
// closed pipe) becomes Error("could not write to standard output: <reason>"): one line on stderr
// and exit code 1 instead of output silently cut short. The binary ignores SIGPIPE, so a closed
// pipe is reported as EPIPE ("Broken pipe") like any other write error rather than killing the
// process mid-write (a training run still saves its checkpoint). stderr is not checked: it is
// where such errors go.
#pragma once
#include <fmt/format.h>

#include <string_view>
#include <utility>

namespace frugal::io {

// fwrite to stdout; throws Error when it fails.
void write_stdout(std::string_view bytes);

// fflush of stdout, also reporting an error flag left by an earlier write; throws Error.
void flush_stdout();

template <class... Args>
void print(fmt::format_string<Args...> format, Args&&... args) {
  write_stdout(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace frugal::io
