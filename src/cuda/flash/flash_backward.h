// src/cuda/flash/flash_backward.h — the fused FP8 attention backward (first step: warp-level
// mma.sync with FP8 operands, FlashAttention-2's backward, arXiv 2307.08691 Algorithm 2, with
// Delta-Matching's matched delta, arXiv 2609.37852). Its reference twin is the CPU tiled form's
// backward (src/cpu/attention_tiled.cpp, attention_backward_tile.cpp) with the kernel's tiles =
// the config's (block_q x block_k); CudaAttention (src/cuda/attention.cpp) runs it for
// AttnForm::Tiled after the fused forward (flash_forward.h). docs/cuda.md §"Fused FP8 attention
// backward".
//
// Three kernels, all on the same (block_q x block_k) tiles of one head, and all computing a tile's
// S, P and dP with one device function (flash_backward_tile.cuh), so the same (i, j) has the same
// bits in each:
//   delta_launch     per query row: D_i (matched: Σ_j P dP / Σ_j P with FP64 sums, a Q-block-major
//                    recompute pre-pass; stale: dO_i·O_i) and dV's row factor 1/l_i.
//   backward_launch  one CTA per (b, KV head, key block): for the rep = H/G query heads and every
//                    query block that sees the key block: S = τ·(Q̂K̂ᵀ)·sq·sk (the forward's MMA
//                    sequence and scale product: the saved (m, l) describe this S), P = exp(S − m)/l,
//                    dP = dÔV̂ᵀ·sdo·sv, dS = P∘(dP − D), the row residual sums, dŜ = dS rounded on
//                    the tile's power-of-two scale (fp8.h scale_from_amax, pow2), then
//                    dV_j += P̃ᵀ(dO/l)~, dK_j += τ dŜᵀQ̂ (FP32 accumulators: dV in registers,
//                    dK in shared memory) and
//                    dQ_i += τ dŜK̂ (FP32 atomicAdd), or, deterministic, a separate Q-block-major dQ
//                    kernel that recomputes the tile (fixed summation order: identical bits per run).
// No S x S buffer: besides inputs and outputs, O(T) per head (delta, row factor, residual sums).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "octet/fp8.h"

