// MethodSet ordering, conflicts, firing and state; see method_set.h.
#include "frugal/methods/method_set.h"

#include <algorithm>
#include <map>

#include "frugal/core/error.h"

namespace frugal {

const char* event_name(Event e) {
  static constexpr const char* names[kNumEvents] = {
      "Init", "FitStart", "BatchStart", "BeforeForward", "AfterForward", "BeforeBackward",
      "AfterBackward", "AfterGradReduce", "BeforeOptimStep", "AfterOptimStep", "Reconfigure",
      "BatchEnd", "Eval", "Checkpoint", "FitEnd"};
  return names[static_cast<int>(e)];
}

MethodSet::MethodSet(std::vector<std::unique_ptr<Method>> methods) {
  // Kahn's algorithm; among ready methods the earliest given goes first, so the order is stable.
  const size_t n = methods.size();
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < n; ++i) index[methods[i]->name()] = i;
  std::vector<std::vector<size_t>> after(n);
  std::vector<int> indegree(n, 0);
  for (size_t i = 0; i < n; ++i)
    for (const std::string& other : methods[i]->runs_before()) {
      auto it = index.find(other);
      if (it == index.end()) continue;  // not enabled in this run
      after[i].push_back(it->second);
      ++indegree[it->second];
    }
  std::vector<bool> placed(n, false);
  for (size_t round = 0; round < n; ++round) {
    size_t pick = n;
    for (size_t i = 0; i < n && pick == n; ++i)
      if (!placed[i] && indegree[i] == 0) pick = i;
    FRUGAL_CHECK(pick != n, "the enabled methods declare a runs-before cycle; this is a bug in "
                 "their declarations, please report it");
    placed[pick] = true;
    for (size_t j : after[pick]) --indegree[j];
    methods_.push_back(std::move(methods[pick]));
  }
  // A reshape rebuilds the model: masks, a frozen prefix and its cached activations belong to the
  // old shapes, unless their owner follows reshapes (and fires after the reshaping method).
  for (size_t i = 0; i < methods_.size(); ++i)
    for (size_t j = 0; j < methods_.size(); ++j) {
      const auto& a = methods_[i];
      const auto& b = methods_[j];
      if (i == j || !a->capabilities().changes_shapes) continue;
      const Capabilities other = b->capabilities();
      if (other.follows_reshape && !other.changes_shapes) {
        FRUGAL_CHECK(i < j, "internal: methods.{} follows the reshapes of methods.{} but fires before "
                     "it; declare runs_before", b->name(), a->name());
        continue;
      }
      FRUGAL_CHECK(!other.owns_masks && !other.changes_trainable_set && !other.changes_shapes,
                   "methods.{} changes the model's shapes mid-run and methods.{} keeps state tied "
                   "to them ({}); they cannot be used together: remove one of the two tables",
                   a->name(), b->name(), other.changes_shapes ? "it reshapes too"
                   : other.owns_masks ? "sparsity masks" : "a frozen prefix and its cached activations");
    }
}

MethodSet MethodSet::from_config(const io::Config& config) {
  std::vector<std::unique_ptr<Method>> enabled;
  std::vector<const MethodInfo*> infos;
  for (const MethodInfo& info : registered_methods()) {
    const std::string prefix = "methods." + info.name;
    if (!config.section_present(prefix)) continue;
    infos.push_back(&info);
    enabled.push_back(info.make(config, prefix));
  }
  for (const MethodInfo* a : infos)
    for (const auto& [other, why] : a->conflicts)
      for (const MethodInfo* b : infos)
        FRUGAL_CHECK(b->name != other, "methods.{} and methods.{} cannot be used together: {}; "
                     "remove one of the two tables", a->name, other, why);
  return MethodSet(std::move(enabled));
}

bool MethodSet::any(bool Capabilities::* flag) const {
  return std::ranges::any_of(methods_, [&](const auto& m) { return m->capabilities().*flag; });
}

bool MethodSet::acts_now(Event event, const TrainContext& ctx, bool Capabilities::* flag) const {
  return std::ranges::any_of(methods_, [&](const auto& m) { return m->capabilities().*flag && m->match(event, ctx); });
}

bool MethodSet::reads_all_gradients_now(const TrainContext& ctx, bool sums_serve) const {
  return std::any_of(methods_.begin(), methods_.end(), [&](const auto& m) {
    const Capabilities c = m->capabilities();
    return c.reads_all_gradients && !(sums_serve && c.gradient_sums_only) && m->match(Event::AfterGradReduce, ctx);
  });
}

