/* octet/c_api.h — a small C ABI over octet's Backend, Attention and Linear (backend.h), for
 * callers that cannot link C++: the PyTorch package (python/octet, loaded with ctypes; the choice
 * and its costs: docs/pytorch.md). Built as the shared library liboctet_c by every CMake preset;
 * the CUDA preset's copy also runs the CUDA backend.
 *
 * Conventions
 *  - Every function that can fail returns 0 on success and -1 on failure; the failure's message
 *    (octet::Error's, naming the problem) is then returned by octet_last_error() on the same
 *    thread. Functions returning a handle return NULL on failure. No C++ exception crosses this ABI.
 *  - Tensors are raw pointers in the memory of the handle's backend (host for "cpu"; device memory
 *    of the backend's device for "cuda:N", e.g. a PyTorch tensor's data_ptr()), row-major and
 *    contiguous, with the dtype given by the params (OCTET_C_F64/F32/BF16).
 *  - On CUDA every call enqueues on the backend's stream (the caller's, e.g. PyTorch's current
 *    stream) and returns without waiting, except where a function says it synchronizes.
 *  - Names (delta, precision, formats, recipe) are octet's own (octet/attention.h, octet/quant.h):
 *    an unknown name fails with a message listing the known ones.
 */
#ifndef OCTET_C_API_H
#define OCTET_C_API_H

#include <stdint.h>

#if defined(__GNUC__)
#define OCTET_C_EXPORT __attribute__((visibility("default")))
#else
#define OCTET_C_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** The ABI version; bumped on any change of a struct or signature below. */
#define OCTET_C_API_VERSION 7
OCTET_C_EXPORT int octet_c_api_version(void);

/** The message of the last failure on this thread ("" if none). Valid until the next call. */
OCTET_C_EXPORT const char* octet_last_error(void);

/** Element types of the tensors handed to the functions below. */
enum octet_c_dtype { OCTET_C_F64 = 0, OCTET_C_F32 = 1, OCTET_C_BF16 = 2 };

typedef struct octet_c_backend octet_c_backend;
typedef struct octet_c_linear octet_c_linear;

/** The CPU reference backend. */
OCTET_C_EXPORT octet_c_backend* octet_backend_new_cpu(void);
/** The CUDA backend on device ordinal `device`, enqueuing on `stream` (a cudaStream_t, e.g.
 *  PyTorch's current stream; NULL: the backend creates its own). NULL on failure: no CUDA in this
 *  build, no such device, or not sm_90 or newer (backend.h make_cuda_backend). */
OCTET_C_EXPORT octet_c_backend* octet_backend_new_cuda(int device, void* stream);
OCTET_C_EXPORT void octet_backend_free(octet_c_backend* backend);
/** Waits for everything enqueued on the backend's stream. */
OCTET_C_EXPORT int octet_backend_synchronize(octet_c_backend* backend);

/** The memory layout of an attention call's q, k, v, o and gradients (octet/attention.h
 *  AttnLayout): [batch, heads, seq, head_dim], or [batch, seq, heads, head_dim] (a projection's
 *  output as it is, FlashAttention's layout: no transposing copy). */
enum octet_c_layout { OCTET_C_HEADS_MAJOR = 0, OCTET_C_TOKENS_MAJOR = 1 };

/** One attention call (octet/attention.h), layouts (OCTET_C_HEADS_MAJOR; OCTET_C_TOKENS_MAJOR
 *  swaps the heads and seq axes of every tensor but lse):
 *    q, o, d_o, dq  [batch, n_heads,    seq_q, head_dim]
 *    k, v, dk, dv   [batch, n_kv_heads, seq_k, head_dim]   (GQA: n_kv_heads divides n_heads)
 *    lse            [batch, n_heads, seq_q], F32 (F64 when dtype is OCTET_C_F64), natural log.
 *  precision "fp8" | "bf16" | "fp64"; delta "matched" | "stale"; formats "hybrid" (dO and dS in
 *  E5M2) | "e4m3". The FP8 config is the fp8-stale / fp8-matched arms' (model.h
 *  attention_config; the flash kernels' flash form on CUDA where they implement head_dim).
 *  dtype OCTET_C_F32 or OCTET_C_BF16 runs the backend's Attention; OCTET_C_F64 (precision "fp64",
 *  "cpu" only) runs the FP64 oracle with FP64 inputs and outputs (gradient checks). */
