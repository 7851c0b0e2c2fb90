// Embedding of the CPU backend: the forward gathers table rows, the backward scatter-adds (a
// repeated id receives every row) and matches finite differences of the forward; negative ids
// are rejected.
#include <gtest/gtest.h>

#include <vector>

#include "backend_test_util.h"
#include "octet/backend.h"
#include "octet/error.h"

using namespace octet;
using octet::test::expect_grad_near;
using octet::test::numeric_grad;
using octet::test::project;
using octet::test::randn;
using octet::test::view;

namespace {

constexpr int64_t kVocab = 7, kDim = 5;

TEST(Embedding, ForwardGathersRows) {
  auto be = make_cpu_backend();
  auto table = randn(kVocab * kDim, 61);
  std::vector<int32_t> ids = {3, 0, 6, 3};
  std::vector<float> out(ids.size() * kDim);
  be->embedding_forward(test::ids(ids), view(table, {kVocab, kDim}), view(out, {4, kDim}));
  for (size_t i = 0; i < ids.size(); ++i)
    for (int64_t d = 0; d < kDim; ++d) EXPECT_EQ(out[i * kDim + d], table[ids[i] * kDim + d]);
}

TEST(Embedding, BackwardMatchesFiniteDifferencesWithRepeatedIds) {
  auto be = make_cpu_backend();
  auto table = randn(kVocab * kDim, 62);
  std::vector<int32_t> ids = {3, 0, 6, 3, 3, 1};
  const int64_t n = int64_t(ids.size());
  auto r = randn(n * kDim, 63);
  std::vector<float> dtable(table.size(), 0.0f);
  be->embedding_backward(test::ids(ids), view(r, {n, kDim}), view(dtable, {kVocab, kDim}));
  auto loss = [&](const std::vector<float>& t) {
    std::vector<float> out(n * kDim);
    be->embedding_forward(test::ids(ids), view(t, {kVocab, kDim}), view(out, {n, kDim}));
    return project(out, r);
  };
  expect_grad_near(dtable, numeric_grad(loss, table, 0.5), 1e-5, 1e-6, "embedding dtable");
  for (int64_t d = 0; d < kDim; ++d) EXPECT_EQ(dtable[2 * kDim + d], 0.0f);  // unused id
}

TEST(Embedding, BackwardAccumulates) {
  auto be = make_cpu_backend();
  std::vector<int32_t> ids = {1};
  std::vector<float> dout(kDim, 2.0f), dtable(kVocab * kDim, 1.0f);
  be->embedding_backward(test::ids(ids), view(dout, {1, kDim}), view(dtable, {kVocab, kDim}));
  EXPECT_EQ(dtable[1 * kDim], 3.0f);
  EXPECT_EQ(dtable[0], 1.0f);
}

TEST(Embedding, RejectsIdsOutsideTheVocabulary) {
  auto be = make_cpu_backend();
  auto table = randn(kVocab * kDim, 64);
  std::vector<int32_t> ids = {2, -1};
  std::vector<float> out(2 * kDim);
  EXPECT_THROW(be->embedding_forward(test::ids(ids), view(table, {kVocab, kDim}), view(out, {2, kDim})),
               Error);
  ids = {2, int32_t(kVocab)};  // one past the vocabulary
  EXPECT_THROW(be->embedding_forward(test::ids(ids), view(table, {kVocab, kDim}), view(out, {2, kDim})),
               Error);
}

}  // namespace
