// src/cuda/runtime/backend_ops.cpp — the operations of CudaBackend (cuda_backend.h): the boundary checks of
// every backend.h operation (dtypes and shapes, once, with messages naming the argument) and their
// dispatch to the kernels of ops.h on the backend's stream and device. Loss and sum_squares add
// into F64 device accumulators; only moments() waits for the GPU (diagnostics).
#include <cmath>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "core/adamw_args.h"
#include "cuda/runtime/check.h"
#include "cuda/runtime/cuda_backend.h"
#include "cuda/ops/ops.h"
#include "octet/adamw_rule.h"
#include "octet/error.h"

namespace octet::cuda {

namespace {
// Row-wise act pair check: same numel and last dim.
void check_same(const Tensor& a, const Tensor& b, const char* what) {
  OCTET_CHECK(a.numel() == b.numel() && a.cols() == b.cols(),
              std::string(what) + ": shapes differ: " + a.str() + " vs " + b.str());
}
// Optional F32 parameter of `n` elements: its pointer, or null if empty.
float* opt_param(const Tensor& t, int64_t n, const char* what) {
  if (t.empty()) return nullptr;
  check_dtype(t, DType::F32, what);
  check_numel(t, n, what);
  return t.f32();
}
// Required F32 parameter of `n` elements (LayerNorm's weight: backend.h).
float* req_param(const Tensor& t, int64_t n, const char* what) {
  check_dtype(t, DType::F32, what);
  check_numel(t, n, what);
  return t.f32();
}
void check_stat(const Tensor& t, int64_t n, const char* what) {
  check_dtype(t, DType::F32, what);
  check_numel(t, n, what);
}
void check_acc(const Tensor& t, int64_t n, const char* what) {
  check_dtype(t, DType::F64, what);
  check_numel(t, n, what);
}
void check_act_or_param(const Tensor& t, const char* what) { check_activation(t, what); }
// x act [rows, dim >= 1] and the other act tensors of a row-wise op, each of x's shape.
void check_rows(const std::string& op, const Tensor& x,
                std::initializer_list<std::pair<const Tensor*, const char*>> same) {
  check_activation(x, (op + ": x").c_str());
  OCTET_CHECK(x.cols() >= 1, op + ": dim must be >= 1, got " + x.str());
  for (const auto& [t, name] : same) {
    const std::string what = op + ": " + name;
    check_activation(*t, what.c_str());
    check_same(x, *t, what.c_str());
  }
}
}  // namespace

// ---- elementwise, embedding ----
void CudaBackend::axpy(float a, const Tensor& x, const Tensor& y) {
  DeviceGuard g(device_);
  check_act_or_param(x, "axpy: x");
  check_act_or_param(y, "axpy: y");
  check_numel(y, x.numel(), "axpy: y");
  axpy_launch(a, x, y, stream_);
}
void CudaBackend::scale(float a, const Tensor& x) {
  DeviceGuard g(device_);
  check_act_or_param(x, "scale: x");
  scale_launch(a, x, stream_);
}

void CudaBackend::embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) {
  DeviceGuard g(device_);
  check_dtype(ids, DType::I32, "embedding_forward: ids");
  check_dtype(table, DType::F32, "embedding_forward: table");
  check_activation(out, "embedding_forward: out");
  const int64_t n = ids.numel(), dim = table.cols();
  OCTET_CHECK(table.shape.rank == 2 && dim >= 1,
              "embedding_forward: table must be [vocab, dim], got " + table.str());
  OCTET_CHECK(out.numel() == n * dim && out.cols() == dim, "embedding_forward: out must be [" +
                                                               std::to_string(n) + ", " +
                                                               std::to_string(dim) + "], got " + out.str());
  embedding_forward_launch(ids.i32(), table.f32(), out, n, dim, stream_);
}
void CudaBackend::embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable) {
  DeviceGuard g(device_);
  check_dtype(ids, DType::I32, "embedding_backward: ids");
  check_activation(dout, "embedding_backward: dout");
  check_dtype(dtable, DType::F32, "embedding_backward: dtable");
  const int64_t n = ids.numel(), dim = dtable.cols();
  OCTET_CHECK(dtable.shape.rank == 2 && dim >= 1,
              "embedding_backward: dtable must be [vocab, dim], got " + dtable.str());
  OCTET_CHECK(dout.numel() == n * dim && dout.cols() == dim,
              "embedding_backward: dout must be [" + std::to_string(n) + ", " + std::to_string(dim) +
                  "], got " + dout.str());
  const int64_t vocab = dtable.shape.dims[0];
  const size_t bytes = embedding_backward_workspace(n, vocab);
  const Buffer ws = alloc_uninitialized(DType::I32, {int64_t((bytes + 3) / 4)});  // stream-ordered
  embedding_backward_launch(ids.i32(), dout, dtable.f32(), n, dim, vocab, ws.tensor().data, bytes, stream_);
}

