// src/cuda/quantize/quantizer.h — CudaQuantizer: the GPU twin of octet::Quantizer (quant.h) for one operand
// slot, with its tensor-delayed state (amax history, scales, overflow count, the amax recorded since
// the last update) in device memory, producing device FP8 operands.
//
// Quantize-then-update, as quant.h (TransformerEngine's amax_and_scale_update): quantize() writes the
// row-wise copy [rows, cols] and/or the column-wise copy [cols, rows] of x from one pass over x
// (quantize.h), both with the current scale, and records the amax; update() folds the recorded
// amax into the history and computes the next scale. Neither waits for the GPU: every decision
// that depends on device state (is the history still empty? was the amax finite?) is taken by a
// one-thread kernel on the stream. Statistics, the host getters and the checkpoint state
// (delayed_state / load_delayed_state) synchronize the stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/runtime/buffer.h"
#include "cuda/quantize/qtensor.h"
#include "cuda/quantize/quantize.h"
#include "octet/backend.h"
#include "octet/quant.h"

namespace octet::cuda {

class CudaBackend;
class SavedPlacement;

/// An owning device FP8 operand: codes and scales are Buffers of a backend (stream-ordered), so a
/// DevQ can be scratch (reused; grows when too small) or part of a forward's saved state.
struct DevQ {
  DevQTensor view;
  Buffer codes, scales;
  /// Sets the shape, format and layout; allocates from `backend` when the buffers are too small,
  /// without zero fill: the quantize kernel writes every code (padding too) and every scale entry.
  void ensure(int64_t rows, int64_t cols, Format format, ScaleLayout layout, CudaBackend& backend);
  /// As ensure(), with the codes and then the scales taken from `at` (views of caller memory, or
  /// only counted: saved_placement.h); ensure() keeps them afterwards (they are large enough).
  void place(int64_t rows, int64_t cols, Format format, ScaleLayout layout, SavedPlacement& at);
};

class CudaQuantizer {
 public:
  /// Throws octet::Error for an invalid config (history length < 1, non-positive unit scale).
  /// `backend` (which enqueues on `stream`) provides the operand memory.
  CudaQuantizer(const QuantConfig& config, Role role, CudaBackend& backend, cudaStream_t stream);

  /// Quantizes x (act, F32 or BF16, viewed as [x.rows(), x.cols()]) into `rowwise` ([rows, cols])
  /// and/or `colwise` ([cols, rows]); either may be null, not both. Tensor-delayed: the current
  /// scale (this tensor's own amax while the history is empty) and the amax recorded.
  /// `amax` (optional, device): x's amax as |x| float bits, computed by the kernel that wrote x (ops.h
  /// amax outputs); tensor-current then skips its amax pre-pass (same scale, same codes). Ignored by
  /// the other recipes.
  void quantize(const Tensor& x, DevQ* rowwise, DevQ* colwise, const unsigned* amax = nullptr);
  /// tensor-delayed: folds the recorded amax into the history (quant.h Quantizer::update);
  /// other recipes: no-op. Enqueued, no synchronization.
  void update();
  /// tensor-delayed: the recorded amax (-1: none; synchronizes) / replaces it (enqueued).
  float pending_amax() const;
  void set_pending_amax(float amax);
  /// tensor-delayed: the recorded amax in the cross-rank exchange form (backend.h
  /// Linear::pending_amaxes) into the device int *out / replaced from *in. Enqueued, no host wait.
  void pending_exchange(int32_t* out) const;
  void set_pending_exchange(const int32_t* in);

  const QuantConfig& config() const { return config_; }
  Role role() const { return role_; }
  Format format() const { return format_for(config_.formats, role_); }
  ScaleLayout layout() const { return scale_layout_for(config_.recipe, role_); }
  cudaStream_t stream() const { return stream_; }

  /// Statistics of the last quantization (row-wise copy; column-wise if it had none), {} before
  /// the first. Synchronizes.
  QuantStats stats() const;
  /// Amax of the last quantized source (NaN if it held a NaN). Synchronizes.
  float last_amax() const;
  /// Counts of the last quantization: {underflow, saturated} of the row-wise (0) or column-wise
  /// (1) copy. Synchronizes.
  void last_counts(int copy, int64_t* underflow, int64_t* saturated) const;
  /// tensor-delayed state (synchronizes): the delayed scale, the last update's overflow flag, the
  /// overflow count.
  float delayed_scale() const;
  bool last_overflow() const;
  int64_t overflow_count() const;
  /// tensor-delayed: the state to checkpoint, downloaded (synchronizes), the circular device
  /// history unrolled to most recent last; quant.h's Quantizer::delayed_state twin.
  DelayedState delayed_state() const;
  /// tensor-delayed: uploads a delayed_state() (validated by check_delayed_state; synchronizes);
  /// clears the recorded amax and the overflow flag, as Quantizer::load_delayed_state. Both
  /// throw octet::Error for the stateless recipes.
  void load_delayed_state(const DelayedState& state);

 private:
  void read_state(int st[5]) const;  // synchronizes
  QuantConfig config_;
  Role role_;
  CudaBackend& backend_;
  cudaStream_t stream_;
  DeviceBuffer<QuantCounters> counters_;  // [1]: amax, counts, scale range of the last quantization
  const unsigned* amax_bits() const { return &counters_.get()->amax_bits; }  // device address
  QuantCounters read_counters() const;                                       // synchronizes
  DeviceBuffer<unsigned> row_amax_, col_amax_;                               // row recipe scratch
  DeviceBuffer<float> scale_;              // [2]: delayed scale, this quantization's scale
  DeviceBuffer<float> history_;            // [H]
  DeviceBuffer<int> state_;                // [5]: quantize.h delayed state
  DeviceBuffer<unsigned> pending_;         // [1]: recorded amax bits
  bool history_nonempty_ = false;          // host knowledge (from a synchronizing read or a load)
  int64_t last_rows_ = 0, last_cols_ = 0;  // shape of the copy the stats describe
  int last_copy_ = 0;                      // 0: row-wise, 1: column-wise
};

/// Downloads a device operand into octet's host QTensor form (codes without padding, scale_inv
/// row-major over blocks as quant.h lays it out). amax and counts are not filled. Synchronizes.
QTensor to_host(const DevQTensor& q, cudaStream_t stream);

}  // namespace octet::cuda
