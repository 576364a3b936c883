// Streaming, sharded `frugal prepare` and the data directories the loader reads: the sharded
// output reads bit-identically to an in-memory preparation of the same text; it is the same for
// any thread count and any compression; inputs are files, directories and globs of text and
// JSONL; bad inputs and earlier or interrupted outputs give one clear line; and nanoGPT's raw
// uint16 files and llm.c's shards (fixtures written here byte by byte) are read and trained on.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "frugal/core/error.h"
#include "frugal/data/corpus.h"
#include "frugal/data/loader.h"
#include "frugal/data/prepare.h"
#include "frugal/data/shard.h"
#include "frugal/data/text.h"
#include "frugal/data/tokenizer.h"
#include "error_of.h"
#include "paths.h"
#include "run_cli.h"
#include "run_metrics.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using frugal::testing::contains;
using frugal::testing::run_frugal;
using frugal::testing::run_shell;
using frugal::testing::TempDir;
namespace data = frugal::data;

namespace {

std::string shakespeare() {
  return data::read_text_file(std::string(test_paths::source_dir()) + "/data/tinyshakespeare/input.txt");
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<int32_t> all_tokens(const data::TokenSet& set) {
  std::vector<int32_t> out(static_cast<size_t>(set.size()));
  set.read(0, set.size(), out.data());
  return out;
}

// Shakespeare's paragraphs as JSONL documents (with a field that is not the text), in order.
std::vector<std::string> paragraphs(size_t count) {
  std::vector<std::string> docs;
  const std::string text = shakespeare();
  for (size_t pos = 0; docs.size() < count && pos < text.size();) {
    const size_t end = std::min(text.find("\n\n", pos), text.size());
    docs.push_back(text.substr(pos, end - pos + 1));
    pos = end + 2;
  }
  return docs;
}

std::string jsonl(const std::vector<std::string>& docs) {
  std::string out;
  for (size_t i = 0; i < docs.size(); ++i) out += nlohmann::json{{"id", i}, {"body", docs[i]}}.dump() + "\n";
  return out;
}

data::PrepareResult prepare(const std::vector<std::string>& inputs, const std::string& out,
                            std::initializer_list<std::function<void(data::PrepareOptions&)>> set = {}) {
  data::PrepareOptions o;
  o.inputs = inputs;
  o.out_dir = out;
  for (const auto& f : set) f(o);
  return data::prepare(o);
}

// Every file below dir, by relative path, with its bytes.
std::map<std::string, std::string> tree(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).string()] = read_file(e.path().string());
  return files;
}

// A prepared directory as earlier versions wrote it, in memory: the text encoded whole, the last
// val_fraction of the tokens in val.bin.
void prepare_in_memory(const data::Tokenizer& tok, const std::string& text, const std::string& out, double val_fraction) {
  const std::vector<int32_t> ids = tok.encode(text);
  const auto n_val = static_cast<size_t>(static_cast<double>(ids.size()) * val_fraction);
  fs::create_directories(out);
  data::write_shard(out + "/train.bin", {ids.data(), ids.size() - n_val}, tok.vocab_size());
  data::write_shard(out + "/val.bin", {ids.data() + ids.size() - n_val, n_val}, tok.vocab_size());
  write_file(out + "/frugal_tokenizer.json", tok.to_json() + "\n");
}

}  // namespace

