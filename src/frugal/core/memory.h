// Aligned buffers and process memory statistics.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace frugal {

inline constexpr size_t kAlign = 64;  // bytes: one cache line, one AVX-512 vector

struct AlignedFree {
  void operator()(void* p) const;
};

// An owning, 64-byte aligned, zero-initialised array of T.
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

void* aligned_zeroed_alloc(size_t bytes);

template <class T>
void Buffer<T>::resize(size_t n) {
  ptr_.reset(static_cast<T*>(aligned_zeroed_alloc(n * sizeof(T))));
  n_ = n;
}

template <class T>
void Buffer<T>::zero() {
  if (n_) __builtin_memset(static_cast<void*>(ptr_.get()), 0, n_ * sizeof(T));
}

// Peak resident set size of this process in bytes (VmHWM), 0 when unknown.
uint64_t peak_rss_bytes();

// Memory the machine can give this process without swapping, in bytes: MemAvailable of
// /proc/meminfo, else the free physical pages (sysconf).
uint64_t available_memory_bytes();

}  // namespace frugal
