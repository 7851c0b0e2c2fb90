// backend_test.cpp — where the CUDA backend runs (backend.h CudaOptions): on the caller's stream,
// with the caller's device restored, and a clear octet::Error for a device that does not exist
// (make_cuda_backend and make_backend("cuda:N")). The stream is checked with CUDA stream capture:
// while the caller's stream is being captured into a graph, work enqueued on it is recorded, not
// run; work on any other stream would run at once (and change the tensor), and a synchronization of
// the captured stream would invalidate the capture (an error). So an op that leaves the tensor
// unchanged during capture and changes it when the graph is launched ran on the caller's stream
// without synchronizing — the property CUDA Graph capture of a whole training step needs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "octet/backend.h"
#include "octet/error.h"

namespace octet {
namespace {

TEST(CudaBackendOptions, EnqueuesOnTheCallersStream) {
  OCTET_REQUIRE_GPU();
  cudaStream_t user = nullptr;
  OCTET_CUDA_CHECK(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking));
  int before = -1, after = -1;
  OCTET_CUDA_CHECK(cudaGetDevice(&before));
  {
    auto gpu = make_cuda_backend(CudaOptions{0, user});
    const int64_t n = 4096;
    const Buffer x = gpu->alloc(DType::F32, {n});
    const Buffer y = gpu->alloc(DType::BF16, {n});
    const std::vector<float> ones(size_t(n), 1.0f);
    gpu->upload(x, ones.data());
    gpu->synchronize();

    cudaGraph_t graph = nullptr;
    OCTET_CUDA_CHECK(cudaStreamBeginCapture(user, cudaStreamCaptureModeThreadLocal));
    gpu->scale(2.0f, x);    // x = 2
    gpu->copy(y, x);        // y = bf16(2)
    gpu->axpy(1.0f, y, x);  // x = 4
    const cudaError_t end = cudaStreamEndCapture(user, &graph);
    ASSERT_EQ(end, cudaSuccess) << "the capture broke (a synchronization or a call on the captured "
                                   "stream that capture forbids): "
                                << cudaGetErrorString(end);
    size_t nodes = 0;
    OCTET_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
    EXPECT_GE(nodes, 3u) << "the ops were not enqueued on the caller's stream";
    EXPECT_EQ(gpu->download_f32(x), ones) << "an op ran outside the caller's stream during capture";

    cudaGraphExec_t exec = nullptr;
    OCTET_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    OCTET_CUDA_CHECK(cudaGraphLaunch(exec, user));
    OCTET_CUDA_CHECK(cudaStreamSynchronize(user));
    EXPECT_EQ(gpu->download_f32(x), std::vector<float>(size_t(n), 4.0f))
        << "the captured ops did not compute x = 2·1 + bf16(2)";
    OCTET_CUDA_CHECK(cudaGraphExecDestroy(exec));
    OCTET_CUDA_CHECK(cudaGraphDestroy(graph));
    OCTET_CUDA_CHECK(cudaGetDevice(&after));
    EXPECT_EQ(after, before) << "the caller's device is restored";
  }
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
