// src/cuda/elementwise.cu — pointwise and layout kernels of the CUDA backend: fill, axpy, scale,
// GELU (tanh form, Hendrycks & Gimpel 2016), SwiGLU (Shazeer 2020), embedding lookup/scatter-add,
// RoPE (Su et al., arXiv 2104.09864, rotate-half pairing) and the head-layout permutations.
// Twins of src/cpu/backend/{memory,activations,embedding,rope,heads}.cpp; see ops.h.
// Activations are evaluated in double, as the CPU twin does, so the two agree to FP32 rounding.
#include <cuda_runtime.h>

#include "cuda/check.h"
#include "cuda/ops.h"

namespace octet::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b < 1) b = 1;
  if (b > 132 * 64) b = 132 * 64;  // grid-stride loops beyond this
  return unsigned(b);
}

#define OCTET_GRID_STRIDE(i, n)                                                       \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < int64_t(n); \
       i += int64_t(gridDim.x) * blockDim.x)

__global__ void fill_kernel(float* x, float v, size_t n) { OCTET_GRID_STRIDE(i, n) x[i] = v; }
__global__ void axpy_kernel(float a, const float* x, float* y, size_t n) {
  OCTET_GRID_STRIDE(i, n) y[i] = y[i] + a * x[i];
}
__global__ void scale_kernel(float a, float* x, size_t n) { OCTET_GRID_STRIDE(i, n) x[i] *= a; }

__device__ __forceinline__ uint32_t hash32(uint32_t x) {  // a 32-bit integer mix (xorshift-multiply)
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}

__global__ void fill_random_kernel(float* x, size_t n, uint32_t seed, float sigma) {
  OCTET_GRID_STRIDE(i, n) {
    float s = 0.0f;
    for (uint32_t k = 0; k < 4; ++k)
      s += float(hash32(uint32_t(i) * 4u + k + hash32(seed + uint32_t(i >> 32))) >> 8) * (1.0f / 16777216.0f);
    x[i] = sigma * (s - 2.0f) * 1.7320508f;  // Irwin–Hall(4): mean 2, variance 1/3
  }
}

constexpr double kGeluC = 0.044715;
constexpr double kSqrt2OverPi = 0.79788456080286535588;

__global__ void gelu_forward_kernel(const float* x, float* y, size_t n) {
  OCTET_GRID_STRIDE(i, n) {
    const double v = x[i];
    const double u = kSqrt2OverPi * (v + kGeluC * v * v * v);
    y[i] = float(0.5 * v * (1.0 + tanh(u)));
  }
}
__global__ void gelu_backward_kernel(const float* x, const float* dy, float* dx, size_t n) {
  OCTET_GRID_STRIDE(i, n) {
    const double v = x[i];
    const double th = tanh(kSqrt2OverPi * (v + kGeluC * v * v * v));
    const double du = kSqrt2OverPi * (1.0 + 3.0 * kGeluC * v * v);
    dx[i] = float(double(dy[i]) * (0.5 * (1.0 + th) + 0.5 * v * (1.0 - th * th) * du));
  }
}

__device__ __forceinline__ double sigmoid(double g) { return 1.0 / (1.0 + exp(-g)); }

__global__ void swiglu_forward_kernel(const float* h, float* y, int64_t rows, int64_t f) {
  OCTET_GRID_STRIDE(i, rows * f) {
    const int64_t r = i / f, c = i % f;
    const double g = h[r * 2 * f + c];
    y[i] = float(g * sigmoid(g) * double(h[r * 2 * f + f + c]));
  }
}
__global__ void swiglu_backward_kernel(const float* h, const float* dy, float* dh, int64_t rows,
                                       int64_t f) {
  OCTET_GRID_STRIDE(i, rows * f) {
    const int64_t r = i / f, c = i % f;
    const double g = h[r * 2 * f + c], u = h[r * 2 * f + f + c], d = dy[i];
    const double s = sigmoid(g);
    dh[r * 2 * f + c] = float(d * u * s * (1.0 + g * (1.0 - s)));
    dh[r * 2 * f + f + c] = float(d * g * s);
  }
}

__global__ void embedding_forward_kernel(const int32_t* ids, const float* table, float* out,
                                         int64_t n, int64_t dim) {
  OCTET_GRID_STRIDE(i, n * dim) out[i] = table[int64_t(ids[i / dim]) * dim + i % dim];
}
__global__ void embedding_backward_kernel(const int32_t* ids, const float* dout, float* dtable,
                                          int64_t n, int64_t dim) {
  OCTET_GRID_STRIDE(i, n * dim) atomicAdd(&dtable[int64_t(ids[i / dim]) * dim + i % dim], dout[i]);
}

// One thread per rotation pair (t, i); the angle in double as the CPU twin's table.
__global__ void rope_kernel(float* x, int64_t bh, int64_t seq, int64_t head_dim, double theta,
                            double sign) {
  const int64_t half = head_dim / 2;
  OCTET_GRID_STRIDE(idx, bh * seq * half) {
    const int64_t i = idx % half, row = idx / half, t = row % seq;
    const double inv_freq = pow(theta, -2.0 * double(i) / double(head_dim));
    double sn, cs;
    sincos(double(t) * inv_freq * sign, &sn, &cs);
    float* v = x + row * head_dim;
    const double x1 = v[i], x2 = v[i + half];
    v[i] = float(x1 * cs - x2 * sn);
    v[i + half] = float(x1 * sn + x2 * cs);
  }
}

