// src/cuda/quantize/quantize.h — GPU quantization kernels: FP32 source -> FP8 codes + scale_inv, row-wise
// and column-wise (transposed) copies from one read of the source, with the amax reduction.
//
// Semantics are those of octet::Quantizer (quant.h, src/fp8): q = fp8_encode(x * s, format,
// saturate) with s from fp8.h's scale_from_amax over the block's amax and scale_inv = 1/s; zero
// blocks get s = 1; a NaN/inf amax gives a NaN scale (carried). Per-element rounding is fp8.h's,
// shared with the CPU reference, so codes and scales are bitwise equal to it.
// Scale sources:
//   Pointer      s read from device memory (tensor-delayed: the state's scale; unit: the static scale)
//   TensorAmax   s from the whole tensor's amax (tensor-current; an amax pre-pass runs first)
//   RowCol       s per row of each copy from full-row amaxes (row recipe; a pre-pass runs first)
//   Tile         s per 1x128 / 128x128 / 1x32 block, from the tile itself (block, mx): one pass
// The kernel works on 128x128 tiles of the source staged in shared memory (DeepSeek-V3 §3.3 tiles);
// a tensor-wide scale (Pointer, TensorAmax) runs a lighter kernel on 64x128 tiles that encodes each
// element once and stages only the FP8 codes of the column-wise copy (the same bytes).
// The source may be F32 or BF16 (loaded as FP32). Nothing here synchronizes with the host.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/quantize/qtensor.h"

