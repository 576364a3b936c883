// Runs the `frugal` binary from a test and captures its exit code and output.
#pragma once
#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <string_view>

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
  return run_shell(std::string(FRUGAL_BINARY) + " " + args, redirect);
}

inline bool contains(const std::string& s, std::string_view part) {
  return s.find(part) != std::string::npos;
}

}  // namespace frugal::testing
