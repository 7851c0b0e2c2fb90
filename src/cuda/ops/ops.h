// src/cuda/ops/ops.h — launchers of the CUDA backend's non-GEMM kernels (elementwise, batched span
// copies, embedding, norms, RoPE, activations, head layouts, loss, reductions, AdamW).
//
// Each is the GPU twin of the CPU backend operation of the same name (src/cpu/backend/*) with the
// semantics documented in include/octet/backend.h; shapes and layouts are the ones given there.
// Tensors are device views already validated by the backend (cuda/backend.cpp checks dtypes and
// shapes once, at the boundary); act tensors may be F32 or BF16 each (typed.cuh: loaded as FP32,
// rounded once on store). Every launcher enqueues on `stream`, checks the launch and never waits.
// Reductions accumulate in double like the CPU twin (sums of squares, norm statistics, softmax
// denominators); pointwise math runs in FP32 (double where the twin's formula cancels).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "octet/tensor.h"

namespace octet::cuda {

// elementwise.cu
/// x = value for F64, F32, BF16 (rounded once) or I32 (truncated) tensors.
void fill_launch(const Tensor& x, double value, cudaStream_t s);
/// dst = src for act tensors of equal numel, converting F32 <-> BF16 (RNE) as the dtypes need.
void convert_launch(const Tensor& dst, const Tensor& src, cudaStream_t s);
void axpy_launch(float a, const Tensor& x, const Tensor& y, cudaStream_t s);
// copy_spans.cu
/// One batched copy (cub::DeviceMemcpy::Batched) of `n` runs of bytes: dst + dst_at[i] <- src +
/// src_at[i], bytes[i] each, from host arrays (uploaded with its scratch in stream order; the host
/// arrays may be reused once this returns). Checked by the caller (backend.h check_copy_spans).
void copy_spans_launch(void* dst, const void* src, const int64_t* src_at, const int64_t* dst_at,
                       const int64_t* bytes, int64_t n, cudaStream_t s);
void scale_launch(float a, const Tensor& x, cudaStream_t s);
/// amax (optional, device): *amax = max(*amax, |y| max as float bits, of y as stored) — the amax an
/// FP8 tensor-current quantizer of y needs (quantizer.h quantize(..., amax)), computed by the kernel
/// that writes y instead of a pre-pass over it. The same for the norms' forwards below.
void gelu_forward_launch(const Tensor& x, const Tensor& y, cudaStream_t s, unsigned* amax = nullptr);
void gelu_backward_launch(const Tensor& x, const Tensor& dy, const Tensor& dx, cudaStream_t s,
                          unsigned* amax = nullptr);  ///< amax of dx, as the forward's
/// h [rows, 2f], y [rows, f].
void swiglu_forward_launch(const Tensor& h, const Tensor& y, int64_t rows, int64_t f, cudaStream_t s);
void swiglu_backward_launch(const Tensor& h, const Tensor& dy, const Tensor& dh, int64_t rows, int64_t f,
                            cudaStream_t s);
/// ids [n], table F32 [vocab, dim], out act [n, dim].
void embedding_forward_launch(const int32_t* ids, const float* table, const Tensor& out, int64_t n,
                              int64_t dim, cudaStream_t s);
/// dtable F32 [vocab, dim] += the rows of dout act [n, dim] at ids [n] (each in [0, vocab)), in the
/// CPU twin's order (ids sorted stably with their positions, then each id's rows added in position
/// order: the same bits as the CPU backend, no atomics). workspace: embedding_backward_workspace bytes.
size_t embedding_backward_workspace(int64_t n, int64_t vocab);
void embedding_backward_launch(const int32_t* ids, const Tensor& dout, float* dtable, int64_t n, int64_t dim,
                               int64_t vocab, void* workspace, size_t workspace_bytes, cudaStream_t s);
/// x act [B, heads, seq, head_dim] (tokens_major: [B, seq, heads, head_dim]), rows = B·heads·seq,
/// rotated in place.
void rope_launch(const Tensor& x, int64_t rows, int64_t heads, int64_t seq, int64_t head_dim, float theta,
                 bool inverse, bool tokens_major, cudaStream_t s);
/// qkv [B,T,(H+2G)D] <-> q [B,H,T,D], k, v [B,G,T,D] (tokens_major: q [B,T,H,D], k, v [B,T,G,D]);
/// to_heads=false is merge_qkv.
void qkv_layout_launch(const Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v, int64_t batch,
                       int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim, bool to_heads,
                       bool tokens_major, cudaStream_t s);
/// [B,H,T,D] -> [B,T,H*D] (to_tokens) or back; x is the source, y the destination.
void heads_tokens_launch(const Tensor& x, const Tensor& y, int64_t batch, int64_t heads, int64_t seq,
                         int64_t head_dim, bool to_tokens, cudaStream_t s);

/// x[i] = sigma · (a deterministic pseudo-normal sample of (seed, i)) — inputs for benchmarks and
/// large tests without a host round trip (sum of 4 hashed uniforms, rescaled to unit variance).
void fill_random_launch(float* x, size_t n, uint32_t seed, float sigma, cudaStream_t s);

// norms.cu: x, y, dy, dx act [rows, dim]; w F32 [dim] or null (gain 1); b F32 or null;
// mean, rstd F32 [rows]; dw, db F32 accumulated (null: skipped); accumulate: dx += the gradient as
// stored (backend.h rmsnorm_backward).
void rmsnorm_forward_launch(const Tensor& x, const float* w, const Tensor& y, float* rstd, int64_t rows,
                            int64_t dim, float eps, cudaStream_t s, unsigned* amax = nullptr);
void rmsnorm_backward_launch(const Tensor& x, const float* w, const float* rstd, const Tensor& dy,
                             const Tensor& dx, float* dw, int64_t rows, int64_t dim, cudaStream_t s,
                             bool accumulate = false);
void layernorm_forward_launch(const Tensor& x, const float* w, const float* b, const Tensor& y, float* mean,
                              float* rstd, int64_t rows, int64_t dim, float eps, cudaStream_t s,
                              unsigned* amax = nullptr);
void layernorm_backward_launch(const Tensor& x, const float* w, const float* mean, const float* rstd,
                               const Tensor& dy, const Tensor& dx, float* dw, float* db, int64_t rows,
                               int64_t dim, cudaStream_t s, bool accumulate = false);

// loss.cu: per-row loss (double) into row_loss [n]; dlogits may alias logits or be empty.
// A target >= vocab makes its row's loss and dlogits NaN (the CPU twin throws; the GPU cannot
// without a host synchronization, so the NaN reaches the loss the trainer reads).
void cross_entropy_launch(const Tensor& logits, const int32_t* targets, const Tensor& dlogits,
                          double* row_loss, int64_t n, int64_t vocab, float grad_scale, cudaStream_t s);

// reduce.cu: partial sums in double, `parts` blocks (reduce_parts(n) of them).
int reduce_parts(size_t n);
void sum_squares_launch(const Tensor& x, double* parts, cudaStream_t s);
void sum_launch(const Tensor& x, double* parts, cudaStream_t s);
/// parts2[2*i] = Σ (x−mu)², parts2[2*i+1] = Σ (x−mu)⁴.
void central_moments_launch(const Tensor& x, double mu, double* parts2, cudaStream_t s);
/// Generic double sum of a device array into parts (used for per-row losses).
void sum_double_launch(const double* x, size_t n, double* parts, cudaStream_t s);
/// acc[0] += Σ parts[i] (i in order, one thread: deterministic). n_parts <= 1024.
void accumulate_parts_launch(const double* parts, int n_parts, double* acc, cudaStream_t s);
/// The attention row-residual accumulator (backend.h Attention::backward): acc[0] = max(acc[0],
/// max_i r[i]) (a NaN sticks), acc[1] += mean_i r[i]. n >= 1.
void residual_accumulate_launch(const double* r, int64_t n, double* acc, cudaStream_t s);

// reduce.cu: AdamW (double arithmetic per element, as the CPU twin), all F32 [n]
void adamw_launch(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                  float eps, float wd, double bc1, double bc2, cudaStream_t s);

// optim.cu: the fused optimizer step (backend.h adamw_prepare / adamw_apply; adamw_rule.h).
/// One thread: decides skip and clip from norm_sq[0] (and loss_sum[0] if not null) and updates
/// state (F64 [kOptStateSlots]); bias_corr F64 [t_rows, 2].
void adamw_prepare_launch(const double* norm_sq, const double* loss_sum, const double* bias_corr,
                          int64_t t_rows, double* state, float grad_clip, cudaStream_t s);
/// Unless state says skip: AdamW over n elements with clipped gradients, weight decay per element
/// from segments (F64 [k, 2] rows {end, decay}). Scalar grid-stride, one launch.
void adamw_apply_launch(float* p, const float* g, float* m, float* v, int64_t n, const double* segments,
                        int64_t k, const double* state, float lr, float beta1, float beta2, float eps,
                        float wd, cudaStream_t s);

}  // namespace octet::cuda
