// Tokenizer speed: encodes one file with N threads several times and prints the median MB/s.
// Usage: bench_tokenizer FILE [--threads N] [--repeat R] [--tokenizer SPEC]
// (tools/compare_tokenizer.sh runs it next to tools/bench_tiktoken.py with the same settings.)
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "frugal/core/error.h"
#include "frugal/core/timer.h"
#include "frugal/data/text.h"
#include "frugal/data/tokenizer.h"

int main(int argc, char** argv) {
  std::string file, spec = "gpt2";
  int threads = 1, repeat = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (a == "--repeat" && i + 1 < argc) {
      repeat = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--tokenizer" && i + 1 < argc) {
      spec = argv[++i];
    } else {
      file = a;
    }
  }
  if (file.empty()) {
    fmt::print(stderr, "usage: bench_tokenizer FILE [--threads N] [--repeat R] [--tokenizer SPEC]\n");
    return 2;
  }
  try {
    const std::string text = frugal::data::read_text_file(file);
    frugal::Timer load_timer;
    const auto tok = frugal::data::load_tokenizer(spec, {.allow_special = false, .threads = threads});
    const double load_s = load_timer.seconds();
    size_t tokens = tok->encode(text).size();  // warm-up
    std::vector<double> seconds;
    for (int r = 0; r < repeat; ++r) {
      frugal::Timer t;
      tokens = tok->encode(text).size();
      seconds.push_back(t.seconds());
    }
    std::sort(seconds.begin(), seconds.end());
    const double median = seconds[seconds.size() / 2];
    fmt::print("frugal {} threads={} bytes={} tokens={} load_s={:.3f} median_s={:.4f} MB/s={:.2f}\n",
               spec, threads, text.size(), tokens, load_s, median, text.size() / median / 1e6);
  } catch (const frugal::Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
