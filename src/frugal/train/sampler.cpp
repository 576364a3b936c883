// Sampling; see sampler.h.
#include "frugal/train/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "frugal/core/error.h"
#include "frugal/core/rng.h"
#include "frugal/io/stdout.h"
#include "frugal/model/decoder.h"

namespace frugal {

void validate(const SampleOptions& o) {
  FRUGAL_CHECK(o.max_tokens >= 1, "max tokens = {} must be at least 1", o.max_tokens);
  FRUGAL_CHECK(o.temperature > 0 && std::isfinite(o.temperature),
               "temperature = {} must be a positive number (try 0.8)", o.temperature);
  FRUGAL_CHECK(o.top_k >= 0, "top-k = {} must be 0 (off) or positive", o.top_k);
  FRUGAL_CHECK(o.top_p > 0 && o.top_p <= 1, "top-p = {} must be in (0, 1]", o.top_p);
}

int32_t sample_token(const float* logits, int V, const SampleOptions& o, double uniform) {
  std::vector<int32_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  int keep = o.top_k > 0 ? std::min(o.top_k, V) : V;
  std::vector<double> p(keep);
  const double mx = logits[order[0]];
  double sum = 0;
  for (int i = 0; i < keep; ++i) sum += p[i] = std::exp((logits[order[i]] - mx) / o.temperature);
  if (o.top_p < 1.0) {  // smallest prefix whose mass reaches top_p
    double mass = 0;
    for (int i = 0; i < keep; ++i) {
      mass += p[i] / sum;
      if (mass >= o.top_p) {
        keep = i + 1;
        break;
      }
    }
    sum = std::accumulate(p.begin(), p.begin() + keep, 0.0);
  }
  double target = uniform * sum;
  for (int i = 0; i < keep; ++i) {
    target -= p[i];
    if (target < 0) return order[i];
  }
  return order[keep - 1];
}

std::vector<int32_t> generate(GPT& model, std::vector<int32_t> context, const SampleOptions& o,
                              const std::function<void(int32_t)>& on_token) {
  validate(o);
  FRUGAL_CHECK(!context.empty(), "sampling needs at least one context token");
  const int V = model.config().vocab_size;
  Rng rng(o.seed, 11);
  Decoder decoder(model);
  const float* logits = decoder.prefill(context);
  for (int n = 0; n < o.max_tokens; ++n) {
    const int32_t next = sample_token(logits, V, o, rng.uniform());
    context.push_back(next);
    if (on_token) on_token(next);
    if (n + 1 < o.max_tokens) logits = decoder.step(next);
  }
  return context;
}

std::vector<int32_t> prompt_context(const data::Tokenizer& tokenizer, const std::string& prompt) {
  std::vector<int32_t> context;
  try {
    context = tokenizer.encode(prompt);
  } catch (const Error& e) {
    fail("the prompt cannot be encoded with this model's tokenizer: {}", e.what());
  }
  if (context.empty()) context.push_back(tokenizer.eot_token() >= 0 ? tokenizer.eot_token() : 0);
  return context;
}

void print_samples(GPT& model, const data::Tokenizer& tokenizer, const std::string& prompt,
                   int count, SampleOptions options) {
  const std::vector<int32_t> context = prompt_context(tokenizer, prompt);
  const uint64_t seed = options.seed;
  for (int i = 0; i < count; ++i) {
    io::print("--- sample {} ---\n{}", i + 1, prompt);
    options.seed = seed + i;
    generate(model, context, options, [&](int32_t id) {
      io::print("{}", tokenizer.decode(std::span<const int32_t>(&id, 1)));
      io::flush_stdout();
    });
    io::print("\n");
    io::flush_stdout();
  }
}

}  // namespace frugal
