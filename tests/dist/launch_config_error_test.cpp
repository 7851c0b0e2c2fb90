// A config error under plain `mpirun -np N octet train|compare ...` (no --nproc launcher to check it
// first): every rank finds it, one line reports it, the job exits with status 2 and without an
// MPI_Abort — for an invalid value, a batch that does not split over the ranks and an evaluation
// larger than the validation split (the last two were found inside the ranks' collectives before),
// a resume over a corpus whose text changed, and a CPU run beyond the host's memory (exit 1).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "job.h"
#include "shell_run.h"
#include "train/train_test_util.h"

using namespace octet;

namespace {

using JobRun = test::ShellRun;

JobRun mpirun(int np, const std::string& args) {
  return test::run_shell("timeout 120 mpirun --oversubscribe -np " + std::to_string(np) + " " +
                         std::string(OCTET_BINARY_DIR) + "/octet " + args);
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = 0; (p = s.find(what, p)) != std::string::npos; p += what.size()) ++n;
  return n;
}

void expect_one_error_no_abort(const JobRun& r, const std::string& message) {
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_EQ(count(r.out, "octet: error: "), 1u) << r.out;
  EXPECT_EQ(count(r.out, "octet: failed"), 0u) << r.out;
  EXPECT_NE(r.out.find(message), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("MPI_ABORT"), std::string::npos) << r.out;
}

struct Fixture {
  test::TempDir dir{"launch-config-error"};
  std::string config;
  Fixture() {
    test::write_file(dir / "corpus.txt", test::synthetic_text(400));
    RunConfig c = test::tiny_run(dir / "corpus.txt", dir / "cache");  // batch_size 2
    c.precision.arm = Arm::FP32;
    config = dir / "tiny.toml";
    test::write_file(config, to_toml(c));
  }
};

bool skip() { return test::comm().size() > 1 || std::getenv("OCTET_TEST_FAILURE_CHILD"); }

TEST(LaunchConfigError, AnInvalidValueReadsOnce) {
  if (skip()) GTEST_SKIP() << "starts its own job from one process";
  Fixture f;
  const std::string out = f.dir / "bad";
  expect_one_error_no_abort(mpirun(2, "train --config " + f.config + " --set model.n_layer=0 --out " + out),
                            "model.n_layer must be >= 1");
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(LaunchConfigError, ABatchThatDoesNotSplitOverTheRanksReadsOnce) {
  if (skip()) GTEST_SKIP() << "starts its own job from one process";
  Fixture f;
  const std::string out = f.dir / "three";
  expect_one_error_no_abort(mpirun(3, "train --config " + f.config + " --out " + out),
                            "cannot be split evenly over 3 ranks");
  EXPECT_FALSE(std::filesystem::exists(out));
  expect_one_error_no_abort(
      mpirun(3, "compare --config " + f.config + " --arms fp32 --out " + (f.dir / "cmp")),
      "cannot be split evenly over 3 ranks");
}

TEST(LaunchConfigError, AnEvaluationLargerThanTheValidationSplitReadsOnce) {
  if (skip()) GTEST_SKIP() << "starts its own job from one process";
  Fixture f;
  const std::string out = f.dir / "eval";
  expect_one_error_no_abort(
      mpirun(2, "train --config " + f.config + " --set train.eval_batches=100000 --out " + out),
      "validation split has");
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(LaunchConfigError, AChangedCorpusOnResumeReadsOnce) {
  if (skip()) GTEST_SKIP() << "starts its own job from one process";
  Fixture f;
  const std::string out = f.dir / "run";
  ASSERT_EQ(mpirun(2, "train --config " + f.config + " --set train.steps=2 --out " + out).status, 0);
  test::write_file(f.dir / "corpus.txt", test::synthetic_text(401));  // one line more
  expect_one_error_no_abort(mpirun(2, "train --resume " + out + " --set train.steps=4"),
                            "gives other tokens than the run trained on");
}

TEST(LaunchConfigError, ACpuRunBeyondTheHostsMemoryFailsOnce) {
  if (skip()) GTEST_SKIP() << "starts its own job from one process";
  Fixture f;
  const std::string out = f.dir / "huge";
  const JobRun r =
      mpirun(2, "train --config " + f.config + " --set model.vocab_size=10000000000 --out " + out);
  EXPECT_EQ(r.status, 1) << r.out;  // memory, not bad input
  EXPECT_EQ(count(r.out, "octet: failed: out of memory (train on the cpu needs at least"), 1u) << r.out;
  EXPECT_EQ(r.out.find("MPI_ABORT"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
