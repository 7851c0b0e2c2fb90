// src/train/run_dir_lock.h — the lock that keeps two octet processes from writing one run
// directory (docs/training.md §Resume): an exclusive advisory flock on the directory itself (no
// file is written), held while a run trains and while compare --overwrite removes an earlier
// compare's arms.
#pragma once

#include <string>

namespace octet::train_detail {

class RunDirLock {
 public:
  /// Locks `dir` (an existing directory). Throws octet::Error "run directory DIR is in use by
  /// another octet process" if another process holds it, or naming the cause if it cannot be
  /// opened or locked.
  explicit RunDirLock(const std::string& dir);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

 private:
  int fd_;
};

}  // namespace octet::train_detail
