// A run's metrics.jsonl as the tests read it: every record, in order (blank lines skipped), or
// those of the time budget's fixes.
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

// The records in which a time budget fixed (or re-fixed) the run's horizon.
inline std::vector<nlohmann::json> budget_records(const std::string& run_dir) {
  std::vector<nlohmann::json> fixes;
  for (const nlohmann::json& record : logged_records(run_dir))
    if (record.contains("budget")) fixes.push_back(record);
  return fixes;
}

}  // namespace frugal::testing