// ---- norms ----
// The optional amax output (backend.h) as the kernels' unsigned* (null when empty).
static unsigned* amax_out(const Tensor& amax, const char* what) {
  check_amax_out(amax, what);
  return amax.empty() ? nullptr : reinterpret_cast<unsigned*>(amax.data);
}

void CudaBackend::rmsnorm_forward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& rstd,
                                  float eps, const Tensor& amax) {
  DeviceGuard g(device_);
  check_rows("rmsnorm_forward", x, {{&y, "y"}});
  const int64_t rows = x.rows(), dim = x.cols();
  check_stat(rstd, rows, "rmsnorm_forward: rstd");
  rmsnorm_forward_launch(x, opt_param(w, dim, "rmsnorm_forward: weight"), y, rstd.f32(), rows, dim, eps,
                         stream_, amax_out(amax, "rmsnorm_forward: amax"));
}
void CudaBackend::rmsnorm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy,
                                   const Tensor& dx, const Tensor& dw, bool accumulate) {
  DeviceGuard g(device_);
  check_rows("rmsnorm_backward", x, {{&dy, "dy"}, {&dx, "dx"}});
  OCTET_CHECK(dx.data != x.data && dx.data != dy.data, "rmsnorm_backward: dx must not alias x or dy");
  const int64_t rows = x.rows(), dim = x.cols();
  check_stat(rstd, rows, "rmsnorm_backward: rstd");
  OCTET_CHECK(dw.empty() || !w.empty(), "rmsnorm_backward: dweight given without a weight");
  rmsnorm_backward_launch(x, opt_param(w, dim, "rmsnorm_backward: weight"), rstd.f32(), dy, dx,
                          opt_param(dw, dim, "rmsnorm_backward: dweight"), rows, dim, stream_, accumulate);
}
void CudaBackend::layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                                    const Tensor& mean, const Tensor& rstd, float eps, const Tensor& amax) {
  DeviceGuard g(device_);
  check_rows("layernorm_forward", x, {{&y, "y"}});
  const int64_t rows = x.rows(), dim = x.cols();
  check_stat(mean, rows, "layernorm_forward: mean");
  check_stat(rstd, rows, "layernorm_forward: rstd");
  layernorm_forward_launch(x, req_param(w, dim, "layernorm_forward: weight"),
                           opt_param(b, dim, "layernorm_forward: bias"), y, mean.f32(), rstd.f32(), rows, dim,
                           eps, stream_, amax_out(amax, "layernorm_forward: amax"));
}
void CudaBackend::layernorm_backward(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                                     const Tensor& dy, const Tensor& dx, const Tensor& dw, const Tensor& db,
                                     bool accumulate) {
  DeviceGuard g(device_);
  check_rows("layernorm_backward", x, {{&dy, "dy"}, {&dx, "dx"}});
  OCTET_CHECK(dx.data != x.data && dx.data != dy.data, "layernorm_backward: dx must not alias x or dy");
  const int64_t rows = x.rows(), dim = x.cols();
  check_stat(mean, rows, "layernorm_backward: mean");
  check_stat(rstd, rows, "layernorm_backward: rstd");
  layernorm_backward_launch(x, req_param(w, dim, "layernorm_backward: weight"), mean.f32(), rstd.f32(), dy,
                            dx, opt_param(dw, dim, "layernorm_backward: dweight"),
                            opt_param(db, dim, "layernorm_backward: dbias"), rows, dim, stream_, accumulate);
}

