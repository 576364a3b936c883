// Generation speed: tokens/s of generate() (key/value-cached Decoder) against the full re-run it
// replaced (one GPT::logits over the last block_size tokens per new token), same model, same
// sampling, medians of three interleaved rounds.
// Usage: bench_generate [TOKENS=300] [N_LAYER=4] [N_EMBD=192] [VOCAB=65] [BLOCK=256]
// Threads: OMP_NUM_THREADS.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "frugal/core/rng.h"
#include "frugal/core/threading.h"
#include "frugal/bench/kernel_bench.h"
#include "frugal/model/gpt.h"
#include "frugal/train/sampler.h"

namespace {

int arg(int argc, char** argv, int i, int fallback) { return argc > i ? std::atoi(argv[i]) : fallback; }

// The pre-cache algorithm: every token re-runs the model over the whole (windowed) context.
std::vector<int32_t> generate_full_rerun(frugal::GPT& model, std::vector<int32_t> context,
                                         const frugal::SampleOptions& o) {
  const int V = model.config().vocab_size, window_max = model.config().block_size;
  frugal::Rng rng(o.seed, 11);
  std::vector<float> logits;
  for (int n = 0; n < o.max_tokens; ++n) {
    const int T = std::min<int>(static_cast<int>(context.size()), window_max);
    logits.resize(size_t(T) * V);
    model.logits(context.data() + context.size() - T, 1, T, logits.data());
    context.push_back(frugal::sample_token(&logits[size_t(T - 1) * V], V, o, rng.uniform()));
  }
  return context;
}

}  // namespace

int main(int argc, char** argv) {
  frugal::ModelConfig c;
  const int tokens = arg(argc, argv, 1, 300);
  c.n_layer = arg(argc, argv, 2, 4);
  c.n_embd = arg(argc, argv, 3, 192);
  c.vocab_size = arg(argc, argv, 4, 65);
  c.block_size = arg(argc, argv, 5, 256);
  c.n_head = c.n_embd / 48;  // head size 48
  c.validate();
  frugal::GPT model(c);
  model.init_weights(1);
  const frugal::SampleOptions o{.max_tokens = tokens, .temperature = 1.0, .top_k = 0, .top_p = 1.0, .seed = 1};
  const std::vector<int32_t> prompt{0};
  fmt::print("model: {} layers, n_embd {}, {} heads, vocab {}, block_size {}; {} tokens from a "
             "1-token prompt, {} threads\n",
             c.n_layer, c.n_embd, c.n_head, c.vocab_size, c.block_size, tokens, frugal::num_threads());

  // Three rounds that run both in turn (after one untimed run of each, so that neither pays the
  // cold start alone: page faults, thread pool, GEMM library set-up); the medians are compared.
  std::vector<int32_t> full, cached;
  const std::vector<double> s = frugal::bench::interleaved_median_seconds(
      {[&] { full = generate_full_rerun(model, prompt, o); }, [&] { cached = frugal::generate(model, prompt, o); }}, 3);
  const double full_s = s[0], cached_s = s[1];

  // Tokens agree while the context fits the window (the two slide differently past it).
  const size_t fits = std::min<size_t>(full.size(), c.block_size);
  const bool same = std::equal(full.begin(), full.begin() + fits, cached.begin());
  fmt::print("full re-run per token : {:8.1f} tokens/s ({:.3f} s)\n", tokens / full_s, full_s);
  fmt::print("kv-cached decoder     : {:8.1f} tokens/s ({:.3f} s)\n", tokens / cached_s, cached_s);
  fmt::print("speed-up {:.1f}x; first {} tokens identical: {}\n", full_s / cached_s, fits, same ? "yes" : "NO");
  return 0;
}
