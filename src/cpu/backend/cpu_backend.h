// cpu_backend.h — the CPU reference backend (octet::Backend on host memory), internal declaration.
//
// The readable twin of the CUDA backend, in the style of karpathy/llm.c's CPU trainer: plain
// loops over FP32 buffers, clear math, double accumulation wherever a sum decides accuracy
// (norm statistics, softmax denominators, reductions). GEMMs go through octet/gemm.h (OpenBLAS
// underneath), attention through octet/attention.h. Every operation is documented in
// octet/backend.h; each concept lives in its own file of this folder:
//   memory.cpp (memory, elementwise, make_cpu_backend), embedding.cpp, norms.cpp, rope.cpp,
//   activations.cpp, heads.cpp (head layouts), loss.cpp, reductions.cpp, adamw.cpp,
//   linear.cpp (CpuLinear), attention.cpp (CpuAttention).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "octet/backend.h"

namespace octet::cpu {

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }

  float* alloc(size_t n) override;
  int32_t* alloc_i32(size_t n) override;
  void release(void* p) override;
  void upload(float* dst, const float* host_src, size_t n) override;
  void upload_i32(int32_t* dst, const int32_t* host_src, size_t n) override;
  void download(float* host_dst, const float* src, size_t n) override;
  void fill(float* x, float value, size_t n) override;
  void copy(float* dst, const float* src, size_t n) override;
  void synchronize() override {}

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
};

}  // namespace octet::cpu
