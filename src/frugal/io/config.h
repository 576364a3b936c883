// Schema-driven configuration: a ConfigSchema lists every dotted key ("optim.lr") with its type,
// default, range and description; a Config resolves values from defaults <- TOML file <-
// `--set key=value` overrides, rejecting unknown keys (with a suggestion), wrong types and
// out-of-range values with the file and line. Optional sections ([methods.freeze]) are enabled
// by their presence. to_toml() writes the resolved config so it loads back identically.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace frugal::io {

// The alternatives of ConfigValue are in ConfigType order.
enum class ConfigType { Int, Float, Bool, String, Strings };
using ConfigValue = std::variant<int64_t, double, bool, std::string, std::vector<std::string>>;

// The double with the shortest decimal form of f (0.1f -> 0.1, not 0.100000001490116), for
// writing float settings into TOML and JSON files people read.
double decimal_value(float f);

// A value as TOML source text ("3", "0.1", "true", "\"text\"", "[\"a\", \"b\"]").
std::string toml_value(const ConfigValue& v);
const char* config_type_name(ConfigType t);  // "int", "float", "bool", "string", "list of strings"

// Numeric bounds; each side optional and inclusive or exclusive. Default: unbounded.
struct Range {
  std::optional<double> min, max;
  bool min_inclusive = true, max_inclusive = true;

  static Range closed(double lo, double hi);     // [lo, hi]
  static Range half_open(double lo, double hi);  // [lo, hi)
  static Range left_open(double lo, double hi);  // (lo, hi]
  static Range at_least(double lo);              // [lo, inf)
  static Range above(double lo);                 // (lo, inf)
  bool contains(double v) const;                 // false for NaN
  std::string str() const;                       // "[0, 1)", "(0, inf)"; "" when unbounded
};

struct ConfigKey {
  std::string name;  // dotted: "model.n_layer"
  ConfigType type;
  ConfigValue default_value;
  std::string description;
  Range range;                       // Int and Float keys
  std::vector<std::string> allowed;  // String and Strings keys: permitted values (empty: any)
};

// An optional group of keys (e.g. one training method): absent unless the TOML file has its
// table or an override sets a key under it (or `--set prefix={}`).
struct ConfigSection {
  std::string prefix;  // "methods.freeze"
  std::string description;
};

class ConfigSchema {
 public:
  // Each add_* throws Error on a malformed or duplicate name, or a default outside its range.
  ConfigSchema& add_int(const std::string& name, int64_t default_value,
                        const std::string& description, Range range = {});
  ConfigSchema& add_float(const std::string& name, double default_value,
                          const std::string& description, Range range = {});
  ConfigSchema& add_bool(const std::string& name, bool default_value,
                         const std::string& description);
  ConfigSchema& add_string(const std::string& name, std::string default_value,
                           const std::string& description, std::vector<std::string> allowed = {});
  ConfigSchema& add_strings(const std::string& name, std::vector<std::string> default_value,
                            const std::string& description, std::vector<std::string> allowed = {});
  ConfigSchema& add_section(const std::string& prefix, const std::string& description);

  const std::vector<ConfigKey>& keys() const { return keys_; }  // sorted by name
  const std::vector<ConfigSection>& sections() const { return sections_; }  // sorted by prefix
  const ConfigKey* find(const std::string& name) const;  // nullptr when unknown
  const ConfigKey& at(const std::string& name) const;    // throws Error when unknown
  bool is_section(const std::string& prefix) const;
  // True when `path` is a table: some key or optional section lies under it ("model", "methods").
  bool is_table(const std::string& path) const;
  // The nearest known key to `name` (Levenshtein over the dotted name, else over the last
  // segment), or "" when none is close. With tables = true, suggests table paths instead.
  std::string suggest(const std::string& name, bool tables = false) const;
  // Throws Error for `path`, which names no key (or, with table = true, no table), from `where`
  // (its file and line or --set; may be empty): with the nearest known name, or, when it lies
  // under a table of optional sections only ("methods.sparse42"), naming the section it would be
  // and listing that table's sections.
  [[noreturn]] void fail_unknown(const std::string& path, bool table, const std::string& where) const;
  // Throws Error (naming `where`) unless `value` has the key's type and satisfies its range or
  // allowed values.
  void check(const ConfigKey& key, const ConfigValue& value, const std::string& where) const;
  // Markdown reference: | key | type | default | range / allowed | description |, sorted.
  std::string markdown() const;

 private:
  ConfigSchema& add(ConfigKey key);
  void check_new_name(const std::string& name) const;
  std::vector<ConfigKey> keys_;
  std::vector<ConfigSection> sections_;
};

class Config {
 public:
  explicit Config(ConfigSchema schema);  // every key at its default, no section present
  // defaults <- `toml_path` (skipped when empty) <- `overrides` ("key=value" each).
  static Config load(ConfigSchema schema, const std::string& toml_path,
                     const std::vector<std::string>& overrides = {});

  // Each merge/override is all-or-nothing: on Error the Config is unchanged.
  void merge_file(const std::string& toml_path);
  void merge_toml(std::string_view text, const std::string& source_name);
  // "optim.lr=3e-4": the value is parsed per the key's type (lists: "a,b" or ["a", "b"]);
  // "methods.freeze={}" enables an optional section with its defaults.
  void apply_override(const std::string& key_equals_value);
  void apply_overrides(const std::vector<std::string>& overrides);
  void set(const std::string& key, const std::string& value);

  bool has(const std::string& key) const;  // the schema knows the key
  const ConfigValue& get(const std::string& key) const;
  // Each throws Error for an unknown key or a key of another type.
  int64_t get_int(const std::string& key) const;
  int get_int32(const std::string& key) const;  // get_int, an Error when it does not fit an int
  double get_float(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  const std::string& get_string(const std::string& key) const;
  const std::vector<std::string>& get_strings(const std::string& key) const;
  // For an optional section declared in the schema (throws Error otherwise).
  bool section_present(const std::string& prefix) const;

  // Every key, grouped by table and sorted; keys of absent optional sections are written as
  // comments. merge_toml(to_toml()) into a fresh Config gives an identical Config.
  std::string to_toml() const;
  // The keys of this config's tables (its optional sections that are present, and every table that
  // is not optional) that the TOML file `toml_path` does not set. For a file written by to_toml, the
  // keys added to the schema since it was written: loaded, they took their defaults.
  std::vector<std::string> keys_not_set_by(const std::string& toml_path) const;
  const ConfigSchema& schema() const { return *schema_; }
  bool operator==(const Config& other) const;  // same values and same present sections

 private:
  void set_value(const ConfigKey& key, ConfigValue value, const std::string& where);
  void mark_present(const std::string& path);
  void set_text(const std::string& key, const std::string& value, const std::string& where);

  std::shared_ptr<const ConfigSchema> schema_;
  std::map<std::string, ConfigValue> values_;
  std::set<std::string> present_;  // prefixes of present optional sections
};

}  // namespace frugal::io
