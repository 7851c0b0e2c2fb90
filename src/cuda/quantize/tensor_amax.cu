// src/cuda/quantize/tensor_amax.cu — the amax of a whole tensor (quantize.h tensor_amax_launch): the
// pre-pass of the tensor-current recipe and of tensor-delayed's first quantization. One streaming
// pass: 16-byte loads in a grid-stride loop over a grid that fills every SM, a warp and block max
// of the |x| bit patterns (unsigned order = numeric order for |x|, NaN above inf), and one
// atomicMax per block (docs/cuda.md §"Memory-bound kernels").
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/runtime/check.h"
#include "cuda/quantize/quantize.h"

namespace octet::cuda {
namespace {

// The tensor amax (tensor-current, tensor-delayed's first quantization) in one streaming pass:
// 16-byte loads over a grid-stride loop, reduced per block, one atomicMax per block.
constexpr int kAmaxThreads = 256;

template <class T>
__global__ void __launch_bounds__(kAmaxThreads)
    tensor_amax_kernel(const T* x, int64_t n, bool vec, const int* skip_if, unsigned* amax_bits) {
  if (skip_if && *skip_if > 0) return;  // uniform over the grid
  constexpr int kVec = 16 / sizeof(T);
  const int64_t nv = vec ? n / kVec : 0;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  unsigned m = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < nv; i += stride) {
    const uint4 u = reinterpret_cast<const uint4*>(x)[i];
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 4; ++j)
      m = sizeof(T) == 4 ? max(m, w[j] & 0x7FFFFFFFu)
                         : max(m, max((w[j] << 16) & 0x7FFFFFFFu, w[j] & 0x7FFF0000u));
  }
  for (int64_t i = nv * kVec + blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += stride) {
    if constexpr (sizeof(T) == 4)
      m = max(m, __float_as_uint(x[i]) & 0x7FFFFFFFu);
    else
      m = max(m, (unsigned(x[i]) << 16) & 0x7FFFFFFFu);
  }
  __shared__ unsigned warp_max[kAmaxThreads / 32];
  m = __reduce_max_sync(0xFFFFFFFFu, m);
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x < 32) {
    m = threadIdx.x < kAmaxThreads / 32 ? warp_max[threadIdx.x] : 0u;
    m = __reduce_max_sync(0xFFFFFFFFu, m);
    if (threadIdx.x == 0 && m) atomicMax(amax_bits, m);
  }
}

// Blocks for a streaming kernel over `n` items: enough to fill every SM (2048 resident threads
// each), no more than the work. The SM count is the current device's at the first call.
unsigned streaming_blocks(int64_t n, int threads) {
  static const int sms = [] {
    int dev = 0, count = 0;
    OCTET_CUDA_CHECK(cudaGetDevice(&dev));
    OCTET_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev));
    return count;
  }();
  const int64_t need = ceil_div(n, threads);
  const int64_t full = int64_t(sms) * (2048 / threads);
  return unsigned(need < 1 ? 1 : (need < full ? need : full));
}

// counters->amax_bits = max(itself, amax of the source); 16-byte loads when the source is aligned
// for them (a view into the middle of a buffer may not be: then element by element).
}  // namespace

void tensor_amax_launch(const void* x, bool x_bf16, int64_t n, const int* skip_if, unsigned* amax_bits,
                        cudaStream_t stream) {
  OCTET_CHECK(n >= 1, "tensor_amax: empty tensor");
  const bool vec = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const int64_t items = vec ? n / (x_bf16 ? 8 : 4) : n;
  const unsigned blocks = streaming_blocks(items, kAmaxThreads);
  if (x_bf16)
    tensor_amax_kernel<uint16_t>
        <<<blocks, kAmaxThreads, 0, stream>>>(static_cast<const uint16_t*>(x), n, vec, skip_if, amax_bits);
  else
    tensor_amax_kernel<float>
        <<<blocks, kAmaxThreads, 0, stream>>>(static_cast<const float*>(x), n, vec, skip_if, amax_bits);
  OCTET_CUDA_LAUNCH_CHECK();
}

}  // namespace octet::cuda