typedef struct octet_attention_params {
  int64_t batch, n_heads, n_kv_heads, seq_q, seq_k, head_dim;
  int32_t causal;      /**< 0 or 1; bottom-right aligned when seq_q != seq_k */
  float softmax_scale; /**< τ; 0: 1/sqrt(head_dim) */
  const char* precision;
  const char* delta;
  const char* formats;
  int32_t dtype; /**< enum octet_c_dtype of q, k, v, o, d_o, dq, dk, dv */
  const void *q, *k, *v;
  void *o, *lse;      /**< forward: written */
  const void* d_o;    /**< backward: the output gradient */
  void *dq, *dk, *dv; /**< backward: written (not accumulated) */
  double* residual;   /**< backward, may be NULL: F64 [2] in backend memory, accumulates
                           the softmax-gradient row residual (backend.h Attention::backward:
                           [0] = max, [1] += mean); not computed for OCTET_C_F64 */
  void* saved;        /**< may be NULL: backend memory of saved_size >= octet_attention_saved_bytes()
                           bytes, 256-byte aligned, where the forward places what the backward
                           reads (FP8 codes, scales, softmax statistics; backend.h forward_to) */
  int64_t saved_size; /**< bytes at saved */
  int32_t layout;     /**< enum octet_c_layout of q, k, v, o, d_o, dq, dk, dv; another value fails */
  /** Packed sequences (FlashAttention's varlen form); n_seqs 0 and both pointers NULL: one dense
   *  call. n_seqs >= 1 sequences lie back to back: sequence s holds rows cu_seqlens_q[s] ..
   *  cu_seqlens_q[s + 1] − 1 of q, o, d_o, dq and rows cu_seqlens_k[s] .. cu_seqlens_k[s + 1] − 1
   *  of k, v, dk, dv, and attends to its own keys only (causal: bottom-right within the sequence).
   *  Needs batch 1 and OCTET_C_TOKENS_MAJOR (q [seq_q, n_heads, head_dim] with seq_q the total);
   *  the offsets are int64 [n_seqs + 1] in host memory, rising from 0 to seq_q and to seq_k
   *  (either total may be 0: a packing in which no sequence has queries, or none has keys);
   *  n_seqs at most 2^31 − 2 (FlashAttention's int32 offsets), and the backward's offsets must
   *  be the forward's: saved is laid out by them, and the library checks only that saved_size is
   *  at least what they need. lse holds sequence s's [n_heads, len_q(s)] at element
   *  n_heads · cu_seqlens_q[s]. No kernel reads the offsets yet: the call runs as dense calls,
   *  with causal sequences of len_q == len_k bucketed by their length rounded up to 128 (below
   *  65 tokens to a power of two from 16; one dense call of batch n over the bucket's sequences
   *  copied with zero padding to that length;
   *  real rows as their own call's in exact arithmetic, with the bucket's per-tensor FP8 scales)
   *  and every other sequence, or a bucket of one, a dense call on its rows; saved holds each
   *  dense call's state at a 256-byte aligned offset (octet_attention_saved_bytes gives the total;
   *  the forward zeroes the padding between two parts). A sequence with queries and no keys gets
   *  0 in its rows of o and dq and −inf in its lse; one with keys and no queries gets 0 in its
   *  rows of dk and dv. residual must be NULL. */
  int64_t n_seqs;
  const int64_t* cu_seqlens_q;
  const int64_t* cu_seqlens_k;
} octet_attention_params;

/** The bytes of `saved` that a forward with these params (shapes, precision, delta, formats,
 *  dtype, and the offsets of packed sequences; no tensor is read) fills: the same for every call
 *  with them. -1 on failure. */
OCTET_C_EXPORT int64_t octet_attention_saved_bytes(octet_c_backend* backend,
                                                   const octet_attention_params* params);
/** The same size as terms in the sizes of a dense call (octet/saved_size.h AttnSizeTerm), for a
 *  caller that must write it as an expression of symbolic sizes (torch.compile's dynamic shapes):
 *  term t is the four int64 terms[4t .. 4t + 3] = (unit_bytes, dims, seq_step, align) and covers
 *  round_up(unit_bytes · Π, align) bytes, Π the product of the sizes whose bits are set in dims
 *  (1 batch, 2 n_heads, 4 n_kv_heads, 8 head_dim, 16 seq_q, 32 seq_k), each sequence length
 *  entering as ceil(seq / seq_step); octet_attention_saved_bytes is the sum over the terms. The
 *  terms are those of the implementation the backend runs for these params; a call that differs in
 *  batch, seq_q or seq_k has the same terms wherever the backend runs the same implementation for
 *  it (every FP8 call does; precision "bf16" on CUDA leaves cuDNN's fused SDPA for the unfused
 *  form at seq_q = seq_k = 1 and at causal seq_q > seq_k). Writes the first min(count, capacity)
 *  terms and returns the count (0: nothing saved; above capacity: call again with room); -1 on
 *  failure (what octet_attention_saved_bytes refuses, packed sequences, terms NULL with capacity
 *  > 0, capacity < 0). */
OCTET_C_EXPORT int64_t octet_attention_saved_size_terms(octet_c_backend* backend,
                                                        const octet_attention_params* params, int64_t* terms,
                                                        int64_t capacity);
/** Forward: writes o and lse, and the saved state into `saved` if given. */
OCTET_C_EXPORT int octet_attention_forward(octet_c_backend* backend, const octet_attention_params* params);
/** Backward from d_o. With `saved`: reads the saved state a forward with the same params placed
 *  there, and that forward's o and lse (q, k, v are not read and may be NULL); the caller keeps
 *  all three unchanged in between. Without: re-runs the forward on q, k, v into scratch
 *  (deterministic: the same FP8 codes, O and softmax statistics as the caller's forward), which
 *  costs one extra forward (docs/pytorch.md). */
