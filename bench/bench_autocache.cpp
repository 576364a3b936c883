// Where AutoCache pays: per sample, the time to recompute one frozen block's forward versus the
// time to read the block's cached output (T,C floats) from memory or from the spill file (warm:
// in the page cache; cold: dropped from it with posix_fadvise first). The break-even intensity is
// the prefix FLOPs per cached byte at which recomputing costs as much as reading; caching pays
// above it. autocache.h's kMemoryBreakEvenFlopsPerByte / kDiskBreakEvenFlopsPerByte come from here.
// Each time is the best of several repetitions (the machine is shared).
// Usage: bench_autocache [threads=2]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "frugal/bench/kernel_bench.h"
#include "frugal/core/threading.h"
#include "frugal/core/timer.h"
#include "frugal/methods/freeze/autocache.h"
#include "frugal/methods/freeze/prefix_cache.h"

namespace {

using namespace frugal;
using frugal::bench::best_seconds;

void drop_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void measure(int C, int T) {
  const int B = 8, L = 4;
  ModelConfig c;
  c.vocab_size = 65, c.n_layer = L, c.n_head = std::max(1, C / 64), c.n_embd = C, c.block_size = T;
  GPT model(c);
  model.init_weights(1);
  model.plan(B, T);
  model.set_frozen_prefix(L);
  std::vector<int32_t> tokens(size_t(B) * T, 1);
  std::vector<float> prefix(size_t(B) * T * C, 0.1f);
  auto forward_from = [&](int level) {
    return best_seconds([&] { model.forward(tokens.data(), tokens.data(), 0.0f, 0, prefix.data(), level); }, 5);
  };
  const double block = (forward_from(0) - forward_from(L)) / L / B;  // one block, one sample

  const size_t floats = size_t(T) * C, samples = 64;
  const std::string dir = (std::filesystem::temp_directory_path() / "frugal_bench_autocache").string();
  std::vector<float> buf(floats, 0.5f);
  freeze::PrefixCache memory(floats, samples * floats * sizeof(float), dir + "/unused.bin");
  freeze::PrefixCache disk(floats, 0, dir + "/spill.bin");
  for (size_t s = 0; s < samples; ++s) {
    memory.write(int64_t(s), 1, buf.data());
    disk.write(int64_t(s), 1, buf.data());
  }
  auto read_all = [&](const freeze::PrefixCache& cache) {
    for (size_t s = 0; s < samples; ++s) cache.read(int64_t(s), 1, buf.data());
  };
  const double mem = best_seconds([&] { read_all(memory); }, 5) / samples;
  const double warm = best_seconds([&] { read_all(disk); }, 5) / samples;
  double cold = 1e30;
  for (int r = 0; r < 3; ++r) {
    drop_page_cache(dir + "/spill.bin");
    Timer t;
    read_all(disk);
    cold = std::min(cold, t.seconds() / samples);
  }
  const double intensity = freeze::prefix_flops_per_byte(model, T, 1);
  std::printf("C %4d T %4d | block %8.1f us (%5.0f FLOP/B) | memory %6.1f us -> %5.2f FLOP/B | "
              "disk warm %6.1f us -> %5.2f | cold %7.1f us -> %6.2f\n",
              C, T, block * 1e6, intensity, mem * 1e6, intensity * mem / block, warm * 1e6,
              intensity * warm / block, cold * 1e6, intensity * cold / block);
  std::filesystem::remove_all(dir);
}

}  // namespace

int main(int argc, char** argv) {
  frugal::set_num_threads(argc > 1 ? std::atoi(argv[1]) : 2);
  std::printf("per sample: one block's forward vs reading its cached output; '-> X FLOP/B' is the "
              "break-even intensity (caching pays when the prefix's FLOPs per cached byte exceed it)\n");
  for (const auto& [C, T] : {std::pair{64, 64}, {128, 128}, {384, 256}}) measure(C, T);
}
