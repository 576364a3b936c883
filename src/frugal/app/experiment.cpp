// The experiment runner; see experiment.h.
#include "frugal/app/experiment.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <toml++/toml.h>

#include "frugal/core/error.h"
#include "frugal/io/atomic_file.h"
#include "frugal/io/dir_lock.h"
#include "frugal/io/stdout.h"
#include "frugal/train/run_config.h"
#include "frugal/train/trainer.h"

namespace frugal {
namespace fs = std::filesystem;

namespace {

// A run's name becomes a directory under the experiment's output, whose earlier run is replaced:
// only plain names, so that it can never be "..", "." or a path.
bool valid_run_name(const std::string& name) {
  if (name.empty() || name.front() == '.') return false;
  return std::all_of(name.begin(), name.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '_' || c == '-' || c == '.';
  });
}

std::vector<std::string> string_list(const toml::node_view<const toml::node>& node, const std::string& where) {
  std::vector<std::string> out;
  if (!node) return out;
  const toml::array* array = node.as_array();
  FRUGAL_CHECK(array, "{}: `set` must be a list of \"key=value\" strings", where);
  for (const toml::node& element : *array) {
    const auto s = element.value<std::string>();
    FRUGAL_CHECK(s && s->find('=') != std::string::npos,
                 "{}: every entry of `set` must be a \"key=value\" string", where);
    out.push_back(*s);
  }
  return out;
}

}  // namespace

Experiment load_experiment(const std::string& path, const std::vector<std::string>& overrides) {
  FRUGAL_CHECK(fs::exists(path), "experiment file {} not found", path);
  toml::table doc;
  try {
    doc = toml::parse_file(path);
  } catch (const toml::parse_error& err) {
    fail("{}:{}:{}: {}", path, err.source().begin.line, err.source().begin.column, err.description());
  }
  static const std::set<std::string> known = {"description", "target_loss", "base", "pretrain", "run"};
  for (const auto& [key, value] : doc)
    FRUGAL_CHECK(known.count(std::string(key.str())), "{}: unknown key '{}'; an experiment has "
                 "description, target_loss, [base], [pretrain] and [[run]]", path, key.str());
  Experiment e;
  e.path = path;
  e.overrides = overrides;
  e.description = doc["description"].value_or(std::string());
  if (const auto t = doc["target_loss"]) {
    e.target_loss = t.value<double>();
    FRUGAL_CHECK(e.target_loss, "{}: target_loss must be a number", path);
  }
  if (const toml::table* base = doc["base"].as_table()) {
    std::ostringstream text;
    text << *base;
    e.base_toml = text.str();
  }
  if (const toml::table* pre = doc["pretrain"].as_table()) {
    e.pretrain_steps = (*pre)["steps"].value_or(int64_t{0});
    FRUGAL_CHECK(e.pretrain_steps > 0, "{}: [pretrain] needs steps > 0", path);
    e.pretrain_overrides = string_list((*pre)["set"], path + " [pretrain]");
  }
  const toml::array* runs = doc["run"].as_array();
  FRUGAL_CHECK(runs && !runs->empty(), "{}: no [[run]] entries; add at least a baseline run", path);
  std::set<std::string> names = {"pretrain"};
  for (const toml::node& node : *runs) {
    const toml::table* t = node.as_table();
    FRUGAL_CHECK(t, "{}: every [[run]] must be a table", path);
    ExperimentRun r;
    r.name = (*t)["name"].value_or(std::string());
    const std::string where = fmt::format("{} run '{}'", path, r.name);
    FRUGAL_CHECK(valid_run_name(r.name), "{}: the run name '{}' is not usable as a directory name: "
                 "use letters, digits, '_', '-' and '.', not starting with '.'", path, r.name);
    FRUGAL_CHECK(names.insert(r.name).second, "{}: the run name '{}' is used twice (or is the "
                 "reserved 'pretrain')", path, r.name);
    static const std::set<std::string> run_keys = {"name", "set", "pretrained", "baseline"};
    for (const auto& [key, value] : *t)
      FRUGAL_CHECK(run_keys.count(std::string(key.str())), "{}: unknown key '{}'; a [[run]] has name, "
                   "set, pretrained and baseline", where, key.str());
    r.overrides = string_list((*t)["set"], where);
    if (const auto b = (*t)["baseline"]) {
      FRUGAL_CHECK(b.is_string(), "{}: baseline must be the name of a run", where);
      r.baseline = *b.value<std::string>();
    }
    r.pretrained = (*t)["pretrained"].value_or(e.pretrain_steps > 0);
    FRUGAL_CHECK(!r.pretrained || e.pretrain_steps > 0, "{}: pretrained = true needs a [pretrain] table", where);
    e.runs.push_back(std::move(r));
  }
  baseline_indices(e);  // fail early
  // Every run's config passes the checks `frugal train` makes before it reads data, so that a bad
  // value in the fifth run is refused before the first has trained for an hour.
  auto check = [&](const ExperimentRun* r) {
    try {
      run_settings(experiment_config(e, r, "check"));
    } catch (const Error& err) {
      fail("{} {}: {}", path, r ? fmt::format("run '{}'", r->name) : std::string("[pretrain]"), err.what());
    }
  };
  for (const ExperimentRun& r : e.runs) check(&r);
  if (e.pretrain_steps > 0) check(nullptr);
  return e;
}

