// Aligned buffers and process memory statistics.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace frugal {

inline constexpr size_t kAlign = 64;  // bytes: one cache line, one AVX-512 vector

// Frees what aligned_zeroed_alloc returned: unmaps it when it was mapped on its own (mapped_bytes).
struct AlignedFree {
  size_t mapped_bytes = 0;
  void operator()(void* p) const;
};

// An owning, 64-byte aligned, zero-initialised array of T (whose whole pages take memory only once
// written).
template <class T>
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t n) { resize(n); }
  void resize(size_t n);
  T* data() { return ptr_.get(); }
  const T* data() const { return ptr_.get(); }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return ptr_.get()[i]; }
  const T& operator[](size_t i) const { return ptr_.get()[i]; }
  void zero();

 private:
  std::unique_ptr<T, AlignedFree> ptr_;
  size_t n_ = 0;
};

// `bytes` zeroed, 64-byte aligned, whose whole pages take memory only once written. From
// kMappedBytes up a mapping of its own (*mapped_bytes its length, else 0), whose memory goes back
// to the operating system when freed: the allocator's heap keeps freed blocks of up to tens of MiB
// resident, which a model's buffers, built and dropped at start-up (AutoPipe's unit models) and at
// every re-partition, would otherwise leave behind.
inline constexpr size_t kMappedBytes = size_t{1} << 20;
void* aligned_zeroed_alloc(size_t bytes, size_t* mapped_bytes);

template <class T>
void Buffer<T>::resize(size_t n) {
  size_t mapped = 0;
  T* p = static_cast<T*>(aligned_zeroed_alloc(n * sizeof(T), &mapped));
  ptr_ = std::unique_ptr<T, AlignedFree>(p, AlignedFree{mapped});
  n_ = n;
}

template <class T>
void Buffer<T>::zero() {
  if (n_) __builtin_memset(static_cast<void*>(ptr_.get()), 0, n_ * sizeof(T));
}

// Returns the whole pages inside [p, p + bytes) to the operating system (madvise MADV_DONTNEED on
// the pages of a private anonymous mapping, which every Buffer is): they read as zero afterwards
// and take memory again only when written. Returns the bytes released.
size_t release_pages(void* p, size_t bytes);
// Sets [p, p + bytes) to zero: the whole pages by releasing them, the rest with memset.
void zero_releasing_pages(void* p, size_t bytes);
// Asks for transparent huge pages (2 MiB) on the pages inside [p, p + bytes), where the kernel
// allows them on request: memory released and taken again every step then costs one page fault
// per 2 MiB instead of per 4 KiB. Best effort: does nothing where they are unavailable.
void prefer_huge_pages(void* p, size_t bytes);

// Peak resident set size of this process in bytes (VmHWM), 0 when unknown.
uint64_t peak_rss_bytes();

// Memory the machine can give this process without swapping, in bytes: MemAvailable of
// /proc/meminfo, else the free physical pages (sysconf).
uint64_t available_memory_bytes();

}  // namespace frugal