void MethodSet::fire(Event event, TrainContext& ctx) {
  ++counts_[static_cast<int>(event)];
  const int64_t at_start = ctx.session.reshapes();
  for (auto& m : methods_) {
    ctx.reshaped = ctx.session.reshapes() != at_start;
    if (!m->match(event, ctx)) continue;
    const int64_t reshapes = ctx.session.reshapes();
    m->apply(event, ctx);
    FRUGAL_CHECK(ctx.session.reshapes() == reshapes ||
                     (event == Event::Reconfigure && m->capabilities().changes_shapes),
                 "internal: method {} reshaped the session at {}; reshape only at Reconfigure, "
                 "and declare Capabilities::changes_shapes", m->name(), event_name(event));
  }
  ctx.reshaped = false;
}

namespace {

// Each method's non-empty line(method), in order, headed "methods.<name>: ".
template <class Line>
std::vector<std::string> headed_lines(const std::vector<std::unique_ptr<Method>>& methods, Line&& line) {
  std::vector<std::string> lines;
  for (const auto& m : methods)
    if (const std::string text = line(*m); !text.empty()) lines.push_back("methods." + m->name() + ": " + text);
  return lines;
}

}  // namespace

std::vector<std::string> MethodSet::restore_trained_function(TrainContext& ctx) {
  return headed_lines(methods_, [&](Method& m) { return m.restore_trained_function(ctx); });
}

std::vector<std::string> MethodSet::unfinished_at_end() const {
  return headed_lines(methods_, [](const Method& m) { return m.unfinished_at_end(); });
}

int MethodSet::cached_prefix_blocks() const {
  int k = 0;
  for (const auto& m : methods_) k = std::max(k, m->cached_prefix_blocks());
  return k;
}

std::optional<StepPlan> MethodSet::step_plan(int64_t horizon) const {
  std::optional<StepPlan> plan;
  for (const auto& m : methods_) {
    std::optional<StepPlan> p = m->step_plan(horizon);
    if (!p) continue;
    FRUGAL_CHECK(!plan, "internal: two methods plan the cost of the run's steps (methods.{})", m->name());
    FRUGAL_CHECK(p->ends.size() == p->kinds.size() && !p->ends.empty() && p->ends.back() == horizon &&
                 p->names.size() == p->estimated_cost.size(), "internal: methods.{}'s step plan is malformed",
                 m->name());
    plan = std::move(p);
  }
  return plan;
}

nlohmann::json MethodSet::save_state() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& m : methods_) j[m->name()] = m->save_state();
  return j;
}

Method& MethodSet::saved_method(const std::string& name) {
  auto m = std::find_if(methods_.begin(), methods_.end(), [&](const auto& x) { return x->name() == name; });
  FRUGAL_CHECK(m != methods_.end(), "the checkpoint has state of method '{}' but the config does "
               "not enable it; add a [methods.{}] table to resume this run", name, name);
  return **m;
}

std::vector<std::string> MethodSet::load_state(const nlohmann::json& state, const std::string& checkpoint) {
  std::vector<std::string> started;
  for (const auto& m : methods_) {
    if (state.contains(m->name())) continue;
    const std::string why = m->cannot_start_mid_run();
    FRUGAL_CHECK(why.empty(), "the checkpoint {0} was trained without methods.{1}, which cannot start "
                 "mid-run: {2}; remove the [methods.{1}] table to resume, or start a new run (another "
                 "train.out_dir) from the checkpoint's weights with --init-from {0}", checkpoint, m->name(), why);
    started.push_back(m->name());
  }
  for (auto it = state.begin(); it != state.end(); ++it) saved_method(it.key()).load_state(it.value());
  return started;
}

Method::StateTensors MethodSet::state_tensors() const {
  Method::StateTensors all;
  for (const auto& m : methods_)
    for (auto& [name, values] : m->state_tensors()) all.emplace_back(m->name() + "/" + name, values);
  return all;
}

void MethodSet::load_state_tensors(std::map<std::string, std::vector<float>> tensors) {
  std::map<std::string, std::map<std::string, std::vector<float>>> by_method;
  for (auto& [name, values] : tensors) {
    const size_t slash = name.find('/');
    FRUGAL_CHECK(slash != std::string::npos, "a checkpoint's method tensor '{}' is not named "
                 "<method>/<tensor>; the file is damaged", name);
    by_method[name.substr(0, slash)][name.substr(slash + 1)] = std::move(values);
  }
  for (auto& [method, named] : by_method) saved_method(method).load_state_tensors(std::move(named));
}

}  // namespace frugal
