// src/cuda/attention/glue/glue.h — the memory-bound operand glue around the CUDA attention GEMMs and
// the flash kernels (attention_base.h, flash/flash_bwd_launch.cu): the tensor amax of Q, K, V, dO (and of
// dO_i / l_i), the packing of those tensors into padded FP8 (or BF16) row copies and "group" transposes, and
// the un-padding, scaling copy of the dQ, dK, dV accumulators into the caller's F32 or BF16 gradients.
//
// Inputs are read as they are given (F32 or BF16 activations, octet/tensor.h) with 16-byte loads:
// no FP32 widening copy. The results are bitwise those of the CPU twin's rules (octet/fp8.h
// scale_from_amax, fp8_encode with saturation, bf16_round; src/cpu/attention_quant.cpp), checked
// by tests/cuda/attention/glue/glue_test.cpp. Access plan and expected times: docs/attention.md
// §"Operand glue".
//
// Layouts (T_p: the sequence length T rounded up to 16; pad rows hold zeros):
//   input x            [B, heads, T, D]   F32 or BF16, D a multiple of 16; or tokens-major
//                                         [B, T, heads, D] (act_layout.h; the outputs the same)
//   row copies         [B, heads, T_p, D]
//   "group" transposes [B, G, D, rep·T_p]  (G = heads / rep; the rep heads of a group side by side
//                                           along the last axis, head h = g·rep + l at column
//                                           l·T_p + t: the operand layout of the batched GQA GEMMs)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "octet/fp8.h"
#include "octet/tensor.h"

