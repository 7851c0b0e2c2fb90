// src/bench/profiling_backend.cpp — ProfilingBackend (profiling_backend.h): every Backend call,
// and the forward/backward of every Linear and Attention it makes, forwarded to the wrapped backend
// and timed under an op-class name ("linear.fwd bf16 768x2304", "attention.bwd", "layernorm.bwd").
#include "bench/profiling_backend.h"

#include <utility>

namespace octet {

namespace {

std::string precision_name(LinearPrecision p) {
  switch (p) {
    case LinearPrecision::BF16:
      return "bf16";
    case LinearPrecision::FP8:
      return "fp8";
    case LinearPrecision::FP32:
      return "fp32";
  }
  return "?";
}

class ProfiledLinear final : public Linear {
 public:
  ProfiledLinear(ProfilingBackend& pb, std::unique_ptr<Linear> inner, const LinearSpec& spec)
      : pb_(pb), inner_(std::move(inner)) {
    const std::string shape = precision_name(spec.precision) + " " + std::to_string(spec.in_features) + "x" +
                              std::to_string(spec.out_features);
    fwd_ = "linear.fwd " + shape;
    bwd_ = "linear.bwd " + shape;
  }
  SavedLinear forward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& x_amax = {},
                      const Tensor& residual = {}) override {
    return pb_.timed(fwd_, [&] { return inner_->forward(x, w, y, x_amax, residual); });
  }
  void backward(const SavedLinear& saved, const Tensor& dy, const Tensor& dx, const Tensor& dw,
                const Tensor& dy_amax = {}) override {
    pb_.timed(bwd_, [&] { inner_->backward(saved, dy, dx, dw, dy_amax); });
  }
  void update_scales() override {
    pb_.timed("linear.update_scales", [&] { inner_->update_scales(); });
  }
  void weights_changed() override { inner_->weights_changed(); }
  QuantStats stats_x() const override { return inner_->stats_x(); }
  QuantStats stats_w() const override { return inner_->stats_w(); }
  QuantStats stats_dy() const override { return inner_->stats_dy(); }
  std::vector<float> quant_state() const override { return inner_->quant_state(); }
  void load_quant_state(const std::vector<float>& s) override { inner_->load_quant_state(s); }

 private:
  ProfilingBackend& pb_;
  std::unique_ptr<Linear> inner_;
  std::string fwd_, bwd_;
};

class ProfiledAttention final : public Attention {
 public:
  ProfiledAttention(ProfilingBackend& pb, std::unique_ptr<Attention> inner)
      : pb_(pb), inner_(std::move(inner)) {}
  SavedAttention forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                         const Tensor& lse) override {
    return pb_.timed("attention.fwd", [&] { return inner_->forward(q, k, v, o, lse); });
  }
  void backward(const SavedAttention& saved, const Tensor& d_o, const Tensor& dq, const Tensor& dk,
                const Tensor& dv, const Tensor& residual) override {
    pb_.timed("attention.bwd", [&] { inner_->backward(saved, d_o, dq, dk, dv, residual); });
  }

 private:
  ProfilingBackend& pb_;
  std::unique_ptr<Attention> inner_;
};

}  // namespace

