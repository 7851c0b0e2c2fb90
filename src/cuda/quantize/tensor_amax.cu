// src/cuda/quantize/tensor_amax.cu — the amax of a whole tensor (quantize.h tensor_amax_launch): the
// pre-pass of the tensor-current recipe and of tensor-delayed's first quantization. One streaming
// pass: 16-byte loads in a grid-stride loop over a grid that fills every SM, a warp and block max
// of the |x| bit patterns (unsigned order = numeric order for |x|, NaN above inf), and one
// atomicMax per block (docs/cuda.md §"Memory-bound kernels").
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/runtime/check.h"
#include "cuda/quantize/quantize.h"

namespace octet::cuda {
namespace {

// The tensor amax (tensor-current, tensor-delayed's first quantization) in one streaming pass:
// 16-byte loads over a grid-stride loop (four in flight per thread), reduced per block, one
// atomicMax per block. blockIdx.y picks the tensor of the set (one launch for several tensors).
constexpr int kAmaxThreads = 256;

// |x| bits of the elements in one 16-byte word (4 F32 or 8 BF16), folded into m.
template <class T>
__device__ __forceinline__ unsigned fold16(unsigned m, uint4 u) {
  const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int j = 0; j < 4; ++j)
    m = sizeof(T) == 4 ? max(m, w[j] & 0x7FFFFFFFu)
                       : max(m, max((w[j] << 16) & 0x7FFFFFFFu, w[j] & 0x7FFF0000u));
  return m;
}

template <class T>
__global__ void __launch_bounds__(kAmaxThreads)
    tensor_amax_kernel(const __grid_constant__ AmaxSet set, const int* skip_if) {
  if (skip_if && *skip_if > 0) return;  // uniform over the grid
  const T* x = static_cast<const T*>(set.x[blockIdx.y]);
  const int64_t n = set.n[blockIdx.y];
  unsigned* const amax_bits = set.bits[blockIdx.y];
  constexpr int kVec = 16 / sizeof(T);
  const int64_t nv = reinterpret_cast<uintptr_t>(x) % 16 == 0 ? n / kVec : 0;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  unsigned m = 0;
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  for (; i + 3 * stride < nv; i += 4 * stride) {  // four independent loads before any use
    const uint4 u0 = xv[i], u1 = xv[i + stride], u2 = xv[i + 2 * stride], u3 = xv[i + 3 * stride];
    m = fold16<T>(fold16<T>(fold16<T>(fold16<T>(m, u0), u1), u2), u3);
  }
  for (; i < nv; i += stride) m = fold16<T>(m, xv[i]);
  for (int64_t j = nv * kVec + blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < n; j += stride) {
    if constexpr (sizeof(T) == 4)
      m = max(m, __float_as_uint(x[j]) & 0x7FFFFFFFu);
    else
      m = max(m, (unsigned(x[j]) << 16) & 0x7FFFFFFFu);
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

}  // namespace

void tensor_amax_launch(const void* x, bool x_bf16, int64_t n, const int* skip_if, unsigned* amax_bits,
                        cudaStream_t stream) {
  AmaxSet set;
  set.count = 1;
  set.x[0] = x;
  set.n[0] = n;
  set.bits[0] = amax_bits;
  tensor_amax_many_launch(set, x_bf16, skip_if, stream);
}

void tensor_amax_many_launch(const AmaxSet& set, bool x_bf16, const int* skip_if, cudaStream_t stream) {
  OCTET_CHECK(set.count >= 1 && set.count <= AmaxSet::kMax, "tensor_amax: a set of 1 to " +
                                                                std::to_string(AmaxSet::kMax) +
                                                                " tensors, got " + std::to_string(set.count));
  int64_t items = 1;  // the largest tensor's 16-byte words (or elements)
  for (int i = 0; i < set.count; ++i) {
    OCTET_CHECK(set.n[i] >= 1, "tensor_amax: empty tensor");
    OCTET_CHECK(set.x[i] && set.bits[i], "tensor_amax: a null pointer");
    const bool vec = reinterpret_cast<uintptr_t>(set.x[i]) % 16 == 0;
    items = std::max(items, vec ? set.n[i] / (x_bf16 ? 8 : 4) : set.n[i]);
  }
  // The SMs' worth of blocks shared among the tensors; four words per thread per iteration.
  const unsigned full = streaming_blocks(ceil_div(items, 4), kAmaxThreads);
  const dim3 grid(std::max(1u, full / unsigned(set.count)), unsigned(set.count));
  if (x_bf16)
    tensor_amax_kernel<uint16_t><<<grid, kAmaxThreads, 0, stream>>>(set, skip_if);
  else
    tensor_amax_kernel<float><<<grid, kAmaxThreads, 0, stream>>>(set, skip_if);
  OCTET_CUDA_LAUNCH_CHECK();
}

}  // namespace octet::cuda
