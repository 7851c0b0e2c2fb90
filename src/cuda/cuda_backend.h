// src/cuda/cuda_backend.h — the CUDA backend (octet::Backend on device memory), internal declaration.
//
// The GPU twin of src/cpu/backend (the CPU reference): every operation of include/octet/backend.h,
// with the same semantics, on one stream of the current device. GEMMs through cuBLASLt (gemm.h),
// quantization by the tile kernels (quantize.h), the other operations by the kernels of ops.h,
// attention unfused (attention.h). make_cuda_backend() returns one.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "cuda/buffer.h"
#include "cuda/gemm.h"
#include "octet/backend.h"

namespace octet::cuda {

class CudaBackend final : public Backend {
 public:
  CudaBackend();
  ~CudaBackend() override;
  std::string name() const override { return "cuda"; }

  float* alloc(size_t n) override;
  int32_t* alloc_i32(size_t n) override;
  void release(void* p) override;
  void upload(float* dst, const float* host_src, size_t n) override;
  void upload_i32(int32_t* dst, const int32_t* host_src, size_t n) override;
  void download(float* host_dst, const float* src, size_t n) override;
  void fill(float* x, float value, size_t n) override;
  void copy(float* dst, const float* src, size_t n) override;
  void synchronize() override;

  void axpy(float a, const float* x, float* y, size_t n) override;
  void scale(float a, float* x, size_t n) override;

  void embedding_forward(const int32_t* ids, const float* table, float* out, int64_t n,
                         int64_t dim) override;
  void embedding_backward(const int32_t* ids, const float* dout, float* dtable, int64_t n,
                          int64_t dim) override;

  void rmsnorm_forward(const float* x, const float* weight, float* y, float* rstd, int64_t rows,
                       int64_t dim, float eps) override;
  void rmsnorm_backward(const float* x, const float* weight, const float* rstd, const float* dy,
                        float* dx, float* dweight, int64_t rows, int64_t dim) override;
  void layernorm_forward(const float* x, const float* weight, const float* bias, float* y,
                         float* mean, float* rstd, int64_t rows, int64_t dim, float eps) override;
  void layernorm_backward(const float* x, const float* weight, const float* mean,
                          const float* rstd, const float* dy, float* dx, float* dweight,
                          float* dbias, int64_t rows, int64_t dim) override;

  void rope(float* x, int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, float theta,
            bool inverse) override;

  void gelu_forward(const float* x, float* y, size_t n) override;
  void gelu_backward(const float* x, const float* dy, float* dx, size_t n) override;
  void swiglu_forward(const float* h, float* y, int64_t rows, int64_t f) override;
  void swiglu_backward(const float* h, const float* dy, float* dh, int64_t rows,
                       int64_t f) override;

  void split_qkv(const float* qkv, float* q, float* k, float* v, int64_t batch, int64_t seq,
                 int64_t heads, int64_t kv_heads, int64_t head_dim) override;
  void merge_qkv(const float* q, const float* k, const float* v, float* qkv, int64_t batch,
                 int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim) override;
  void heads_to_tokens(const float* x, float* y, int64_t batch, int64_t heads, int64_t seq,
                       int64_t head_dim) override;
  void tokens_to_heads(const float* x, float* y, int64_t batch, int64_t heads, int64_t seq,
                       int64_t head_dim) override;

  std::unique_ptr<Linear> make_linear(const LinearSpec& spec) override;
  std::unique_ptr<Attention> make_attention(const AttentionShape& shape,
                                            const AttentionConfig& config) override;

  double cross_entropy(const float* logits, const int32_t* targets, float* dlogits, int64_t n,
                       int64_t vocab, float grad_scale) override;

  double sum_squares(const float* x, size_t n) override;
  Moments moments(const float* x, size_t n) override;

  void adamw(float* param, const float* grad, float* m, float* v, size_t n, float lr, float beta1,
             float beta2, float eps, float weight_decay, int64_t step) override;

  cudaStream_t stream() const { return stream_; }
  /// The shared cuBLASLt engine (plan cache and workspace) of this backend.
  GemmEngine& gemm() { return *gemm_; }

 private:
  double sum_parts(size_t n_parts, int per_part = 1, int which = 0);
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<GemmEngine> gemm_;
  DeviceBuffer<double> parts_, row_loss_;
  DeviceBuffer<int> flag_;
};

/// The FP8 / BF16 / FP32 linear layer of the CUDA backend (linear.cpp).
std::unique_ptr<Linear> make_cuda_linear(const LinearSpec& spec, GemmEngine& gemm);

}  // namespace octet::cuda
