// src/cuda/ops/reduce_util.cuh — warp and block sum/max reductions shared by the CUDA kernels, and the
// block amax output of the kernels that produce a tensor an FP8 quantizer reads (quantize.h).
#pragma once

#include <cuda_runtime.h>

namespace octet::cuda {

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
  return v;
}

template <typename T>
__device__ __forceinline__ T warp_max(T v) {
  for (int off = 16; off > 0; off /= 2) v = max(v, __shfl_xor_sync(0xFFFFFFFFu, v, off));
  return v;
}

/// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
/// `scratch` holds 32 values of T in shared memory; the call synchronizes the block twice.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = lane < nw ? scratch[lane] : T(0);
  return warp_sum(r);
}

/// Max over the block; same contract as block_sum. `lowest` is the identity.
template <typename T>
__device__ __forceinline__ T block_max(T v, T* scratch, T lowest) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T r = lane < nw ? scratch[lane] : lowest;
  return warp_max(r);
}

/// *out = max(*out, the block's largest m) with one atomicMax per block (every thread of the block
/// must call it; out null: nothing). Amaxes as |x| float bits: unsigned order is numeric order and
/// NaN compares above inf (quantize.h).
__device__ __forceinline__ void block_amax_out(unsigned m, unsigned* scratch, unsigned* out) {
  if (!out) return;  // uniform
  m = block_max(m, scratch, 0u);
  if (threadIdx.x == 0 && m) atomicMax(out, m);
}

}  // namespace octet::cuda
