// A run's metrics.jsonl as the tests read it: every record, in order (blank lines skipped).
#pragma once

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace frugal::testing {

inline std::vector<nlohmann::json> logged_records(const std::string& run_dir) {
  std::vector<nlohmann::json> records;
  std::ifstream metrics(run_dir + "/metrics.jsonl");
  for (std::string line; std::getline(metrics, line);)
    if (!line.empty()) records.push_back(nlohmann::json::parse(line));
  return records;
}

}  // namespace frugal::testing
