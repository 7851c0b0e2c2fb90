// cpu_backend.h — the CPU reference backend (octet::Backend on host memory), internal declaration.
//
// The readable twin of the CUDA backend, in the style of karpathy/llm.c's CPU trainer: plain
// loops computing in FP32, double accumulation wherever a sum decides accuracy (norm statistics,
// softmax denominators, reductions). Activation tensors may be F32 or BF16; every op converts them
// through act_io.h (read as FP32, round once on store). GEMMs go through octet/gemm.h (OpenBLAS
// underneath), attention through octet/attention.h. Every operation is documented in
// octet/backend.h; each concept lives in its own file of this folder:
//   memory.cpp (memory, elementwise, make_cpu_backend), embedding.cpp, norms.cpp, rope.cpp,
//   activations.cpp, heads.cpp (head layouts), loss.cpp, reductions.cpp, adamw.cpp,
//   linear.cpp (CpuLinear), attention.cpp (CpuAttention), gated_delta.cpp (the recurrent mixer).
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
  DType preferred_activation_dtype() const override { return DType::F32; }

  Buffer alloc(DType dtype, Shape shape) override;
  void release(void* p) override;
  void upload(const Tensor& dst, const void* host_src) override;
  void download(void* host_dst, const Tensor& src) override;
  void fill(const Tensor& x, double value) override;
  void copy(const Tensor& dst, const Tensor& src) override;
  void copy_spans(const Tensor& dst, const Tensor& src, const std::vector<CopySpan>& spans) override;
  void synchronize() override {}

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
};

}  // namespace octet::cpu
