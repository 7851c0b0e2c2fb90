// src/cuda/backend.cpp — CudaBackend (cuda_backend.h): memory, dispatch of every backend.h operation
// to its kernel (ops.h), host-side reductions of the double partials, and make_cuda_backend().
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cuda/check.h"
#include "cuda/cuda_backend.h"
#include "cuda/ops.h"
#include "octet/error.h"

namespace octet {
namespace cuda {

CudaBackend::CudaBackend() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  OCTET_CHECK(e == cudaSuccess && count > 0,
              std::string("cuda backend: no usable GPU (") +
                  (e == cudaSuccess ? "no device" : cudaGetErrorString(e)) + ")");
  OCTET_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  gemm_ = std::make_unique<GemmEngine>(stream_);
}

CudaBackend::~CudaBackend() {
  gemm_.reset();
  parts_.reset();
  row_loss_.reset();
  flag_.reset();
  if (stream_) cudaStreamDestroy(stream_);
}

// ---- memory ----
float* CudaBackend::alloc(size_t n) {
  float* p = nullptr;
  OCTET_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p), (n ? n : 1) * sizeof(float)));
  OCTET_CUDA_CHECK(cudaMemsetAsync(p, 0, (n ? n : 1) * sizeof(float), stream_));
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return p;
}
int32_t* CudaBackend::alloc_i32(size_t n) {
  int32_t* p = nullptr;
  OCTET_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p), (n ? n : 1) * sizeof(int32_t)));
  OCTET_CUDA_CHECK(cudaMemsetAsync(p, 0, (n ? n : 1) * sizeof(int32_t), stream_));
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return p;
}
void CudaBackend::release(void* p) {
  if (!p) return;
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
  OCTET_CUDA_CHECK(cudaFree(p));
}
void CudaBackend::upload(float* dst, const float* src, size_t n) {
  OCTET_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyHostToDevice, stream_));
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
}
void CudaBackend::upload_i32(int32_t* dst, const int32_t* src, size_t n) {
  OCTET_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
}
void CudaBackend::download(float* dst, const float* src, size_t n) {
  OCTET_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
}
void CudaBackend::fill(float* x, float value, size_t n) { fill_launch(x, value, n, stream_); }
void CudaBackend::copy(float* dst, const float* src, size_t n) {
  OCTET_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
}
void CudaBackend::synchronize() { OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

// ---- elementwise, embedding, norms, RoPE, activations, layouts ----
void CudaBackend::axpy(float a, const float* x, float* y, size_t n) { axpy_launch(a, x, y, n, stream_); }
void CudaBackend::scale(float a, float* x, size_t n) { scale_launch(a, x, n, stream_); }

void CudaBackend::embedding_forward(const int32_t* ids, const float* table, float* out, int64_t n,
                                    int64_t dim) {
  OCTET_CHECK(n >= 0 && dim >= 1, "embedding: need n >= 0 and dim >= 1");
  embedding_forward_launch(ids, table, out, n, dim, stream_);
}
void CudaBackend::embedding_backward(const int32_t* ids, const float* dout, float* dtable,
                                     int64_t n, int64_t dim) {
  OCTET_CHECK(n >= 0 && dim >= 1, "embedding: need n >= 0 and dim >= 1");
  embedding_backward_launch(ids, dout, dtable, n, dim, stream_);
}

static void check_norm(const char* op, int64_t rows, int64_t dim) {
  OCTET_CHECK(rows >= 0 && dim >= 1, std::string(op) + ": need rows >= 0 and dim >= 1, got rows=" +
                                         std::to_string(rows) + " dim=" + std::to_string(dim));
}
void CudaBackend::rmsnorm_forward(const float* x, const float* w, float* y, float* rstd,
                                  int64_t rows, int64_t dim, float eps) {
  check_norm("rmsnorm_forward", rows, dim);
  rmsnorm_forward_launch(x, w, y, rstd, rows, dim, eps, stream_);
}
void CudaBackend::rmsnorm_backward(const float* x, const float* w, const float* rstd,
                                   const float* dy, float* dx, float* dw, int64_t rows,
                                   int64_t dim) {
  check_norm("rmsnorm_backward", rows, dim);
  rmsnorm_backward_launch(x, w, rstd, dy, dx, dw, rows, dim, stream_);
}
void CudaBackend::layernorm_forward(const float* x, const float* w, const float* b, float* y,
                                    float* mean, float* rstd, int64_t rows, int64_t dim, float eps) {
  check_norm("layernorm_forward", rows, dim);
  layernorm_forward_launch(x, w, b, y, mean, rstd, rows, dim, eps, stream_);
}
void CudaBackend::layernorm_backward(const float* x, const float* w, const float* mean,
                                     const float* rstd, const float* dy, float* dx, float* dw,
                                     float* db, int64_t rows, int64_t dim) {
  check_norm("layernorm_backward", rows, dim);
  layernorm_backward_launch(x, w, mean, rstd, dy, dx, dw, db, rows, dim, stream_);
}

void CudaBackend::rope(float* x, int64_t batch, int64_t heads, int64_t seq, int64_t head_dim,
                       float theta, bool inverse) {
  OCTET_CHECK(batch >= 0 && heads >= 0 && seq >= 0, "rope: negative size");
  OCTET_CHECK(head_dim >= 2 && head_dim % 2 == 0,
              "rope: head_dim must be even and >= 2, got " + std::to_string(head_dim));
  OCTET_CHECK(theta > 0.0f && std::isfinite(theta),
              "rope: theta must be positive and finite, got " + std::to_string(theta));
  rope_launch(x, batch, heads, seq, head_dim, theta, inverse, stream_);
}

void CudaBackend::gelu_forward(const float* x, float* y, size_t n) { gelu_forward_launch(x, y, n, stream_); }
void CudaBackend::gelu_backward(const float* x, const float* dy, float* dx, size_t n) {
  gelu_backward_launch(x, dy, dx, n, stream_);
}
void CudaBackend::swiglu_forward(const float* h, float* y, int64_t rows, int64_t f) {
  OCTET_CHECK(rows >= 0 && f >= 1, "swiglu: need rows >= 0 and f >= 1");
  swiglu_forward_launch(h, y, rows, f, stream_);
}
void CudaBackend::swiglu_backward(const float* h, const float* dy, float* dh, int64_t rows,
                                  int64_t f) {
  OCTET_CHECK(rows >= 0 && f >= 1, "swiglu: need rows >= 0 and f >= 1");
  swiglu_backward_launch(h, dy, dh, rows, f, stream_);
}

static void check_layout(const char* op, int64_t batch, int64_t seq, int64_t heads,
                         int64_t kv_heads, int64_t head_dim) {
  OCTET_CHECK(batch >= 0 && seq >= 0 && heads >= 1 && kv_heads >= 1 && head_dim >= 1,
              std::string(op) + ": invalid shape");
}
void CudaBackend::split_qkv(const float* qkv, float* q, float* k, float* v, int64_t batch,
                            int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim) {
  check_layout("split_qkv", batch, seq, heads, kv_heads, head_dim);
  qkv_layout_launch(const_cast<float*>(qkv), q, k, v, batch, seq, heads, kv_heads, head_dim, true,
                    stream_);
}
void CudaBackend::merge_qkv(const float* q, const float* k, const float* v, float* qkv,
                            int64_t batch, int64_t seq, int64_t heads, int64_t kv_heads,
                            int64_t head_dim) {
  check_layout("merge_qkv", batch, seq, heads, kv_heads, head_dim);
  qkv_layout_launch(qkv, const_cast<float*>(q), const_cast<float*>(k), const_cast<float*>(v), batch,
                    seq, heads, kv_heads, head_dim, false, stream_);
}
void CudaBackend::heads_to_tokens(const float* x, float* y, int64_t batch, int64_t heads,
                                  int64_t seq, int64_t head_dim) {
  check_layout("heads_to_tokens", batch, seq, heads, 1, head_dim);
  heads_tokens_launch(x, y, batch, heads, seq, head_dim, true, stream_);
}
void CudaBackend::tokens_to_heads(const float* x, float* y, int64_t batch, int64_t heads,
                                  int64_t seq, int64_t head_dim) {
  check_layout("tokens_to_heads", batch, seq, heads, 1, head_dim);
  heads_tokens_launch(x, y, batch, heads, seq, head_dim, false, stream_);
}

// ---- GEMMs ----
std::unique_ptr<Linear> CudaBackend::make_linear(const LinearSpec& spec) {
  return make_cuda_linear(spec, *gemm_);
}

// ---- loss and reductions ----
double CudaBackend::sum_parts(size_t n_parts, int per_part, int which) {
  std::vector<double> h(n_parts * size_t(per_part));
  OCTET_CUDA_CHECK(cudaMemcpyAsync(h.data(), parts_.get(), h.size() * sizeof(double),
                                   cudaMemcpyDeviceToHost, stream_));
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
  double s = 0.0;
  for (size_t i = 0; i < n_parts; ++i) s += h[i * size_t(per_part) + size_t(which)];
  return s;
}

double CudaBackend::cross_entropy(const float* logits, const int32_t* targets, float* dlogits,
                                  int64_t n, int64_t vocab, float grad_scale) {
  OCTET_CHECK(n >= 0 && vocab >= 1, "cross_entropy: need n >= 0 and vocab >= 1, got n=" +
                                        std::to_string(n) + " vocab=" + std::to_string(vocab));
  if (n == 0) return 0.0;
  int* bad = flag_.reserve(1);
  OCTET_CUDA_CHECK(cudaMemsetAsync(bad, 0, sizeof(int), stream_));
  check_targets_launch(targets, n, vocab, bad, stream_);
  int hbad = 0;
  OCTET_CUDA_CHECK(cudaMemcpyAsync(&hbad, bad, sizeof(int), cudaMemcpyDeviceToHost, stream_));
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
  OCTET_CHECK(hbad == 0, "cross_entropy: a target is >= vocab " + std::to_string(vocab));
  double* rl = row_loss_.reserve(size_t(n));
  cross_entropy_launch(logits, targets, dlogits, rl, n, vocab, grad_scale, stream_);
  const int parts = reduce_parts(size_t(n));
  parts_.reserve(size_t(parts));
  sum_double_launch(rl, size_t(n), parts_.get(), stream_);
  return sum_parts(size_t(parts));
}

double CudaBackend::sum_squares(const float* x, size_t n) {
  if (n == 0) return 0.0;
  const int parts = reduce_parts(n);
  parts_.reserve(size_t(parts));
  sum_squares_launch(x, n, parts_.get(), stream_);
  return sum_parts(size_t(parts));
}

Backend::Moments CudaBackend::moments(const float* x, size_t n) {
  Moments out;
  if (n == 0) return out;
  const int parts = reduce_parts(n);
  parts_.reserve(size_t(2 * parts));
  sum_launch(x, n, parts_.get(), stream_);
  const double mu = sum_parts(size_t(parts)) / double(n);
  central_moments_launch(x, n, mu, parts_.get(), stream_);
  const double m2 = sum_parts(size_t(parts), 2, 0) / double(n);
  const double m4 = sum_parts(size_t(parts), 2, 1) / double(n);
  out.mean = mu;
  out.variance = m2;
  out.kurtosis = m2 > 0.0 ? m4 / (m2 * m2) : 0.0;
  return out;
}

void CudaBackend::adamw(float* param, const float* grad, float* m, float* v, size_t n, float lr,
                        float beta1, float beta2, float eps, float weight_decay, int64_t step) {
  OCTET_CHECK(step >= 1, "adamw: step must be >= 1, got " + std::to_string(step));
  OCTET_CHECK(beta1 >= 0.0f && beta1 < 1.0f && beta2 >= 0.0f && beta2 < 1.0f,
              "adamw: betas must lie in [0, 1)");
  const double bc1 = 1.0 - std::pow(double(beta1), double(step));
  const double bc2 = 1.0 - std::pow(double(beta2), double(step));
  adamw_launch(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, bc1, bc2, stream_);
}

}  // namespace cuda

std::unique_ptr<Backend> make_cuda_backend() { return std::make_unique<cuda::CudaBackend>(); }

}  // namespace octet
