// Forward-pass logits of a checkpoint on random tokens, for tools/check_hf_export.py (which
// compares them with transformers' logits of the exported model). Writes OUT.safetensors with
// "tokens" (B, T) I32 and "logits" (B, T, V) F32, and prints the forward time.
// Usage: bench_logits CHECKPOINT_OR_RUN_DIR OUT.safetensors [B] [T] [SEED]
#include <fmt/format.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "frugal/core/error.h"
#include "frugal/core/rng.h"
#include "frugal/core/timer.h"
#include "frugal/io/safetensors.h"
#include "frugal/train/checkpoint.h"

int main(int argc, char** argv) {
  if (argc < 3 || argc > 6) {
    fmt::print(stderr, "usage: {} CHECKPOINT_OR_RUN_DIR OUT.safetensors [B=2] [T=block_size] [SEED=1]\n", argv[0]);
    return 2;
  }
  try {
    const auto model = frugal::load_checkpoint_model(frugal::resolve_checkpoint(argv[1]));
    const frugal::ModelConfig& c = model->config();
    const int B = argc > 3 ? std::atoi(argv[3]) : 2;
    const int T = argc > 4 ? std::atoi(argv[4]) : c.block_size;
    frugal::Rng rng(argc > 5 ? std::strtoull(argv[5], nullptr, 10) : 1, 0);
    std::vector<int32_t> tokens(size_t(B) * T);  // (B, T)
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng.below(c.vocab_size));
    std::vector<float> logits(tokens.size() * c.vocab_size);  // (B, T, V)
    frugal::Timer timer;
    model->logits(tokens.data(), B, T, logits.data());
    fmt::print("forward B={} T={} V={}: {:.1f} ms\n", B, T, c.vocab_size, timer.ms());
    frugal::io::SafeTensors out;
    out.put("tokens", frugal::io::DType::I32, {B, T}, tokens.data());
    out.put_f32("logits", {B, T, c.vocab_size}, logits.data());
    frugal::io::write_safetensors(argv[2], out);
  } catch (const frugal::Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
