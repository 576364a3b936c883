// ConfigSchema / Config: TOML (toml++) walking against the schema, typed --set overrides,
// nearest-key suggestions, range checks, deterministic TOML and Markdown output.
#include "frugal/io/config.h"

#include <algorithm>
#include <limits>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <toml++/toml.h>

#include "frugal/core/error.h"

namespace frugal::io {
namespace {

std::string last_segment(const std::string& name) {
  size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

std::string table_of(const std::string& name) {
  size_t dot = name.rfind('.');
  return dot == std::string::npos ? std::string() : name.substr(0, dot);
}

// True when `path` equals `prefix` or lies under it ("a.b.c" is under "a.b", "a.bc" is not).
bool under(const std::string& path, const std::string& prefix) {
  return path.size() >= prefix.size() && path.compare(0, prefix.size(), prefix) == 0 &&
         (path.size() == prefix.size() || path[prefix.size()] == '.');
}

size_t levenshtein(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t substitute = diagonal + (a[i - 1] != b[j - 1]);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitute});
    }
  }
  return row[b.size()];
}

// The candidate closest to `name` within max(min_distance, length/3) edits, or "".
std::string nearest(const std::vector<std::string>& candidates, const std::string& name,
                    bool by_last_segment) {
  std::string target = by_last_segment ? last_segment(name) : name;
  size_t limit = std::max<size_t>(by_last_segment ? 1 : 2, target.size() / 3);
  std::string best;
  size_t best_distance = limit + 1;
  for (const std::string& c : candidates) {
    size_t d = levenshtein(target, by_last_segment ? last_segment(c) : c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += fmt::format("\\u{:04X}", c);
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

std::string toml_float(double v) {
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // keep it a TOML float
  return s;
}

const char* expectation(ConfigType t) {
  switch (t) {
    case ConfigType::Int: return "an integer";
    case ConfigType::Float: return "a number";
    case ConfigType::Bool: return "true or false";
    case ConfigType::String: return "a string";
    case ConfigType::Strings: return "a list of strings";
  }
  return "?";
}

[[noreturn]] void type_error(const ConfigKey& key, const std::string& got, const std::string& where) {
  fail("'{}' expects {}, got {} ({}); write {} like the default {}", key.name,
       expectation(key.type), got, where, expectation(key.type), toml_value(key.default_value));
}

// "string \"fast\"", "integer 3", "table", ... for error messages.
std::string describe(const toml::node& node) {
  if (auto s = node.as_string()) return "string " + toml_string(s->get());
  if (auto i = node.as_integer()) return fmt::format("integer {}", i->get());
  if (auto f = node.as_floating_point()) return "float " + toml_float(f->get());
  if (auto b = node.as_boolean()) return fmt::format("boolean {}", b->get());
  if (node.is_array()) return "an array";
  if (node.is_table()) return "a table";
  return "a date/time";
}

std::string location(const std::string& source, const toml::source_region& region) {
  return region.begin.line ? fmt::format("{}:{}", source, region.begin.line) : source;
}

ConfigValue from_toml(const ConfigKey& key, const toml::node& node, const std::string& where) {
  switch (key.type) {
    case ConfigType::Int:
      if (auto i = node.as_integer()) return i->get();
      break;
    case ConfigType::Float:
      if (auto f = node.as_floating_point()) return f->get();
      if (auto i = node.as_integer()) return static_cast<double>(i->get());
      break;
    case ConfigType::Bool:
      if (auto b = node.as_boolean()) return b->get();
      break;
    case ConfigType::String:
      if (auto s = node.as_string()) return s->get();
      break;
    case ConfigType::Strings:
      if (auto s = node.as_string()) return std::vector<std::string>{s->get()};  // a list of one
      if (auto array = node.as_array()) {
        std::vector<std::string> list;
        for (const toml::node& element : *array) {
          auto s = element.as_string();
          if (!s) type_error(key, "an array containing " + describe(element), where);
          list.push_back(s->get());
        }
        return list;
      }
      break;
  }
  type_error(key, describe(node), where);
}

std::string trim(std::string_view s) {
  size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return {};
  size_t end = s.find_last_not_of(" \t");
  return std::string(s.substr(begin, end - begin + 1));
}

template <class T>
bool parse_number(const std::string& text, T* out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  return ec == std::errc() && ptr == end;
}

// An override's text parsed per the key's type.
ConfigValue from_text(const ConfigKey& key, const std::string& text, const std::string& where) {
  std::string got = toml_string(text);
  switch (key.type) {
    case ConfigType::Int: {
      int64_t i;
      if (parse_number(text, &i)) return i;
      break;
    }
    case ConfigType::Float: {
      double d;
      if (parse_number(text, &d)) return d;
      break;
    }
    case ConfigType::Bool:
      if (text == "true" || text == "1") return true;
      if (text == "false" || text == "0") return false;
      break;
    case ConfigType::String:
      if (text.size() >= 2 && text.front() == '"' && text.back() == '"')
        return text.substr(1, text.size() - 2);
      return text;
    case ConfigType::Strings: {
      if (!text.empty() && text.front() == '[') {
        toml::table parsed;
        try {
          parsed = toml::parse("v = " + text, where);
        } catch (const toml::parse_error&) {
          type_error(key, got, where);
        }
        return from_toml(key, *parsed.get("v"), where);
      }
      std::vector<std::string> list;
      std::istringstream items(text);
      for (std::string item; std::getline(items, item, ',');) list.push_back(trim(item));
      return list;
    }
  }
  type_error(key, got, where);
}

// One entry of a TOML document resolved against the schema: a key's value, or (no value) the
// presence of a table.
struct Assignment {
  const ConfigKey* key;  // nullptr for a table
  std::string path;
  ConfigValue value;
  std::string where;
};

void collect(const ConfigSchema& schema, const toml::table& table, const std::string& prefix,
             const std::string& source, std::vector<Assignment>& out) {
  for (const auto& [k, node] : table) {
    std::string path = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    std::string where = location(source, node.source().begin.line ? node.source() : k.source());
    if (const ConfigKey* key = schema.find(path)) {
      out.push_back({key, path, from_toml(*key, node, where), where});
    } else if (schema.is_table(path)) {
      if (!node.is_table())
        fail("'{}' is a table of keys, not a value ({}); set its keys instead, e.g. [{}]", path,
             where, path);
      out.push_back({nullptr, path, {}, where});
      collect(schema, *node.as_table(), path, source, out);
    } else {
      schema.fail_unknown(path, node.is_table(), where);
    }
  }
}

// The assignments of the TOML document `text` (from `source_name`, for the messages).
std::vector<Assignment> parse_assignments(const ConfigSchema& schema, std::string_view text, const std::string& source_name) {
  toml::table table;
  try {
    table = toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    fail("{}:{}:{}: TOML syntax error: {}; fix the file", source_name, e.source().begin.line,
         e.source().begin.column, e.description());
  }
  std::vector<Assignment> assignments;
  collect(schema, table, "", source_name, assignments);
  return assignments;
}

std::string read_config_file(const std::string& toml_path) {
  std::error_code ec;
  FRUGAL_CHECK(!std::filesystem::is_directory(toml_path, ec), "config file '{}' is a directory; "
               "pass the path of a TOML file", toml_path);
  std::ifstream in(toml_path, std::ios::binary);
  FRUGAL_CHECK(in.good(), "cannot read config file '{}': {}; check the path", toml_path,
               std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

bool valid_name(const std::string& name) {
  if (name.empty() || name.front() == '.' || name.back() == '.' ||
      name.find("..") != std::string::npos)
    return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

std::string markdown_cell(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : c == '\n' ? std::string(" ") : std::string(1, c);
  return out;
}

}  // namespace

double decimal_value(float f) { return std::stod(fmt::format("{}", f)); }

std::string toml_value(const ConfigValue& v) {
  struct Visitor {
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return toml_float(d); }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(const std::string& s) const { return toml_string(s); }
    std::string operator()(const std::vector<std::string>& list) const {
      std::string out = "[";
      for (size_t i = 0; i < list.size(); ++i) out += (i ? ", " : "") + toml_string(list[i]);
      return out + "]";
    }
  };
  return std::visit(Visitor{}, v);
}


const char* config_type_name(ConfigType t) {
  switch (t) {
    case ConfigType::Int: return "int";
    case ConfigType::Float: return "float";
    case ConfigType::Bool: return "bool";
    case ConfigType::String: return "string";
    case ConfigType::Strings: return "list of strings";
  }
  return "?";
}

// ---- Range ----

Range Range::closed(double lo, double hi) { return Range{lo, hi, true, true}; }
Range Range::half_open(double lo, double hi) { return Range{lo, hi, true, false}; }
Range Range::left_open(double lo, double hi) { return Range{lo, hi, false, true}; }
Range Range::at_least(double lo) { return Range{lo, std::nullopt, true, true}; }
Range Range::above(double lo) { return Range{lo, std::nullopt, false, true}; }

bool Range::contains(double v) const {
  if (std::isnan(v)) return false;
  if (min && (min_inclusive ? v < *min : v <= *min)) return false;
  if (max && (max_inclusive ? v > *max : v >= *max)) return false;
  return true;
}

std::string Range::str() const {
  if (!min && !max) return "";
  return fmt::format("{}{}, {}{}", min && min_inclusive ? '[' : '(',
                     min ? fmt::format("{}", *min) : "-inf", max ? fmt::format("{}", *max) : "inf",
                     max && max_inclusive ? ']' : ')');
}

// ---- ConfigSchema ----

void ConfigSchema::check_new_name(const std::string& name) const {
  FRUGAL_CHECK(valid_name(name), "config name '{}' is malformed; use dot-separated segments of "
               "letters, digits, '_' and '-'", name);
  for (const ConfigKey& k : keys_)
    FRUGAL_CHECK(!under(name, k.name) && !under(k.name, name), "config name '{}' clashes with "
                 "key '{}' (one would be a table of the other); rename one", name, k.name);
  FRUGAL_CHECK(!is_section(name), "config name '{}' is already a section; rename it", name);
}

ConfigSchema& ConfigSchema::add(ConfigKey key) {
  check_new_name(key.name);
  check(key, key.default_value, "default of the schema");
  auto pos = std::lower_bound(keys_.begin(), keys_.end(), key.name,
                              [](const ConfigKey& k, const std::string& n) { return k.name < n; });
  keys_.insert(pos, std::move(key));
  return *this;
}

ConfigSchema& ConfigSchema::add_int(const std::string& name, int64_t default_value,
                                    const std::string& description, Range range) {
  return add({name, ConfigType::Int, default_value, description, range, {}});
}
ConfigSchema& ConfigSchema::add_float(const std::string& name, double default_value,
                                      const std::string& description, Range range) {
  return add({name, ConfigType::Float, default_value, description, range, {}});
}
ConfigSchema& ConfigSchema::add_bool(const std::string& name, bool default_value,
                                     const std::string& description) {
  return add({name, ConfigType::Bool, default_value, description, {}, {}});
}
ConfigSchema& ConfigSchema::add_string(const std::string& name, std::string default_value,
                                       const std::string& description,
                                       std::vector<std::string> allowed) {
  return add({name, ConfigType::String, std::move(default_value), description, {},
              std::move(allowed)});
}
ConfigSchema& ConfigSchema::add_strings(const std::string& name,
                                        std::vector<std::string> default_value,
                                        const std::string& description,
                                        std::vector<std::string> allowed) {
  return add({name, ConfigType::Strings, std::move(default_value), description, {},
              std::move(allowed)});
}

ConfigSchema& ConfigSchema::add_section(const std::string& prefix, const std::string& description) {
  FRUGAL_CHECK(valid_name(prefix) && !find(prefix) && !is_section(prefix), "config section '{}' "
               "is malformed, a key, or declared twice; fix the schema", prefix);
  auto pos = std::lower_bound(
      sections_.begin(), sections_.end(), prefix,
      [](const ConfigSection& s, const std::string& p) { return s.prefix < p; });
  sections_.insert(pos, {prefix, description});
  return *this;
}

const ConfigKey* ConfigSchema::find(const std::string& name) const {
  auto it = std::lower_bound(keys_.begin(), keys_.end(), name,
                             [](const ConfigKey& k, const std::string& n) { return k.name < n; });
  return it != keys_.end() && it->name == name ? &*it : nullptr;
}

const ConfigKey& ConfigSchema::at(const std::string& name) const {
  const ConfigKey* key = find(name);
  if (!key) fail_unknown(name, false, "");
  return *key;
}

void ConfigSchema::fail_unknown(const std::string& path, bool table, const std::string& where) const {
  const std::string at = where.empty() ? "" : " (" + where + ")";
  // The deepest table above `path`; when it holds optional sections and no keys of its own
  // ("methods"), `path` names a section it does not have.
  std::string parent = table_of(path);
  while (!parent.empty() && !is_table(parent)) parent = table_of(parent);
  std::vector<std::string> names, prefixes;
  for (const ConfigSection& s : sections_)
    if (table_of(s.prefix) == parent) names.push_back(last_segment(s.prefix)), prefixes.push_back(s.prefix);
  const bool has_keys = std::any_of(keys_.begin(), keys_.end(),
                                    [&](const ConfigKey& k) { return table_of(k.name) == parent; });
  if (!names.empty() && !has_keys) {
    const size_t start = parent.empty() ? 0 : parent.size() + 1;
    const std::string section = path.substr(0, path.find('.', start));
    std::string best = nearest(prefixes, section, false);
    if (best.empty()) best = nearest(prefixes, section, true);
    fail("unknown config section '{}'{}: the sections of [{}] are {}{}", section, at, parent,
         fmt::join(names, ", "), best.empty() ? "" : "; did you mean '" + best + "'?");
  }
  const std::string suggestion = suggest(path, table);
  fail("unknown config {} '{}'{}; {}", table ? "section" : "key", path, at,
       suggestion.empty() ? "see docs/config.md for the known keys" : "did you mean '" + suggestion + "'?");
}

bool ConfigSchema::is_section(const std::string& prefix) const {
  return std::any_of(sections_.begin(), sections_.end(),
                     [&](const ConfigSection& s) { return s.prefix == prefix; });
}

bool ConfigSchema::is_table(const std::string& path) const {
  return std::any_of(keys_.begin(), keys_.end(),
                     [&](const ConfigKey& k) { return k.name != path && under(k.name, path); }) ||
         std::any_of(sections_.begin(), sections_.end(),
                     [&](const ConfigSection& s) { return under(s.prefix, path); });
}

std::string ConfigSchema::suggest(const std::string& name, bool tables) const {
  std::set<std::string> names;
  for (const ConfigKey& k : keys_) {
    if (!tables) names.insert(k.name);
    for (std::string t = table_of(k.name); tables && !t.empty(); t = table_of(t)) names.insert(t);
  }
  for (const ConfigSection& s : sections_)
    for (std::string t = s.prefix; tables && !t.empty(); t = table_of(t)) names.insert(t);
  std::vector<std::string> candidates(names.begin(), names.end());
  std::string best = nearest(candidates, name, false);
  return best.empty() ? nearest(candidates, name, true) : best;
}

void ConfigSchema::check(const ConfigKey& key, const ConfigValue& value,
                         const std::string& where) const {
  FRUGAL_CHECK(value.index() == static_cast<size_t>(key.type), "'{}' expects {}, got another "
               "type ({}); pass {}", key.name, expectation(key.type), where, expectation(key.type));
  std::optional<double> number;
  if (auto i = std::get_if<int64_t>(&value)) number = static_cast<double>(*i);
  if (auto d = std::get_if<double>(&value)) number = *d;
  if (number)
    FRUGAL_CHECK(key.range.contains(*number), "'{}' = {} is out of range {} ({}); use a value in "
                 "that range", key.name, toml_value(value), key.range.str(), where);
  if (key.allowed.empty()) return;
  std::vector<std::string> items;
  if (auto s = std::get_if<std::string>(&value)) items = {*s};
  if (auto list = std::get_if<std::vector<std::string>>(&value)) items = *list;
  for (const std::string& item : items) {
    if (std::find(key.allowed.begin(), key.allowed.end(), item) != key.allowed.end()) continue;
    std::string choices;
    for (const std::string& a : key.allowed) choices += (choices.empty() ? "" : ", ") + toml_string(a);
    fail("'{}' = {} is not one of {} ({}); pick one of them", key.name, toml_string(item),
         choices, where);
  }
}

std::string ConfigSchema::markdown() const {
  struct Row {
    std::string name, text;
  };
  std::vector<Row> rows;
  for (const ConfigKey& k : keys_) {
    std::string limits = k.range.str();
    for (const std::string& a : k.allowed) limits += (limits.empty() ? "" : ", ") + toml_string(a);
    rows.push_back({k.name, fmt::format("| `{}` | {} | `{}` | {} | {} |\n", k.name,
                                        config_type_name(k.type), toml_value(k.default_value),
                                        markdown_cell(limits), markdown_cell(k.description))});
  }
  for (const ConfigSection& s : sections_)
    rows.push_back({s.prefix, fmt::format("| `[{}]` | optional section | absent |  | {} |\n",
                                          s.prefix, markdown_cell(s.description))});
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.name < b.name; });
  std::string out = "| key | type | default | range / allowed | description |\n|---|---|---|---|---|\n";
  for (const Row& r : rows) out += r.text;
  return out;
}

// ---- Config ----

Config::Config(ConfigSchema schema)
    : schema_(std::make_shared<const ConfigSchema>(std::move(schema))) {
  for (const ConfigKey& k : schema_->keys()) values_[k.name] = k.default_value;
}

Config Config::load(ConfigSchema schema, const std::string& toml_path,
                    const std::vector<std::string>& overrides) {
  Config config(std::move(schema));
  if (!toml_path.empty()) config.merge_file(toml_path);
  config.apply_overrides(overrides);
  return config;
}

void Config::merge_file(const std::string& toml_path) { merge_toml(read_config_file(toml_path), toml_path); }

void Config::merge_toml(std::string_view text, const std::string& source_name) {
  std::vector<Assignment> assignments = parse_assignments(*schema_, text, source_name);
  Config next = *this;
  for (Assignment& a : assignments) {
    if (a.key) {
      next.set_value(*a.key, std::move(a.value), a.where);
    } else {
      next.mark_present(a.path);
    }
  }
  *this = std::move(next);
}

std::vector<std::string> Config::keys_not_set_by(const std::string& toml_path) const {
  std::set<std::string> set;
  for (const Assignment& a : parse_assignments(*schema_, read_config_file(toml_path), toml_path))
    if (a.key) set.insert(a.path);
  const auto in_absent_section = [&](const ConfigKey& k) {
    return std::any_of(schema_->sections().begin(), schema_->sections().end(),
                       [&](const ConfigSection& s) { return under(k.name, s.prefix) && !present_.count(s.prefix); });
  };
  std::vector<std::string> missing;
  for (const ConfigKey& k : schema_->keys())
    if (!in_absent_section(k) && !set.count(k.name)) missing.push_back(k.name);
  return missing;
}

void Config::apply_override(const std::string& key_equals_value) {
  size_t eq = key_equals_value.find('=');
  FRUGAL_CHECK(eq != std::string::npos, "override '{}' has no '='; write --set key=value, e.g. "
               "--set optim.lr=0.001", key_equals_value);
  set_text(trim(std::string_view(key_equals_value).substr(0, eq)),
           trim(std::string_view(key_equals_value).substr(eq + 1)),
           "--set " + key_equals_value);
}

void Config::apply_overrides(const std::vector<std::string>& overrides) {
  Config next = *this;
  for (const std::string& o : overrides) next.apply_override(o);
  *this = std::move(next);
}

void Config::set(const std::string& key, const std::string& value) {
  set_text(key, value, "--set " + key + "=" + value);
}

void Config::set_text(const std::string& key, const std::string& value, const std::string& where) {
  if (schema_->is_section(key)) {
    FRUGAL_CHECK(value == "{}", "'{}' is an optional section, not a value ({}); enable it with "
                 "--set {}={{}} or set one of its keys", key, where, key);
    mark_present(key);
    return;
  }
  const ConfigKey* k = schema_->find(key);
  if (!k) schema_->fail_unknown(key, false, where);
  set_value(*k, from_text(*k, value, where), where);
}

void Config::set_value(const ConfigKey& key, ConfigValue value, const std::string& where) {
  schema_->check(key, value, where);
  values_[key.name] = std::move(value);
  mark_present(key.name);
}

void Config::mark_present(const std::string& path) {
  for (const ConfigSection& s : schema_->sections())
    if (under(path, s.prefix)) present_.insert(s.prefix);
}

bool Config::has(const std::string& key) const { return schema_->find(key) != nullptr; }

const ConfigValue& Config::get(const std::string& key) const {
  return values_.at(schema_->at(key).name);
}

namespace {
template <class T>
const T& typed(const Config& c, const std::string& key, ConfigType type) {
  const ConfigValue& v = c.get(key);
  FRUGAL_CHECK(std::holds_alternative<T>(v), "config key '{}' is {}, not {}; read it with the "
               "getter of its type", key, config_type_name(c.schema().at(key).type),
               config_type_name(type));
  return std::get<T>(v);
}
}  // namespace

int64_t Config::get_int(const std::string& key) const {
  return typed<int64_t>(*this, key, ConfigType::Int);
}
int Config::get_int32(const std::string& key) const {
  const int64_t v = get_int(key);
  FRUGAL_CHECK(v >= std::numeric_limits<int>::min() && v <= std::numeric_limits<int>::max(),
               "{} = {} is out of range: it must fit a 32-bit int (at most {})", key, v,
               std::numeric_limits<int>::max());
  return static_cast<int>(v);
}
double Config::get_float(const std::string& key) const {
  return typed<double>(*this, key, ConfigType::Float);
}
bool Config::get_bool(const std::string& key) const {
  return typed<bool>(*this, key, ConfigType::Bool);
}
const std::string& Config::get_string(const std::string& key) const {
  return typed<std::string>(*this, key, ConfigType::String);
}
const std::vector<std::string>& Config::get_strings(const std::string& key) const {
  return typed<std::vector<std::string>>(*this, key, ConfigType::Strings);
}

bool Config::section_present(const std::string& prefix) const {
  FRUGAL_CHECK(schema_->is_section(prefix), "'{}' is not an optional section of the config "
               "schema; declare it with add_section", prefix);
  return present_.count(prefix) > 0;
}

std::string Config::to_toml() const {
  // Tables in order, each with its keys; optional sections with no keys still get a header.
  std::map<std::string, std::vector<const ConfigKey*>> tables;
  for (const ConfigKey& k : schema_->keys()) tables[table_of(k.name)].push_back(&k);
  for (const ConfigSection& s : schema_->sections()) tables[s.prefix];
  std::string out = "# frugal configuration, fully resolved: every key, sorted.\n";
  for (const auto& [table, keys] : tables) {
    const ConfigSection* absent = nullptr;
    for (const ConfigSection& s : schema_->sections())
      if (under(table, s.prefix) && !present_.count(s.prefix)) absent = &s;
    std::string comment = absent ? "# " : "";
    if (!table.empty()) {
      out += fmt::format("\n{}[{}]{}\n", comment, table,
                         absent ? "  (optional section, absent)" : "");
    }
    for (const ConfigKey* k : keys)
      out += fmt::format("{}{} = {}\n", comment, last_segment(k->name), toml_value(values_.at(k->name)));
  }
  return out;
}

bool Config::operator==(const Config& other) const {
  return values_ == other.values_ && present_ == other.present_;
}

}  // namespace frugal::io
