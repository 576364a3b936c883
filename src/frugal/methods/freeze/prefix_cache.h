// PrefixCache: the store behind AutoCache. Holds activation tensors (T,C floats) keyed by
// (training sample id, level), where the level is the number of frozen blocks the tensor is the
// output of. A sample may hold several levels at once (the old one stays until every cached
// sample has the new one, so micro-batches mixing both can still be served). Entries live in
// memory up to a byte budget; beyond it they spill to fixed-size slots of one file on disk, an
// unnamed file of this process (created and unlinked at once: no other process, such as another
// rank with the same directory, can open it, and nothing is left behind by a crash). Freed slots
// are reused. It knows nothing of models: the freeze method decides what is valid.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "frugal/core/error.h"

namespace frugal::freeze {

// The spill file could not be created, written or read (a full disk, an I/O error). The cache's
// content is then undefined: drop it.
class SpillError : public Error {
 public:
  using Error::Error;
};

class PrefixCache {
 public:
  // sample_floats: floats per entry (T·C); memory_bytes: in-memory budget; spill_dir: where the
  // file that holds entries beyond the budget is created, on the first spill.
  PrefixCache(size_t sample_floats, size_t memory_bytes, std::string spill_dir);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  bool has(int64_t id, int level) const;
  // The levels held for `id`, ascending (empty when none).
  std::vector<int> levels(int64_t id) const;
  // Copies entry (id, level), which must exist, to out (T,C). Throws SpillError.
  void read(int64_t id, int level, float* out) const;
  // Stores (or replaces) entry (id, level): data (T,C). Throws SpillError.
  void write(int64_t id, int level, const float* data);
  // Removes every entry at `level`.
  void drop_level(int level);
  void clear();

  size_t samples() const { return index_.size(); }  // distinct sample ids held
  size_t count(int level) const;                     // entries at `level`
  std::vector<int> held_levels() const;              // levels with entries, ascending
  size_t entries_on_disk() const { return disk_used_; }
  size_t spill_file_bytes() const;  // the spill file's size (0 before the first spill)
  size_t sample_floats() const { return floats_; }

 private:
  struct Entry {
    int level;
    bool on_disk;
    size_t slot;  // index into memory_ or into the spill file
  };
  void release(const Entry& e);
  void open_spill_file();
  const Entry* find(int64_t id, int level) const;

  size_t floats_, memory_slots_max_;
  std::string spill_dir_;
  int fd_ = -1;
  std::unordered_map<int64_t, std::vector<Entry>> index_;  // per id, sorted by level
  std::map<int, size_t> level_counts_;
  std::vector<std::unique_ptr<float[]>> memory_;
  std::vector<size_t> free_memory_, free_disk_;
  size_t disk_slots_ = 0, disk_used_ = 0;
};

}  // namespace frugal::freeze