std::vector<size_t> baseline_indices(const Experiment& e) {
  auto index_of = [&](const ExperimentRun& r) -> std::optional<size_t> {  // r's baseline key
    if (r.baseline.empty()) return std::nullopt;
    const auto named = std::find_if(e.runs.begin(), e.runs.end(),
                                    [&](const ExperimentRun& other) { return other.name == r.baseline; });
    FRUGAL_CHECK(named != e.runs.end(), "{} run '{}': baseline '{}' is not a run of the file", e.path,
                 r.name, r.baseline);
    return size_t(named - e.runs.begin());
  };
  std::vector<std::optional<size_t>> keys;  // each run's baseline key, resolved
  for (const ExperimentRun& r : e.runs) keys.push_back(index_of(r));
  std::vector<bool> named_as_baseline(e.runs.size(), false);
  named_as_baseline[0] = true;
  for (const auto& b : keys)
    if (b) named_as_baseline[*b] = true;
  std::vector<size_t> out(e.runs.size(), 0);
  for (size_t i = 0; i < e.runs.size(); ++i) {
    out[i] = keys[i] ? *keys[i] : named_as_baseline[i] ? i : 0;
    FRUGAL_CHECK(!named_as_baseline[i] || out[i] == i, "{} run '{}' is a baseline{} and so is compared "
                 "with itself; drop its baseline key ('{}')", e.path, e.runs[i].name,
                 i == 0 ? " (the first run)" : "", e.runs[i].baseline);
  }
  return out;
}

io::Config experiment_config(const Experiment& e, const ExperimentRun* run, const std::string& out_dir) {
  io::Config config(run_schema());
  config.merge_toml(e.base_toml, e.path + " [base]");
  if (run) {
    config.apply_overrides(run->overrides);
  } else {
    config.apply_overrides(e.pretrain_overrides);
    config.set("train.max_steps", std::to_string(e.pretrain_steps));
  }
  config.apply_overrides(e.overrides);
  config.set("train.out_dir", out_dir);
  return config;
}

namespace {

std::string results_markdown(const Experiment& e, const ExperimentOptions& o, const ReportTable& table,
                             const std::vector<std::string>& left_out) {
  std::string md = fmt::format("# Experiment {}\n\n", fs::path(e.path).stem().string());
  if (!e.description.empty()) md += e.description + "\n\n";
  md += fmt::format("Command: `{}`\n\n", o.command.empty() ? "frugal experiment " + e.path : o.command);
  if (e.pretrain_steps > 0)
    md += fmt::format("Pretraining: {} dense steps{}; runs marked *pretrained* start from its final "
                      "checkpoint.\n\n", e.pretrain_steps,
                      e.pretrain_overrides.empty() ? "" : fmt::format(" with `{}`", fmt::join(e.pretrain_overrides, " ")));
  md += "| run | pretrained | overrides |\n|---|---|---|\n";
  for (const ExperimentRun& r : e.runs)
    md += fmt::format("| {} | {} | {} |\n", r.name, r.pretrained ? "yes" : "no",
                      r.overrides.empty() ? "(base)" : fmt::format("`{}`", fmt::join(r.overrides, "` `")));
  if (!left_out.empty())
    md += fmt::format("\nNot in the table (no finished results in this directory, or none for its baseline; "
                      "train them with `--only`): {}.\n", fmt::join(left_out, ", "));
  if (table.rows.empty()) return md;
  md += fmt::format("\n{}\n", markdown(table));
  if (o.plots)
    for (const char* plot : {kPlotValVsWall, kPlotValVsFlops, kPlotTrainVsStep})
      md += fmt::format("![{0}]({0}.png)\n", plot);
  return md;
}

}  // namespace

