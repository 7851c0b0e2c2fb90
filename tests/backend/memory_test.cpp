// Memory, elementwise operations and the backend factory: alloc is zero-initialized, upload and
// download round-trip, copy_spans copies each run and checks every one before copying any,
// fill/copy/axpy/scale follow their BLAS-1 definitions, make_backend names unknown devices, and
// without CUDA the "cuda" device fails with the documented message.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "octet/backend.h"
#include "octet/fp8.h"
#include "octet/error.h"

using namespace octet;
using octet::test::randn;
using octet::test::view;

namespace {

TEST(Memory, AllocIsZeroAlignedAndRoundTrips) {
  auto be = make_cpu_backend();
  const int64_t n = 1000;
  Buffer d = be->alloc(DType::F32, {n});
  Buffer di = be->alloc(DType::I32, {10, 100});
  EXPECT_EQ(d.tensor().str(), "f32[1000]");
  EXPECT_EQ(di.tensor().shape, Shape({10, 100}));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(d.tensor().data) % 64, 0u);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(d.tensor().f32()[i], 0.0f);
    ASSERT_EQ(di.tensor().i32()[i], 0);
  }
  auto x = randn(size_t(n), 71);
  std::vector<int32_t> xi(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) xi[size_t(i)] = int32_t(i * 7919 % 1000) - 500;
  be->upload(d, x.data());
  be->upload(di, xi.data());
  std::vector<float> back(static_cast<size_t>(n));
  be->download(back.data(), d);
  be->synchronize();
  EXPECT_EQ(back, x);
  EXPECT_EQ(std::vector<int32_t>(di.tensor().i32(), di.tensor().i32() + n), xi);
  Buffer empty = be->alloc(DType::BF16, {0});
  EXPECT_FALSE(empty.empty());  // a unique pointer even for zero elements
}

TEST(Memory, CopySpansCopiesEachRunAndChecksEveryOne) {
  auto be = make_cpu_backend();
  std::vector<float> src = randn(20, 74), dst(12, -1.0f);
  be->copy_spans(view(dst), view(src), {{2, 0, 3}, {19, 11, 1}, {0, 5, 0}});
  const std::vector<float> want = {src[2], src[3], src[4], -1, -1, -1, -1, -1, -1, -1, -1, src[19]};
  EXPECT_EQ(dst, want);
  const auto fails = [&](const std::vector<CopySpan>& spans, const std::string& says) {
    try {
      be->copy_spans(view(dst), view(src), spans);
      ADD_FAILURE() << "no error for " << says;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  fails({{0, 0, 1}, {18, 0, 3}}, "span 1 (src_at 18, dst_at 0, count 3) runs past src's 20 elements");
  fails({{0, 10, 3}}, "runs past dst's 12 elements");
  fails({{-1, 0, 1}}, "negative");
  EXPECT_EQ(dst, want) << "a refused call copies nothing";
  const Buffer f64 = be->alloc(DType::F64, {12});
  EXPECT_THROW(be->copy_spans(f64, view(src), {{0, 0, 1}}), Error) << "dtype mismatch";
}

TEST(Memory, FillCopyAxpyScale) {
  auto be = make_cpu_backend();
  auto x = randn(33, 72), y = randn(33, 73);
  std::vector<float> z(33);
  be->fill(view(z), 2.5);
  for (float v : z) EXPECT_EQ(v, 2.5f);
  be->copy(view(z), view(x));
  EXPECT_EQ(z, x);
  std::vector<float> y0 = y;
  be->axpy(-0.5f, view(x), view(y));
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i], y0[i] + -0.5f * x[i]);
  be->scale(4.0f, view(x));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(x[i], 4.0f * z[i]);
  test::Acc acc;
  be->fill(acc.t(), 0.25);
  EXPECT_EQ(acc.v[0], 0.25);
  EXPECT_EQ(be->read_f64(acc.t()), 0.25);
}

TEST(Memory, CopyConvertsF32ToBf16AndBack) {
  // F32 -> BF16 rounds to nearest even (fp8.h bf16_from_float); BF16 -> F32 is exact.
  auto be = make_cpu_backend();
  const std::vector<float> x = {1.0f, 1.0f + 0x1p-8f, 1.0f + 0x1p-7f + 0x1p-8f, -3.14159f, 1e-30f};
  Buffer b = be->alloc(DType::BF16, {int64_t(x.size())});
  be->copy(b, view(x));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(b.tensor().bf16()[i], bf16_from_float(x[i])) << i;
  EXPECT_EQ(b.tensor().bf16()[1], bf16_from_float(1.0f));            // a tie rounds to even (down)
  EXPECT_EQ(b.tensor().bf16()[2], bf16_from_float(1.0f + 0x1p-6f));  // a tie rounds to even (up)
  std::vector<float> back(x.size());
  be->copy(view(back), b);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(back[i], bf16_round(x[i])) << i;
  EXPECT_EQ(be->download_f32(b), back);
  std::vector<float> wrong(x.size() + 1);
  EXPECT_THROW(be->copy(view(wrong), b), Error);
}

TEST(Factory, CpuByName) {
  EXPECT_EQ(make_backend("cpu")->name(), "cpu");
  EXPECT_EQ(make_cpu_backend()->name(), "cpu");
}

TEST(Factory, UnknownDeviceIsNamed) {
  EXPECT_THROW(make_backend("cuda:x"), Error);
  EXPECT_THROW(make_backend("cuda:-1"), Error);
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

namespace octet {
namespace {

// Shapes whose element or byte count overflows 64 bits are one clear error, never a small buffer.
TEST(Memory, OverflowingShapesAreRejected) {
  auto be = make_cpu_backend();
  EXPECT_THROW(be->alloc(DType::F32, {int64_t(1) << 62}), Error);
  EXPECT_THROW(be->alloc(DType::F32, {int64_t(1) << 32, int64_t(1) << 32}), Error);
  EXPECT_THROW(be->alloc(DType::F64, {INT64_MAX}), Error);
  EXPECT_THROW(be->alloc(DType::F32, {3037000500, 3037000500}), Error);
  Shape bad;
  bad.rank = 6;  // the public fields bypass the constructor's check
  EXPECT_THROW(bad.numel(), Error);
  Shape neg{4};
  neg.dims[0] = -4;
  EXPECT_THROW(be->alloc(DType::F32, neg), Error);
  EXPECT_EQ((Shape{int64_t(1) << 30, 1024}).numel(), int64_t(1) << 40);  // large but valid
}

}  // namespace
}  // namespace octet
