// The communicator's collectives against values computed here from each rank's known input: run
// as one process (the single-rank communicator) and by ctest under `mpirun -np 2` (MPI). Also the
// argument checks, NaN propagation of a sum, the asynchronous reduce-scatter of the gradient buckets,
// the in-place all-gather and the launch environment.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "job.h"
#include "octet/error.h"

using namespace octet;
using test::comm;
using test::cpu;

namespace {

TEST(Comm, AllReduceSumAndMax) {
  const int R = comm().size(), me = comm().rank();
  std::vector<float> f(5);
  std::vector<double> d(3);
  std::vector<int32_t> i(4);
  for (int k = 0; k < 5; ++k) f[size_t(k)] = float((me + 1) * k) + 0.5f;
  for (int k = 0; k < 3; ++k) d[size_t(k)] = (k == 1 ? -1.0 : 1.0) * (me + 1) * 0.25;
  for (int k = 0; k < 4; ++k) i[size_t(k)] = me * 10 - k;
  comm().all_reduce(Tensor(f.data(), DType::F32, {5}), ReduceOp::Sum);
  comm().all_reduce(Tensor(d.data(), DType::F64, {3}), ReduceOp::Max);
  comm().all_reduce(Tensor(i.data(), DType::I32, {4}), ReduceOp::Max);
  const double ranks_sum = R * (R + 1) / 2.0;  // Σ (r + 1)
  for (int k = 0; k < 5; ++k) EXPECT_EQ(f[size_t(k)], float(ranks_sum * k + 0.5 * R)) << k;
  EXPECT_EQ(d[0], R * 0.25);
  EXPECT_EQ(d[1], -0.25);  // the max of −(r + 1)/4 is rank 0's
  for (int k = 0; k < 4; ++k) EXPECT_EQ(i[size_t(k)], (R - 1) * 10 - k);
}

TEST(Comm, SumPropagatesNaNFromOneRank) {
  float x[2] = {1.0f, 2.0f};
  if (comm().rank() == comm().size() - 1) x[1] = NAN;
  comm().all_reduce(Tensor(x, DType::F32, {2}), ReduceOp::Sum);
  EXPECT_EQ(x[0], float(comm().size()));
  EXPECT_TRUE(std::isnan(x[1]));
}

TEST(Comm, ReduceScatterAndAllGather) {
  const int R = comm().size(), me = comm().rank();
  const int n = 3;
  std::vector<float> in(size_t(R * n)), out(n, -1.0f);
  for (int j = 0; j < R * n; ++j) in[size_t(j)] = float(1000 * me + j);
  comm().reduce_scatter(Tensor(in.data(), DType::F32, {R * n}), Tensor(out.data(), DType::F32, {n}));
  for (int k = 0; k < n; ++k)  // Σ_r (1000 r + me·n + k)
    EXPECT_EQ(out[size_t(k)], float(1000.0 * R * (R - 1) / 2 + R * (me * n + k))) << k;
  std::vector<float> mine(n), all(size_t(R * n), -1.0f);
  for (int k = 0; k < n; ++k) mine[size_t(k)] = float(100 * me + k);
  comm().all_gather(Tensor(mine.data(), DType::F32, {n}), Tensor(all.data(), DType::F32, {R * n}));
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < n; ++k) EXPECT_EQ(all[size_t(r * n + k)], float(100 * r + k));
}

TEST(Comm, BroadcastFromTheLastRankAndBarrier) {
  const int root = comm().size() - 1;
  double x[2] = {double(comm().rank()), 7.0 * comm().rank()};
  comm().broadcast(Tensor(x, DType::F64, {2}), root);
  EXPECT_EQ(x[0], double(root));
  EXPECT_EQ(x[1], 7.0 * root);
  comm().barrier();
}

TEST(Comm, BadArgumentsNameTheCall) {
  std::vector<float> a(4), b(3);
  std::vector<int32_t> i(2);
  const Tensor ta(a.data(), DType::F32, {4}), tb(b.data(), DType::F32, {3});
  EXPECT_THROW(comm().all_reduce(Tensor(i.data(), DType::I32, {2}), ReduceOp::Sum), Error);
  try {
    comm().reduce_scatter(ta, tb);  // 4 != size × 3
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("reduce_scatter"), std::string::npos) << e.what();
  }
  EXPECT_THROW(comm().all_gather(ta, tb), Error);
  EXPECT_THROW(comm().broadcast(ta, comm().size()), Error);
}

TEST(Comm, AsyncReduceScattersCompleteAtTheWaitInIssueOrder) {
  // three buckets in flight at once (as the backward starts them), then one wait; a synchronous
  // collective issued meanwhile (the amax all-reduce) must come after them on every rank
  const int R = comm().size(), me = comm().rank();
  const int n = 4, buckets = 3;
  std::vector<float> in(size_t(buckets * R * n)), out(size_t(buckets * n), -1.0f);
  for (size_t j = 0; j < in.size(); ++j) in[j] = float(10000 * me + int(j));
  for (int b = buckets - 1; b >= 0; --b) {  // top down
    comm().reduce_scatter_async(Tensor(in.data() + b * R * n, DType::F32, {R * n}),
                                Tensor(out.data() + b * n, DType::F32, {n}));
    comm().progress();
  }
  int32_t flag = me;
  comm().all_reduce(Tensor(&flag, DType::I32, {1}), ReduceOp::Max);
  comm().wait_async();
  EXPECT_EQ(flag, R - 1);
  for (int b = 0; b < buckets; ++b)
    for (int k = 0; k < n; ++k)  // Σ_r (10000 r + b·R·n + me·n + k)
      EXPECT_EQ(out[size_t(b * n + k)], float(10000.0 * R * (R - 1) / 2 + R * (b * R * n + me * n + k)))
          << "bucket " << b << " element " << k;
}

TEST(Comm, AllGatherInPlace) {
  const int R = comm().size(), me = comm().rank();
  const int n = 5;
  std::vector<float> all(size_t(R * n), -1.0f);
  for (int k = 0; k < n; ++k) all[size_t(me * n + k)] = float(100 * me + k);  // only this rank's part
  comm().all_gather(Tensor(all.data() + me * n, DType::F32, {n}), Tensor(all.data(), DType::F32, {R * n}));
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < n; ++k) EXPECT_EQ(all[size_t(r * n + k)], float(100 * r + k)) << r << " " << k;
}

TEST(Env, TorchrunVariablesAndTheirErrors) {
  if (comm().size() > 1) GTEST_SKIP() << "changes the environment; one process only";
  setenv("WORLD_SIZE", "4", 1);
  setenv("RANK", "3", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("MASTER_PORT", "29500", 1);
  DistEnv e = dist_env_from_environment();
  EXPECT_EQ(e.world, 4);
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.master_port, 29500);
  setenv("RANK", "4", 1);
  EXPECT_THROW(dist_env_from_environment(), Error);
  setenv("RANK", "x1", 1);
  EXPECT_THROW(dist_env_from_environment(), Error);
  setenv("RANK", "0", 1);
  setenv("MASTER_PORT", "70000", 1);
  EXPECT_THROW(dist_env_from_environment(), Error);
  for (const char* v : {"WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_PORT"}) unsetenv(v);
  EXPECT_EQ(dist_env_from_environment().world, 1);
}

}  // namespace
