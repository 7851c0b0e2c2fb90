// src/cuda/runtime/cuda_backend.h — the CUDA backend (octet::Backend on device memory), internal declaration.
//
// The GPU twin of src/cpu/backend (the CPU reference): every operation of include/octet/backend.h,
// with the same semantics, on one device and one stream (CudaOptions: the caller's stream, or an
// owned non-blocking one). Every public entry point — the Backend operations, the methods of its
// Linear and Attention objects, Buffer release — makes the backend's device current for its
// duration (DeviceGuard, restoring the caller's device) and only enqueues work: memory is
// stream-ordered (cudaMallocAsync / cudaFreeAsync), results the host needs accumulate in F64
// device tensors, and only download, read_f64, moments, synchronize and the diagnostics and
// checkpoint getters wait. GEMMs through cuBLASLt (gemm.h), quantization by the tile kernels
// (quantize.h), the other operations by the kernels of ops.h, attention unfused (attention.cpp).
// (docs/cuda.md §"Memory, streams and synchronization")
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "cuda/runtime/buffer.h"
#include "cuda/gemm/gemm.h"
#include "octet/backend.h"

namespace octet::cuda {

class SdpaEngine;  // cudnn_sdpa.h: cuDNN's fused SDPA graphs (plan cache, handle, workspace)

/// Makes `device` current for the guard's lifetime and restores the previous device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
  bool changed_ = false;
};

/// Device memory in bytes (memory_stats.cpp). pool_*: the device's default stream-ordered memory
/// pool, which every allocation of the backend draws from (alloc, alloc_uninitialized, the scratch
/// DeviceBuffers of the GEMM engine, quantizers and attention): in use now, the most in use since
/// the last reset_memory_stats() (the pool's high-water mark, cudaMemPoolAttrUsedMemHigh), and held
/// by the pool (freed memory is kept: see the constructor). device_*: cudaMemGetInfo, total − free,
/// i.e. everything on the GPU (the pool, the CUDA context, library handles, other processes).
struct MemoryStats {
  uint64_t pool_used = 0, pool_used_peak = 0, pool_reserved = 0;
  uint64_t device_used = 0, device_total = 0;
};

/// `device` if it is a usable CUDA device; otherwise octet::Error naming what is missing (no GPU,
/// no driver, a device index beyond the count, a GPU this build has no kernels for). Every entry point that
/// touches the GPU checks it first (CudaBackend's constructor, the benchmarks).
int checked_cuda_device(int device);

/// Whether the library's kernels have an image for `device` (kernel_image.cu: a build for sm_90a
/// has none for an sm_100 or sm_89 GPU). No exceptions; false if the query fails.
bool kernel_image_runs_on(int device);

class CudaBackend final : public Backend {
 public:
  /// Throws octet::Error if the device does not exist or is older than sm_90.
  explicit CudaBackend(const CudaOptions& options);
  ~CudaBackend() override;
  std::string name() const override { return "cuda"; }
  DType preferred_activation_dtype() const override { return DType::BF16; }

  Buffer alloc(DType dtype, Shape shape) override;
  /// As alloc(), without the zero fill (stream-ordered cudaMallocAsync only): for memory a kernel
  /// overwrites entirely before anything reads it (the FP8 operands of quantizer.h DevQ).
  Buffer alloc_uninitialized(DType dtype, Shape shape);
  void release(void* p) override;
  void upload(const Tensor& dst, const void* host_src) override;
  void download(void* host_dst, const Tensor& src) override;
  void fill(const Tensor& x, double value) override;
  void copy(const Tensor& dst, const Tensor& src) override;
  void copy_spans(const Tensor& dst, const Tensor& src, const std::vector<CopySpan>& spans) override;
  void synchronize() override;

  void axpy(float a, const Tensor& x, const Tensor& y) override;
  void scale(float a, const Tensor& x) override;

  void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) override;
  void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable) override;

  void rmsnorm_forward(const Tensor& x, const Tensor& weight, const Tensor& y, const Tensor& rstd, float eps,
                       const Tensor& amax = {}) override;
  void rmsnorm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dy,
                        const Tensor& dx, const Tensor& dweight, bool accumulate) override;
  void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                         const Tensor& mean, const Tensor& rstd, float eps, const Tensor& amax = {}) override;
  void layernorm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                          const Tensor& dy, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                          bool accumulate) override;

  void rope(const Tensor& x, float theta, bool inverse, AttnLayout layout) override;

  void gelu_forward(const Tensor& x, const Tensor& y, const Tensor& amax = {}) override;
  void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx, const Tensor& amax = {}) override;
  void swiglu_forward(const Tensor& h, const Tensor& y) override;
  void swiglu_backward(const Tensor& h, const Tensor& dy, const Tensor& dh) override;

  void split_qkv(const Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v,
                 AttnLayout layout) override;
  void merge_qkv(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qkv,
                 AttnLayout layout) override;
  void heads_to_tokens(const Tensor& x, const Tensor& y) override;
  void tokens_to_heads(const Tensor& x, const Tensor& y) override;

  std::unique_ptr<Linear> make_linear(const LinearSpec& spec) override;
  std::unique_ptr<Attention> make_attention(const AttentionShape& shape,
                                            const AttentionConfig& config) override;

  void gated_delta_forward(const GatedDeltaArgs& in, const Tensor& o) override;
  void gated_delta_backward(const GatedDeltaArgs& in, const Tensor& d_o, const Tensor& dq, const Tensor& dk,
                            const Tensor& dv, const Tensor& dgates) override;

  void cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& dlogits, float grad_scale,
                     const Tensor& loss_sum) override;

  void sum_squares(const Tensor& x, const Tensor& out) override;
  Moments moments(const Tensor& x) override;

  void adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, float lr, float beta1,
             float beta2, float eps, float weight_decay, int64_t step) override;
  void adamw_prepare(const Tensor& norm_sq, const Tensor& loss_sum, const Tensor& bias_corr,
                     const Tensor& state, float grad_clip) override;
  void adamw_apply(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                   const Tensor& segments, const Tensor& state, float lr, float beta1, float beta2, float eps,
                   float weight_decay) override;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  /// The memory counters now (synchronizes the stream first, so frees already enqueued count).
  MemoryStats memory_stats();
  /// Synchronizes, returns the pool's unused memory to the device (cudaMemPoolTrimTo 0) and restarts
  /// the pool's high-water marks at the current use: what follows is measured alone. The pool is the
  /// device's, so another backend on the same device shares these counters.
  void reset_memory_stats();
  /// The shared cuBLASLt engine (plan cache and workspace) of this backend.
  GemmEngine& gemm() { return *gemm_; }
  /// The shared cuDNN SDPA engine (cudnn_sdpa.h) of this backend, created at first use; throws
  /// octet::Error if cuDNN cannot be initialized.
  SdpaEngine& sdpa();

 private:
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  bool owns_stream_ = false;
  std::unique_ptr<GemmEngine> gemm_;
  std::unique_ptr<SdpaEngine> sdpa_;
  DeviceBuffer<double> parts_, row_loss_;
};

/// The FP8 / BF16 / FP32 linear layer of the CUDA backend (linear.cpp).
std::unique_ptr<Linear> make_cuda_linear(const LinearSpec& spec, CudaBackend& backend);

}  // namespace octet::cuda
