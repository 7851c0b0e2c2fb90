// src/cuda/flash/flash_forward.h — the fused FP8 attention forward, in two kernel flavors with one
// semantics: warp-level mma.sync with E4M3 operands (FlashAttention-2's structure, arXiv
// 2307.08691, with FlashAttention-3's FP8 P, arXiv 2407.08608; flash_forward.cu) and Hopper
// warpgroup MMA (wgmma, sm_90a; flash_forward_wgmma.cu). Its reference twin is the CPU tiled form
// (src/cpu/attention_tiled.cpp) with block_k = the kernel's key tile; CudaAttention
// (src/cuda/attention.cpp) runs it for AttnForm::Tiled. docs/cuda.md §"Fused FP8 attention forward"
// and §"wgmma forward".
//
// Per query row i of head (b, h), reading KV head h / (H/G) (GQA), keys j < visible(i) (all Tk,
// or causal bottom-right: j <= i + Tk − Tq), key tiles of block_k from j = 0:
//   S = τ·(Q̂K̂ᵀ)·sq·sk in FP32; online softmax (flash_softmax.cuh); P̃ = E4M3(exp(S − m_new)·p_scale);
//   O = bf16_round((Σ P̃·V̂·sv) / Σ P̃), LSE = m + log l, row_max = m, row_sum = l (l the unrounded
//   Σ exp(S − m): the statistics the unfused backward's P = exp(S − m) / l reads).
// A row that sees no key: O = 0, LSE = row_max = −inf, row_sum = 0.
// No S x S buffer: memory is the inputs, the outputs and per-CTA shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace octet::cuda::flash {

/// Which kernel runs the forward (and logits_launch). Auto: the environment variable
/// OCTET_FLASH_FORWARD if set (`mma_sync` or `wgmma`; anything else is an octet::Error), else
/// wgmma on an sm_90 device (head_dim 64 and 128, every block_k) when kWgmmaOnSm90, else mma_sync.
enum class ForwardKernel { Auto, MmaSync, Wgmma };

/// Whether Auto picks the wgmma kernel on an sm_90 device. On since 2026-12-01: faster than
/// mma.sync at every shape measured on the H200 (docs/cuda.md §"wgmma forward": 1.17-1.55x with
/// the operand glue, B4-8 H12-16 D64/128 S1024-4096) and within the FP64 oracle's rule. Its FP8
/// P̃V̂ accumulator moves O by up to ~3e-3 relative, which the stale delta D_i = dO_i·O_i reads: as
/// after cuDNN's FP8 forward, whose P̃V̂ runs on the same instruction. mma.sync stays for other GPUs
/// and as OCTET_FLASH_FORWARD=mma_sync.
inline constexpr bool kWgmmaOnSm90 = true;

/// "mma_sync" | "wgmma" ("auto" for Auto): the names OCTET_FLASH_FORWARD takes.
const char* forward_kernel_name(ForwardKernel k);

/// One forward call. Tq_p, Tk_p: the sequence lengths rounded up to a multiple of 16 (pads hold
/// zero codes). All pointers are device pointers; the code buffers must be 16-byte aligned.
struct ForwardParams {
  const uint8_t* q = nullptr;    ///< Q̂ E4M3 codes [B, H, Tq_p, D]
  const uint8_t* k = nullptr;    ///< K̂ E4M3 codes [B, G, Tk_p, D]
  const uint8_t* v_t = nullptr;  ///< V̂ᵀ E4M3 codes [B, G, D, Tk_p]
  /// the 1/scale of Q̂, K̂, V̂: one float each, or with qkv_head_block one per (batch, head,
  /// 128-token block): [B, H, ⌈Tq/128⌉] for Q̂, [B, G, ⌈Tk/128⌉] for K̂ and V̂ (flash_qkv_scales.cuh)
  const float* q_scale_inv = nullptr;
  const float* k_scale_inv = nullptr;
  const float* v_scale_inv = nullptr;
  bool qkv_head_block = false;  ///< QkvScaling::HeadBlock (octet/attention.h)
  float* o = nullptr;        ///< out [B, H, Tq, D] F32 holding BF16-rounded values
  float* lse = nullptr;      ///< out [B, H, Tq]
  float* row_max = nullptr;  ///< out [B, H, Tq]: m_i
  float* row_sum = nullptr;  ///< out [B, H, Tq]: l_i
  int64_t B = 0, H = 0, G = 0, Tq = 0, Tk = 0, Tq_p = 0, Tk_p = 0, D = 0;
  bool causal = false;
  float tau = 0.0f;        ///< softmax scale τ (usually 1/√D)
  float p_scale = 256.0f;  ///< P̃'s static power-of-two scale (attention.h validate_p_scale)
  int64_t block_k = 128;   ///< key tile: the CPU twin's block_k
  ForwardKernel kernel = ForwardKernel::Auto;  ///< which flavor runs (select_forward_kernel)
};

/// The kernel forward_launch and logits_launch run for `requested` (ForwardKernel's rule for Auto)
/// on the current device. Throws octet::Error on an unknown OCTET_FLASH_FORWARD value, or when
/// wgmma is asked for (by `requested` or the variable) on a device that is not sm_90.
ForwardKernel select_forward_kernel(ForwardKernel requested = ForwardKernel::Auto);

/// Throws octet::Error unless head_dim ∈ {64, 128} and block_k ∈ {64, 128} (the instantiated
/// kernels), naming the supported values.
void check_forward_supported(int64_t head_dim, int64_t block_k);

/// Launches the forward on `stream` (asynchronous). Throws octet::Error on an unsupported
/// head_dim or block_k (check_forward_supported), inconsistent dimensions (H not a multiple of G,
/// Tq_p/Tk_p not the 16-rounded lengths), a null or misaligned pointer.
void forward_launch(const ForwardParams& p, cudaStream_t stream);

/// S [B, H, Tq_p, Tk_p] FP32 = τ·(Q̂K̂ᵀ)·sq·sk for every row and key, pads included (0), unmasked,
/// with the bits forward_launch computes for each (i, j) with the same p (the same kernel flavor,
/// select_forward_kernel(p.kernel): same MMA sequence, same scale product), so that the saved
/// (m, l) describe exactly its S and its P = exp(S − m) / l sums to 1 to FP32 rounding.
/// The two flavors' S may differ at FP32 rounding level (the tensor core's sum over head_dim in
/// wgmma vs mma.sync). The fused backward (flash_backward.h) recomputes S with mma.sync: after a
/// wgmma forward its P = exp(S − m) / l then sums to 1 only up to that rounding, which the matched
/// delta's rule (Σ P·dP / Σ P, octet/delta_rule.h) absorbs: the row residual stays at FP32 level.
/// Reads p's Q̂, K̂, their scales, the dimensions, block_k and kernel (v_t, v_scale_inv, o, lse,
/// row_max, row_sum are not used). Errors as forward_launch's.
void logits_launch(const ForwardParams& p, float* s, cudaStream_t stream);

/// The wgmma flavor's launch (flash_forward_wgmma.cu), for forward_launch and logits_launch after
/// their checks: the forward if s_out is null, else the logits into s_out.
void wgmma_forward_launch(const ForwardParams& p, float* s_out, cudaStream_t stream);

}  // namespace octet::cuda::flash