// ---- RoPE, activations ----
void CudaBackend::rope(const Tensor& x, float theta, bool inverse, AttnLayout layout) {
  DeviceGuard g(device_);
  check_activation(x, "rope: x");
  OCTET_CHECK(x.shape.rank == 4, std::string("rope: x must be ") + layout_dims(layout) + ", got " + x.str());
  const int64_t D = x.shape[3];
  OCTET_CHECK(D >= 2 && D % 2 == 0, "rope: head_dim must be even and >= 2, got " + x.str());
  OCTET_CHECK(theta > 0.0f && std::isfinite(theta),
              "rope: theta must be positive and finite, got " + std::to_string(theta));
  rope_launch(x, x.shape[0] * x.shape[1] * x.shape[2], x.shape[heads_axis(layout)], x.shape[seq_axis(layout)],
              D, theta, inverse, layout == AttnLayout::TokensMajor, stream_);
}

void CudaBackend::gelu_forward(const Tensor& x, const Tensor& y, const Tensor& amax) {
  DeviceGuard g(device_);
  check_activation(x, "gelu_forward: x");
  check_activation(y, "gelu_forward: y");
  check_numel(y, x.numel(), "gelu_forward: y");
  gelu_forward_launch(x, y, stream_, amax_out(amax, "gelu_forward: amax"));
}
void CudaBackend::gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx, const Tensor& amax) {
  DeviceGuard g(device_);
  check_activation(x, "gelu_backward: x");
  check_activation(dy, "gelu_backward: dy");
  check_activation(dx, "gelu_backward: dx");
  check_numel(dy, x.numel(), "gelu_backward: dy");
  check_numel(dx, x.numel(), "gelu_backward: dx");
  gelu_backward_launch(x, dy, dx, stream_, amax_out(amax, "gelu_backward: amax"));
}
static void check_swiglu(const char* op, const Tensor& h, const Tensor& y) {
  check_activation(h, op);
  check_activation(y, op);
  OCTET_CHECK(
      y.cols() >= 1 && h.cols() == 2 * y.cols() && h.rows() == y.rows(),
      std::string(op) + ": h must be [rows, 2F] for y [rows, F], got h " + h.str() + ", y " + y.str());
}
void CudaBackend::swiglu_forward(const Tensor& h, const Tensor& y) {
  DeviceGuard g(device_);
  check_swiglu("swiglu_forward", h, y);
  swiglu_forward_launch(h, y, y.rows(), y.cols(), stream_);
}
void CudaBackend::swiglu_backward(const Tensor& h, const Tensor& dy, const Tensor& dh) {
  DeviceGuard g(device_);
  check_swiglu("swiglu_backward", h, dy);
  check_activation(dh, "swiglu_backward: dh");
  check_same(h, dh, "swiglu_backward: dh");
  swiglu_backward_launch(h, dy, dh, dy.rows(), dy.cols(), stream_);
}