// The done-when test: a corpus prepared by streaming into many shards on several threads is
// read (split contents and the loader's batches) bit-identically to an in-memory preparation.
TEST(Prepare, StreamingShardsReadLikeAnInMemoryPreparation) {
  TempDir dir;
  const std::string text = shakespeare();  // 1.1 MB: cut into several units
  ASSERT_GT(text.size(), 4 * data::kUnitBytes);
  write_file(dir.file("input.txt"), text);
  for (const std::string spec : {"gpt2", "char"}) {
    SCOPED_TRACE(spec);
    const std::string streamed = dir.file(spec + "-streamed"), memory = dir.file(spec + "-memory");
    const data::PrepareResult r = prepare({dir.file("input.txt")}, streamed, {[&](data::PrepareOptions& o) {
      o.tokenizer = spec, o.shard_tokens = 10007, o.threads = 3;
    }});
    EXPECT_GT(r.shards, 20);
    const auto tok = data::load_prepared_tokenizer(streamed);
    prepare_in_memory(*tok, text, memory, 0.1);
    const auto manifest = nlohmann::json::parse(read_file(streamed + "/manifest.json"));
    for (const std::string split : {"train", "val"}) {
      const auto a = data::open_prepared_split(streamed, split, *tok), b = data::open_prepared_split(memory, split, *tok);
      ASSERT_EQ(a->size(), b->size()) << split;
      EXPECT_EQ(all_tokens(*a), all_tokens(*b)) << split;
      // The split's text bytes, recorded while streaming, are those its tokens decode to.
      EXPECT_EQ(manifest["splits"][split]["bytes"].get<int64_t>(), data::text_bytes(*b, *tok)) << split;
      const data::LoaderOrder order = split == "train" ? data::LoaderOrder::Shuffled : data::LoaderOrder::Sequential;
      data::BatchLoader la(a, 64, order, 5), lb(b, 64, order, 5);
      std::vector<int32_t> ia(8 * 64), ta(8 * 64), ib(8 * 64), tb(8 * 64);
      std::vector<int64_t> sa(8), sb(8);
      for (int batch = 0; batch < 40; ++batch) {
        ASSERT_EQ(la.next(8, ia.data(), ta.data(), sa.data()), lb.next(8, ib.data(), tb.data(), sb.data()));
        ASSERT_EQ(ia, ib);
        ASSERT_EQ(ta, tb);
      }
    }
  }
}

// Encoding on 1, 2 or 4 threads, and reading plain, .gz, .xz or .zst input, write the same bytes;
// the tokens are the documents' own, each encoded alone, joined by <|endoftext|>.
TEST(Prepare, OutputIsTheSameForAnyThreadCountAndCompression) {
  TempDir dir;
  const std::vector<std::string> docs = paragraphs(3000);
  write_file(dir.file("c.jsonl"), jsonl(docs));
  for (const char* tool : {"gzip", "xz", "zstd -q"}) {
    const std::string ext = std::string(tool) == "gzip" ? "gz" : std::string(tool) == "xz" ? "xz" : "zst";
    ASSERT_EQ(run_shell(std::string(tool) + " -c " + dir.file("c.jsonl") + " > " + dir.file("c.jsonl." + ext)).rc, 0) << tool;
  }
  const auto with = [](int threads) {
    return [threads](data::PrepareOptions& o) { o.text_field = "body", o.shard_tokens = 5000, o.threads = threads; };
  };
  prepare({dir.file("c.jsonl")}, dir.file("t1"), {with(1)});
  const auto reference = tree(dir.file("t1"));
  EXPECT_GT(reference.size(), 20u);
  for (const auto& [name, threads] : std::vector<std::pair<std::string, int>>{
           {"c.jsonl", 2}, {"c.jsonl", 4}, {"c.jsonl.gz", 2}, {"c.jsonl.xz", 2}, {"c.jsonl.zst", 2}}) {
    const std::string out = dir.file(name + std::to_string(threads));
    prepare({dir.file(name)}, out, {with(threads)});
    auto got = tree(out);
    // The manifest names the source file; everything else is byte for byte the same.
    const auto manifest = nlohmann::json::parse(got.at("manifest.json"));
    EXPECT_EQ(manifest["streams"]["train"]["sources"][0]["path"], fs::absolute(dir.file(name)).string());
    got.erase("manifest.json");
    auto expected = reference;
    expected.erase("manifest.json");
    EXPECT_EQ(got, expected) << name << " on " << threads << " threads";
  }

  const auto tok = data::load_prepared_tokenizer(dir.file("t1"));
  std::vector<int32_t> ids;
  for (size_t i = 0; i < docs.size(); ++i) {
    if (i > 0) ids.push_back(tok->eot_token());
    const auto doc = tok->encode(docs[i]);
    ids.insert(ids.end(), doc.begin(), doc.end());
  }
  std::vector<int32_t> got = all_tokens(*data::open_prepared_split(dir.file("t1"), "train", *tok));
  const auto val = all_tokens(*data::open_prepared_split(dir.file("t1"), "val", *tok));
  got.insert(got.end(), val.begin(), val.end());
  EXPECT_EQ(got, ids);
}

