// backend_test.cpp — where the CUDA backend runs (backend.h CudaOptions): on the caller's stream
// (a device-side gate on that stream, stream_gate.h, holds the backend's work back until it opens,
// so work on any other stream would show, and a call that waits for its own stream would hit the
// gate's time limit), with the caller's device restored, and a clear octet::Error for a device
// that does not exist (make_cuda_backend and make_backend("cuda:N")).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "octet/backend.h"
#include "octet/error.h"
#include "stream_gate.h"

namespace octet {
namespace {

// Reads n floats of device memory into `pinned` (n floats of page-locked host memory) through a
// stream of its own (not ordered after the caller's): a truly asynchronous copy, which a pageable
// destination would not be.
std::vector<float> peek(const float* p, size_t n, float* pinned, cudaStream_t side) {
  OCTET_CUDA_CHECK(cudaMemcpyAsync(pinned, p, n * sizeof(float), cudaMemcpyDeviceToHost, side));
  OCTET_CUDA_CHECK(cudaStreamSynchronize(side));
  return std::vector<float>(pinned, pinned + n);
}

TEST(CudaBackendOptions, EnqueuesOnTheCallersStream) {
  OCTET_REQUIRE_GPU();
  cudaStream_t user = nullptr, side = nullptr;
  OCTET_CUDA_CHECK(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking));
  OCTET_CUDA_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  int before = -1, after = -1;
  OCTET_CUDA_CHECK(cudaGetDevice(&before));
  {
    auto gpu = make_cuda_backend(CudaOptions{0, user});
    const int64_t n = 4096;
    const Buffer x = gpu->alloc(DType::F32, {n});
    const std::vector<float> ones(size_t(n), 1.0f);
    gpu->upload(x, ones.data());
    gpu->synchronize();
    float* pinned = nullptr;  // allocated before the gate closes (no allocation inside it)
    OCTET_CUDA_CHECK(cudaMallocHost(&pinned, size_t(n) * sizeof(float)));
    {
      test::StreamGate gate(user);  // the backend's scale must queue behind it
      gpu->scale(2.0f, x);
      EXPECT_EQ(cudaStreamQuery(user), cudaErrorNotReady);
      EXPECT_EQ(peek(x.tensor().f32(), size_t(n), pinned, side), ones)
          << "the op ran before the gate opened";
      gate.open();
      OCTET_CUDA_CHECK(cudaStreamSynchronize(user));
      EXPECT_FALSE(gate.timed_out())
          << "the backend's call waited for the caller's stream (a hidden synchronization)";
    }
    EXPECT_EQ(peek(x.tensor().f32(), size_t(n), pinned, side), std::vector<float>(size_t(n), 2.0f))
        << "the op had not run when the caller's stream was synchronized";
    OCTET_CUDA_CHECK(cudaFreeHost(pinned));
    OCTET_CUDA_CHECK(cudaGetDevice(&after));
    EXPECT_EQ(after, before) << "the caller's device is restored";
  }
  OCTET_CUDA_CHECK(cudaStreamDestroy(side));
  OCTET_CUDA_CHECK(cudaStreamDestroy(user));
}

TEST(CudaBackendOptions, MissingDeviceIsOneClearError) {
  OCTET_REQUIRE_GPU();
  int count = 0;
  OCTET_CUDA_CHECK(cudaGetDeviceCount(&count));
  try {
    make_cuda_backend(CudaOptions{count, nullptr});
    FAIL() << "device " << count << " of " << count << " must not exist";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("device " + std::to_string(count) + " does not exist"), std::string::npos) << msg;
  }
  EXPECT_THROW(make_cuda_backend(CudaOptions{-1, nullptr}), Error);
  EXPECT_THROW(make_backend("cuda:" + std::to_string(count)), Error);
  EXPECT_THROW(make_backend("cuda:x"), Error);
  EXPECT_EQ(make_backend("cuda:0")->name(), "cuda");
  EXPECT_EQ(make_backend("cuda")->preferred_activation_dtype(), DType::BF16);
}

}  // namespace
}  // namespace octet
