// Failures end every rank (docs/distributed.md §Failures): a rank killed in the middle of a job
// leaves the other blocked in a collective, and the job must still end non-zero within a timeout
// (MPI: mpirun notices the dead process and ends the rest). The test starts its own 2-rank job of
// this binary, whose FailureChild test plays the ranks.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "job.h"

using namespace octet;
using test::comm;

namespace {

bool is_child() { return std::getenv("OCTET_TEST_FAILURE_CHILD") != nullptr; }

TEST(Failure, AKilledRankEndsTheJobNonZeroWithinTheTimeout) {
  if (comm().size() > 1 || is_child()) GTEST_SKIP() << "starts its own job from one process";
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  ASSERT_GT(n, 0);
  self[n] = 0;
  const int timeout_s = 60;
  const std::string cmd =
      "OCTET_TEST_FAILURE_CHILD=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
      "timeout " +
      std::to_string(timeout_s) + " mpirun --oversubscribe -np 2 " + std::string(self) +
      " --gtest_filter=FailureChild.* > /dev/null 2>&1";
  const auto t0 = std::chrono::steady_clock::now();
  const int status = std::system(cmd.c_str());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_NE(WEXITSTATUS(status), 124) << "the job hung until timeout killed it";
  EXPECT_LT(s, timeout_s);
}

TEST(FailureChild, RankOneDiesWhileRankZeroWaitsInACollective) {
  if (!is_child() || comm().size() != 2) GTEST_SKIP() << "a rank of Failure's job";
  comm().barrier();
  if (comm().rank() == 1) ::raise(SIGKILL);
  double x = 1.0;
  for (int i = 0; i < 1000000; ++i) comm().all_reduce(Tensor(&x, DType::F64, {1}), ReduceOp::Sum);
  ADD_FAILURE() << "rank 0 finished its collectives without rank 1";
}

}  // namespace
