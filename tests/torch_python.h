// The interpreter of .venv-torch (tools/setup_torch_venv.sh) for tests that compare with Hugging
// Face libraries and are skipped without it.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "paths.h"

namespace frugal::testing {

// The interpreter of .venv-torch in this checkout or in the main worktree of its repository, when
// it imports tokenizers and transformers; "" if none does.
inline std::string torch_python() {
  namespace fs = std::filesystem;
  std::vector<fs::path> roots{test_paths::source_dir()};
  if (FILE* p = ::popen((std::string("git -C ") + test_paths::source_dir() + " rev-parse --path-format=absolute --git-common-dir 2>/dev/null").c_str(), "r")) {
    char buf[4096] = {};
    const size_t n = std::fread(buf, 1, sizeof(buf) - 1, p);
    ::pclose(p);
    std::string dir(buf, n);
    while (!dir.empty() && (dir.back() == '\n' || dir.back() == '\r')) dir.pop_back();
    if (!dir.empty()) roots.push_back(fs::path(dir).parent_path());
  }
  for (const fs::path& root : roots) {
    const std::string python = (root / ".venv-torch/bin/python").string();
    if (fs::exists(python) && std::system((python + " -c 'import tokenizers, transformers' 2>/dev/null").c_str()) == 0)
      return python;
  }
  return "";
}

}  // namespace frugal::testing
