// Implementation of the small core utilities: threads, aligned memory, RSS.
#include <omp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "frugal/core/error.h"
#include "frugal/core/memory.h"
#include "frugal/core/threading.h"

namespace frugal {
namespace {

void (*g_thread_count_follower)(int) = nullptr;

}  // namespace

void set_thread_count_follower(void (*follower)(int)) { g_thread_count_follower = follower; }

void set_num_threads(int n) {
  if (n <= 0) return;
  omp_set_num_threads(n);
  if (g_thread_count_follower) g_thread_count_follower(n);
}

int num_threads() { return omp_get_max_threads(); }

void reexec_with_default_omp_wait_policy(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  if (setenv("GOMP_SPINCOUNT", kDefaultOmpSpinCount, 1) != 0) return;
  execv("/proc/self/exe", argv);  // returns only on failure: run on with libgomp's default
}

std::string omp_wait_policy() {
  std::string out;
  for (const char* name : {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"}) {
    const char* value = std::getenv(name);
    if (!value) continue;
    if (!out.empty()) out += ' ';
    out.append(name).append("=").append(value);
  }
  return out.empty() ? "libgomp default" : out;
}

void AlignedFree::operator()(void* p) const {
  if (mapped_bytes)
    munmap(p, mapped_bytes);
  else
    std::free(p);
}

void* aligned_zeroed_alloc(size_t bytes, size_t* mapped_bytes) {
  *mapped_bytes = 0;
  if (bytes == 0) return nullptr;
  if (bytes >= kMappedBytes) {  // page-aligned, and zero pages the kernel maps in only when written
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    *mapped_bytes = bytes;
    return p;
  }
  size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded);
  if (!p) throw std::bad_alloc();
  // Whole pages zeroed by releasing them: they take memory only once written, so a buffer that is
  // allocated but not (yet) used, e.g. a model's gradients before its first backward, costs none.
  zero_releasing_pages(p, rounded);
  return p;
}

size_t release_pages(void* p, size_t bytes) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) / page * page;
  if (end <= begin) return 0;
  FRUGAL_CHECK(madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED) == 0,
               "internal: madvise(MADV_DONTNEED) failed: {}", std::strerror(errno));
  return end - begin;
}

void zero_releasing_pages(void* p, size_t bytes) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  char* const first = static_cast<char*>(p);
  char* const last = first + bytes;
  char* begin = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(first) + page - 1) / page * page);
  char* end = reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(last) / page * page);
  if (end <= begin) begin = end = last;
  std::memset(first, 0, begin - first);
  std::memset(end, 0, last - end);
  release_pages(begin, end - begin);
}

void prefer_huge_pages(void* p, size_t bytes) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

namespace {

// The value of the "<field>  <n> kB" line of a /proc file in bytes, 0 when absent.
uint64_t proc_kb_field(const char* path, const char* field) {
  FILE* f = std::fopen(path, "r");
  if (!f) return 0;
  const size_t length = std::strlen(field);
  char line[256];
  uint64_t kb = 0;
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, field, length) == 0) {
      kb = std::strtoull(line + length, nullptr, 10);
      break;
    }
  }
  std::fclose(f);
  return kb * 1024;
}

}  // namespace

uint64_t peak_rss_bytes() { return proc_kb_field("/proc/self/status", "VmHWM:"); }

uint64_t available_memory_bytes() {
  if (const uint64_t available = proc_kb_field("/proc/meminfo", "MemAvailable:")) return available;
  return static_cast<uint64_t>(sysconf(_SC_AVPHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace frugal