// ---- head layouts ----
namespace {
struct Heads {
  int64_t B, H, T, D;
};
// A per-head activation's [B, H, T, D] (tokens-major: stored [B, T, H, D]).
Heads heads_of(const Tensor& t, const char* what, AttnLayout layout = AttnLayout::HeadsMajor) {
  check_activation(t, what);
  OCTET_CHECK(t.shape.rank == 4 && t.shape[1] >= 1 && t.shape[2] >= 1 && t.shape[3] >= 1,
              std::string(what) + ": expected " + layout_dims(layout) + ", got " + t.str());
  return {t.shape[0], t.shape[heads_axis(layout)], t.shape[seq_axis(layout)], t.shape[3]};
}
void check_qkv(const char* op, const Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v,
               AttnLayout layout, Heads* hq, int64_t* G) {
  *hq = heads_of(q, op, layout);
  const Heads hk = heads_of(k, op, layout), hv = heads_of(v, op, layout);
  OCTET_CHECK(hk.B == hq->B && hk.T == hq->T && hk.D == hq->D && k.shape == v.shape,
              std::string(op) + ": k and v must match q " + q.str() + " in B, T and D, got k " + k.str() +
                  ", v " + v.str());
  (void)hv;
  *G = hk.H;
  check_activation(qkv, op);
  check_numel(qkv, hq->B * hq->T * (hq->H + 2 * *G) * hq->D, op);
  OCTET_CHECK(qkv.cols() == (hq->H + 2 * *G) * hq->D,
              std::string(op) + ": qkv must be [B, T, (H + 2G)·D] = [.., " +
                  std::to_string((hq->H + 2 * *G) * hq->D) + "], got " + qkv.str());
}
}  // namespace

void CudaBackend::split_qkv(const Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v,
                            AttnLayout layout) {
  DeviceGuard g(device_);
  Heads h;
  int64_t G;
  check_qkv("split_qkv", qkv, q, k, v, layout, &h, &G);
  qkv_layout_launch(qkv, q, k, v, h.B, h.T, h.H, G, h.D, true, layout == AttnLayout::TokensMajor, stream_);
}
void CudaBackend::merge_qkv(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& qkv,
                            AttnLayout layout) {
  DeviceGuard g(device_);
  Heads h;
  int64_t G;
  check_qkv("merge_qkv", qkv, q, k, v, layout, &h, &G);
  qkv_layout_launch(qkv, q, k, v, h.B, h.T, h.H, G, h.D, false, layout == AttnLayout::TokensMajor, stream_);
}
void CudaBackend::heads_to_tokens(const Tensor& x, const Tensor& y) {
  DeviceGuard g(device_);
  const Heads h = heads_of(x, "heads_to_tokens: x");
  check_activation(y, "heads_to_tokens: y");
  check_numel(y, x.numel(), "heads_to_tokens: y");
  heads_tokens_launch(x, y, h.B, h.H, h.T, h.D, true, stream_);
}
void CudaBackend::tokens_to_heads(const Tensor& x, const Tensor& y) {
  DeviceGuard g(device_);
  const Heads h = heads_of(y, "tokens_to_heads: y");
  check_activation(x, "tokens_to_heads: x");
  check_numel(x, y.numel(), "tokens_to_heads: x");
  heads_tokens_launch(x, y, h.B, h.H, h.T, h.D, false, stream_);
}

// ---- loss and reductions ----
void CudaBackend::cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor& dlogits,
                                float grad_scale, const Tensor& loss_sum) {
  DeviceGuard g(device_);
  check_activation(logits, "cross_entropy: logits");
  check_dtype(targets, DType::I32, "cross_entropy: targets");
  check_acc(loss_sum, 1, "cross_entropy: loss_sum");
  const int64_t n = logits.rows(), vocab = logits.cols();
  OCTET_CHECK(vocab >= 1, "cross_entropy: vocab must be >= 1, got " + logits.str());
  check_numel(targets, n, "cross_entropy: targets");
  if (!dlogits.empty()) {
    check_activation(dlogits, "cross_entropy: dlogits");
    check_same(logits, dlogits, "cross_entropy: dlogits");
    OCTET_CHECK(dlogits.data != logits.data || dlogits.dtype == logits.dtype,
                "cross_entropy: dlogits aliases logits with another dtype");
  }
  if (n == 0) return;
  double* rl = row_loss_.reserve(size_t(n), stream_);
  cross_entropy_launch(logits, targets.i32(), dlogits, rl, n, vocab, grad_scale, stream_);
  const int parts = reduce_parts(size_t(n));
  double* p = parts_.reserve(size_t(parts), stream_);
  sum_double_launch(rl, size_t(n), p, stream_);
  accumulate_parts_launch(p, parts, loss_sum.f64(), stream_);
}