namespace octet::cuda {

/// Dimensions of one attention call: H query heads, G KV heads, rep = H/G; T_p is T rounded up to
/// 16, the padded length of the packed copies.
struct AttnDims {
  int64_t B, H, G, rep, Tq, Tk, Tq_p, Tk_p, D;
  bool causal;
  bool tokens_major;  ///< the caller's q, k, v, o and gradients [B, T, heads, D] (act_layout.h)
};

/// The element a packed copy holds: an FP8 code (1 byte); the BF16 bits (2 bytes) of the decoded
/// FP8 code without its scale (the scale is applied after a BF16 GEMM); or the BF16 bits of the
/// value itself (BF16 attention). None: that copy is not written.
enum class PackKind : int { None = 0, Fp8Code = 1, Bf16OfCode = 2, Bf16OfValue = 3 };

/// Which kernel packs. Staged: the values staged in shared memory as FP32, every PackKind. Codes
/// (glue/pack_codes.cu): each value encoded once and the FP8 codes staged, for tensors whose copies
/// are FP8 codes (or absent) and under 2^31 elements; the same bits, fewer instructions per element
/// (a forward from BF16 15-25 % faster on an H200, bench/results/2026-12-03-h200-attention-pack.jsonl);
/// other sets fall back to the staged pack. Block (glue/pack_block.cu): for the quantize-and-pack
/// of FP8-code copies with per-(head, block) scales of 64 or 128 tokens and head_dim <= 128, one
/// launch that measures each block's amax from the values it packs (one read of the input instead
/// of the amax launch's and the pack's two); the same bits; other sets and pack_launch alone go to
/// the code pack. Auto: the OCTET_ATTN_PACK environment variable (staged | codes | block), else
/// block (so the code pack for the sets the block pack does not take); any other value throws
/// octet::Error.
enum class PackKernel : int { Auto = 0, Staged = 1, Codes = 2, Block = 3 };

/// The kernel Auto resolves to (OCTET_ATTN_PACK, read once; throws octet::Error for a value other
/// than staged, codes or block), or k itself when it is not Auto.
PackKernel chosen_pack_kernel(PackKernel k = PackKernel::Auto);
/// "staged" | "codes" | "block" (Auto: "auto").
const char* pack_kernel_name(PackKernel k);

struct PackArgs {
  const void* x = nullptr;     ///< [B, heads, T, D] of x_dtype (16-byte aligned: vector loads)
  DType x_dtype = DType::F32;  ///< F32 or BF16
  bool tokens_major = false;   ///< x is [B, T, heads, D] instead (the packed copies are not)
  /// [B, heads, T] F32 or null: the packed value of element (.., t, d) is x · row_factor[.., t]
  /// (one FP32 multiply: dV's operand dO_i / l_i)
  const float* row_factor = nullptr;
  int64_t B = 0, heads = 0, T = 0, T_p = 0, D = 0;
  int64_t rep = 1;  ///< heads per group in the transposed layout (H/G for Q, 1 for K, V)
  Format format = Format::E4M3;
  bool fp8 = true;  ///< scale s from the tensor amax (FP8); else s = 1 (BF16)
  /// 0: one scale for the tensor; else one per (b, head, block of scale_block tokens) — the
  /// QkvScaling::HeadBlock of Q, K, V (octet/attention.h; 128), a multiple of 64. amax_bits and
  /// scale_inv then hold B·heads·⌈T/scale_block⌉ entries (pack_block_amax_launch).
  int64_t scale_block = 0;
  const unsigned* amax_bits = nullptr;  ///< the tensor amax as |x| bits (pack_amax_launch)
  float* scale_inv = nullptr;           ///< out: 1/s (FP8 only), one float (or one per block)
  PackKind row_kind = PackKind::None, trans_kind = PackKind::None;
  void* row = nullptr;                   ///< row copy [B, heads, T_p, D], 16-byte aligned
  void* trans = nullptr;                 ///< group transpose [B, G, D, rep·T_p], 16-byte aligned
  PackKernel kernel = PackKernel::Auto;  ///< a set packs with its first tensor's choice
};

/// *bits = the amax of x (|x| as float bits: unsigned order is numeric order, NaN above inf),
/// with row_factor ([B, heads, T]): of each element times its row's factor (the values pack_launch
/// packs), x's rows heads-major, or tokens-major [B, T, heads, D] when tokens_major (heads and T
/// then say how). x holds n elements of dtype (F32 or BF16), n a multiple of D when row_factor is
/// given. Zeroes *bits first (enqueued on s). One atomic per block; 16-byte loads when x is 16-byte
/// aligned (and D % 8 == 0). Throws octet::Error for another dtype, n < 1, or tokens-major rows
/// that heads·T does not divide.
void pack_amax_launch(const void* x, DType dtype, int64_t n, unsigned* bits, cudaStream_t s,
                      const float* row_factor = nullptr, int64_t D = 1, bool tokens_major = false,
                      int64_t heads = 1, int64_t T = 1);

/// bits[bh·nb + k] = the amax of block k (tokens k·block .. min(T, (k + 1)·block) − 1, all D) of
/// head bh of x [bh, T, D] (or tokens-major [bh / heads, T, heads, D], act_layout.h; F32 or BF16,
/// D a multiple of 8), nb = ⌈T/block⌉, as |x| bits (NaN above inf): the per-(head, block) amaxes
/// of PackArgs::scale_block. Written, not accumulated. One CTA per block. Throws octet::Error for
/// another dtype, D % 8 != 0, block < 1, an empty x, a null pointer, more than 2^31 − 1 blocks, or
/// tokens-major with heads not dividing bh.
void pack_block_amax_launch(const void* x, DType dtype, int64_t bh, int64_t T, int64_t D, int64_t block,
                            unsigned* bits, cudaStream_t s, bool tokens_major = false, int64_t heads = 1);

/// Packs x into a.row and/or a.trans (a.row_kind, a.trans_kind; None skips one): element value v
/// (times its row factor), code = fp8_encode(v·s, format, saturate) with s = scale_from_amax(amax,
/// format) (FP8; the amax of the tensor, or of the element's block with scale_block), BF16 =
/// bf16_round; pad rows t in [T, T_p) are zero. Writes 1/s to scale_inv (FP8; per block with
/// scale_block). Tiles of 64 t x 64 d through shared memory. Throws octet::Error when D is not a
/// multiple of 16, T_p is not T rounded up to 16, heads % rep != 0, scale_block is not a multiple
/// of 64 or comes with a row_factor, or an output is not 16-byte aligned.
void pack_launch(const PackArgs& a, cudaStream_t s);

/// The whole quantize-and-pack of one tensor: its amax (FP8: per tensor into amax_bits[0], of the
/// values times a.row_factor if given; per (b, head, block) with a.scale_block), then pack_launch
/// with a.amax_bits = amax_bits. amax_bits holds one unsigned, or B·heads·⌈T/scale_block⌉. BF16
/// (!a.fp8) packs without an amax. Errors as the two launches'.
void pack_quantized_launch(PackArgs a, unsigned* amax_bits, cudaStream_t s);

/// The most tensors one pack_quantized_many_launch takes (Q, K and V).
constexpr int kMaxPackSet = 3;

/// The kernel that packs n tensors (1..kMaxPackSet, one input dtype, one scaling) in
/// pack_quantized_many_launch (n = 1: pack_quantized_launch) under each tensor's `kernel` choice:
/// Block, Codes or Staged (what a benchmark records and a test checks it ran). Throws octet::Error
/// for n outside 1..kMaxPackSet or a bad OCTET_ATTN_PACK.
PackKernel quantized_pack_kernel(const PackArgs* args, int n);

/// pack_quantized_launch of n tensors (1..kMaxPackSet: the Q, K, V of a forward) in one memset,
/// one amax launch and one pack launch instead of n of each: the same bits as one call per tensor,
/// the SMs shared among the tensors (at GPT-2-small's shape each tensor alone fills ~1.5 waves).
/// amax_bits holds the tensors' amax entries one after another (tensor i's after the earlier
/// tensors' counts: 1 each per tensor, B·heads·⌈T/scale_block⌉ with block scales); args[i].amax_bits
/// is ignored. Tensors of different input dtypes, layouts, head_dims or scalings are packed one call
/// each. Throws octet::Error for n outside 1..kMaxPackSet, a row factor, or as pack_launch.
void pack_quantized_many_launch(const PackArgs* args, int n, unsigned* amax_bits, cudaStream_t s);

/// dO's glue for the flash backward in two launches and two reads of dO: the amaxes of dO and of
/// dO_i·f_i, f_i = row_factor_of(l_i) (row_factor.h; l = row_sum [B, H, T] F32, the forward's),
/// written to row_factor [B, H, T], in one pass; then dÔ's copies (`rows`) and (dO/l)~'s (`trans`)
/// in one pack launch, each tile read once (the code pack; the staged pack, when chosen, reads it
/// once per copy). The bits of pack_quantized_launch(rows) and of pack_quantized_launch(trans) with
/// trans.row_factor = row_factor (four launches, four reads). rows and trans: the same x, dtype,
/// layout, B, heads, T, D; rows without a row factor, trans with the row_factor argument; FP8 with
/// one scale per tensor; amax_bits [2] (rows', then trans'). Throws octet::Error for other args, a
/// null pointer, D % 16 != 0 (or as pack_launch).
void pack_d_o_launch(PackArgs rows, PackArgs trans, const float* row_sum, float* row_factor,
                     unsigned* amax_bits, cudaStream_t s);

/// dst [bh, T, D] (F32 or BF16: dst_dtype; tokens-major [bh / heads, T, heads, D] when
/// tokens_major, act_layout.h) = src [bh, T_p, D] · alpha · (*scale_a) · (*scale_b) (null scales:
/// 1), the product in FP32 and rounded once into BF16 (fp8.h bf16_from_float, as convert_launch).
/// D a multiple of 8; 16-byte accesses when src and dst are 16-byte aligned. Throws octet::Error
/// for D % 8 != 0, T > T_p, or tokens-major with heads not dividing bh.
void unpad_scale_launch(const float* src, void* dst, DType dst_dtype, int64_t bh, int64_t T, int64_t T_p,
                        int64_t D, float alpha, const float* scale_a, const float* scale_b, cudaStream_t s,
                        bool tokens_major = false, int64_t heads = 1);

}  // namespace octet::cuda
