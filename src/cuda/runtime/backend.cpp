// src/cuda/runtime/backend.cpp — CudaBackend (cuda_backend.h): the device guard, device and stream
// selection (CudaOptions), stream-ordered memory, and make_cuda_backend(). The operations are in
// backend_ops.cpp. Nothing here waits for the GPU except download and synchronize (backend.h
// "Asynchrony").
#include <cstdio>
#include <string>
#include <vector>

#include "cuda/runtime/check.h"
#include "cuda/runtime/cuda_backend.h"
#include "cuda/attention/cudnn/cudnn_sdpa.h"
#include "cuda/ops/ops.h"
#include "octet/error.h"

namespace octet {
namespace cuda {

DeviceGuard::DeviceGuard(int device) {
  OCTET_CUDA_CHECK(cudaGetDevice(&prev_));
  if (prev_ != device) {
    OCTET_CUDA_CHECK(cudaSetDevice(device));
    changed_ = true;
  }
}
DeviceGuard::~DeviceGuard() {
  if (changed_) (void)cudaSetDevice(prev_);
}

int checked_cuda_device(int device) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  // cudaErrorInsufficientDriver is also what a machine without any NVIDIA driver reports.
  OCTET_CHECK(e == cudaSuccess && count > 0,
              std::string("cuda backend: no usable GPU (") +
                  (e == cudaSuccess ? "no device" : cudaGetErrorString(e)) +
                  (e == cudaErrorInsufficientDriver
                       ? "; also what a machine without an NVIDIA driver reports: check nvidia-smi"
                       : "") +
                  ")");
  OCTET_CHECK(device >= 0 && device < count,
              "cuda backend: device " + std::to_string(device) + " does not exist (" + std::to_string(count) +
                  " CUDA device" + (count == 1 ? "" : "s") + ": 0.." + std::to_string(count - 1) + ")");
  cudaDeviceProp prop{};
  OCTET_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  OCTET_CHECK(prop.major >= 9, "cuda backend: device " + std::to_string(device) + " (" + prop.name + ", sm_" +
                                   std::to_string(prop.major) + std::to_string(prop.minor) +
                                   ") is older than sm_90");
  OCTET_CHECK(kernel_image_runs_on(device),
              "cuda backend: device " + std::to_string(device) + " (" + prop.name + ", sm_" +
                  std::to_string(prop.major) + std::to_string(prop.minor) +
                  ") has no image of octet's kernels: this build is for CMAKE_CUDA_ARCHITECTURES " +
                  OCTET_CUDA_ARCHITECTURES + " (sm_90a kernels run on sm_90 only; rebuild for the GPU)");
  return device;
}

CudaBackend::CudaBackend(const CudaOptions& options) : device_(checked_cuda_device(options.device)) {
  DeviceGuard g(device_);
  if (options.stream) {
    stream_ = static_cast<cudaStream_t>(options.stream);
  } else {
    OCTET_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    owns_stream_ = true;
  }
  // Keep freed stream-ordered memory in the device's pool (no return to the OS at every sync).
  cudaMemPool_t pool;
  OCTET_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device_));
  uint64_t keep = UINT64_MAX;
  OCTET_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  gemm_ = std::make_unique<GemmEngine>(stream_);
}

CudaBackend::~CudaBackend() {
  int prev = -1;  // no exceptions here: errors (e.g. at process exit) are ignored
  (void)cudaGetDevice(&prev);
  if (prev != device_) (void)cudaSetDevice(device_);
  gemm_.reset();
  sdpa_.reset();
  parts_.reset();
  row_loss_.reset();
  (void)cudaStreamSynchronize(stream_);  // stream-ordered frees complete before the stream goes
  if (owns_stream_) (void)cudaStreamDestroy(stream_);
  if (prev != device_ && prev >= 0) (void)cudaSetDevice(prev);
}