// The manifest: counts, shards, sources, the tokenizer, and the text bytes of each split (what
// bits per byte divide by): the UTF-8 bytes its tokens decode to, separators not counted.
TEST(Prepare, ManifestRecordsCountsSourcesAndTextBytes) {
  TempDir dir;
  const std::vector<std::string> docs = paragraphs(400);
  write_file(dir.file("a.jsonl"), jsonl({docs.begin(), docs.begin() + 300}));
  write_file(dir.file("v.jsonl"), jsonl({docs.begin() + 300, docs.end()}));
  const data::PrepareResult r = prepare({dir.file("a.jsonl")}, dir.file("out"), {[&](data::PrepareOptions& o) {
    o.text_field = "body", o.val_inputs = {dir.file("v.jsonl")}, o.shard_tokens = 4096;
  }});
  const auto m = nlohmann::json::parse(read_file(dir.file("out/manifest.json")));
  EXPECT_EQ(m["format"], "frugal-token-shards");
  EXPECT_EQ(m["tokenizer"]["vocab_size"], 50257);
  EXPECT_EQ(m["streams"]["train"]["documents"], 300);
  EXPECT_EQ(m["streams"]["val"]["documents"], 100);
  EXPECT_EQ(r.documents, 400);
  EXPECT_EQ(m["splits"]["train"]["end"], r.train_tokens);
  EXPECT_EQ(m["splits"]["val"]["end"], r.val_tokens);
  int64_t shard_tokens = 0;
  for (const auto& s : m["streams"]["train"]["shards"]) shard_tokens += s["tokens"].get<int64_t>();
  EXPECT_EQ(shard_tokens, r.train_tokens);
  const auto tok = data::load_prepared_tokenizer(dir.file("out"));
  size_t val_bytes = 0;
  for (size_t i = 300; i < docs.size(); ++i) val_bytes += docs[i].size();
  EXPECT_EQ(m["splits"]["val"]["bytes"], val_bytes);
  EXPECT_EQ(m["streams"]["val"]["input_bytes"], val_bytes);
  EXPECT_EQ(data::text_bytes(*data::open_prepared_split(dir.file("out"), "val", *tok), *tok), static_cast<int64_t>(val_bytes));
}

// Directories give their .txt/.jsonl/.json files (compressed or not) sorted by path; globs their
// matches sorted; inputs keep their order.
TEST(Prepare, InputsAreFilesDirectoriesAndGlobs) {
  TempDir dir;
  fs::create_directories(dir.file("corpus/sub"));
  for (const char* name : {"corpus/b.txt", "corpus/a.jsonl.zst", "corpus/sub/c.json", "corpus/notes.md", "x1.txt", "x2.txt"})
    write_file(dir.file(name), "x");
  const std::vector<std::string> got = data::expand_inputs(
      {dir.file("x2.txt"), dir.file("corpus"), dir.file("x*.txt")}, "--input");
  EXPECT_EQ(got, (std::vector<std::string>{dir.file("x2.txt"), dir.file("corpus/a.jsonl.zst"), dir.file("corpus/b.txt"),
                                           dir.file("corpus/sub/c.json"), dir.file("x1.txt"), dir.file("x2.txt")}));
  EXPECT_TRUE(data::is_jsonl_path("a.jsonl.zst"));
  EXPECT_FALSE(data::is_jsonl_path("a.txt.gz"));
  EXPECT_NE(frugal::testing::error_of([&] { data::expand_inputs({dir.file("y*.txt")}, "--input"); })
                .find("pattern '" + dir.file("y*.txt") + "' matches no file"), std::string::npos);
  fs::create_directories(dir.file("empty"));
  EXPECT_NE(frugal::testing::error_of([&] { data::expand_inputs({dir.file("empty")}, "--val-input"); })
                .find("--val-input directory '" + dir.file("empty") + "' holds no .txt, .jsonl or .json file"), std::string::npos);

  // Text files are one document each, joined by <|endoftext|> (gpt2) or as they are (char).
  write_file(dir.file("d1.txt"), "a first document");
  write_file(dir.file("d2.txt"), "and a second one");
  const auto ids = [&](const std::string& spec) {
    const std::string out = dir.file("o-" + spec);
    prepare({dir.file("d*.txt")}, out, {[&](data::PrepareOptions& o) { o.tokenizer = spec, o.val_fraction = 0.3; }});
    const auto tok = data::load_prepared_tokenizer(out);
    std::vector<int32_t> all = all_tokens(*data::open_prepared_split(out, "train", *tok));
    const auto val = all_tokens(*data::open_prepared_split(out, "val", *tok));
    all.insert(all.end(), val.begin(), val.end());
    return tok->decode(all);
  };
  EXPECT_EQ(ids("gpt2"), "a first document<|endoftext|>and a second one");
  EXPECT_EQ(ids("char"), "a first documentand a second one");
}

