// The AutoCache store; see prefix_cache.h.
#include "frugal/methods/freeze/prefix_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "frugal/core/error.h"

namespace frugal::freeze {

PrefixCache::PrefixCache(size_t sample_floats, size_t memory_bytes, std::string spill_dir)
    : floats_(sample_floats),
      memory_slots_max_(memory_bytes / (sample_floats * sizeof(float))),
      spill_dir_(std::move(spill_dir)) {}

PrefixCache::~PrefixCache() {
  if (fd_ >= 0) ::close(fd_);
}

const PrefixCache::Entry* PrefixCache::find(int64_t id, int level) const {
  const auto it = index_.find(id);
  if (it == index_.end()) return nullptr;
  for (const Entry& e : it->second)
    if (e.level == level) return &e;
  return nullptr;
}

bool PrefixCache::has(int64_t id, int level) const { return find(id, level) != nullptr; }

std::vector<int> PrefixCache::levels(int64_t id) const {
  std::vector<int> out;
  if (const auto it = index_.find(id); it != index_.end())
    for (const Entry& e : it->second) out.push_back(e.level);
  return out;
}

size_t PrefixCache::count(int level) const {
  const auto it = level_counts_.find(level);
  return it == level_counts_.end() ? 0 : it->second;
}

std::vector<int> PrefixCache::held_levels() const {
  std::vector<int> out;
  for (const auto& [level, n] : level_counts_) out.push_back(level);
  return out;
}

void PrefixCache::read(int64_t id, int level, float* out) const {
  const Entry* e = find(id, level);
  FRUGAL_CHECK(e, "internal: AutoCache has no entry for sample {} at level {}", id, level);
  const size_t bytes = floats_ * sizeof(float);
  if (!e->on_disk) {
    std::memcpy(out, memory_[e->slot].get(), bytes);
    return;
  }
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd_, reinterpret_cast<char*>(out) + done, bytes - done,
                              static_cast<off_t>(e->slot * bytes + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw SpillError(fmt::format("reading the AutoCache spill file in {} failed ({})", spill_dir_,
                                   n < 0 ? std::strerror(errno) : "short file"));
    done += static_cast<size_t>(n);
  }
}

size_t PrefixCache::spill_file_bytes() const {
  struct stat st {};
  return fd_ >= 0 && ::fstat(fd_, &st) == 0 ? static_cast<size_t>(st.st_size) : 0;
}

void PrefixCache::open_spill_file() {
  std::error_code ec;
  std::filesystem::create_directories(spill_dir_, ec);
  std::string path = (std::filesystem::path(spill_dir_) / "prefix_cache.XXXXXX").string();
  fd_ = ::mkostemp(path.data(), O_CLOEXEC);
  if (fd_ < 0)
    throw SpillError(fmt::format("cannot create the AutoCache spill file in {} ({})", spill_dir_,
                                 ec ? ec.message() : std::strerror(errno)));
  ::unlink(path.c_str());  // the open descriptor keeps it until this process closes it or ends
}

void PrefixCache::write(int64_t id, int level, const float* data) {
  const Entry* found = find(id, level);
  Entry e = found ? *found : Entry{level, false, 0};
  if (!found) {
    if (!free_memory_.empty()) {
      e.slot = free_memory_.back();
      free_memory_.pop_back();
    } else if (memory_.size() < memory_slots_max_) {
      e.slot = memory_.size();
      memory_.emplace_back(new float[floats_]);
    } else {
      if (fd_ < 0) open_spill_file();
      e.on_disk = true;
      if (!free_disk_.empty()) {
        e.slot = free_disk_.back();
        free_disk_.pop_back();
      } else {
        e.slot = disk_slots_++;
      }
      ++disk_used_;
    }
    auto& list = index_[id];
    list.insert(std::upper_bound(list.begin(), list.end(), level,
                                 [](int l, const Entry& x) { return l < x.level; }), e);
    ++level_counts_[level];
  }
  const size_t bytes = floats_ * sizeof(float);
  if (!e.on_disk) {
    std::memcpy(memory_[e.slot].get(), data, bytes);
    return;
  }
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pwrite(fd_, reinterpret_cast<const char*>(data) + done, bytes - done,
                               static_cast<off_t>(e.slot * bytes + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw SpillError(fmt::format("writing the AutoCache spill file in {} failed ({})", spill_dir_,
                                   n < 0 ? std::strerror(errno) : "no progress"));
    done += static_cast<size_t>(n);
  }
}

void PrefixCache::release(const Entry& e) {
  if (e.on_disk) {
    free_disk_.push_back(e.slot);
    --disk_used_;
  } else {
    free_memory_.push_back(e.slot);
  }
}

void PrefixCache::drop_level(int level) {
  if (count(level) == 0) return;
  for (auto it = index_.begin(); it != index_.end();) {
    auto& list = it->second;
    for (auto e = list.begin(); e != list.end();) {
      if (e->level == level) {
        release(*e);
        e = list.erase(e);
      } else {
        ++e;
      }
    }
    it = list.empty() ? index_.erase(it) : std::next(it);
  }
  level_counts_.erase(level);
}

void PrefixCache::clear() {
  index_.clear();
  level_counts_.clear();
  memory_.clear();
  free_memory_.clear();
  free_disk_.clear();
  disk_slots_ = disk_used_ = 0;
}

}  // namespace frugal::freeze
