// The data commands of the `frugal` binary (prepare, tokenize, detokenize), run as a user would:
// outputs, shards they write, and the errors for bad input and for output that cannot be written.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "frugal/data/prepare.h"
#include "frugal/data/shard.h"
#include "frugal/data/text.h"
#include "frugal/data/tokenizer.h"
#include "run_cli.h"

namespace fs = std::filesystem;

using frugal::testing::CliResult;
using frugal::testing::contains;
using frugal::testing::run_frugal;

namespace {

fs::path temp_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("frugal_test_cli_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_file(const fs::path& p, std::string_view bytes) { std::ofstream(p, std::ios::binary) << bytes; }

}  // namespace

TEST(DataCli, TokenizeAndDetokenizeRoundTrip) {
  const fs::path dir = temp_dir("tok");
  const std::string text = "Hello world<|endoftext|> It's 2024 — naïve 😀\n\tend\n";
  write_file(dir / "in.txt", text);
  CliResult r = run_frugal("tokenize " + (dir / "in.txt").string() + " > " + (dir / "ids.txt").string());
  ASSERT_EQ(r.rc, 0) << r.output;
  const auto tok = frugal::data::load_tokenizer("gpt2");
  std::string expected;
  for (int32_t id : tok->encode(text)) expected += std::to_string(id) + " ";
  expected.back() = '\n';
  EXPECT_EQ(frugal::data::read_text_file((dir / "ids.txt").string()), expected);
  r = run_frugal("detokenize " + (dir / "ids.txt").string());
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(r.output, text);

  r = run_frugal("tokenize --text-eot --pieces " + (dir / "in.txt").string());
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_TRUE(contains(r.output, R"("Hello" " world" "<" "|" "end" "of" "text" "|" ">" " It" "'s")")) << r.output;
  EXPECT_TRUE(contains(r.output, R"("\n" "\t" "end" "\n")")) << r.output;

  write_file(dir / "bad_ids.txt", "15496 99999\n");
  r = run_frugal("detokenize - < " + (dir / "bad_ids.txt").string());
  EXPECT_NE(r.rc, 0);
  EXPECT_TRUE(contains(r.output, "'99999' at byte offset 6 is not a token id")) << r.output;
}

TEST(DataCli, PrepareGpt2WritesShardsAndTokenizer) {
  const fs::path dir = temp_dir("gpt2");
  const std::string a = "First document. <|endoftext|> still first.\n", b = "Second document.\n";
  write_file(dir / "a.txt", a);
  write_file(dir / "b.txt", b);
  const fs::path out = dir / "out";
  const CliResult r = run_frugal("prepare --input " + (dir / "a.txt").string() + " --input " +
                       (dir / "b.txt").string() + " --out " + out.string() + " --val-fraction 0.25");
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "MB/s")) << r.output;
  // frugal's own name, never Hugging Face's tokenizer.json (another format)
  EXPECT_FALSE(fs::exists(out / "tokenizer.json"));
  const auto tok = frugal::data::load_tokenizer_json((out / "frugal_tokenizer.json").string());
  std::vector<int32_t> all = tok->encode(a);
  all.push_back(50256);  // files are separated by <|endoftext|>
  const auto ids_b = tok->encode(b);
  all.insert(all.end(), ids_b.begin(), ids_b.end());
  const auto train = frugal::data::open_prepared_split(out.string(), "train", *tok);
  const auto val = frugal::data::open_prepared_split(out.string(), "val", *tok);
  EXPECT_EQ(train->vocab_size(), 50257);
  ASSERT_EQ(train->size() + val->size(), static_cast<int64_t>(all.size()));
  EXPECT_EQ(val->size(), static_cast<int64_t>(all.size() / 4));
  std::vector<int32_t> got(all.size());
  train->read(0, train->size(), got.data());
  val->read(0, val->size(), got.data() + train->size());
  EXPECT_EQ(got, all);
  EXPECT_EQ(std::count(all.begin(), all.end(), 50256), 2);
}

TEST(DataCli, PrepareCharReadsXzAndRejectsBadInput) {
  const fs::path dir = temp_dir("char");
  const std::string xz = frugal::data::data_dir() + "/wikitext-2/train.txt.xz";
  CliResult r = run_frugal("prepare --tokenizer char --input " + xz + " --out " + (dir / "out").string());
  ASSERT_EQ(r.rc, 0) << r.output;
  const auto tok = frugal::data::load_prepared_tokenizer((dir / "out").string());
  const auto train = frugal::data::open_prepared_split((dir / "out").string(), "train", *tok);
  const auto val = frugal::data::open_prepared_split((dir / "out").string(), "val", *tok);
  EXPECT_EQ(train->size() + val->size(), 10780437);  // characters of train.txt (data/wikitext-2/SOURCE.md)

  write_file(dir / "bad.txt", "good text\nthen \xC3\x28 bad");
  r = run_frugal("prepare --input " + (dir / "bad.txt").string() + " --out " + (dir / "bad").string());
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.output, "not valid UTF-8")) << r.output;
  EXPECT_TRUE(contains(r.output, "byte offset 15")) << r.output;
  EXPECT_TRUE(contains(r.output, "iconv")) << r.output;
  EXPECT_FALSE(fs::exists(dir / "bad" / "manifest.json"));
  EXPECT_FALSE(fs::exists(dir / "bad" / "shards"));

  r = run_frugal("prepare --input " + (dir / "missing.txt").string() + " --out " + (dir / "m").string());
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.output, "missing.txt' does not exist")) << r.output;

  write_file(dir / "v.txt", "abc\nbca\ncab\nabc\nbca\n");
  r = run_frugal("prepare --tokenizer char --input " + (dir / "v.txt").string() + " --out " + (dir / "v").string());
  ASSERT_EQ(r.rc, 0) << r.output;
  write_file(dir / "q.txt", "abz\n");
  r = run_frugal("tokenize --tokenizer char:" + (dir / "v" / "frugal_tokenizer.json").string() + " " + (dir / "q.txt").string());
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.output, "'z' (U+007A) at byte offset 2 is not in the character vocabulary")) << r.output;
}