// Bad corpora give one line naming the file and the place.
TEST(Prepare, BadInputsGiveOneLineErrors) {
  TempDir dir;
  write_file(dir.file("bad.jsonl"), "{\"text\": \"fine\"}\n\n{\"text\": \"also fine\"}\n{\"text\": \"cut\n");
  write_file(dir.file("field.jsonl"), "{\"text\": \"fine\"}\n{\"body\": \"no text\"}\n");
  write_file(dir.file("array.jsonl"), "[1, 2]\n");
  write_file(dir.file("fake.zst"), "plain text, not zstd");
  write_file(dir.file("t.txt"), shakespeare().substr(0, 300000));  // compresses to well over 100 bytes
  ASSERT_EQ(run_shell("zstd -q -c " + dir.file("t.txt") + " | head -c 100 > " + dir.file("cut.txt.zst")).rc, 0);
  ASSERT_EQ(run_shell("gzip -c " + dir.file("t.txt") + " | head -c 100 > " + dir.file("cut.txt.gz")).rc, 0);
  const std::pair<std::string, std::string> cases[] = {
      {"bad.jsonl", "bad.jsonl line 4 is not JSON"},
      {"field.jsonl", "field.jsonl line 2 has no string field \"text\"; name the field holding the text with --text-field"},
      {"array.jsonl", "array.jsonl line 1 is not a JSON object"},
      {"fake.zst", "fake.zst' ends in .zst but is not such a file"},
      {"cut.txt.zst", "cut.txt.zst' ends inside a zstd frame (truncated)"},
      {"cut.txt.gz", "cut.txt.gz' ends inside a gzip stream (truncated)"},
  };
  for (const auto& [file, message] : cases) {
    const auto r = run_frugal("prepare --input " + dir.file(file) + " --out " + dir.file("out-" + file));
    EXPECT_EQ(r.rc, 1) << file << ": " << r.output;
    EXPECT_TRUE(contains(r.output, message)) << file << ": " << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << file << ": " << r.output;
    EXPECT_FALSE(fs::exists(dir.file("out-" + file + "/shards"))) << file;
  }
  const auto from_stdin = run_shell("echo hello | " + std::string(test_paths::binary()) + " prepare --tokenizer char --input - --out " + dir.file("s"));
  EXPECT_EQ(from_stdin.rc, 1);
  EXPECT_TRUE(contains(from_stdin.output, "standard input (-) can be read once")) << from_stdin.output;
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {"--shard-tokens 1", "--shard-tokens 1 must be at least 2"},
           {"--text-field ''", "--text-field is empty"},
           {"--threads -1", "--threads -1 must be 0"}}) {
    const auto r = run_frugal("prepare --input " + dir.file("t.txt") + " --out " + dir.file("o") + " " + args);
    EXPECT_EQ(r.rc, 1) << args;
    EXPECT_TRUE(contains(r.output, message)) << args << ": " << r.output;
  }
}

