// Config: defaults <- TOML <- --set, typed getters, error messages, optional sections, to_toml
// round trip and the Markdown reference, all on a small schema built here; `frugal config`'s
// output errors.
#include "frugal/io/config.h"

#include <gtest/gtest.h>

#include <fstream>

#include "frugal/core/error.h"
#include "run_cli.h"
#include "temp_dir.h"

using namespace frugal::io;
using frugal::Error;
using frugal::testing::TempDir;

namespace {

ConfigSchema schema() {
  ConfigSchema s;
  s.add_int("model.n_layer", 4, "Number of transformer blocks", Range::at_least(1))
      .add_float("model.dropout", 0.0, "Dropout | on residual branches", Range::half_open(0, 1))
      .add_string("model.mlp", "gelu", "MLP kind", {"gelu", "geglu", "swiglu"})
      .add_bool("model.bias", true, "Biases in linears")
      .add_float("optim.lr", 6e-4, "Peak learning rate", Range::above(0))
      .add_strings("data.files", {"a.bin"}, "Token shards")
      .add_string("run.name", "default", "Run name")
      .add_int("seed", 1337, "Random seed")
      .add_section("methods.freeze", "Freeze layers early")
      .add_float("methods.freeze.alpha", 0.5, "Freeze fraction", Range::closed(0, 1))
      .add_strings("methods.freeze.layers", {}, "Layers to freeze")
      .add_section("methods.ema", "Weight EMA (no options)");
  return s;
}

// Runs `f`, which must throw Error whose message contains each of `parts`.
template <class F>
void expect_error(F f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << "\n  missing: " << p;
  }
}