ReportTable run_experiment(const Experiment& e, const ExperimentOptions& o) {
  FRUGAL_CHECK(!o.out_dir.empty(), "no output directory for the experiment; pass --out DIR");
  const io::DirLock lock = io::DirLock::exclusive(o.out_dir, "experiment directory",
                                                  "wait for that experiment to end or pass another --out");
  const auto dir_of = [&](const std::string& name) { return (fs::path(o.out_dir) / name).string(); };
  const std::string pretrain_dir = dir_of("pretrain");
  const auto config_of = [&](const ExperimentRun* r) {
    return experiment_config(e, r, r ? dir_of(r->name) : pretrain_dir);
  };
  const auto selected = [&](const std::string& name) {
    return o.only.empty() || std::find(o.only.begin(), o.only.end(), name) != o.only.end();
  };
  // Finished earlier with the config it would be trained with now. A marker written before some of
  // the config's keys existed does not say what those keys were in its run (loaded, they take their
  // defaults, and a new default may change what a run computes): that run counts as unfinished, and
  // `why_unfinished` says so.
  std::map<std::string, std::string> why_unfinished;  // by run name ("pretrain")
  const auto finished = [&](const ExperimentRun* r) {
    const fs::path marker = fs::path(r ? dir_of(r->name) : pretrain_dir) / kFinishedRunFile;
    if (!fs::exists(marker)) return false;
    const io::Config was = io::Config::load(run_schema(), marker.string());
    if (was.to_toml() != config_of(r).to_toml()) return false;
    const std::vector<std::string> unknown = was.keys_not_set_by(marker.string());
    if (unknown.empty()) return true;
    const std::string name = r ? r->name : "pretrain";
    why_unfinished[name] = fmt::format(
        " (it finished before {}{} existed; train it again, or add {} to {} if {} reproduce that run)", unknown[0],
        unknown.size() > 1 ? fmt::format(" and {} more keys", unknown.size() - 1) : "",
        unknown.size() > 1 ? "them" : "it", marker.string(), unknown.size() > 1 ? "their defaults" : "its default");
    if (!o.quiet && !selected(name)) io::print("note: run '{}' counts as unfinished{}\n", name, why_unfinished[name]);
    return false;
  };
  for (const std::string& name : o.only)
    FRUGAL_CHECK(name == "pretrain" ? e.pretrain_steps > 0
                                    : std::any_of(e.runs.begin(), e.runs.end(), [&](const ExperimentRun& r) { return r.name == name; }),
                 "--only {}: {} has no run '{}'{}", name, e.path, name,
                 name == "pretrain" ? " (no [pretrain] table)" : "");
  // Which runs will have results, and whether everything a run to train needs is there.
  const std::vector<size_t> baselines = baseline_indices(e);
  std::vector<bool> has(e.runs.size());
  for (size_t i = 0; i < e.runs.size(); ++i) has[i] = selected(e.runs[i].name) || finished(&e.runs[i]);
  const bool pretrain_ready = e.pretrain_steps == 0 || selected("pretrain") || finished(nullptr);
  for (size_t i = 0; i < e.runs.size(); ++i) {
    const ExperimentRun& r = e.runs[i];
    if (!selected(r.name)) continue;
    const std::string& baseline = e.runs[baselines[i]].name;
    FRUGAL_CHECK(has[baselines[i]], "--only: run '{}' is compared with '{}', which has no finished results "
                 "with this config in {}{}; add it to --only", r.name, baseline, o.out_dir, why_unfinished[baseline]);
    FRUGAL_CHECK(!r.pretrained || pretrain_ready, "--only: run '{}' starts from the pretraining, which has no "
                 "finished results with this config in {}{}; add pretrain to --only", r.name, o.out_dir,
                 why_unfinished["pretrain"]);
  }

  // Each run's Trainer locks its own directory before replacing the run in it (overwrite).
  auto train = [&](const std::string& name, const io::Config& config, const std::string& init_from) {
    if (!o.quiet) io::print("=== {} ===\n", name);
    Trainer trainer(config, {.init_from = init_from, .quiet = o.quiet, .overwrite = true});
    const fs::path marker = fs::path(config.get_string("train.out_dir")) / kFinishedRunFile;
    fs::remove(marker);  // the Trainer holds the directory and replaced the run in it
    const FitResult r = trainer.fit();
    FRUGAL_CHECK(!r.interrupted, "the experiment was interrupted during run '{}'", name);
    io::write_file_atomic(marker.string(), config.to_toml());
    if (!o.quiet)
      io::print("{}: {} steps in {:.1f} s, val loss {:.4f}\n", name, r.steps, r.seconds, r.final_val_loss);
  };
  if (e.pretrain_steps > 0 && selected("pretrain")) train("pretrain", config_of(nullptr), "");
  for (const ExperimentRun& r : e.runs)
    if (selected(r.name)) train(r.name, config_of(&r), r.pretrained ? pretrain_dir : "");

  // The report: every run with results whose baseline has them too, baselines renumbered.
  std::vector<std::string> dirs, names, left_out;
  std::vector<size_t> rows, row_of(e.runs.size()), report_baselines;
  for (size_t i = 0; i < e.runs.size(); ++i) {
    if (has[i] && has[baselines[i]]) {
      row_of[i] = rows.size();
      rows.push_back(i);
      dirs.push_back(dir_of(e.runs[i].name));
      names.push_back(e.runs[i].name);
    } else {
      left_out.push_back(e.runs[i].name);
    }
  }
  for (size_t i : rows) report_baselines.push_back(row_of[baselines[i]]);
  ReportOptions report;
  report.target_loss = e.target_loss;
  report.names = names;
  report.baselines = report_baselines;
  report.plots = o.plots;
  // --only pretrain: nothing to compare yet, results.md only.
  const ReportTable table = rows.empty() ? ReportTable{} : write_report(dirs, o.out_dir, report);
  io::write_file_atomic((fs::path(o.out_dir) / "results.md").string(), results_markdown(e, o, table, left_out));
  return table;
}

}  // namespace frugal
