// docs/config.md must be exactly what `frugal config --reference` prints, so the reference can
// never drift from the schema. Regenerate with: ./build/frugal config --reference > docs/config.md
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "frugal/train/run_config.h"
#include "paths.h"

TEST(ConfigDocs, ReferenceIsUpToDate) {
  std::ifstream in(std::string(test_paths::source_dir()) + "/docs/config.md");
  ASSERT_TRUE(in) << "docs/config.md is missing; run ./build/frugal config --reference > docs/config.md";
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), frugal::config_reference_markdown())
      << "docs/config.md is stale; run ./build/frugal config --reference > docs/config.md";
}