// A finished preparation, an interrupted one (shards but no manifest) and an earlier version's
// train.bin are refused without --overwrite; an uncommitted shard leaves no file behind.
TEST(Prepare, EarlierOrInterruptedOutputIsRefusedUnlessOverwritten) {
  TempDir dir;
  write_file(dir.file("in.txt"), shakespeare().substr(0, 20000));
  const std::string out = dir.file("out"), run = "prepare --input " + dir.file("in.txt") + " --out " + out;
  ASSERT_EQ(run_frugal(run).rc, 0);
  const auto first = tree(out);
  auto r = run_frugal(run);
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.output, out + " is already prepared (it has manifest.json); pass --overwrite")) << r.output;
  fs::remove(out + "/manifest.json");  // as if the run had been killed before its end
  r = run_frugal(run);
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.output, "holds the shards of an interrupted `frugal prepare`")) << r.output;
  const auto tok = data::load_prepared_tokenizer(dir.file("out"));  // still there; its shards are not read:
  EXPECT_TRUE(contains(frugal::testing::error_of([&] { data::open_prepared_split(out, "train", *tok); }),
                       "holds the shards of an interrupted `frugal prepare` (no manifest.json)"));
  r = run_frugal(run + " --overwrite");
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(tree(out), first);

  prepare_in_memory(*tok, "abc", dir.file("old"), 0.5);
  r = run_frugal("prepare --input " + dir.file("in.txt") + " --out " + dir.file("old"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(contains(r.output, "holds data prepared by an earlier frugal (train.bin, val.bin)")) << r.output;
  ASSERT_EQ(run_frugal("prepare --input " + dir.file("in.txt") + " --out " + dir.file("old") + " --overwrite").rc, 0);
  EXPECT_FALSE(fs::exists(dir.file("old/train.bin")));

  {
    data::ShardWriter w(dir.file("partial.bin"), 100);
    const std::vector<int32_t> some(1000, 7);
    w.append(some);
  }
  for (const auto& e : fs::directory_iterator(dir.path()))
    EXPECT_FALSE(contains(e.path().filename().string(), "partial")) << e.path();
}

// Shard writer and reader: a stream's shards read as one sequence; windows cross shard
// boundaries; a range of it (a split) starts and ends anywhere.
TEST(TokenSet, ReadsAcrossShardsAndWithinARange) {
  TempDir dir;
  std::vector<std::shared_ptr<const data::TokenShard>> shards;
  std::vector<int32_t> all;
  for (int s = 0; s < 4; ++s) {
    std::vector<int32_t> t(static_cast<size_t>(s == 2 ? 0 : 10 + s));
    for (auto& x : t) x = static_cast<int32_t>(all.size() + (&x - t.data())) % 97;
    all.insert(all.end(), t.begin(), t.end());
    data::write_shard(dir.file(std::to_string(s)), t, 97);
    shards.push_back(std::make_shared<const data::TokenShard>(data::TokenShard::open(dir.file(std::to_string(s)))));
  }
  const data::TokenSet whole(shards, "whole"), part(shards, "part", 7, 30);
  EXPECT_EQ(all_tokens(whole), all);
  EXPECT_EQ(all_tokens(part), std::vector<int32_t>(all.begin() + 7, all.begin() + 30));
  std::vector<int32_t> window(9);
  part.read(2, 9, window.data());  // tokens 9..17: across the first two shards
  EXPECT_EQ(window, std::vector<int32_t>(all.begin() + 9, all.begin() + 18));
  EXPECT_THROW(part.read(20, 4, window.data()), frugal::Error);
  EXPECT_THROW(data::TokenSet(shards, "bad", 5, 100), frugal::Error);
}

namespace {

// The character tokens of `text` as nanoGPT's raw uint16 file and llm.c's shard, written byte
// by byte as their programs do (little-endian).
void write_raw_uint16(const std::string& path, std::span<const int32_t> ids) {
  std::ofstream out(path, std::ios::binary);
  for (const int32_t id : ids) {
    const auto v = static_cast<uint16_t>(id);
    out.write(reinterpret_cast<const char*>(&v), 2);
  }
}

void write_llmc(const std::string& path, std::span<const int32_t> ids, int32_t magic = data::kLlmcGpt2Magic, int32_t version = 1) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic, header[1] = version, header[2] = static_cast<int32_t>(ids.size());
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(header.data()), 1024);
  std::ofstream out(path, std::ios::binary | std::ios::app);
  for (const int32_t id : ids) {
    const auto v = static_cast<uint16_t>(id);
    out.write(reinterpret_cast<const char*>(&v), 2);
  }
}

}  // namespace

