// The `frugal` command line itself: --version, usage errors (one line, a hint to --help, exit code
// 2), and an installed binary finding its bundled data next to itself after its prefix is moved.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "paths.h"
#include "run_cli.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using frugal::testing::CliResult;
using frugal::testing::contains;
using frugal::testing::run_frugal;
using frugal::testing::run_shell;
using frugal::testing::TempDir;

namespace {

int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

// "Hello world" in GPT-2's tokens.
constexpr const char* kHelloWorldIds = "15496 995\n";

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

// `cmake --install` into a prefix, the prefix moved elsewhere: the binary finds its GPT-2 files in
// PREFIX/share/frugal beside its bin/, not in the source tree it was built from.
TEST(Cli, AnInstallFindsItsDataAfterItsPrefixIsMoved) {
  TempDir dir;
  const std::string build_dir = fs::path(test_paths::binary()).parent_path().string();
  const std::string install = dir.file("install"), moved = dir.file("moved");
  CliResult r = run_shell(std::string(FRUGAL_CMAKE) + " --install " + build_dir + " --prefix " + install);
  ASSERT_EQ(r.rc, 0) << r.output;
  fs::rename(install, moved);
  const std::string frugal = moved + "/bin/frugal";
  r = run_shell("printf 'Hello world' | " + frugal + " tokenize --tokenizer gpt2 -", "2>&1");
  EXPECT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(r.output, kHelloWorldIds);
  // It read the moved prefix's copy: without it, the error names that copy.
  fs::remove(moved + "/share/frugal/gpt2-bpe/vocab.bpe");
  r = run_shell("printf 'Hello world' | " + frugal + " tokenize --tokenizer gpt2 -", "2>&1");
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_TRUE(contains(r.output, moved + "/share/frugal/gpt2-bpe")) << r.output;
  // FRUGAL_DATA_DIR comes first, and must be a directory.
  r = run_shell("printf 'Hello world' | FRUGAL_DATA_DIR=" + std::string(test_paths::source_dir()) + "/data " + frugal +
                " tokenize --tokenizer gpt2 -", "2>&1");
  EXPECT_EQ(r.output, kHelloWorldIds);
  r = run_shell("printf 'Hello world' | FRUGAL_DATA_DIR=" + dir.file("none") + " " + frugal +
                " tokenize --tokenizer gpt2 -", "2>&1");
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "FRUGAL_DATA_DIR")) << r.output;
  EXPECT_EQ(lines(r.output), 1) << r.output;
}