void CudaBackend::sum_squares(const Tensor& x, const Tensor& out) {
  DeviceGuard g(device_);
  check_act_or_param(x, "sum_squares: x");
  check_acc(out, 1, "sum_squares: out");
  if (x.numel() == 0) return;
  const int parts = reduce_parts(size_t(x.numel()));
  double* p = parts_.reserve(size_t(parts), stream_);
  sum_squares_launch(x, p, stream_);
  accumulate_parts_launch(p, parts, out.f64(), stream_);
}

Backend::Moments CudaBackend::moments(const Tensor& x) {
  DeviceGuard g(device_);
  check_act_or_param(x, "moments: x");
  Moments out;
  const int64_t n = x.numel();
  if (n == 0) return out;
  const int parts = reduce_parts(size_t(n));
  double* p = parts_.reserve(size_t(2 * parts), stream_);
  auto host_sum = [&](int per_part, int which) {  // synchronizes
    std::vector<double> h(size_t(parts) * size_t(per_part));
    OCTET_CUDA_CHECK(
        cudaMemcpyAsync(h.data(), p, h.size() * sizeof(double), cudaMemcpyDeviceToHost, stream_));
    OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
    double s = 0.0;
    for (int i = 0; i < parts; ++i) s += h[size_t(i * per_part + which)];
    return s;
  };
  sum_launch(x, p, stream_);
  const double mu = host_sum(1, 0) / double(n);
  central_moments_launch(x, mu, p, stream_);
  const double m2 = host_sum(2, 0) / double(n);
  const double m4 = host_sum(2, 1) / double(n);
  out.mean = mu;
  out.variance = m2;
  out.kurtosis = m2 > 0.0 ? m4 / (m2 * m2) : 0.0;
  return out;
}

void CudaBackend::adamw(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, float lr,
                        float beta1, float beta2, float eps, float weight_decay, int64_t step) {
  DeviceGuard g(device_);
  const int64_t n = param.numel();
  check_dtype(param, DType::F32, "adamw: param");
  for (const auto& [t, what] : {std::pair{&grad, "adamw: grad"}, {&m, "adamw: m"}, {&v, "adamw: v"}}) {
    check_dtype(*t, DType::F32, what);
    check_numel(*t, n, what);
  }
  OCTET_CHECK(step >= 1, "adamw: step must be >= 1, got " + std::to_string(step));
  OCTET_CHECK(beta1 >= 0.0f && beta1 < 1.0f && beta2 >= 0.0f && beta2 < 1.0f,
              "adamw: betas must lie in [0, 1)");
  adamw_launch(param.f32(), grad.f32(), m.f32(), v.f32(), size_t(n), lr, beta1, beta2, eps, weight_decay,
               adamw_bias_correction(beta1, step), adamw_bias_correction(beta2, step), stream_);
}

void CudaBackend::adamw_prepare(const Tensor& norm_sq, const Tensor& loss_sum, const Tensor& bias_corr,
                                const Tensor& state, float grad_clip) {
  DeviceGuard g(device_);
  check_adamw_prepare_args(norm_sq, loss_sum, bias_corr, state, grad_clip);
  adamw_prepare_launch(norm_sq.f64(), loss_sum.empty() ? nullptr : loss_sum.f64(), bias_corr.f64(),
                       bias_corr.shape[0], state.f64(), grad_clip, stream_);
}

void CudaBackend::adamw_apply(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                              const Tensor& segments, const Tensor& state, float lr, float beta1, float beta2,
                              float eps, float weight_decay) {
  DeviceGuard g(device_);
  const int64_t n = check_adamw_apply_args(param, grad, m, v, segments, state, beta1, beta2);
  adamw_apply_launch(param.f32(), grad.f32(), m.f32(), v.f32(), n, segments.f64(), segments.shape[0],
                     state.f64(), lr, beta1, beta2, eps, weight_decay, stream_);
}

}  // namespace octet::cuda