OCTET_C_EXPORT int octet_attention_backward(octet_c_backend* backend, const octet_attention_params* params);

/** A linear layer Y = X Wᵀ in FP8 (octet/backend.h Linear; recipes octet/quant.h). */
typedef struct octet_linear_spec {
  int64_t in_features, out_features;
  const char* recipe;       /**< "tensor-current" | "tensor-delayed" | "row" | "block" | "mx" | "unit" */
  const char* formats;      /**< "e4m3" | "hybrid" */
  int32_t amax_history_len; /**< tensor-delayed: history length H (1 to 2^20) */
  const char* amax_algo;    /**< tensor-delayed: "max" | "most_recent" */
  int32_t margin;           /**< scale = fp8_max / amax / 2^margin */
} octet_linear_spec;

/** One linear call: x act [rows, in], w F32 [out, in], y act [rows, out]; dy act [rows, out],
 *  dx act [rows, in] (written; NULL: skipped), dw F32 [out, in] (accumulated +=; NULL: skipped).
 *  act dtype: OCTET_C_F32 or OCTET_C_BF16. */
typedef struct octet_linear_call {
  int64_t rows;
  int32_t dtype;
  const void* x;
  const float* w;
  void* y;
  const void* dy;
  void* dx;
  float* dw;
  void* saved;        /**< may be NULL: backend memory of saved_size >= octet_linear_saved_bytes(rows)
                           bytes, 256-byte aligned, where the forward places what the backward reads
                           (X̂ᵀ and Ŵᵀ: FP8 codes and scales; backend.h Linear::forward_to) */
  int64_t saved_size; /**< bytes at saved */
} octet_linear_call;

/** NULL on failure (invalid spec: unknown recipe or format, history < 1, margin out of range). */
OCTET_C_EXPORT octet_c_linear* octet_linear_new(octet_c_backend* backend, const octet_linear_spec* spec);
OCTET_C_EXPORT void octet_linear_free(octet_c_linear* linear);
/** The bytes of `saved` that a forward of `rows` rows fills (the same for every such call); -1 on
 *  failure (rows < 1, or a size beyond int64). */
OCTET_C_EXPORT int64_t octet_linear_saved_bytes(octet_c_linear* linear, int64_t rows);
/** The same size as terms in the row count (octet/saved_size.h), for a caller that must write it
 *  as an expression of a symbolic row count (torch.compile's dynamic shapes): term t is the four
 *  int64 terms[4t .. 4t + 3] = (step_bytes, step_rows, fixed_bytes, align) and covers
 *  round_up(step_bytes · ceil(rows / step_rows) + fixed_bytes, align) bytes;
 *  octet_linear_saved_bytes(rows) is the sum over the terms. Writes the first min(count, capacity)
 *  terms and returns the count (0: the linear saves nothing; above capacity: call again with
 *  room); -1 on failure (terms NULL with capacity > 0, capacity < 0). */
OCTET_C_EXPORT int64_t octet_linear_saved_size_terms(octet_c_linear* linear, int64_t* terms,
                                                     int64_t capacity);
/** Forward: writes y, and the saved state into `saved` if given. Quantizes with each slot's current
 *  scale and records the amaxes. */
OCTET_C_EXPORT int octet_linear_forward(octet_c_linear* linear, const octet_linear_call* call);
/** Backward: dx and dw from dy. With `saved`: from the X̂ᵀ and Ŵᵀ a forward of the same rows placed
 *  there (x and w are not read and may be NULL; the caller keeps `saved` unchanged in between).
 *  Without: re-runs the forward's quantization of x and w first (the same codes: the scales only
 *  change at update_scales; not its GEMM), which costs one more pass over each. */
OCTET_C_EXPORT int octet_linear_backward(octet_c_linear* linear, const octet_linear_call* call);
/** Delayed scaling's update step (Linear::update_scales): once per optimizer step. */
OCTET_C_EXPORT int octet_linear_update_scales(octet_c_linear* linear);
/** The quantizer state (Linear::quant_state's layout) into out[0..capacity); returns the number of
 *  floats it holds (call with capacity 0 to ask), or -1 on failure. Synchronizes. */
OCTET_C_EXPORT int64_t octet_linear_quant_state(octet_c_linear* linear, float* out, int64_t capacity);
/** Restores a quant_state (Linear::load_quant_state); fails naming the mismatch. */
OCTET_C_EXPORT int octet_linear_load_quant_state(octet_c_linear* linear, const float* state, int64_t count);
/** Amax recorded at the last quantization of x, w and dy (Linear::stats_*), into out[3].
 *  Synchronizes. */
OCTET_C_EXPORT int octet_linear_amax(octet_c_linear* linear, float* out);

#ifdef __cplusplus
}
#endif
#endif /* OCTET_C_API_H */
