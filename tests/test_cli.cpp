// The `frugal` command line itself: --version, usage errors (one line, a hint to --help, exit code
// 2).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "run_cli.h"

using frugal::testing::CliResult;
using frugal::testing::contains;
using frugal::testing::run_frugal;

namespace {

int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

}  // namespace

TEST(Cli, VersionIsTheProjectVersion) {
  const CliResult r = run_frugal("--version", "2>/dev/null");
  EXPECT_EQ(r.rc, 0);
  EXPECT_TRUE(r.output.starts_with(std::string("frugal ") + FRUGAL_PROJECT_VERSION)) << r.output;
  EXPECT_EQ(lines(r.output), 1) << r.output;
}

TEST(Cli, UsageErrorsAreOneLineWithExitCodeTwo) {
  const std::pair<std::string, std::vector<std::string>> cases[] = {
      {"bogus", {"unknown command 'bogus'", "train, ", "tokenize", "see `frugal --help`"}},
      {"", {"no command given", "train, ", "see `frugal --help`"}},
      {"--bogus", {"unknown option '--bogus'", "train, ", "see `frugal --help`"}},
      {"tokenize", {"file is required", "see `frugal tokenize --help`"}},
      {"tokenize --bogus -", {"--bogus", "see `frugal tokenize --help`"}},
      {"bench --preset XL", {"XL", "see `frugal bench --help`"}},
      {"bench --steps many", {"many", "see `frugal bench --help`"}},
      {"export --format onnx a b", {"onnx", "see `frugal export --help`"}},
      {"eval", {"checkpoint is required", "see `frugal eval --help`"}},
      {"sample a b", {"b", "see `frugal sample --help`"}},
  };
  for (const auto& [args, parts] : cases) {
    const CliResult r = run_frugal(args);
    EXPECT_EQ(r.rc, 2) << args << ": " << r.output;
    EXPECT_TRUE(r.output.starts_with("error: ")) << args << ": " << r.output;
    EXPECT_EQ(lines(r.output), 1) << args << ": " << r.output;
    for (const std::string& part : parts) EXPECT_TRUE(contains(r.output, part)) << args << ": " << r.output;
  }
  const CliResult help = run_frugal("train --help", "2>/dev/null");
  EXPECT_EQ(help.rc, 0);
  EXPECT_TRUE(contains(help.output, "--resume")) << help.output;
}