// Memory is the wrapped backend's: a Buffer from alloc() returns its memory to the wrapped backend
// directly (not through this decorator), so buffers outlive nothing they depend on.
Buffer ProfilingBackend::alloc(DType dtype, Shape shape) { return inner_.alloc(dtype, shape); }
void ProfilingBackend::release(void* p) { inner_.release(p); }
void ProfilingBackend::synchronize() { inner_.synchronize(); }
void ProfilingBackend::upload(const Tensor& dst, const void* src) {
  timed("copy.h2d", [&] { inner_.upload(dst, src); });
}
void ProfilingBackend::download(void* dst, const Tensor& src) {
  timed("copy.d2h", [&] { inner_.download(dst, src); });
}
void ProfilingBackend::fill(const Tensor& x, double value) {
  timed("fill", [&] { inner_.fill(x, value); });
}
void ProfilingBackend::copy(const Tensor& dst, const Tensor& src) {
  timed("copy.d2d", [&] { inner_.copy(dst, src); });
}
void ProfilingBackend::copy_spans(const Tensor& dst, const Tensor& src, const std::vector<CopySpan>& spans) {
  timed("copy.spans", [&] { inner_.copy_spans(dst, src, spans); });
}
void ProfilingBackend::axpy(float a, const Tensor& x, const Tensor& y) {
  timed("axpy", [&] { inner_.axpy(a, x, y); });
}
void ProfilingBackend::scale(float a, const Tensor& x) {
  timed("scale", [&] { inner_.scale(a, x); });
}
void ProfilingBackend::embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) {
  timed("embedding.fwd", [&] { inner_.embedding_forward(ids, table, out); });
}
void ProfilingBackend::embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable) {
  timed("embedding.bwd", [&] { inner_.embedding_backward(ids, dout, dtable); });
}
void ProfilingBackend::rmsnorm_forward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& rstd,
                                       float eps, const Tensor& amax) {
  timed("rmsnorm.fwd", [&] { inner_.rmsnorm_forward(x, w, y, rstd, eps, amax); });
}
void ProfilingBackend::rmsnorm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd,
                                        const Tensor& dy, const Tensor& dx, const Tensor& dw,
                                        bool accumulate) {
  timed("rmsnorm.bwd", [&] { inner_.rmsnorm_backward(x, w, rstd, dy, dx, dw, accumulate); });
}
void ProfilingBackend::layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                                         const Tensor& mean, const Tensor& rstd, float eps,
                                         const Tensor& amax) {
  timed("layernorm.fwd", [&] { inner_.layernorm_forward(x, w, b, y, mean, rstd, eps, amax); });
}
void ProfilingBackend::layernorm_backward(const Tensor& x, const Tensor& w, const Tensor& mean,
                                          const Tensor& rstd, const Tensor& dy, const Tensor& dx,
                                          const Tensor& dw, const Tensor& db, bool accumulate) {
  timed("layernorm.bwd", [&] { inner_.layernorm_backward(x, w, mean, rstd, dy, dx, dw, db, accumulate); });
}
void ProfilingBackend::rope(const Tensor& x, float theta, bool inverse, AttnLayout layout) {
  timed("rope", [&] { inner_.rope(x, theta, inverse, layout); });
}
void ProfilingBackend::gelu_forward(const Tensor& x, const Tensor& y, const Tensor& amax) {
  timed("gelu.fwd", [&] { inner_.gelu_forward(x, y, amax); });
}
void ProfilingBackend::gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx,
                                     const Tensor& amax) {
  timed("gelu.bwd", [&] { inner_.gelu_backward(x, dy, dx, amax); });
}
void ProfilingBackend::swiglu_forward(const Tensor& h, const Tensor& y) {
  timed("swiglu.fwd", [&] { inner_.swiglu_forward(h, y); });
}
void ProfilingBackend::swiglu_backward(const Tensor& h, const Tensor& dy, const Tensor& dh) {
  timed("swiglu.bwd", [&] { inner_.swiglu_backward(h, dy, dh); });
}
void ProfilingBackend::split_qkv(const Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v,
                                 AttnLayout layout) {
  timed("layout", [&] { inner_.split_qkv(qkv, q, k, v, layout); });
}
void ProfilingBackend::merge_qkv(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qkv,
                                 AttnLayout layout) {
  timed("layout", [&] { inner_.merge_qkv(q, k, v, qkv, layout); });
}
void ProfilingBackend::heads_to_tokens(const Tensor& x, const Tensor& y) {
  timed("layout", [&] { inner_.heads_to_tokens(x, y); });
}
void ProfilingBackend::tokens_to_heads(const Tensor& x, const Tensor& y) {
  timed("layout", [&] { inner_.tokens_to_heads(x, y); });
}
std::unique_ptr<Linear> ProfilingBackend::make_linear(const LinearSpec& spec) {
  return std::make_unique<ProfiledLinear>(*this, inner_.make_linear(spec), spec);
}
std::unique_ptr<Attention> ProfilingBackend::make_attention(const AttentionShape& shape,
                                                            const AttentionConfig& config) {
  return std::make_unique<ProfiledAttention>(*this, inner_.make_attention(shape, config));
}
void ProfilingBackend::gated_delta_forward(const GatedDeltaArgs& in, const Tensor& o) {
  timed("gated_delta.fwd", [&] { inner_.gated_delta_forward(in, o); });
}
void ProfilingBackend::gated_delta_backward(const GatedDeltaArgs& in, const Tensor& d_o, const Tensor& dq,
                                            const Tensor& dk, const Tensor& dv, const Tensor& dgates) {
  timed("gated_delta.bwd", [&] { inner_.gated_delta_backward(in, d_o, dq, dk, dv, dgates); });
}
void ProfilingBackend::cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& dlogits,
                                     float grad_scale, const Tensor& loss_sum) {
  timed("cross_entropy", [&] { inner_.cross_entropy(logits, targets, dlogits, grad_scale, loss_sum); });
}
void ProfilingBackend::sum_squares(const Tensor& x, const Tensor& out) {
  timed("sum_squares", [&] { inner_.sum_squares(x, out); });
}
Backend::Moments ProfilingBackend::moments(const Tensor& x) {
  return timed("moments", [&] { return inner_.moments(x); });
}
void ProfilingBackend::adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                             float lr, float beta1, float beta2, float eps, float weight_decay,
                             int64_t step) {
  timed("adamw", [&] { inner_.adamw(param, grad, m, v, lr, beta1, beta2, eps, weight_decay, step); });
}
void ProfilingBackend::adamw_prepare(const Tensor& norm_sq, const Tensor& loss_sum, const Tensor& bias_corr,
                                     const Tensor& state, float grad_clip) {
  timed("adamw", [&] { inner_.adamw_prepare(norm_sq, loss_sum, bias_corr, state, grad_clip); });
}
void ProfilingBackend::adamw_apply(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                                   const Tensor& segments, const Tensor& state, float lr, float beta1,
                                   float beta2, float eps, float weight_decay) {
  timed("adamw",
        [&] { inner_.adamw_apply(param, grad, m, v, segments, state, lr, beta1, beta2, eps, weight_decay); });
}

}  // namespace octet
