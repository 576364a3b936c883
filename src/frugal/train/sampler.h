// Autoregressive sampling from a GPT: temperature, top-k and top-p (nucleus) filtering, seeded.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "frugal/data/tokenizer.h"
#include "frugal/model/gpt.h"

namespace frugal {

struct SampleOptions {
  int max_tokens = 200;
  double temperature = 1.0;  // > 0
  int top_k = 0;             // 0: no top-k filter
  double top_p = 1.0;        // (0, 1]; 1: no nucleus filter
  uint64_t seed = 1;
};

// Throws Error with the accepted range for out-of-range options.
void validate(const SampleOptions& options);

// Picks a token from logits (V) per the options, drawing one uniform from rng.
int32_t sample_token(const float* logits, int V, const SampleOptions& options, double uniform);

// Extends `context` (non-empty) by max_tokens tokens, calling on_token for each as it is made.
// Runs a key/value-cached Decoder (model/decoder.h): the context is prefilled once (its last
// block_size tokens), then each new token costs one cached step; when the window is full it
// slides to its last block_size/2 tokens. Leaves the model's activation plan untouched.
std::vector<int32_t> generate(GPT& model, std::vector<int32_t> context, const SampleOptions& options,
                              const std::function<void(int32_t)>& on_token = {});

// The context a sample starts from: the prompt's tokens, or the end-of-text token (token 0 for a
// tokenizer without one) when the prompt is empty. A prompt the tokenizer cannot encode (a
// character outside a char vocabulary) is an Error naming it.
std::vector<int32_t> prompt_context(const data::Tokenizer& tokenizer, const std::string& prompt);

// Prints `count` samples to stdout, each headed "--- sample i ---" and starting with the prompt,
// streamed and flushed token by token. Sample i (from 0) uses seed options.seed + i.
void print_samples(GPT& model, const data::Tokenizer& tokenizer, const std::string& prompt,
                   int count, SampleOptions options);

}  // namespace frugal
