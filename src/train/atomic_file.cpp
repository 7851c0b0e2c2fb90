// src/train/atomic_file.cpp — whole-file reads, and crash-safe file replacement, the one place octet writes a
// file that a crash must never leave half-written (checkpoints, weights, config.toml, the cut-back
// metrics.jsonl): the bytes go to <path>.tmp, are fsynced, and the temporary file is renamed over <path>
// (POSIX rename is atomic), so <path> is always either the old or the new file (docs/training.md §Output).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "octet/error.h"
#include "octet/train.h"

namespace octet {

namespace fs = std::filesystem;

std::string read_file_bytes(const std::string& path, const std::string& what) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  OCTET_CHECK(in.good(), io_error("cannot read " + what, path));
  std::ostringstream ss;
  ss << in.rdbuf();
  OCTET_CHECK(!in.bad(), io_error("cannot read " + what, path));
  return ss.str();
}

void write_file_atomic(const std::string& path, const std::vector<std::string_view>& chunks) {
  const std::string tmp = path + ".tmp";
  // A fresh file: a leftover (or a symbolic link someone put there) is unlinked first, and
  // O_EXCL | O_NOFOLLOW never write through a link to another file.
  if (::unlink(tmp.c_str()) != 0 && errno != ENOENT)
    OCTET_FAIL(io_error("cannot write", tmp,
                        std::string("something there cannot be removed (") + std::strerror(errno) + ")"));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0644);
  OCTET_CHECK(fd >= 0, "cannot write " + tmp + ": " + std::strerror(errno));
  int err = 0;
  for (std::string_view c : chunks) {
    while (err == 0 && !c.empty()) {
      const ssize_t w = ::write(fd, c.data(), c.size());
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0)
        err = w < 0 ? errno : EIO;
      else
        c.remove_prefix(size_t(w));
    }
  }
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    std::remove(tmp.c_str());
    OCTET_FAIL("cannot write " + tmp + ": " + std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());  // nothing left behind (e.g. path is a directory)
    OCTET_FAIL("cannot rename " + tmp + " to " + path + ": " + std::strerror(e));
  }
}

void require_new_file(const std::string& path, const std::string& option) {
  std::error_code ec;
  OCTET_CHECK(!fs::exists(fs::symlink_status(path, ec)),
              option + " " + path + " exists; not overwritten (remove it or give another path)");
}

void require_directory_path(const std::string& path, const std::string& option) {
  std::error_code ec;
  const fs::file_status target = fs::status(path, ec);
  OCTET_CHECK(ec.value() != ELOOP, option + " " + path + ": too many levels of symbolic links (a loop)");
  OCTET_CHECK(!fs::is_symlink(fs::symlink_status(path, ec)) || fs::exists(target),
              option + " " + path + " is a symbolic link to nothing");
  if (fs::exists(target)) {
    OCTET_CHECK(fs::is_directory(target), option + " " + path + " is a file, not a directory");
    return;
  }
  for (fs::path p = fs::path(path).parent_path(); !p.empty();
       p = p.parent_path()) {  // the nearest that exists
    const fs::file_status s = fs::status(p, ec);
    OCTET_CHECK(fs::exists(s) || !fs::is_symlink(fs::symlink_status(p, ec)),
                option + " " + path + ": " + p.string() + " is a symbolic link to nothing");
    if (fs::exists(s)) {
      OCTET_CHECK(fs::is_directory(s),
                  option + " " + path + ": " + p.string() + " is a file, not a directory");
      return;
    }
    if (p == p.parent_path()) return;
  }
}

void require_empty_or_new_dir(const std::string& path, const std::string& option) {
  require_directory_path(path, option);
  std::error_code ec;
  OCTET_CHECK(!fs::exists(path, ec) || (fs::is_directory(path, ec) && fs::is_empty(path, ec)),
              option + " " + path + " exists and is not an empty directory; not overwritten");
}

void remove_interrupted_writes(const std::string& dir, const std::vector<std::string>& names) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;
  std::vector<fs::path> leftovers;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    bool ours = false;
    for (const std::string& n : names) ours = ours || e.path().filename() == n + ".tmp";
    if (!ours || !e.is_regular_file(ec)) return;  // something else is there: not ours to clean
    leftovers.push_back(e.path());
  }
  for (const fs::path& p : leftovers)
    OCTET_CHECK(fs::remove(p, ec) && !ec, io_error("cannot remove", p.string(), ec.message()));
}

void create_output_dir(const std::string& path, const std::string& option) {
  std::error_code ec;
  fs::create_directories(path, ec);
  OCTET_CHECK(!ec, "cannot create " + option + " " + path + ": " + ec.message());
}

}  // namespace octet