// tokens [B, T, width*D] <-> heads [B, n, T, D] for heads [first, first + n) of the token tensor.
__global__ void move_heads_kernel(const float* tokens_in, float* tokens_out, const float* heads_in,
                                  float* heads_out, int64_t batch, int64_t seq, int64_t width,
                                  int64_t first, int64_t n, int64_t head_dim, bool to_heads) {
  OCTET_GRID_STRIDE(idx, batch * n * seq * head_dim) {
    const int64_t d = idx % head_dim;
    const int64_t t = (idx / head_dim) % seq;
    const int64_t h = (idx / (head_dim * seq)) % n;
    const int64_t b = idx / (head_dim * seq * n);
    const int64_t tok = ((b * seq + t) * width + first + h) * head_dim + d;
    if (to_heads)
      heads_out[idx] = tokens_in[tok];
    else
      tokens_out[tok] = heads_in[idx];
  }
}

void move_heads(const float* tin, float* tout, const float* hin, float* hout, int64_t batch,
                int64_t seq, int64_t width, int64_t first, int64_t n, int64_t head_dim,
                bool to_heads, cudaStream_t s) {
  const int64_t total = batch * n * seq * head_dim;
  if (total == 0) return;
  move_heads_kernel<<<blocks_for(total), kThreads, 0, s>>>(tin, tout, hin, hout, batch, seq, width,
                                                           first, n, head_dim, to_heads);
  OCTET_CUDA_LAUNCH_CHECK();
}

}  // namespace

#define OCTET_LAUNCH(kernel, n, ...)                                 \
  do {                                                               \
    if ((n) == 0) return;                                            \
    kernel<<<blocks_for(int64_t(n)), kThreads, 0, s>>>(__VA_ARGS__); \
    OCTET_CUDA_LAUNCH_CHECK();                                       \
  } while (0)

void fill_launch(float* x, float value, size_t n, cudaStream_t s) {
  OCTET_LAUNCH(fill_kernel, n, x, value, n);
}
void fill_random_launch(float* x, size_t n, uint32_t seed, float sigma, cudaStream_t s) {
  OCTET_LAUNCH(fill_random_kernel, n, x, n, seed, sigma);
}
void axpy_launch(float a, const float* x, float* y, size_t n, cudaStream_t s) {
  OCTET_LAUNCH(axpy_kernel, n, a, x, y, n);
}
void scale_launch(float a, float* x, size_t n, cudaStream_t s) {
  OCTET_LAUNCH(scale_kernel, n, a, x, n);
}
void gelu_forward_launch(const float* x, float* y, size_t n, cudaStream_t s) {
  OCTET_LAUNCH(gelu_forward_kernel, n, x, y, n);
}
void gelu_backward_launch(const float* x, const float* dy, float* dx, size_t n, cudaStream_t s) {
  OCTET_LAUNCH(gelu_backward_kernel, n, x, dy, dx, n);
}
void swiglu_forward_launch(const float* h, float* y, int64_t rows, int64_t f, cudaStream_t s) {
  OCTET_LAUNCH(swiglu_forward_kernel, rows * f, h, y, rows, f);
}
void swiglu_backward_launch(const float* h, const float* dy, float* dh, int64_t rows, int64_t f,
                            cudaStream_t s) {
  OCTET_LAUNCH(swiglu_backward_kernel, rows * f, h, dy, dh, rows, f);
}
void embedding_forward_launch(const int32_t* ids, const float* table, float* out, int64_t n,
                              int64_t dim, cudaStream_t s) {
  OCTET_LAUNCH(embedding_forward_kernel, n * dim, ids, table, out, n, dim);
}
void embedding_backward_launch(const int32_t* ids, const float* dout, float* dtable, int64_t n,
                               int64_t dim, cudaStream_t s) {
  OCTET_LAUNCH(embedding_backward_kernel, n * dim, ids, dout, dtable, n, dim);
}
void rope_launch(float* x, int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, float theta,
                 bool inverse, cudaStream_t s) {
  OCTET_LAUNCH(rope_kernel, batch * heads * seq * (head_dim / 2), x, batch * heads, seq, head_dim,
               double(theta), inverse ? -1.0 : 1.0);
}
void qkv_layout_launch(float* qkv, float* q, float* k, float* v, int64_t batch, int64_t seq,
                       int64_t heads, int64_t kv_heads, int64_t head_dim, bool to_heads,
                       cudaStream_t s) {
  const int64_t w = heads + 2 * kv_heads;
  if (to_heads) {
    move_heads(qkv, nullptr, nullptr, q, batch, seq, w, 0, heads, head_dim, true, s);
    move_heads(qkv, nullptr, nullptr, k, batch, seq, w, heads, kv_heads, head_dim, true, s);
    move_heads(qkv, nullptr, nullptr, v, batch, seq, w, heads + kv_heads, kv_heads, head_dim, true, s);
  } else {
    move_heads(nullptr, qkv, q, nullptr, batch, seq, w, 0, heads, head_dim, false, s);
    move_heads(nullptr, qkv, k, nullptr, batch, seq, w, heads, kv_heads, head_dim, false, s);
    move_heads(nullptr, qkv, v, nullptr, batch, seq, w, heads + kv_heads, kv_heads, head_dim, false, s);
  }
}
void heads_tokens_launch(const float* x, float* y, int64_t batch, int64_t heads, int64_t seq,
                         int64_t head_dim, bool to_tokens, cudaStream_t s) {
  if (to_tokens)
    move_heads(nullptr, y, x, nullptr, batch, seq, heads, 0, heads, head_dim, false, s);
  else
    move_heads(x, nullptr, nullptr, y, batch, seq, heads, 0, heads, head_dim, true, s);
}

}  // namespace octet::cuda
