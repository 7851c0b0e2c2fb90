// src/cuda/flash/flash_forward.h — the fused FP8 attention forward (first step: warp-level
// mma.sync with E4M3 operands, FlashAttention-2's structure, arXiv 2307.08691, with
// FlashAttention-3's FP8 P, arXiv 2407.08608). Its reference twin is the CPU tiled form
// (src/cpu/attention_tiled.cpp) with block_k = the kernel's key tile; CudaAttention
// (src/cuda/attention.cpp) runs it for AttnForm::Tiled. docs/cuda.md §"Fused FP8 attention forward".
//
// Per query row i of head (b, h), reading KV head h / (H/G) (GQA), keys j < visible(i) (all Tk,
// or causal bottom-right: j <= i + Tk − Tq), key tiles of block_k from j = 0:
//   S = τ·(Q̂K̂ᵀ)·sq·sk in FP32; online softmax (flash_softmax.cuh); P̃ = E4M3(exp(S − m_new)·p_scale);
//   O = bf16_round((Σ P̃·V̂)·sv / Σ P̃), LSE = m + log l, row_max = m, row_sum = l (l the unrounded
//   Σ exp(S − m): the statistics the unfused backward's P = exp(S − m) / l reads).
// A row that sees no key: O = 0, LSE = row_max = −inf, row_sum = 0.
// No S x S buffer: memory is the inputs, the outputs and per-CTA shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace octet::cuda::flash {

/// One forward call. Tq_p, Tk_p: the sequence lengths rounded up to a multiple of 16 (pads hold
/// zero codes). All pointers are device pointers; the code buffers must be 16-byte aligned.
struct ForwardParams {
  const uint8_t* q = nullptr;    ///< Q̂ E4M3 codes [B, H, Tq_p, D]
  const uint8_t* k = nullptr;    ///< K̂ E4M3 codes [B, G, Tk_p, D]
  const uint8_t* v_t = nullptr;  ///< V̂ᵀ E4M3 codes [B, G, D, Tk_p]
  const float* q_scale_inv = nullptr;  ///< one float each: the tensors' 1/scale
  const float* k_scale_inv = nullptr;
  const float* v_scale_inv = nullptr;
  float* o = nullptr;        ///< out [B, H, Tq, D] F32 holding BF16-rounded values
  float* lse = nullptr;      ///< out [B, H, Tq]
  float* row_max = nullptr;  ///< out [B, H, Tq]: m_i
  float* row_sum = nullptr;  ///< out [B, H, Tq]: l_i
  int64_t B = 0, H = 0, G = 0, Tq = 0, Tk = 0, Tq_p = 0, Tk_p = 0, D = 0;
  bool causal = false;
  float tau = 0.0f;        ///< softmax scale τ (usually 1/√D)
  float p_scale = 256.0f;  ///< P̃'s static power-of-two scale (attention.h validate_p_scale)
  int64_t block_k = 128;   ///< key tile: the CPU twin's block_k
};

/// Throws octet::Error unless head_dim ∈ {64, 128} and block_k ∈ {64, 128} (the instantiated
/// kernels), naming the supported values.
void check_forward_supported(int64_t head_dim, int64_t block_k);

/// Launches the forward on `stream` (asynchronous). Throws octet::Error on an unsupported
/// head_dim or block_k (check_forward_supported), inconsistent dimensions (H not a multiple of G,
/// Tq_p/Tk_p not the 16-rounded lengths), a null or misaligned pointer.
void forward_launch(const ForwardParams& p, cudaStream_t stream);

/// S [B, H, Tq_p, Tk_p] FP32 = τ·(Q̂K̂ᵀ)·sq·sk for every row and key, pads included (0), unmasked,
/// with the bits forward_launch computes for each (i, j) (the same kernel: same MMA sequence, same
/// scale product). The unfused backward recomputes S with it after a fused forward, so that the
/// saved (m, l) describe exactly its S and its P = exp(S − m) / l sums to 1 to FP32 rounding.
/// Reads p's Q̂, K̂, their scales, the dimensions and block_k (v_t, v_scale_inv, o, lse, row_max,
/// row_sum are not used). Errors as forward_launch's.
void logits_launch(const ForwardParams& p, float* s, cudaStream_t stream);

}  // namespace octet::cuda::flash
