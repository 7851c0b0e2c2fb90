// src/cuda/attention/flash/flash_kernels.h — the launchers of the flash attention's kernels, one
// per kernel file, for the two launch files only (flash_fwd_launch.cu, flash_bwd_launch.cu): they
// check nothing that the launch files check and select nothing. Semantics: flash.h.
//   sm89 (mma.sync m16n8k32 with E4M3/E5M2 operands, sm_89 and later):
//     flash_fwd_sm89.cu        forward and logits
//     flash_bwd_delta_sm89.cu  matched delta pre-pass (recomputes each tile's P and dP)
//     flash_bwd_sm89.cu        main backward (key-block-major)
//     flash_bwd_dq_sm89.cu     the deterministic dQ kernel (Q-block-major)
//   sm90 (Hopper wgmma, sm_90a):
//     flash_fwd_sm90.cu        forward and logits
//     flash_bwd_delta_sm90.cu  matched delta pre-pass (S and dP with queries as rows)
//     flash_bwd_sm90.cu        main backward (key-block-major), 128 x 128 dS scale tiles
//     flash_bwd_ws_sm90.cu     main backward (key-block-major, warp-specialized), 64 x 64 tiles
//   any architecture:
//     flash_bwd_rows.cu        stale delta, row residual finish, the dQ row-sum projection
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/attention/flash/flash.h"

namespace octet::cuda::flash {

/// Forward (s_out null) or logits into s_out, after run_forward's / run_logits' checks.
void fwd_sm89_launch(const ForwardParams& p, float* s_out, cudaStream_t stream);
void fwd_sm90_launch(const ForwardParams& p, float* s_out, cudaStream_t stream);

/// Whether the wgmma backward kernels cover p: head_dim 64 or 128, block_q = block_k = 128 or
/// block_q = block_k = 64, not deterministic, Tk < 2^31.
bool bwd_sm90_supported(const BackwardParams& p);

/// The matched delta pre-pass: delta, row_factor (p.matched).
void bwd_delta_sm89_launch(const BackwardParams& p, cudaStream_t stream);
/// The wgmma flavor's (flash_bwd_delta_sm90.cu: S = Q̂K̂ᵀ, dP = dÔV̂ᵀ with queries as rows, a
/// query's statistics and partial sums in one lane).
void bwd_delta_sm90_launch(const BackwardParams& p, cudaStream_t stream);
/// The main kernel into the zeroed accumulators (dQ by atomics unless p.deterministic).
void bwd_sm89_launch(const BackwardParams& p, cudaStream_t stream);
/// The deterministic dQ kernel (after bwd_sm89_launch with p.deterministic): dq_acc in full.
void bwd_dq_sm89_launch(const BackwardParams& p, cudaStream_t stream);
/// The wgmma main kernel: flash_bwd_sm90.cu's for 128 x 128 dS scale tiles, bwd_ws_sm90_launch
/// for 64 x 64.
void bwd_sm90_launch(const BackwardParams& p, cudaStream_t stream);
/// The warp-specialized main kernel (flash_bwd_ws_sm90.cu), block_q = block_k = 64: dQ always by
/// TMA bulk reduces (p.dq_tma is not read).
void bwd_ws_sm90_launch(const BackwardParams& p, cudaStream_t stream);

/// Stale delta D_i = dO_i·O_i and row_factor 1/l_i, one warp per row.
void bwd_stale_delta_launch(const BackwardParams& p, cudaStream_t stream);

/// residual[row] = |Σ dS| / Σ P(|dP| + |D|) (0 where the magnitude is 0) from res_sums, rows
/// B·H·Tq: the per-row diagnostic of octet/attention.h.
void bwd_residual_finish_launch(const double* res_sums, int64_t rows, double* residual, cudaStream_t stream);

/// The dQ row-sum projection (after the main kernel with p.ds_row_sum, before dq_acc is scaled out;
/// docs/delta-matching.md §"The dQ row-sum projection", the CPU reference's project_dq in
/// src/cpu/attention.cpp): dq_acc[b, h, i, :] −= τ · r̂_i · k̄, with k̄ the mean of K̂'s decoded codes
/// over the Tk keys of (b, KV head h / (H/G)) summed in FP64 — dq_acc's units (with qkv_head_block
/// each code × its block's 1/sk). One CTA per (b, h). Throws octet::Error on a null pointer or an
/// unsupported head_dim.
void bwd_dq_projection_launch(const BackwardParams& p, cudaStream_t stream);

}  // namespace octet::cuda::flash
