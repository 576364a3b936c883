// Runs the `frugal` binary from a test and captures its exit code and output.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <string_view>

#include "paths.h"

namespace frugal::testing {

struct CliResult {
  int rc;
  std::string output;
};

// Runs a shell command line; `redirect` says where stderr goes ("2>&1" merges it into the output).
inline CliResult run_shell(const std::string& command, const std::string& redirect = "2>&1") {
  const std::string cmd = command + " " + redirect;
  std::FILE* p = ::popen(cmd.c_str(), "r");
  CliResult r{-1, ""};
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  const int status = ::pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline CliResult run_frugal(const std::string& args, const std::string& redirect = "2>&1") {
  return run_shell(std::string(test_paths::binary()) + " " + args, redirect);
}

// Runs `frugal args` with its stdout a pipe whose reading end is already closed (as after the
// reader of `frugal ... | head -c1` has exited): every write to it fails with EPIPE. The output is
// what frugal wrote to stderr.
inline CliResult run_frugal_into_closed_pipe(const std::string& args) {
  int out[2], err[2];
  if (::pipe(out) != 0 || ::pipe(err) != 0) return {-1, "pipe() failed"};
  ::close(out[0]);
  const std::string cmd = std::string("exec ") + test_paths::binary() + " " + args;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    ::close(err[0]);
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  CliResult r{-1, ""};
  char buf[4096];
  ssize_t n;
  while ((n = ::read(err[0], buf, sizeof(buf))) > 0) r.output.append(buf, static_cast<size_t>(n));
  ::close(err[0]);
  int status = 0;
  if (pid > 0 && ::waitpid(pid, &status, 0) == pid && WIFEXITED(status)) r.rc = WEXITSTATUS(status);
  return r;
}

// `frugal args` with its standard output on a full disk and into a closed pipe: each must exit 1
// with one error line naming the failed write.
inline void expect_unwritable_output_is_an_error(const std::string& args) {
  CliResult r = run_frugal(args, "2>&1 >/dev/full");
  EXPECT_EQ(r.rc, 1) << args;
  EXPECT_EQ(r.output, "error: could not write to standard output: No space left on device\n") << args;
  r = run_frugal_into_closed_pipe(args);
  EXPECT_EQ(r.rc, 1) << args;
  EXPECT_EQ(r.output, "error: could not write to standard output: Broken pipe\n") << args;
}

inline bool contains(const std::string& s, std::string_view part) {
  return s.find(part) != std::string::npos;
}

}  // namespace frugal::testing
