// Memory, elementwise operations and the backend factory: alloc is zero-initialized, upload and
// download round-trip, fill/copy/axpy/scale follow their BLAS-1 definitions, make_backend names
// unknown devices, and without CUDA the "cuda" device fails with the documented message.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend_test_util.h"
#include "octet/backend.h"
#include "octet/error.h"

using namespace octet;
using octet::test::randn;

namespace {

TEST(Memory, AllocIsZeroAndRoundTrips) {
  auto be = make_cpu_backend();
  const size_t n = 1000;
  float* d = be->alloc(n);
  int32_t* di = be->alloc_i32(n);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(d[i], 0.0f);
    ASSERT_EQ(di[i], 0);
  }
  auto x = randn(n, 71);
  std::vector<int32_t> xi(n);
  for (size_t i = 0; i < n; ++i) xi[i] = int32_t(i * 7919 % 1000) - 500;
  be->upload(d, x.data(), n);
  be->upload_i32(di, xi.data(), n);
  std::vector<float> back(n);
  be->download(back.data(), d, n);
  be->synchronize();
  EXPECT_EQ(back, x);
  EXPECT_EQ(std::vector<int32_t>(di, di + n), xi);
  be->release(d);
  be->release(di);
  be->release(be->alloc(0));
}

TEST(Memory, FillCopyAxpyScale) {
  auto be = make_cpu_backend();
  auto x = randn(33, 72), y = randn(33, 73);
  std::vector<float> z(33);
  be->fill(z.data(), 2.5f, z.size());
  for (float v : z) EXPECT_EQ(v, 2.5f);
  be->copy(z.data(), x.data(), z.size());
  EXPECT_EQ(z, x);
  std::vector<float> y0 = y;
  be->axpy(-0.5f, x.data(), y.data(), y.size());
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i], y0[i] + -0.5f * x[i]);
  be->scale(4.0f, x.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(x[i], 4.0f * z[i]);
}

TEST(Factory, CpuByName) {
  EXPECT_EQ(make_backend("cpu")->name(), "cpu");
  EXPECT_EQ(make_cpu_backend()->name(), "cpu");
}

TEST(Factory, UnknownDeviceIsNamed) {
  try {
    make_backend("tpu");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'tpu'"), std::string::npos) << e.what();
  }
}

#ifndef OCTET_WITH_CUDA
TEST(Factory, CudaWithoutCudaBuildSaysHowToEnableIt) {
  try {
    make_backend("cuda");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("octet was built without CUDA (configure with "
                                          "-DOCTET_CUDA=ON)"),
              std::string::npos)
        << e.what();
  }
}
#endif

}  // namespace
