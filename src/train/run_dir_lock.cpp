// src/train/run_dir_lock.cpp — RunDirLock (run_dir_lock.h): flock(2) on the directory's descriptor.
#include "train/run_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "octet/error.h"

namespace octet::train_detail {

RunDirLock::RunDirLock(const std::string& dir) : fd_(::open(dir.c_str(), O_RDONLY | O_DIRECTORY)) {
  OCTET_CHECK(fd_ >= 0, io_error("cannot open", dir));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    OCTET_CHECK(err != EWOULDBLOCK, "run directory " + dir + " is in use by another octet process");
    OCTET_FAIL(io_error("cannot lock", dir, std::strerror(err)));
  }
}

RunDirLock::~RunDirLock() { ::close(fd_); }

}  // namespace octet::train_detail
