// `octet train --nproc 2` end to end on the CPU (mpirun): the job trains like one process (the same
// config: train.batch_size is the global batch), only rank 0 logs and writes; a rank-local error
// ends the job non-zero; an invalid --nproc is refused before anything starts; the ranks end when the
// launcher is killed.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "job.h"
#include "shell_run.h"
#include "train/train_test_util.h"

using namespace octet;

namespace {

using CliRun = test::ShellRun;

CliRun run(const std::string& args) {
  return test::run_shell("timeout 300 " + std::string(OCTET_BINARY_DIR) + "/octet " + args);
}

struct Fixture {
  test::TempDir dir{"launch"};
  std::string config;
  Fixture() {
    test::write_file(dir / "corpus.txt", test::synthetic_text(400));
    RunConfig c = test::tiny_run(dir / "corpus.txt", dir / "cache");
    c.precision.arm = Arm::FP32;
    config = dir / "tiny.toml";
    test::write_file(config, to_toml(c));
  }
};

TEST(Launch, TwoRanksTrainLikeOneProcessAndRankZeroWrites) {
  if (test::comm().size() > 1 || std::getenv("OCTET_TEST_FAILURE_CHILD")) GTEST_SKIP() << "one process";
  Fixture f;
  const CliRun two = run("train --config " + f.config + " --out " + (f.dir / "two") + " --nproc 2");
  ASSERT_EQ(two.status, 0) << two.out;
  EXPECT_NE(two.out.find("| ranks | 2 |"), std::string::npos) << two.out;
  size_t done = 0;
  for (size_t p = 0; (p = two.out.find("done: final val loss", p)) != std::string::npos; ++p) ++done;
  EXPECT_EQ(done, 1u) << "one log: rank 0's";
  size_t corpus = 0;  // the corpus line: rank 0's only, not also the launcher's
  for (size_t p = 0; (p = two.out.find("corpus ", p)) != std::string::npos; ++p)
    corpus += p == 0 || two.out[p - 1] == '\n';
  EXPECT_EQ(corpus, 1u) << two.out;
  const CliRun one = run("train --config " + f.config + " --out " + (f.dir / "one"));
  ASSERT_EQ(one.status, 0) << one.out;
  // the same final validation loss to FP32 reduction-order rounding (printed with 4 decimals)
  auto final_loss = [](const std::string& s) {
    const size_t p = s.find("done: final val loss ");
    return std::stod(s.substr(p + 21, 8));
  };
  EXPECT_NEAR(final_loss(two.out), final_loss(one.out), 1.5e-4);
  EXPECT_TRUE(std::filesystem::exists(f.dir / "two/checkpoint.safetensors"));
}

TEST(Launch, ARankLocalErrorEndsTheJobNonZero) {
  if (test::comm().size() > 1 || std::getenv("OCTET_TEST_FAILURE_CHILD")) GTEST_SKIP() << "one process";
  Fixture f;  // 2 sequences per micro-batch cannot split over 3 ranks: every rank fails in train()
  const CliRun r = run("train --config " + f.config + " --out " + (f.dir / "three") + " --nproc 3");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("cannot be split evenly over 3 ranks"), std::string::npos) << r.out;
}

TEST(Launch, NonPositiveNprocIsRefused) {
  if (test::comm().size() > 1 || std::getenv("OCTET_TEST_FAILURE_CHILD")) GTEST_SKIP() << "one process";
  Fixture f;
  for (const char* cmd : {"train", "compare"}) {
    const CliRun r =
        run(std::string(cmd) + " --config " + f.config + " --out " + (f.dir / "x") + " --nproc 0");
    EXPECT_EQ(r.status, 2) << r.out;
    EXPECT_EQ(r.out, "octet: error: --nproc: must be a whole number >= 1, got '0'\n")
        << "one line naming the flag";
    EXPECT_FALSE(std::filesystem::exists(f.dir / "x"));
  }
}

TEST(Launch, RanksEndWhenTheLauncherIsKilled) {
  if (test::comm().size() > 1 || std::getenv("OCTET_TEST_FAILURE_CHILD")) GTEST_SKIP() << "one process";
  Fixture f;
  // The launcher is started by a subshell that then becomes `sleep`, which never reaps it: once
  // SIGKILLed (after rank 0 logs a step) it stays a zombie, the case a bare kill(pid, 0) check
  // takes for alive. The processes whose environment names it (mpirun and the two ranks) are
  // counted every 0.1 s for 30 s; any left are killed, then the sleep.
  const std::string log = f.dir / "log", pid = f.dir / "pid";
  const CliRun r = test::run_shell(
      "( " + std::string(OCTET_BINARY_DIR) + "/octet train --config " + f.config + " --out " +
      (f.dir / "run") + " --nproc 2 --set train.steps=1000000 --set train.log_every=1 > " + log +
      " 2>&1 & echo $! > " + pid + "; exec sleep 100 ) & S=$!; " +
      "for i in $(seq 1200); do grep -q '^step' " + log + " && break; sleep 0.1; done; L=$(cat " + pid +
      "); " + "ranks() { grep -lsz \"^OCTET_LAUNCHER_PID=$L:\" /proc/[0-9]*/environ | wc -l; }; " +
      "echo before $(ranks); kill -9 $L; " +
      "for i in $(seq 300); do [ $(ranks) = 0 ] && break; sleep 0.1; done; echo after $(ranks) " +
      "$(cut -d' ' -f3 /proc/$L/stat); " +  // the launcher's state: Z
      "for e in $(grep -lsz \"^OCTET_LAUNCHER_PID=$L:\" /proc/[0-9]*/environ); do " +  // none left behind
      "p=${e#/proc/}; kill -9 ${p%/environ}; done; kill -9 $S; true");
  ASSERT_EQ(r.status, 0) << r.out;
  int before = -1, after = -1;
  char state = '?';
  ASSERT_EQ(std::sscanf(r.out.c_str(), "before %d after %d %c", &before, &after, &state), 3) << r.out;
  EXPECT_GE(before, 2) << "the ranks had started: " << r.out;
  EXPECT_EQ(state, 'Z') << "the launcher was not left a zombie: " << r.out;
  EXPECT_EQ(after, 0) << "processes of the killed launcher still run 30 s later";
  std::ifstream in(log);
  const std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(out.find("the --nproc launcher (process"), std::string::npos)
      << "a rank says why it ends: " << out;
}

}  // namespace