std::string write_file(const TempDir& dir, const std::string& name, const std::string& text) {
  std::string path = dir.file(name);
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST(Config, DefaultsFileAndOverridesInThatOrder) {
  TempDir dir;
  std::string path = write_file(dir, "x.toml",
                                "seed = 7\n[model]\nn_layer = 12\nmlp = \"swiglu\"\n"
                                "[optim]\nlr = 1\n[data]\nfiles = [\"x.bin\", \"y.bin\"]\n");
  Config c = Config::load(schema(), path, {"model.n_layer=6", "model.bias = false",
                                           "run.name=\"quoted\"", "optim.lr=3e-4"});
  EXPECT_EQ(c.get_int("model.n_layer"), 6);          // override beats file
  EXPECT_EQ(c.get_string("model.mlp"), "swiglu");    // file beats default
  EXPECT_EQ(c.get_float("model.dropout"), 0.0);      // default
  EXPECT_EQ(c.get_bool("model.bias"), false);
  EXPECT_EQ(c.get_int("seed"), 7);
  EXPECT_EQ(c.get_float("optim.lr"), 3e-4);
  EXPECT_EQ(c.get_string("run.name"), "quoted");
  EXPECT_EQ(c.get_strings("data.files"), (std::vector<std::string>{"x.bin", "y.bin"}));
  EXPECT_TRUE(c.has("model.n_layer"));
  // A list of strings may be written as one string in a file: a list of one (data.val = "DIR").
  const Config one = Config::load(schema(), write_file(dir, "one.toml", "[data]\nfiles = \"z.bin\"\n"));
  EXPECT_EQ(one.get_strings("data.files"), (std::vector<std::string>{"z.bin"}));
  EXPECT_FALSE(c.has("model.n_layers"));
}

TEST(Config, ListOverridesAcceptCommasOrTomlArrays) {
  Config c(schema());
  c.set("data.files", "p.bin, q.bin");
  EXPECT_EQ(c.get_strings("data.files"), (std::vector<std::string>{"p.bin", "q.bin"}));
  c.set("data.files", "[\"r.bin\"]");
  EXPECT_EQ(c.get_strings("data.files"), (std::vector<std::string>{"r.bin"}));
  c.set("data.files", "");
  EXPECT_TRUE(c.get_strings("data.files").empty());
  expect_error([&] { c.set("data.files", "[1, 2]"); }, {"expects a list of strings"});
}

TEST(Config, UnknownKeySuggestsNearestWithFileAndLine) {
  expect_error([] { Config(schema()).merge_toml("[model]\nn_layers = 3\n", "configs/x.toml"); },
               {"unknown config key 'model.n_layers' (configs/x.toml:2); "
                "did you mean 'model.n_layer'?"});
  // Same last segment under the wrong table.
  expect_error([] { Config(schema()).merge_toml("optim.n_layer = 3\n", "x.toml"); },
               {"'optim.n_layer' (x.toml:1)", "did you mean 'model.n_layer'?"});
  expect_error([] { Config(schema()).merge_toml("[methods.freez]\n", "x.toml"); },
               {"unknown config section 'methods.freez'", "did you mean 'methods.freeze'?"});
  expect_error([] { Config(schema()).merge_toml("zzzzzz = 1\n", "x.toml"); },
               {"unknown config key 'zzzzzz'", "see docs/config.md"});
  expect_error([] { Config(schema()).apply_override("optim.lrr=1"); },
               {"unknown config key 'optim.lrr' (--set optim.lrr=1); did you mean 'optim.lr'?"});
  expect_error([] { Config(schema()).get_int("model.nlayer"); }, {"did you mean 'model.n_layer'"});
  // Under a table of optional sections: the section is named and the table's sections listed.
  expect_error([] { Config(schema()).apply_override("methods.emma={}"); },
               {"unknown config section 'methods.emma' (--set methods.emma={}): the sections of "
                "[methods] are ema, freeze; did you mean 'methods.ema'?"});
  expect_error([] { Config(schema()).merge_toml("[methods.zzzzzzzz]\nx = 1\n", "x.toml"); },
               {"unknown config section 'methods.zzzzzzzz' (x.toml:1): the sections of [methods] "
                "are ema, freeze"});
}

TEST(Config, WrongTypeNamesExpectedAndActual) {
  expect_error([] { Config(schema()).merge_toml("[optim]\nlr = \"fast\"\n", "x.toml"); },
               {"'optim.lr' expects a number, got string \"fast\" (x.toml:2)"});
  expect_error([] { Config(schema()).merge_toml("model.n_layer = 2.5\n", "x.toml"); },
               {"'model.n_layer' expects an integer, got float 2.5"});
  expect_error([] { Config(schema()).merge_toml("[model.n_layer]\n", "x.toml"); },
               {"expects an integer, got a table"});
  expect_error([] { Config(schema()).merge_toml("model = 3\n", "x.toml"); },
               {"'model' is a table of keys, not a value"});
  expect_error([] { Config(schema()).set("model.bias", "yes"); },
               {"'model.bias' expects true or false, got \"yes\""});
  expect_error([] { Config(schema()).set("model.n_layer", "3x"); }, {"expects an integer"});
  expect_error([] { Config(schema()).get_float("model.n_layer"); }, {"is int, not float"});
}

TEST(Config, RangesAndAllowedValues) {
  expect_error([] { Config(schema()).merge_toml("[model]\ndropout = 1.5\n", "x.toml"); },
               {"'model.dropout' = 1.5 is out of range [0, 1) (x.toml:2)"});
  expect_error([] { Config(schema()).set("model.dropout", "1"); }, {"out of range [0, 1)"});
  expect_error([] { Config(schema()).set("optim.lr", "0"); }, {"'optim.lr' = 0.0 is out of range (0, inf)"});
  expect_error([] { Config(schema()).set("optim.lr", "nan"); }, {"out of range"});
  expect_error([] { Config(schema()).set("model.n_layer", "0"); }, {"out of range [1, inf)"});
  expect_error([] { Config(schema()).set("model.mlp", "relu"); },
               {"'model.mlp' = \"relu\" is not one of \"gelu\", \"geglu\", \"swiglu\""});
  Config c(schema());
  c.set("methods.freeze.alpha", "1");  // inclusive upper bound
  c.set("model.dropout", "0");         // inclusive lower bound
  EXPECT_EQ(c.get_float("methods.freeze.alpha"), 1.0);
}

TEST(Config, SyntaxErrorsAndBadOverridesArePositioned) {
  expect_error([] { Config(schema()).merge_toml("seed = 1\n[model\n", "configs/y.toml"); },
               {"configs/y.toml:2:", "TOML syntax error"});
  expect_error([] { Config(schema()).apply_override("model.n_layer"); },
               {"has no '='", "--set key=value"});
  expect_error([] { Config(schema()).merge_file("/nonexistent/c.toml"); },
               {"cannot read config file '/nonexistent/c.toml'"});
}

TEST(Config, ADirectoryIsNotAConfigFile) {  // it used to read as an empty config
  TempDir dir;
  expect_error([&] { Config::load(schema(), dir.path().string()); },
               {"config file '" + dir.path().string() + "' is a directory; pass the path of a TOML file"});
}

TEST(Config, FailedMergeLeavesConfigUnchanged) {
  Config c(schema());
  Config before = c;
  EXPECT_THROW(c.merge_toml("seed = 5\n[methods.freeze]\nalpha = 7\n", "x.toml"), Error);
  EXPECT_THROW(c.apply_overrides({"seed=5", "model.mlp=relu"}), Error);
  EXPECT_TRUE(c == before);
  EXPECT_EQ(c.get_int("seed"), 1337);
}

TEST(Config, OptionalSectionsAreEnabledByPresence) {
  Config c(schema());
  EXPECT_FALSE(c.section_present("methods.freeze"));
  EXPECT_THROW(c.section_present("model"), Error);  // not an optional section

  Config file(schema());
  file.merge_toml("[methods.ema]\n", "x.toml");  // an empty table enables a section
  EXPECT_TRUE(file.section_present("methods.ema"));
  EXPECT_FALSE(file.section_present("methods.freeze"));

  Config key(schema());
  key.set("methods.freeze.alpha", "0.25");
  EXPECT_TRUE(key.section_present("methods.freeze"));

  Config empty(schema());
  empty.apply_override("methods.freeze={}");
  EXPECT_TRUE(empty.section_present("methods.freeze"));
  EXPECT_EQ(empty.get_float("methods.freeze.alpha"), 0.5);
  expect_error([&] { empty.set("methods.freeze", "true"); }, {"enable it with --set methods.freeze={}"});

  Config parent(schema());
  parent.merge_toml("[methods]\n", "x.toml");  // a parent table enables nothing
  EXPECT_FALSE(parent.section_present("methods.freeze"));
}

TEST(Config, ToTomlRoundTripsExactly) {
  Config c(schema());
  c.merge_toml("[methods.freeze]\nlayers = [\"h.0\", \"quote\\\"d\"]\n", "x.toml");
  c.apply_overrides({"optim.lr=0.1", "run.name=tab\there", "model.dropout=0.3", "seed=-5"});
  std::string text = c.to_toml();
  Config back(schema());
  back.merge_toml(text, "saved.toml");
  EXPECT_TRUE(back == c) << text;
  EXPECT_EQ(back.get_float("model.dropout"), 0.3);
  EXPECT_TRUE(back.section_present("methods.freeze"));
  EXPECT_FALSE(back.section_present("methods.ema"));
  EXPECT_EQ(back.to_toml(), text);
  // Every key appears, absent sections commented out, root keys before any table.
  EXPECT_NE(text.find("\nseed = -5\n"), std::string::npos) << text;
  EXPECT_LT(text.find("seed = "), text.find("[data]"));
  EXPECT_NE(text.find("lr = 0.1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# [methods.ema]"), std::string::npos) << text;
  EXPECT_NE(text.find("\n[methods.freeze]\nalpha = 0.5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("n_layer = 4\n"), std::string::npos) << text;
  // Defaults-only config also round-trips (no section becomes present).
  Config defaults(schema());
  Config defaults_back(schema());
  defaults_back.merge_toml(defaults.to_toml(), "d.toml");
  EXPECT_TRUE(defaults_back == defaults);
}

TEST(Config, SchemaRejectsBadDefinitions) {
  EXPECT_THROW(ConfigSchema().add_int("a", 0, "", Range::at_least(1)), Error);
  EXPECT_THROW(ConfigSchema().add_int("a", 0, "").add_int("a", 1, ""), Error);
  EXPECT_THROW(ConfigSchema().add_int("a", 0, "").add_int("a.b", 1, ""), Error);
  EXPECT_THROW(ConfigSchema().add_int("bad name", 0, ""), Error);
  EXPECT_THROW(ConfigSchema().add_string("m", "x", "", {"y"}), Error);
  EXPECT_THROW(ConfigSchema().add_section("s", "").add_section("s", ""), Error);
}

TEST(Config, MarkdownReferenceTable) {
  std::string md = schema().markdown();
  EXPECT_EQ(md.rfind("| key | type | default | range / allowed | description |\n|---|", 0), 0u);
  EXPECT_NE(md.find("| `model.dropout` | float | `0.0` | [0, 1) | Dropout \\| on residual "
                    "branches |\n"), std::string::npos) << md;
  EXPECT_NE(md.find("| `model.mlp` | string | `\"gelu\"` | \"gelu\", \"geglu\", \"swiglu\" |"),
            std::string::npos) << md;
  EXPECT_NE(md.find("| `[methods.freeze]` | optional section | absent |"), std::string::npos);
  EXPECT_LT(md.find("`[methods.freeze]`"), md.find("`methods.freeze.alpha`"));
  EXPECT_NE(md.find("| `data.files` | list of strings | `[\"a.bin\"]` |"), std::string::npos);
}

// `frugal config` to a full disk or a closed pipe: one error line and exit code 1, not a silent 0.
TEST(ConfigCli, OutputThatCannotBeWrittenIsAnError) {
  for (const char* args : {"config", "config --reference"}) {
    frugal::testing::expect_unwritable_output_is_an_error(args);
  }
}