namespace octet::cuda {

enum class ScaleSource : int { Pointer = 0, TensorAmax = 1, RowCol = 2, Tile = 3 };

/// The counters of one quantization, in one device struct so that quantize_launch zeroes them
/// with one memset (all start at 0).
struct QuantCounters {
  unsigned long long counts[4];  ///< underflow, saturated (row-wise copy), same (column-wise)
  unsigned amax_bits;            ///< |x| max as float bits (NaN compares largest)
  /// Min and max of the scales s (float bits) over the blocks holding data of the row-wise copy
  /// (the column-wise copy if there is no row-wise one), for QuantStats without keeping the
  /// operand. The min is kept complemented (max of ~bits), so that 0 means "none" for both;
  /// scale_min() undoes it (none: NaN bits).
  unsigned scale_min_flip;
  unsigned scale_max;
  unsigned unused;
  OCTET_HD unsigned scale_min() const { return ~scale_min_flip; }
};

/// Device accumulators of one quantization (zeroed by quantize_launch).
struct QuantAccum {
  QuantCounters* counters = nullptr;  ///< required
  unsigned* row_amax = nullptr;       ///< [rows_pad of the source] (RowCol only)
  unsigned* col_amax = nullptr;       ///< [cols padded to 16] (RowCol only)
};

struct QuantizeArgs {
  const void* x = nullptr;  ///< source [rows, cols], row-major, contiguous
  bool x_bf16 = false;      ///< x holds BF16 bit patterns (else FP32)
  int64_t rows = 0, cols = 0;
  ScaleSource source = ScaleSource::TensorAmax;
  int margin = 0;
  bool pow2 = false;
  bool saturate = true;
  bool mx = false;            ///< OCP MX scales (fp8.h mx_scale_e8m0); the cast saturates
  bool amax_prepass = false;  ///< Pointer source: reduce the amax before the cast
  /// Pointer source with a pre-pass: the pre-pass does nothing if *skip_prepass_if > 0 (decided
  /// on the device: tensor-delayed skips it once its history is non-empty); the cast then reduces
  /// the amax itself.
  const int* skip_prepass_if = nullptr;
  /// Called on the stream between the amax pre-pass and the cast (tensor-delayed's first use).
  void (*after_prepass)(void* ctx, cudaStream_t stream) = nullptr;
  void* after_prepass_ctx = nullptr;
  /// TensorAmax source: the tensor's amax (|x| max as float bits, device) computed by the kernel
  /// that produced x (ops.h: the norms' and GELU's amax output): no pre-pass, one read of x.
  const unsigned* amax_given = nullptr;
  const float* scale_ptr = nullptr;  ///< Pointer source: the scale s
  DevQTensor* rowwise = nullptr;     ///< [rows, cols] copy (may be null)
  DevQTensor* colwise = nullptr;     ///< [cols, rows] copy (may be null); same format as rowwise
  QuantAccum accum;
  /// Pointer / TensorAmax sources with Tensor-layout copies run the tensor-scaled kernel (one
  /// encode per element, no FP32 tile staging); true forces the general 128x128 tile kernel, which
  /// writes the same bytes (tests and `octet bench quantize` compare the two).
  bool tile_kernel = false;
};

/// Runs the pre-pass (if the source needs one) and the tile cast kernel on `stream`.
/// The DevQTensors must have their shapes set and their buffers allocated; both copies, when
/// present, must share the format. Throws octet::Error on a launch failure.
void quantize_launch(const QuantizeArgs& args, cudaStream_t stream);

/// *amax_bits = max(*amax_bits, |x| max as float bits) over x [n] (F32, or BF16 bit patterns if
/// x_bf16; NaN compares largest); nothing if skip_if && *skip_if > 0 (read on the device).
/// One streaming pass, no host synchronization. Throws octet::Error for n < 1.
void tensor_amax_launch(const void* x, bool x_bf16, int64_t n, const int* skip_if, unsigned* amax_bits,
                        cudaStream_t stream);

/// Up to kMax tensors whose amaxes one launch takes (tensor_amax_many_launch): tensor i is x[i]
/// [n[i]] and its amax goes to *bits[i].
struct AmaxSet {
  static constexpr int kMax = 3;
  int count = 0;
  const void* x[kMax] = {};
  int64_t n[kMax] = {};
  unsigned* bits[kMax] = {};
};

/// tensor_amax_launch of every tensor of `set` (all F32, or all BF16 if x_bf16) in one launch
/// (the Q, K, V of an attention forward: one launch instead of three, the SMs shared among them).
/// Each *bits[i] = max(itself, amax of x[i]); the same bits as one call per tensor. Throws
/// octet::Error for a count outside 1..kMax, an empty tensor or a null pointer.
void tensor_amax_many_launch(const AmaxSet& set, bool x_bf16, const int* skip_if, cudaStream_t stream);

/// FP8 weight all-gather (octet::Linear::encode_weight_piece, docs/distributed.md §"FP8 all-gather"):
/// codes[i] = the tile cast's code of x[i] (F32 [n], n >= 1) under the tensor scale
/// s = scale_from_amax(amax) of the whole tensor's amax (*amax_bits, |x| float bits): the code the
/// TensorAmax cast of the whole tensor writes for that element. Enqueued.
void encode_piece_launch(const float* x, int64_t n, const unsigned* amax_bits, Format format, int margin,
                         bool pow2, bool saturate, uint8_t* codes, cudaStream_t stream);
/// The Tensor-layout operand of a whole tensor from its codes [rows, cols] (row-major, contiguous):
/// `rowwise` [rows, cols] and `colwise` [cols, rows] (shapes and buffers set, Tensor layout, either
/// may be null, not both) get the codes (padding 0) and scale_inv = 1 / scale_from_amax(amax), as
/// the TensorAmax cast writes it. Enqueued.
void install_codes_launch(const uint8_t* codes, int64_t rows, int64_t cols, const unsigned* amax_bits,
                          int margin, bool pow2, DevQTensor* rowwise, DevQTensor* colwise,
                          cudaStream_t stream);

/// out[r, c] = decode(code) * scale_inv (FP32, [rows, cols] contiguous, padding dropped).
void dequantize_launch(const DevQTensor& q, float* out, cudaStream_t stream);

/// Tensor-delayed device state, quantize-then-update (quant.h Quantizer): scale[0] is the delayed
/// scale (the next update's result), scale[1] the scale of the current quantization; state_i =
/// {history count, next position, last-overflow flag, overflow count, amax recorded flag};
/// pending = the amax recorded since the last update (float bits, NaN largest).
/// select (after the amax pre-pass): scale[1] = this tensor's scale_from_amax if the history is
/// empty and the amax finite, else scale[0].
void delayed_select_launch(const unsigned* amax_bits, const int* state_i, float* scale, Format format,
                           int margin, bool pow2, cudaStream_t stream);
/// record (after the cast): pending = max(pending, amax) (a NaN sticks); sets the recorded flag.
void delayed_record_launch(const unsigned* amax_bits, unsigned* pending, int* state_i, cudaStream_t stream);
/// update: nothing recorded: no change. Else the flag and pending are cleared; a finite amax is
/// appended to the circular history [hist_len] and scale[0] = scale_from_amax(max or most recent
/// of the history); a NaN/inf amax keeps the scale and the history, sets the last-overflow flag
/// and counts it (a finite one clears the flag).
void delayed_update_launch(unsigned* pending, float* history, int hist_len, int* state_i, float* scale,
                           Format format, int margin, bool pow2, bool most_recent, cudaStream_t stream);
/// pending = amax bits (amax < 0: nothing recorded), for a cross-rank reduction (quant.h).
void delayed_set_pending_launch(unsigned* pending, int* state_i, float amax, cudaStream_t stream);
/// The cross-rank exchange form (octet::Linear::pending_amaxes, backend.h) of pending, read into /
/// written from the device int *out / *in (−1: nothing recorded), enqueued without a host wait.
void delayed_get_exchange_launch(const unsigned* pending, const int* state_i, int* out, cudaStream_t stream);
void delayed_set_exchange_launch(unsigned* pending, int* state_i, const int* in, cudaStream_t stream);

}  // namespace octet::cuda