// nanoGPT's train.bin/val.bin and llm.c's NAME_train_NNNNNN.bin shards are read as they are
// (data.tokenizer names their tokenizer) and trained on for a few steps through the CLI.
TEST(ForeignData, NanoGptAndLlmcFilesAreReadAndTrainedOn) {
  TempDir dir;
  const std::string text = shakespeare().substr(0, 60000);
  data::CharTokenizer tok = data::CharTokenizer::from_text(text);
  tok.save(dir.file("vocab.json"));
  const std::vector<int32_t> ids = tok.encode(text);
  const std::span<const int32_t> train(ids.data(), 50000), val(ids.data() + 50000, ids.size() - 50000);
  fs::create_directories(dir.file("nanogpt"));
  write_raw_uint16(dir.file("nanogpt/train.bin"), train);
  write_raw_uint16(dir.file("nanogpt/val.bin"), val);
  fs::create_directories(dir.file("llmc"));
  write_llmc(dir.file("llmc/tiny_train_000001.bin"), train.first(20000));
  write_llmc(dir.file("llmc/tiny_train_000002.bin"), train.subspan(20000));
  write_llmc(dir.file("llmc/tiny_val_000000.bin"), val);

  write_file(dir.file("empty.toml"), "");
  for (const char* kind : {"nanogpt", "llmc"}) {
    SCOPED_TRACE(kind);
    const std::string d = dir.file(kind);
    const auto loaded = data::load_prepared_tokenizer(d, "char:" + dir.file("vocab.json"));
    const auto t = data::open_prepared_split(d, "train", *loaded), v = data::open_prepared_split(d, "val", *loaded);
    EXPECT_EQ(all_tokens(*t), std::vector<int32_t>(train.begin(), train.end()));
    EXPECT_EQ(all_tokens(*v), std::vector<int32_t>(val.begin(), val.end()));
    const std::string run = dir.file(std::string("run-") + kind);
    const auto r = run_frugal("train " + dir.file("empty.toml") + " --set data.dir=" + d + " --set data.tokenizer=char:" + dir.file("vocab.json") +
                              " --set model.n_layer=1 --set model.n_head=2 --set model.n_embd=32 --set model.block_size=32"
                              " --set train.batch_size=4 --set train.max_steps=3 --set train.eval_interval=3"
                              " --set train.eval_batches=2 --set sample.count=0 --set train.out_dir=" + run);
    ASSERT_EQ(r.rc, 0) << r.output;
    const std::vector<nlohmann::json> records = frugal::testing::logged_records(run);
    ASSERT_FALSE(records.empty()) << r.output;
    const nlohmann::json& j = records.back();
    EXPECT_EQ(j["step"], 3);
    EXPECT_TRUE(j.contains("val_loss")) << j.dump();
  }

  // Without a tokenizer, and with damaged files: one clear line each.
  EXPECT_TRUE(contains(frugal::testing::error_of([&] { data::load_prepared_tokenizer(dir.file("llmc")); }),
                       "name their tokenizer: data.tokenizer"));
  write_llmc(dir.file("llmc/bad_train.bin"), train.first(10), data::kLlmcGpt2Magic, 3);
  EXPECT_TRUE(contains(frugal::testing::error_of([&] { data::open_prepared_split(dir.file("llmc"), "train", tok); }),
                       "has llm.c's magic 20240520 but version 3 (expected 1)"));
  fs::remove(dir.file("llmc/bad_train.bin"));
  write_file(dir.file("llmc/tiny_train_000003.bin"), read_file(dir.file("llmc/tiny_train_000001.bin")).substr(0, 2000));
  EXPECT_TRUE(contains(frugal::testing::error_of([&] { data::open_prepared_split(dir.file("llmc"), "train", tok); }),
                       "promises 20000 tokens"));
  write_file(dir.file("nanogpt/val.bin"), "abc");
  EXPECT_TRUE(contains(frugal::testing::error_of([&] { data::open_prepared_split(dir.file("nanogpt"), "val", tok); }),
                       "an odd size, so it is not raw uint16 tokens"));
  std::vector<int32_t> big(10, 1000);
  write_raw_uint16(dir.file("nanogpt/val.bin"), big);
  EXPECT_TRUE(contains(frugal::testing::error_of([&] { data::open_prepared_split(dir.file("nanogpt"), "val", tok); }),
                       "token 1000 at position 0 is not below the vocabulary size"));
}
