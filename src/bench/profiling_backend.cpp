// src/bench/profiling_backend.cpp — ProfilingBackend (profiling_backend.h): every Backend call,
// and the forward/backward of every Linear and Attention it makes, forwarded to the wrapped backend
// and timed under an op-class name ("linear.fwd bf16 768x2304", "attention.bwd", "layernorm.bwd").
#include "bench/profiling_backend.h"

#include <utility>

namespace octet {

namespace {

std::string precision_name(LinearPrecision p) {
  switch (p) {
    case LinearPrecision::BF16: return "bf16";
    case LinearPrecision::FP8: return "fp8";
    case LinearPrecision::FP32: return "fp32";
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
  void forward(const float* x, const float* w, float* y, int64_t m) override {
    pb_.timed(fwd_, [&] { inner_->forward(x, w, y, m); });
  }
  void backward(const float* x, const float* w, const float* dy, float* dx, float* dw, int64_t m) override {
    pb_.timed(bwd_, [&] { inner_->backward(x, w, dy, dx, dw, m); });
  }
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
  ProfiledAttention(ProfilingBackend& pb, std::unique_ptr<Attention> inner) : pb_(pb), inner_(std::move(inner)) {}
  void forward(const float* q, const float* k, const float* v, float* o, float* lse) override {
    pb_.timed("attention.fwd", [&] { inner_->forward(q, k, v, o, lse); });
  }
  AttentionStats backward(const float* d_o, float* dq, float* dk, float* dv) override {
    return pb_.timed("attention.bwd", [&] { return inner_->backward(d_o, dq, dk, dv); });
  }

 private:
  ProfilingBackend& pb_;
  std::unique_ptr<Attention> inner_;
};

}  // namespace

float* ProfilingBackend::alloc(size_t n) { return inner_.alloc(n); }
int32_t* ProfilingBackend::alloc_i32(size_t n) { return inner_.alloc_i32(n); }
void ProfilingBackend::release(void* p) { inner_.release(p); }
void ProfilingBackend::synchronize() { inner_.synchronize(); }
void ProfilingBackend::upload(float* dst, const float* src, size_t n) {
  timed("copy.h2d", [&] { inner_.upload(dst, src, n); });
}
void ProfilingBackend::upload_i32(int32_t* dst, const int32_t* src, size_t n) {
  timed("copy.h2d", [&] { inner_.upload_i32(dst, src, n); });
}
void ProfilingBackend::download(float* dst, const float* src, size_t n) {
  timed("copy.d2h", [&] { inner_.download(dst, src, n); });
}
void ProfilingBackend::fill(float* x, float value, size_t n) { timed("fill", [&] { inner_.fill(x, value, n); }); }
void ProfilingBackend::copy(float* dst, const float* src, size_t n) { timed("copy.d2d", [&] { inner_.copy(dst, src, n); }); }
void ProfilingBackend::axpy(float a, const float* x, float* y, size_t n) { timed("axpy", [&] { inner_.axpy(a, x, y, n); }); }
void ProfilingBackend::scale(float a, float* x, size_t n) { timed("scale", [&] { inner_.scale(a, x, n); }); }
void ProfilingBackend::embedding_forward(const int32_t* ids, const float* table, float* out, int64_t n, int64_t dim) {
  timed("embedding.fwd", [&] { inner_.embedding_forward(ids, table, out, n, dim); });
}
void ProfilingBackend::embedding_backward(const int32_t* ids, const float* dout, float* dtable, int64_t n,
                                          int64_t dim) {
  timed("embedding.bwd", [&] { inner_.embedding_backward(ids, dout, dtable, n, dim); });
}
void ProfilingBackend::rmsnorm_forward(const float* x, const float* w, float* y, float* rstd, int64_t rows,
                                       int64_t dim, float eps) {
  timed("rmsnorm.fwd", [&] { inner_.rmsnorm_forward(x, w, y, rstd, rows, dim, eps); });
}
void ProfilingBackend::rmsnorm_backward(const float* x, const float* w, const float* rstd, const float* dy, float* dx,
                                        float* dw, int64_t rows, int64_t dim) {
  timed("rmsnorm.bwd", [&] { inner_.rmsnorm_backward(x, w, rstd, dy, dx, dw, rows, dim); });
}
void ProfilingBackend::layernorm_forward(const float* x, const float* w, const float* b, float* y, float* mean,
                                         float* rstd, int64_t rows, int64_t dim, float eps) {
  timed("layernorm.fwd", [&] { inner_.layernorm_forward(x, w, b, y, mean, rstd, rows, dim, eps); });
}
void ProfilingBackend::layernorm_backward(const float* x, const float* w, const float* mean, const float* rstd,
                                          const float* dy, float* dx, float* dw, float* db, int64_t rows,
                                          int64_t dim) {
  timed("layernorm.bwd", [&] { inner_.layernorm_backward(x, w, mean, rstd, dy, dx, dw, db, rows, dim); });
}
void ProfilingBackend::rope(float* x, int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, float theta,
                            bool inverse) {
  timed("rope", [&] { inner_.rope(x, batch, heads, seq, head_dim, theta, inverse); });
}
void ProfilingBackend::gelu_forward(const float* x, float* y, size_t n) {
  timed("gelu.fwd", [&] { inner_.gelu_forward(x, y, n); });
}
void ProfilingBackend::gelu_backward(const float* x, const float* dy, float* dx, size_t n) {
  timed("gelu.bwd", [&] { inner_.gelu_backward(x, dy, dx, n); });
}
void ProfilingBackend::swiglu_forward(const float* h, float* y, int64_t rows, int64_t f) {
  timed("swiglu.fwd", [&] { inner_.swiglu_forward(h, y, rows, f); });
}
void ProfilingBackend::swiglu_backward(const float* h, const float* dy, float* dh, int64_t rows, int64_t f) {
  timed("swiglu.bwd", [&] { inner_.swiglu_backward(h, dy, dh, rows, f); });
}
void ProfilingBackend::split_qkv(const float* qkv, float* q, float* k, float* v, int64_t batch, int64_t seq,
                                 int64_t heads, int64_t kv_heads, int64_t head_dim) {
  timed("layout", [&] { inner_.split_qkv(qkv, q, k, v, batch, seq, heads, kv_heads, head_dim); });
}
void ProfilingBackend::merge_qkv(const float* q, const float* k, const float* v, float* qkv, int64_t batch,
                                 int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim) {
  timed("layout", [&] { inner_.merge_qkv(q, k, v, qkv, batch, seq, heads, kv_heads, head_dim); });
}
void ProfilingBackend::heads_to_tokens(const float* x, float* y, int64_t batch, int64_t heads, int64_t seq,
                                       int64_t head_dim) {
  timed("layout", [&] { inner_.heads_to_tokens(x, y, batch, heads, seq, head_dim); });
}
void ProfilingBackend::tokens_to_heads(const float* x, float* y, int64_t batch, int64_t heads, int64_t seq,
                                       int64_t head_dim) {
  timed("layout", [&] { inner_.tokens_to_heads(x, y, batch, heads, seq, head_dim); });
}
std::unique_ptr<Linear> ProfilingBackend::make_linear(const LinearSpec& spec) {
  return std::make_unique<ProfiledLinear>(*this, inner_.make_linear(spec), spec);
}
std::unique_ptr<Attention> ProfilingBackend::make_attention(const AttentionShape& shape,
                                                            const AttentionConfig& config) {
  return std::make_unique<ProfiledAttention>(*this, inner_.make_attention(shape, config));
}
double ProfilingBackend::cross_entropy(const float* logits, const int32_t* targets, float* dlogits, int64_t n,
                                       int64_t vocab, float grad_scale) {
  return timed("cross_entropy", [&] { return inner_.cross_entropy(logits, targets, dlogits, n, vocab, grad_scale); });
}
double ProfilingBackend::sum_squares(const float* x, size_t n) {
  return timed("sum_squares", [&] { return inner_.sum_squares(x, n); });
}
Backend::Moments ProfilingBackend::moments(const float* x, size_t n) {
  return timed("moments", [&] { return inner_.moments(x, n); });
}
void ProfilingBackend::adamw(float* param, const float* grad, float* m, float* v, size_t n, float lr, float beta1,
                             float beta2, float eps, float weight_decay, int64_t step) {
  timed("adamw", [&] { inner_.adamw(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, step); });
}

}  // namespace octet
