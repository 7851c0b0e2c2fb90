// src/cuda/attention/flash/flash.h — the flash FP8 attention on the GPU: its parameters and entry
// points (FlashAttention-3's layering, arXiv 2407.08608: params struct → launch file → kernels).
// Forward: FlashAttention-2's online softmax (arXiv 2307.08691) with FP8 P̃ (FlashAttention-3);
// backward: FlashAttention-2's Algorithm 2 with the matched delta of Delta-Matching (arXiv
// 2609.37852, docs/delta-matching.md). CPU twin: the flash form (src/cpu/attention_flash.cpp) with
// the kernels' tiles; FlashAttention (flash_attention.cpp) runs it for AttnForm::Flash.
//
// Files: this header; flash_fwd_launch.cu and flash_bwd_launch.cu (checks, the kernel choice — the
// only place a kernel is selected — and the whole sequence of each direction); kernel files named by
// architecture and role (flash_kernels.h lists their launchers): sm89 = warp-level mma.sync with E4M3
// operands (any GPU from sm_89), sm90 = Hopper warpgroup MMA (wgmma, sm_90a). docs/attention.md.
//
// Forward, per query row i of head (b, h), reading KV head h / (H/G) (GQA), keys j < visible(i)
// (all Tk, or causal bottom-right: j <= i + Tk − Tq), key tiles of block_k from j = 0:
//   S = τ·(Q̂K̂ᵀ)·sq·sk (FP32 accumulation on mma.sync; the FP8 wgmma accumulator, within
//   2^-10·Σ|terms| of the exact sum, on Hopper); online softmax (flash_softmax.cuh); P̃ = E4M3(exp(S −
//   m_new)·p_scale); O = bf16_round((Σ P̃·V̂·sv) / Σ P̃), LSE = m + log l, row_max = m, row_sum = l (l the
//   FP32 Σ exp(S − m), its exponentials in flash_softmax.cuh's FFMA form: the statistics the
//   backward's P = exp(S − m) / l reads, whose rows then sum to 1 within a few FP32 ulp of |S| where the
//   backward recomputes the forward's own S: the mma.sync flavor; the wgmma backward's bound is below).
// A row that sees no key: O = 0, LSE = row_max = −inf, row_sum = 0.
// Backward, per key block of one (b, KV head), for the rep = H/G query heads and every query block
// that sees it: S recomputed by the backward's own MMA sequence (the mma.sync backward sums it in
// FP32 as the mma.sync forward; the wgmma backward's Sᵀ = K̂Q̂ᵀ on the FP8 accumulator, within the
// forward's bound of it, so P rows sum to 1 within exp(±2·bound)), P = exp(S − m)/l, dP = dÔV̂ᵀ·sdo·sv,
// dS = P∘(dP − D), the row residual sums, dŜ = dS on the tile's power-of-two scale, dV += P̃ᵀ(dO/l)~,
// dK += τ dŜᵀQ̂, dQ += τ dŜK̂ (FP32 atomics, or a Q-block-major kernel in deterministic mode).
// No S x S buffer: besides inputs and outputs, O(T) per head.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/attention/act_layout.h"
#include "octet/fp8.h"
#include "octet/tensor.h"