// ---- memory ----
Buffer CudaBackend::alloc(DType dtype, Shape shape) {
  DeviceGuard g(device_);
  Buffer b = alloc_uninitialized(dtype, shape);
  const Tensor& t = b.tensor();
  OCTET_CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.bytes() ? t.bytes() : 1, stream_));
  return b;
}
Buffer CudaBackend::alloc_uninitialized(DType dtype, Shape shape) {
  DeviceGuard g(device_);
  Tensor t(nullptr, dtype, shape);
  const size_t bytes = t.bytes() ? t.bytes() : 1;
  const cudaError_t e = cudaMallocAsync(&t.data, bytes, stream_);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    throw OutOfMemory("cuda alloc: out of device memory for " + t.str() + " (" + std::to_string(bytes) +
                      " bytes) on device " + std::to_string(device_));
  }
  OCTET_CUDA_CHECK(e);
  return Buffer(this, t);
}
void CudaBackend::release(void* p) {
  if (!p) return;
  int prev = -1;
  (void)cudaGetDevice(&prev);  // no exceptions: called from Buffer's destructor
  if (prev != device_) (void)cudaSetDevice(device_);
  const cudaError_t e = cudaFreeAsync(p, stream_);
  if (e != cudaSuccess) std::fprintf(stderr, "octet cuda: cudaFreeAsync failed: %s\n", cudaGetErrorString(e));
  if (prev != device_ && prev >= 0) (void)cudaSetDevice(prev);
}
void CudaBackend::upload(const Tensor& dst, const void* src) {
  DeviceGuard g(device_);
  OCTET_CHECK(!dst.empty() && src, "upload: missing destination or source");
  OCTET_CUDA_CHECK(cudaMemcpyAsync(dst.data, src, dst.bytes(), cudaMemcpyHostToDevice, stream_));
}
void CudaBackend::download(void* dst, const Tensor& src) {
  DeviceGuard g(device_);
  OCTET_CHECK(!src.empty() && dst, "download: missing destination or source");
  OCTET_CUDA_CHECK(cudaMemcpyAsync(dst, src.data, src.bytes(), cudaMemcpyDeviceToHost, stream_));
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
}
void CudaBackend::fill(const Tensor& x, double value) {
  DeviceGuard g(device_);
  OCTET_CHECK(!x.empty(), "fill: missing tensor");
  fill_launch(x, value, stream_);
}
void CudaBackend::copy(const Tensor& dst, const Tensor& src) {
  DeviceGuard g(device_);
  check_numel(dst, src.numel(), "copy: dst");
  OCTET_CHECK(dst.dtype == src.dtype || (is_activation_dtype(dst.dtype) && is_activation_dtype(src.dtype)),
              "copy: cannot convert " + src.str() + " to " + dst.str());
  convert_launch(dst, src, stream_);
}
void CudaBackend::copy_spans(const Tensor& dst, const Tensor& src, const std::vector<CopySpan>& spans) {
  DeviceGuard g(device_);
  check_copy_spans(dst, src, spans);
  const int64_t e = int64_t(dtype_size(dst.dtype));
  std::vector<int64_t> src_at, dst_at, bytes;
  for (const CopySpan& c : spans)
    if (c.count > 0)
      src_at.push_back(c.src_at * e), dst_at.push_back(c.dst_at * e), bytes.push_back(c.count * e);
  copy_spans_launch(dst.data, src.data, src_at.data(), dst_at.data(), bytes.data(), int64_t(bytes.size()),
                    stream_);
}
void CudaBackend::synchronize() {
  DeviceGuard g(device_);
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

// ---- GEMMs ----
std::unique_ptr<Linear> CudaBackend::make_linear(const LinearSpec& spec) {
  DeviceGuard g(device_);
  return make_cuda_linear(spec, *this);
}

}  // namespace cuda

std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& options) {
  return std::make_unique<cuda::CudaBackend>(options);
}

}  // namespace octet
