// Advisory locks on directories shared between frugal processes: flock(2) on the file DIR/.lock.
// The kernel releases a lock when its holder exits in any way (kill -9 included), so a lock never
// outlives its process and a dead holder's lock needs no recovery; the file itself stays.
//   - exclusive: the one process that writes a run directory (train and --resume, import, each
//     run of an experiment). Taken without waiting; the holder records its pid, host, command and
//     start time in the file, so that a refused process names it.
//   - try_exclusive / shared: checkpoint directories. Readers (eval, sample, export, --resume,
//     --init-from) hold a shared lock while they use one; a training run deletes an old
//     checkpoint only when it gets the exclusive lock at once, so it skips a checkpoint being read
//     (and deletes it at a later save) instead of waiting for the reader.
// flock locks belong to an open file, not to a process: two DirLocks in one process exclude each
// other as two processes do.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace frugal::io {

inline constexpr const char* kLockFileName = ".lock";

class DirLock {
 public:
  // Creates `dir` (and its parents) when missing and takes its exclusive lock, recording this
  // process as the holder. When another process holds a lock on it, throws Error
  // "<what> <dir> is in use by frugal pid N on HOST (COMMAND) since TIME; <advice>".
  static DirLock exclusive(const std::string& dir, std::string_view what, std::string_view advice);
  // The exclusive lock of an existing `dir` if nobody holds a lock on it right now, else nullopt.
  // Creates the lock file when missing; records no holder.
  static std::optional<DirLock> try_exclusive(const std::string& dir);
  // A shared lock of `dir`, waiting while an exclusive holder (a deleting run) has it. nullopt when
  // dir has no lock file, or when it was deleted while this waited. Never creates the lock file.
  static std::optional<DirLock> shared(const std::string& dir);

  DirLock(DirLock&& other) noexcept;
  DirLock& operator=(DirLock&&) = delete;
  DirLock(const DirLock&) = delete;
  ~DirLock();  // releases the lock; an exclusive holder first erases its record

 private:
  DirLock(int fd, bool recorded) : fd_(fd), recorded_(recorded) {}

  int fd_ = -1;
  bool recorded_ = false;
};

}  // namespace frugal::io