namespace octet::cuda::flash {

/// Which kernel runs the forward (and run_logits). Auto: the environment variable
/// OCTET_FLASH_FORWARD if set (`mma_sync` or `wgmma`; anything else is an octet::Error), else
/// wgmma on an sm_90 device (head_dim 64 and 128, every block_k), else mma_sync.
enum class ForwardKernel { Auto, MmaSync, Wgmma };

/// Which kernels run the backward (the matched pre-pass and the main kernel). Auto: the
/// environment variable OCTET_FLASH_BACKWARD if set (`mma_sync` or `wgmma`), else wgmma on an
/// sm_90 device. Wgmma (asked for or chosen) runs only where the wgmma kernels cover the call
/// (head_dim 64 or 128, block_q = block_k = 128 or 64, not deterministic) and mma_sync elsewhere.
enum class BackwardKernel { Auto, MmaSync, Wgmma };

/// "mma_sync" | "wgmma" ("auto" for Auto): the names OCTET_FLASH_FORWARD / _BACKWARD take.
const char* forward_kernel_name(ForwardKernel k);
const char* backward_kernel_name(BackwardKernel k);

/// One forward call. Tq_p, Tk_p: the sequence lengths rounded up to a multiple of 16 (pads hold
/// zero codes). All pointers are device pointers; the code buffers must be 16-byte aligned.
struct ForwardParams {
  const uint8_t* q = nullptr;    ///< Q̂ E4M3 codes [B, H, Tq_p, D]
  const uint8_t* k = nullptr;    ///< K̂ E4M3 codes [B, G, Tk_p, D]
  const uint8_t* v_t = nullptr;  ///< V̂ᵀ E4M3 codes [B, G, D, Tk_p] (forward only)
  /// the 1/scale of Q̂, K̂, V̂: one float each, or with qkv_head_block one per (batch, head,
  /// 128-token block): [B, H, ⌈Tq/128⌉] for Q̂, [B, G, ⌈Tk/128⌉] for K̂ and V̂ (flash_qkv_scales.cuh)
  const float* q_scale_inv = nullptr;
  const float* k_scale_inv = nullptr;
  const float* v_scale_inv = nullptr;
  bool qkv_head_block = false;  ///< QkvScaling::HeadBlock (octet/attention.h)
  /// O [B, H, Tq, D], BF16-rounded values: the forward writes exactly one of o (F32) and o_bf16
  /// (BF16 bits, 4-byte aligned: no conversion pass after the kernel); the backward's stale delta
  /// reads the one given
  float* o = nullptr;
  uint16_t* o_bf16 = nullptr;
  /// o (and the backward's BackwardIo d_o, dq, dk, dv, d_o_f32, d_o_bf16) tokens-major
  /// [B, Tq, H, D] (k-side [B, Tk, G, D]) instead of heads-major: src/cuda/attention/act_layout.h
  bool tokens_major = false;
  float* lse = nullptr;      ///< out [B, H, Tq] (forward only)
  float* row_max = nullptr;  ///< [B, H, Tq] m_i: written by the forward, read by the backward
  float* row_sum = nullptr;  ///< [B, H, Tq] l_i: written by the forward, read by the backward
  int64_t B = 0, H = 0, G = 0, Tq = 0, Tk = 0, Tq_p = 0, Tk_p = 0, D = 0;
  bool causal = false;
  float tau = 0.0f;        ///< softmax scale τ (usually 1/√D)
  float p_scale = 256.0f;  ///< P̃'s static power-of-two scale (attention.h validate_p_scale)
  int64_t block_k = 128;   ///< key tile: the CPU twin's block_k (and the dS scale tile's width)
  ForwardKernel kernel = ForwardKernel::Auto;  ///< which forward kernel runs (select_forward_kernel)
  /// The wgmma kernel's n-tiles (of every 8 of S's accumulator) whose exponentials come from
  /// exp2_poly (flash_exp2.h: the FMA units) instead of the SFU, 0..3; −1: forward_exp2_poly().
  /// The mma.sync kernel and run_logits ignore it.
  int exp2_poly = -1;
  /// The wgmma kernel as a persistent grid (one CTA per SM, each walking its (query block, head)
  /// items; the next item's Q̂ and first K̂, V̂ᵀ tiles load while this one's last tiles and epilogue
  /// run) when 1, one CTA per item when 0; −1: forward_persistent(). Ignored elsewhere.
  int persistent = -1;
  /// The persistent grid's CTAs: 0 one per SM, N > 0 at most N (the tests force small grids, so
  /// that a CTA walks many items). Ignored when not persistent.
  int persistent_ctas = 0;
  /// The wgmma kernel's two consumer warpgroups issue their GEMMs in turn (FlashAttention-3's
  /// ping-pong: named barriers hand the turn over, so that one's softmax runs under the other's
  /// GEMMs) when 1, as the warp schedulers interleave them when 0; −1: forward_pingpong(). The
  /// same arithmetic either way. Ignored elsewhere.
  int pingpong = -1;
  /// The order of the query-block-major kernels' work items (both forwards, the backward's delta
  /// pre-passes and deterministic dQ kernel): query heads taken head_group at a time
  /// (flash_persistent.h grouped_item), so that the CTAs running together share their operands in
  /// L2; 0: all heads in one group (block-major, each head's blocks spread over the grid); −1:
  /// flash_head_group(). The same bits in any order. The key-block-major backward kernels follow
  /// BackwardParams::key_head_group.
  int head_group = -1;
};

/// One backward call: the forward's parameters (its codes, scales, statistics, sizes; o for the
/// stale delta) and what the backward adds. The "group transposes" are the layout of
/// src/cuda/attention/glue/glue.h: [B, G, D, rep·T_p], query head h = g·rep + r at column r·Tq_p + i.
struct BackwardParams : ForwardParams {
  const uint8_t* q_t = nullptr;          ///< Q̂ᵀ E4M3 codes, group transpose [B, G, D, rep·Tq_p]
  const uint8_t* k_t = nullptr;          ///< K̂ᵀ E4M3 codes [B, G, D, Tk_p]
  const uint8_t* v = nullptr;            ///< V̂ E4M3 codes [B, G, Tk_p, D]
  const uint8_t* d_o = nullptr;          ///< dÔ codes (do_format) [B, H, Tq_p, D]
  const uint8_t* dv_o_t = nullptr;       ///< (dO_i/l_i)~ codes (do_format), group transpose
  const float* do_scale_inv = nullptr;   ///< dÔ's
  const float* dvo_scale_inv = nullptr;  ///< (dO/l)~'s
  /// dO as given [B, H, Tq, D] (stale delta only): F32, or BF16 bits (read and widened in
  /// registers: no FP32 copy); exactly one of the two
  const float* d_o_f32 = nullptr;
  const uint16_t* d_o_bf16 = nullptr;
  float* delta = nullptr;  ///< [B, H, Tq] D_i (run_delta writes, the main kernel reads)
  /// [B, H, Tq] 1/l_i, 0 in a row without keys (row_factor.h): written by run_backward's dO glue,
  /// and by run_delta with the same bits
  float* row_factor = nullptr;
  /// out [B, H, Tq_p, D]: Σ τ dŜK̂ in code units of K̂ (× sk later; 16-byte aligned); with
  /// qkv_head_block in values (each tile's product × its key block's 1/sk)
  float* dq_acc = nullptr;
  /// out [B, G, Tk_p, D]: Σ τ dŜᵀQ̂ in code units of Q̂ (× sq later); with qkv_head_block in values
  float* dk_acc = nullptr;
  float* dv_acc = nullptr;  ///< out [B, G, Tk_p, D]: dV, scaled (8-byte aligned)
  /// out: the caller's dK and dV, written by the wgmma kernel's epilogue in place of dk_acc,
  /// dv_acc (run_backward sets them when backward_dkv_direct()): [B, G, Tk, D], tokens_major [B,
  /// Tk, G, D], BF16 when dkv_bf16 else F32; dK × *q_scale_inv with per-tensor scales, each value
  /// rounded once — the bits unpad_scale_launch makes from dk_acc, dv_acc. Both or neither; the
  /// wgmma kernel at head_dim 64 only, with dQ by TMA and no residual sums; 4-byte aligned (BF16)
  /// or 8-byte (F32). Null: dk_acc, dv_acc.
  void* dk_out = nullptr;
  void* dv_out = nullptr;
  bool dkv_bf16 = false;
  /// [B, H, Tq, 2] (Σ_j dS_ij, Σ_j P_ij(|dP_ij| + |D_i|)) in FP64, or null: no residual sums
  double* res_sums = nullptr;
  /// [B, H, Tq] FP32 r̂_i = Σ_j dŜ_ij (the rounded dS of every key, in dS units), or null: the dQ
  /// row-sum projection's row sums (AttentionConfig::dq_projection). The wgmma kernel only.
  float* ds_row_sum = nullptr;
  bool matched = true;         ///< delta rule: matched (Delta-Matching) or stale
  bool deterministic = false;  ///< dQ by the Q-block-major kernel instead of atomics
  Format do_format = Format::E5M2;
  Format ds_format = Format::E5M2;
  int64_t block_q = 128;  ///< the dS scale tile's height and the kernels' query tile: 64 or 128
  BackwardKernel bwd_kernel = BackwardKernel::Auto;  ///< which backward flavor runs
  /// The order of the key-block-major main kernels' work items (one CTA per (KV head, key
  /// block)): KV heads taken key_head_group at a time (grouped_item), so that the CTAs running
  /// together read the same query tiles and add into the same dQ rows in L2; 0: all KV heads in one
  /// group; −1: resolved_key_head_group(). The same dK, dV bits in any order (dQ's FP32 atomics
  /// are never in a fixed order).
  int key_head_group = -1;
  /// How the wgmma kernel adds each tile's dQ (128 queries x head_dim FP32) into dq_acc: 0 by
  /// 16-byte FP32 atomics from registers (red.global.add, 16 a thread per tile at head_dim 128); 1
  /// staged in shared memory (the tile step's spent operand stage) and added by four TMA bulk
  /// reduces that one thread issues (cp.reduce.async.bulk.tensor .add); −1: backward_dq_tma().
  /// Either way the additions land in no fixed order. Ignored by the mma.sync kernels and by the
  /// 64 x 64 wgmma kernel (flash_bwd_ws_sm90.cu: always TMA). Another
  /// value is an octet::Error (run_backward_main).
  int dq_tma = -1;
  /// The wgmma kernel's order of each query half's Sᵀ and dPᵀ products at head_dim 64: 1 both
  /// issued at once, P formed while dPᵀ runs and dS before dV's product (FlashAttention-3's overlap
  /// inside a warpgroup); 0 one after the other; −1: backward_sdp_overlap(). The same bits either
  /// way (each product from a zero accumulator in its own k order). Ignored at head_dim 128 (there
  /// the in-flight product does not fit the registers) and by the mma.sync kernels. Another value
  /// is an octet::Error (run_backward_main).
  int sdp_overlap = -1;
};

/// What run_backward reads and writes besides the kernels' operands: dO as the caller gave it,
/// the gradients' destinations, the row-residual accumulator, and the scratch of its glue passes.
struct BackwardIo {
  const void* d_o = nullptr;  ///< dO [B, H, Tq, D], F32 or BF16 (16-byte aligned)
  DType d_o_dtype = DType::BF16;
  void* dq = nullptr;  ///< out [B, H, Tq, D], F32 or BF16 (dq_dtype)
  void* dk = nullptr;  ///< out [B, G, Tk, D]
  void* dv = nullptr;  ///< out [B, G, Tk, D]
  DType dq_dtype = DType::BF16, dk_dtype = DType::BF16, dv_dtype = DType::BF16;
  /// the caller's F64 [2] row-residual accumulator (max, sum: residual_accumulate_launch), or null;
  /// non-null needs p.res_sums and residual_rows
  double* residual = nullptr;
  double* residual_rows = nullptr;  ///< scratch [B, H, Tq]
  unsigned* amax = nullptr;         ///< scratch: two unsigned
  uint8_t* d_o_rows = nullptr;      ///< scratch [B, H, Tq_p, D] bytes: the dÔ codes (do_format)
  float* do_scale_inv = nullptr;    ///< scratch: one float, dÔ's 1/scale
  uint8_t* dv_o_t = nullptr;        ///< scratch [B, H, Tq_p, D] bytes: the (dO/l)~ codes
  float* dvo_scale_inv = nullptr;   ///< scratch: one float (16-byte aligned)
};

/// The wgmma forward's exp2_poly when ForwardParams::exp2_poly is −1: the environment variable
/// OCTET_FLASH_EXP2_POLY (0, 1, 2 or 3: n-tiles of every 8 exponentiated on the FMA units; anything
/// else is an octet::Error), 0 (every exponential on the SFU) when it is unset. Read at every call.
int forward_exp2_poly();

/// The wgmma forward's grid when ForwardParams::persistent is −1: persistent if the environment
/// variable OCTET_FLASH_PERSISTENT is 1 or unset (the default: faster at every measured shape),
/// one CTA per work item if it is 0 (anything else is an octet::Error). Read at every call.
bool forward_persistent();

/// The wgmma forward's GEMM order when ForwardParams::pingpong is −1: the ping-pong if the
/// environment variable OCTET_FLASH_PINGPONG is 1, none if it is 0 or unset (anything else is an
/// octet::Error). Read at every call.
bool forward_pingpong();

/// The flash kernels' head group when ForwardParams::head_group is −1: the environment variable
/// OCTET_FLASH_HEAD_GROUP (a whole number >= 0: 0 all heads in one group), kDefaultHeadGroup when
/// it is unset; anything else is an octet::Error. Read at every call.
int flash_head_group();
/// ForwardParams::head_group resolved: flash_head_group() for −1, else itself (>= 0, or an
/// octet::Error naming the value).
int resolved_head_group(int head_group);
constexpr int kDefaultHeadGroup = 0;

/// The key-block-major backward's head group when BackwardParams::key_head_group is −1, for a grid
/// of kv_heads (B·G) × key_blocks of the `kernel` flavor (Wgmma or MmaSync): the environment
/// variable OCTET_FLASH_BWD_HEAD_GROUP (a whole number >= 0: 0 all KV heads in one group), else for
/// the wgmma kernel flash_persistent.h auto_key_head_group with the current device's SM count (the
/// rule was fitted on that kernel, one CTA per SM) and for mma.sync 0 (not yet timed); a value that
/// is not a whole number is an octet::Error. Read at every call.
int backward_key_head_group(int64_t kv_heads, int64_t key_blocks, BackwardKernel kernel);
/// BackwardParams::key_head_group as run_backward_main resolves it for p run by `kernel`
/// (select_backward_kernel(p), which the caller has already chosen; key blocks ⌈Tk/128⌉ for wgmma,
/// ⌈Tk/block_k⌉ for mma.sync): itself when >= 0, else backward_key_head_group. An octet::Error for a value
/// below −1.
int resolved_key_head_group(const BackwardParams& p, BackwardKernel kernel);

/// The wgmma backward's dQ path when BackwardParams::dq_tma is −1: TMA bulk reduces if the
/// environment variable OCTET_FLASH_BWD_DQ_TMA is 1 or unset (the default: +10 % matched, +12 %
/// stale backward on an H100, docs/attention.md), atomics if it is 0 (anything else is an
/// octet::Error). Read at every call.
bool backward_dq_tma();

/// The wgmma backward's product order when BackwardParams::sdp_overlap is −1: Sᵀ and dPᵀ issued
/// together if the environment variable OCTET_FLASH_BWD_SDP_OVERLAP is 1 or unset (the default:
/// +3 % at head_dim 64 on an H100, docs/attention.md), one after the other if it is 0 (anything
/// else is an octet::Error). Read at every call.
bool backward_sdp_overlap();

/// Whether run_backward has the wgmma kernel write dK and dV into the caller's tensors itself at
/// head_dim 64 (BackwardParams::dk_out, dv_out; same bits, two unpad passes fewer: +7 % matched,
/// +9 % stale at GPT-2-small's shape on an H100, docs/attention.md): the environment variable
/// OCTET_FLASH_BWD_DKV_DIRECT is 1 or unset; 0: through dk_acc, dv_acc and unpad_scale_launch
/// (anything else is an octet::Error). Read at every call. run_backward also needs head_dim 64,
/// the wgmma kernel with dQ by TMA, no residual sums, dK and dV of one dtype (F32 or BF16) and
/// their pairs' alignment, else it takes the accumulators (always at head_dim 128: there it
/// measured no faster, with more spill in the kernel's loop).
bool backward_dkv_direct();
/// Whether run_backward lets the kernel write dK and dV for these params (head_dim 64, the wgmma
/// kernel with dQ by TMA, no residual sums, backward_dkv_direct()); it also needs the caller's dK
/// and dV of one dtype (F32 or BF16) and aligned pairs. Throws as select_backward_kernel and
/// resolved_dq_tma.
bool resolved_dkv_direct(const BackwardParams& p);
/// BackwardParams::dq_tma as run_backward_main resolves it: itself when 0 or 1, backward_dq_tma()
/// for −1. An octet::Error for another value.
int resolved_dq_tma(const BackwardParams& p);
/// BackwardParams::sdp_overlap as run_backward_main resolves it: itself when 0 or 1,
/// backward_sdp_overlap() for −1, and 0 whenever head_dim (p.D) is not 64 (the overlap exists at 64
/// only). An octet::Error for a value outside −1..1.
int resolved_sdp_overlap(const BackwardParams& p);

/// The kernel run_forward and run_logits run for `requested` (ForwardKernel's rule for Auto) on the
/// current device. Throws octet::Error on an unknown OCTET_FLASH_FORWARD value, or when wgmma is
/// asked for (by `requested` or the variable) on a device that is not sm_90.
ForwardKernel select_forward_kernel(ForwardKernel requested = ForwardKernel::Auto);

/// The flavor run_delta (matched) and run_backward_main run for p on the current device
/// (BackwardKernel's rule; never Auto). Both see the same p: the matched delta needs the main
/// kernel's P and dP bits. Throws octet::Error on an unknown OCTET_FLASH_BACKWARD value, or when
/// wgmma is asked for on a device that is not sm_90.
BackwardKernel select_backward_kernel(const BackwardParams& p);

/// Throw octet::Error unless head_dim ∈ {64, 128} and the tiles ∈ {64, 128}, naming the
/// supported values.
void check_forward_supported(int64_t head_dim, int64_t block_k);
void check_backward_supported(int64_t head_dim, int64_t block_q, int64_t block_k);

/// The forward on `stream` (asynchronous): O, LSE, m, l. Throws octet::Error on an unsupported
/// head_dim or block_k, inconsistent dimensions (H not a multiple of G, Tq_p/Tk_p not the
/// 16-rounded lengths), a null or misaligned pointer.
void run_forward(const ForwardParams& p, cudaStream_t stream);

/// S [B, H, Tq_p, Tk_p] FP32 = τ·(Q̂K̂ᵀ)·sq·sk for every row and key, pads included (0), unmasked,
/// with the bits run_forward computes for each (i, j) with the same p (same kernel, same MMA
/// sequence, same scale product), so that the saved (m, l) describe exactly its S. The two flavors'
/// S differ: mma.sync sums in FP32, wgmma on the FP8 accumulator (within 2^-10·Σ|terms| of the
/// exact sum). Reads p's Q̂, K̂, their scales, the dimensions, block_k and
/// kernel. Errors as run_forward's.
void run_logits(const ForwardParams& p, float* s, cudaStream_t stream);

/// The whole backward after a flash forward: dÔ (into io.d_o_rows, io.do_scale_inv, which become
/// p.d_o, p.do_scale_inv; p.row_factor written) and (dO/l)~ (into io.dv_o_t with its own scale)
/// packed from io.d_o in two launches (glue.h pack_d_o_launch), the delta pass (run_delta), the main kernels
/// (run_backward_main), the dQ row-sum projection when p.ds_row_sum is set, dQ, dK, dV unpadded
/// and scaled into io's tensors (rounded once), and the row residual added into io.residual.
/// Asynchronous. Errors as the stages', and octet::Error on a null io tensor.
void run_backward(BackwardParams p, const BackwardIo& io, cudaStream_t stream);

/// The backward's stages on codes, for run_backward and for tests that drive the kernels directly.
/// run_delta: delta and row_factor for every row. Matched reads q, k, v, d_o, their scales,
/// row_max, row_sum; stale reads o (or o_bf16), d_o_f32 (or d_o_bf16), row_sum. Throws
/// octet::Error on unsupported sizes, inconsistent dimensions, a null or misaligned pointer.
void run_delta(const BackwardParams& p, cudaStream_t stream);
/// run_backward_main: zeroes dq_acc (and res_sums, ds_row_sum when given), then writes dq_acc,
/// dk_acc, dv_acc in full (pads included) and adds the residual sums and the dŜ row sums. Needs
/// run_delta's outputs and dv_o_t packed with its row_factor. Errors as run_delta's, and
/// octet::Error when ds_row_sum is given to the mma.sync flavor.
void run_backward_main(const BackwardParams& p, cudaStream_t stream);

}  // namespace octet::cuda::flash
