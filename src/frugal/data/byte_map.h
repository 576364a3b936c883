// ByteStringMap: an open-addressing hash map from byte strings to 64-bit values, with the keys
// copied into one arena. Used by the GPT-2 tokenizer for its vocabulary, merge pairs and piece
// cache, where std::unordered_map's per-node allocations and hashing dominate the encode time.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "frugal/core/rng.h"

namespace frugal::data {

class ByteStringMap {
 public:
  explicit ByteStringMap(size_t expected = 1024) { rehash(capacity_for(expected)); }

  size_t size() const { return size_; }

  // The value stored for key, or nullptr.
  const uint64_t* find(std::string_view key) const {
    const uint64_t h = hash(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.hash == 0) return nullptr;
      if (s.hash == h && s.key_len == key.size() &&
          std::memcmp(arena_.data() + s.key_off, key.data(), key.size()) == 0)
        return &s.value;
    }
  }

  // Inserts or overwrites.
  void insert(std::string_view key, uint64_t value) {
    if ((size_ + 1) * 4 > slots_.size() * 3) rehash(slots_.size() * 2);
    const uint64_t h = hash(key);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.hash == 0) {
        s = Slot{h, arena_.size(), static_cast<uint32_t>(key.size()), value};
        arena_.append(key);
        ++size_;
        return;
      }
      if (s.hash == h && s.key_len == key.size() &&
          std::memcmp(arena_.data() + s.key_off, key.data(), key.size()) == 0) {
        s.value = value;
        return;
      }
    }
  }

  void clear() {
    arena_.clear();
    size_ = 0;
    slots_.assign(slots_.size(), Slot{0, 0, 0, 0});
  }

  // 64-bit hash of a byte string, never 0 (0 marks an empty slot).
  static uint64_t hash(std::string_view key) {
    uint64_t h = key.size() * 0x9E3779B97F4A7C15ull;
    size_t i = 0;
    for (; i + 8 <= key.size(); i += 8) {
      uint64_t w;
      std::memcpy(&w, key.data() + i, 8);
      h = mix64(h ^ w);
    }
    if (i < key.size()) {
      uint64_t w = 0;
      std::memcpy(&w, key.data() + i, key.size() - i);
      h = mix64(h ^ w);
    }
    return h | 1;
  }

 private:
  struct Slot {
    uint64_t hash;
    uint64_t key_off;
    uint32_t key_len;
    uint64_t value;
  };

  static size_t capacity_for(size_t n) {
    size_t c = 16;
    while (c * 3 < n * 4) c *= 2;
    return c;
  }

  void rehash(size_t capacity) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(capacity, Slot{0, 0, 0, 0});
    mask_ = capacity - 1;
    for (const Slot& s : old) {
      if (s.hash == 0) continue;
      size_t i = s.hash & mask_;
      while (slots_[i].hash != 0) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;
  std::string arena_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace frugal::data
