// src/cuda/ops.h — launchers of the CUDA backend's non-GEMM kernels (elementwise, embedding, norms,
// RoPE, activations, head layouts, loss, reductions, AdamW).
//
// Each is the GPU twin of the CPU backend operation of the same name (src/cpu/backend/*) with the
// semantics documented in include/octet/backend.h; shapes and layouts are the ones given there.
// All pointers are device pointers; every launcher enqueues on `stream` and checks the launch.
// Reductions accumulate in double like the CPU twin (sums of squares, norm statistics, softmax
// denominators); pointwise math runs in FP32 (double where the twin's formula cancels).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace octet::cuda {

// elementwise.cu
void fill_launch(float* x, float value, size_t n, cudaStream_t s);
void axpy_launch(float a, const float* x, float* y, size_t n, cudaStream_t s);
void scale_launch(float a, float* x, size_t n, cudaStream_t s);
void gelu_forward_launch(const float* x, float* y, size_t n, cudaStream_t s);
void gelu_backward_launch(const float* x, const float* dy, float* dx, size_t n, cudaStream_t s);
void swiglu_forward_launch(const float* h, float* y, int64_t rows, int64_t f, cudaStream_t s);
void swiglu_backward_launch(const float* h, const float* dy, float* dh, int64_t rows, int64_t f,
                            cudaStream_t s);
void embedding_forward_launch(const int32_t* ids, const float* table, float* out, int64_t n,
                              int64_t dim, cudaStream_t s);
void embedding_backward_launch(const int32_t* ids, const float* dout, float* dtable, int64_t n,
                               int64_t dim, cudaStream_t s);
void rope_launch(float* x, int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, float theta,
                 bool inverse, cudaStream_t s);
/// qkv [B,T,(H+2G)D] <-> q [B,H,T,D], k, v [B,G,T,D]; to_heads=false is merge_qkv.
void qkv_layout_launch(float* qkv, float* q, float* k, float* v, int64_t batch, int64_t seq,
                       int64_t heads, int64_t kv_heads, int64_t head_dim, bool to_heads,
                       cudaStream_t s);
/// [B,H,T,D] -> [B,T,H*D] (to_tokens) or back.
void heads_tokens_launch(const float* x, float* y, int64_t batch, int64_t heads, int64_t seq,
                         int64_t head_dim, bool to_tokens, cudaStream_t s);

/// x[i] = sigma · (a deterministic pseudo-normal sample of (seed, i)) — inputs for benchmarks and
/// large tests without a host round trip (sum of 4 hashed uniforms, rescaled to unit variance).
void fill_random_launch(float* x, size_t n, uint32_t seed, float sigma, cudaStream_t s);

// norms.cu
void rmsnorm_forward_launch(const float* x, const float* w, float* y, float* rstd, int64_t rows,
                            int64_t dim, float eps, cudaStream_t s);
void rmsnorm_backward_launch(const float* x, const float* w, const float* rstd, const float* dy,
                             float* dx, float* dw, int64_t rows, int64_t dim, cudaStream_t s);
void layernorm_forward_launch(const float* x, const float* w, const float* b, float* y,
                              float* mean, float* rstd, int64_t rows, int64_t dim, float eps,
                              cudaStream_t s);
void layernorm_backward_launch(const float* x, const float* w, const float* mean,
                               const float* rstd, const float* dy, float* dx, float* dw, float* db,
                               int64_t rows, int64_t dim, cudaStream_t s);

// loss.cu: per-row loss (double) into row_loss [n]; dlogits may alias logits or be null.
void cross_entropy_launch(const float* logits, const int32_t* targets, float* dlogits,
                          double* row_loss, int64_t n, int64_t vocab, float grad_scale,
                          cudaStream_t s);
/// Sets *bad = 1 if any target >= vocab (checked before the loss, like the CPU twin).
void check_targets_launch(const int32_t* targets, int64_t n, int64_t vocab, int* bad,
                          cudaStream_t s);

// reduce.cu: partial sums in double, `parts` blocks; the caller sums parts on the host.
int reduce_parts(size_t n);
void sum_squares_launch(const float* x, size_t n, double* parts, cudaStream_t s);
void sum_launch(const float* x, size_t n, double* parts, cudaStream_t s);
/// parts2[2*i] = Σ (x−mu)², parts2[2*i+1] = Σ (x−mu)⁴.
void central_moments_launch(const float* x, size_t n, double mu, double* parts2, cudaStream_t s);
/// Generic double sum of a device array into parts (used for per-row losses).
void sum_double_launch(const double* x, size_t n, double* parts, cudaStream_t s);

// adamw.cu (double arithmetic per element, as the CPU twin)
void adamw_launch(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1,
                  float beta2, float eps, float wd, double bc1, double bc2, cudaStream_t s);

}  // namespace octet::cuda