namespace octet::cuda::flash {

/// Which kernels run the backward (delta_launch's matched pre-pass and backward_launch). Auto: the
/// environment variable OCTET_FLASH_BACKWARD if set (`mma_sync` or `wgmma`; anything else is an
/// octet::Error), else wgmma on an sm_90 device when kWgmmaBackwardOnSm90, else mma_sync. Wgmma
/// (asked for or chosen) runs only where wgmma_backward_supported(p) holds and mma_sync elsewhere.
enum class BackwardKernel { Auto, MmaSync, Wgmma };

/// Whether Auto picks the wgmma kernels on an sm_90 device (where wgmma_backward_supported): on since
/// the H200 run of 2026-11-30 (test_cuda 119/119 with mma_sync, and the flash, training, diagnostics,
/// attention, recurrent and optimizer tests 59/59 with OCTET_FLASH_BACKWARD=wgmma; docs/cuda.md
/// §"wgmma backward"). OCTET_FLASH_BACKWARD=mma_sync goes back to the first kernels.
inline constexpr bool kWgmmaBackwardOnSm90 = true;

/// "mma_sync" | "wgmma" ("auto" for Auto): the names OCTET_FLASH_BACKWARD takes.
const char* backward_kernel_name(BackwardKernel k);

/// One backward call. Tq_p, Tk_p: the sequence lengths rounded up to 16 (pads hold zero codes).
/// Device pointers; every code buffer 16-byte aligned. The "group transposes" are the layout of
/// src/cuda/attention_kernels.h: [B, G, D, rep·T_p], query head h = g·rep + r at column r·Tq_p + i.
struct BackwardParams {
  const uint8_t* q = nullptr;     ///< Q̂ E4M3 codes [B, H, Tq_p, D]
  const uint8_t* q_t = nullptr;   ///< Q̂ᵀ E4M3 codes, group transpose [B, G, D, rep·Tq_p]
  const uint8_t* k = nullptr;     ///< K̂ E4M3 codes [B, G, Tk_p, D]
  const uint8_t* k_t = nullptr;   ///< K̂ᵀ E4M3 codes [B, G, D, Tk_p]
  const uint8_t* v = nullptr;     ///< V̂ E4M3 codes [B, G, Tk_p, D]
  const uint8_t* d_o = nullptr;   ///< dÔ codes (do_format) [B, H, Tq_p, D]
  const uint8_t* dv_o_t = nullptr;  ///< (dO_i/l_i)~ codes (do_format), group transpose
  /// the 1/scale of Q̂, K̂, V̂: one float each, or with qkv_head_block one per (batch, head,
  /// 128-token block) (ForwardParams' layout, flash_qkv_scales.cuh)
  const float* q_scale_inv = nullptr;
  const float* k_scale_inv = nullptr;
  const float* v_scale_inv = nullptr;
  bool qkv_head_block = false;  ///< QkvScaling::HeadBlock (octet/attention.h)
  const float* do_scale_inv = nullptr;   ///< dÔ's
  const float* dvo_scale_inv = nullptr;  ///< (dO/l)~'s
  const float* row_max = nullptr;  ///< [B, H, Tq] the forward's m_i
  const float* row_sum = nullptr;  ///< [B, H, Tq] the forward's l_i
  const float* o = nullptr;        ///< [B, H, Tq, D] the forward's O (stale delta only)
  const float* d_o_f32 = nullptr;  ///< [B, H, Tq, D] dO as given (stale delta only)
  /// BF16 forms of o and d_o_f32 (stale delta only): for a BF16 tensor, set this instead of the F32
  /// pointer (read and widened in registers: no FP32 copy)
  const uint16_t* o_bf16 = nullptr;
  const uint16_t* d_o_bf16 = nullptr;
  float* delta = nullptr;          ///< [B, H, Tq] D_i (delta_launch writes, backward reads)
  float* row_factor = nullptr;     ///< [B, H, Tq] 1/l_i, 0 in a row without keys (delta_launch)
  /// out [B, H, Tq_p, D]: Σ τ dŜK̂ in code units of K̂ (× sk later; 16-byte aligned); with
  /// qkv_head_block in values (each tile's product × its key block's 1/sk)
  float* dq_acc = nullptr;
  /// out [B, G, Tk_p, D]: Σ τ dŜᵀQ̂ in code units of Q̂ (× sq later); with qkv_head_block in values
  float* dk_acc = nullptr;
  float* dv_acc = nullptr;  ///< out [B, G, Tk_p, D]: dV, scaled (8-byte aligned)
  /// [B, H, Tq, 2] (Σ_j dS_ij, Σ_j P_ij(|dP_ij| + |D_i|)) in FP64, or null: no residual sums
  double* res_sums = nullptr;
  /// [B, H, Tq] FP32 r̂_i = Σ_j dŜ_ij (the rounded dS of every key, in dS units), or null: the dQ
  /// row-sum projection's row sums (AttentionConfig::dq_projection; dq_projection_launch). The
  /// wgmma kernel only (an octet::Error for the mma.sync flavor).
  float* ds_row_sum = nullptr;
  int64_t B = 0, H = 0, G = 0, Tq = 0, Tk = 0, Tq_p = 0, Tk_p = 0, D = 0;
  bool causal = false;
  bool matched = true;        ///< delta rule: matched (Delta-Matching) or stale
  bool deterministic = false;  ///< dQ by the Q-block-major kernel instead of atomics
  Format do_format = Format::E5M2;
  Format ds_format = Format::E5M2;
  float tau = 0.0f;
  float p_scale = 256.0f;  ///< P̃'s static power-of-two scale
  int64_t block_q = 128;   ///< the dS scale tile and the kernels' query tile: 64 or 128
  int64_t block_k = 128;   ///< the dS scale tile and the kernels' key tile: 64 or 128
  BackwardKernel kernel = BackwardKernel::Auto;  ///< which flavor runs (select_backward_kernel)
};

/// The kernel flavor delta_launch (matched) and backward_launch run for p on the current device
/// (BackwardKernel's rule; never Auto). Both must see the same p.kernel, D, block sizes and
/// deterministic flag: the matched delta needs the main kernel's P and dP bits. Throws
/// octet::Error on an unknown OCTET_FLASH_BACKWARD value, or when wgmma is asked for on a device
/// that is not sm_90.
BackwardKernel select_backward_kernel(const BackwardParams& p);

/// Whether the wgmma kernels cover p: head_dim 64 or 128, block_q = block_k = 128, not
/// deterministic, Tk < 2^31 (residual sums included).
bool wgmma_backward_supported(const BackwardParams& p);

/// The wgmma flavor's launches (flash_backward_wgmma.cu), after delta_launch's / backward_launch's
/// checks and zeroing: the matched pre-pass, and the main kernel. Throw octet::Error unless
/// wgmma_backward_supported(p) (and, for the pre-pass, p.matched).
void wgmma_delta_launch(const BackwardParams& p, cudaStream_t stream);
void wgmma_backward_launch(const BackwardParams& p, cudaStream_t stream);

/// Throws octet::Error unless head_dim ∈ {64, 128} and block_q, block_k ∈ {64, 128}, naming the
/// supported values.
void check_backward_supported(int64_t head_dim, int64_t block_q, int64_t block_k);

/// The delta pre-pass (asynchronous on `stream`): delta and row_factor for every row. Matched reads
/// q, k, v, d_o, their scales, row_max, row_sum; stale reads o (or o_bf16), d_o_f32 (or
/// d_o_bf16), row_sum. Throws
/// octet::Error on unsupported sizes (check_backward_supported), inconsistent dimensions, a null or
/// misaligned pointer.
void delta_launch(const BackwardParams& p, cudaStream_t stream);

/// The main backward (asynchronous): zeroes dq_acc (and res_sums, ds_row_sum when given) first,
/// then writes dq_acc, dk_acc, dv_acc in full (pads included) and adds the residual sums and the dŜ
/// row sums. Needs delta_launch's outputs and dv_o_t packed with its row_factor. Errors as
/// delta_launch's, and octet::Error when ds_row_sum is given to the mma.sync flavor.
void backward_launch(const BackwardParams& p, cudaStream_t stream);

/// The dQ row-sum projection (asynchronous; after backward_launch with p.ds_row_sum, before dq_acc
/// is scaled out; docs/delta-matching.md §"The dQ row-sum projection", the CPU reference's
/// src/cpu/attention.cpp project_dq): dq_acc[b, h, i, :] −= τ · r̂_i · k̄, with k̄ the mean of K̂'s
/// decoded codes over the Tk keys of (b, KV head h / (H/G)) summed in FP64 — dq_acc's units, the
/// code units of K̂ (× sk when scaled out), or with qkv_head_block each code × its block's 1/sk.
/// Reads p.k (K̂ rows [B, G, Tk_p, D]), p.k_scale_inv (with blocks), p.ds_row_sum,
/// p.tau; one CTA per (b, h). Throws octet::Error on a null pointer or unsupported head_dim.
void dq_projection_launch(const BackwardParams& p, cudaStream_t stream);

/// residual[row] = |Σ dS| / Σ P(|dP| + |D|) (0 where the magnitude is 0) from res_sums, rows
/// B·H·Tq: the per-row diagnostic of attention.h.
void residual_finish_launch(const double* res_sums, int64_t rows, double* residual,
                            cudaStream_t stream);

}  // namespace octet::cuda::flash