// stdout on a full disk (/dev/full) or a closed pipe: one error line and exit code 1, for output
// small enough to sit in stdio's buffer until the end and for output written straight through.
TEST(DataCli, OutputThatCannotBeWrittenIsAnError) {
  const fs::path dir = temp_dir("full");
  write_file(dir / "small.txt", "Hello world\n");
  std::string big;
  while (big.size() < 200000) big += "The quick brown fox jumps over the lazy dog. ";
  write_file(dir / "big.txt", big);
  write_file(dir / "ids.txt", "15496 995 198\n");
  for (const std::string& args : {"tokenize " + (dir / "small.txt").string(), "tokenize " + (dir / "big.txt").string(),
                                 "tokenize --pieces " + (dir / "big.txt").string(), "detokenize " + (dir / "ids.txt").string()}) {
    frugal::testing::expect_unwritable_output_is_an_error(args);
  }
}

// Shards too short to hold one sample (a token and the next) are refused: training on them
// could only fail later.
TEST(DataCli, PrepareRefusesInputTooShortForAShard) {
  const fs::path dir = temp_dir("short");
  write_file(dir / "empty.txt", "");
  write_file(dir / "one.txt", "a");
  const std::pair<std::string, std::string> cases[] = {
      {"--input " + (dir / "empty.txt").string(), "the --input files are empty; give text to tokenize"},
      {"--tokenizer char --input " + (dir / "empty.txt").string(), "the --input files are empty"},
      {"--tokenizer char --input " + (dir / "one.txt").string(), "the train split would hold 1 token(s), but "
                                                                "it needs at least 2"},
      {"--tokenizer char --input " + (dir / "one.txt").string() + " --input " + (dir / "one.txt").string(),
       "the val split would hold 0 token(s), but it needs at least 2 (a token and the next one to predict); "
       "give more --input text or a larger --val-fraction"},
  };
  for (const auto& [args, message] : cases) {
    const CliResult r = run_frugal("prepare " + args + " --out " + (dir / "out").string());
    EXPECT_EQ(r.rc, 1) << args << ": " << r.output;
    EXPECT_TRUE(contains(r.output, message)) << args << ": " << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << args << ": " << r.output;
    EXPECT_FALSE(fs::exists(dir / "out" / "manifest.json")) << args;
    EXPECT_FALSE(fs::exists(dir / "out" / "shards")) << args;
  }
}
