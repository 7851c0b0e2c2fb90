// tests/dist/job.h — the test binary's place in a job: one session per process (MPI under
// `mpirun -np 2`, the single-rank communicator otherwise), and a directory every rank of the job
// names alike (rank 0's pid, broadcast), removed by rank 0 at scope exit.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include "octet/dist.h"

namespace octet::test {

inline DistSession& job() {
  static DistSession s = open_dist_session(dist_env_from_environment(), "cpu");
  return s;
}
inline Communicator& comm() { return *job().comm; }
inline Backend& cpu() { return *job().backend; }

/// A directory with the same path on every rank.
struct SharedDir {
  std::filesystem::path path;
  explicit SharedDir(const std::string& tag) {
    static int counter = 0;
    int32_t id[2] = {int32_t(::getpid()), counter++};
    comm().broadcast(Tensor(id, DType::I32, {2}), 0);  // CPU tensors are host memory
    path = std::filesystem::temp_directory_path() /
           ("octet-dist-test-" + tag + "-" + std::to_string(id[0]) + "-" + std::to_string(id[1]));
    if (comm().rank() == 0) {
      std::filesystem::remove_all(path);
      std::filesystem::create_directories(path);
    }
    comm().barrier();
  }
  ~SharedDir() {
    comm().barrier();
    std::error_code ec;
    if (comm().rank() == 0) std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

}  // namespace octet::test
