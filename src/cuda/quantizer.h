// src/cuda/quantizer.h — the GPU twin of octet::Quantizer (quant.h): one quantizer slot, with the
// tensor-delayed amax history and scale kept in device memory, producing device FP8 operands.
//
// quantize() writes the row-wise copy [rows, cols] and/or the column-wise copy [cols, rows] of x from
// one pass over x (quantize.h), both with the recipe's scales; for tensor-delayed both copies use
// the scale of this quantization, as quant.h specifies for quantize_transposed. The delayed history
// is updated on the device (no host sync). Statistics, to_host() and the checkpoint state
// (delayed_state / load_delayed_state) synchronize the stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/buffer.h"
#include "cuda/qtensor.h"
#include "octet/backend.h"
#include "octet/quant.h"

namespace octet::cuda {

/// An owning device FP8 operand: buffers grow as needed and are reused.
struct DevQ {
  DevQTensor view;
  DeviceBuffer<uint8_t> codes;
  DeviceBuffer<float> scales;
  /// Sets the shape, format and layout and makes room for codes and scales.
  void ensure(int64_t rows, int64_t cols, Format format, ScaleLayout layout);
};

class CudaQuantizer {
 public:
  /// Throws octet::Error for an invalid config (history length < 1, non-positive unit scale).
  CudaQuantizer(const QuantConfig& config, Role role, cudaStream_t stream);

  /// Quantizes x [rows, cols] (device, row-major) into `rowwise` ([rows, cols]) and/or `colwise`
  /// ([cols, rows]); either may be null. advance=true advances the delayed state once (quant.h's
  /// quantize()); advance=false reuses the last quantization's scale (quantize_transposed() of a
  /// slot already quantized; before any quantization it acts as advance=true).
  void quantize(const float* x, int64_t rows, int64_t cols, DevQ* rowwise, DevQ* colwise,
                bool advance = true);

  const QuantConfig& config() const { return config_; }
  Role role() const { return role_; }
  Format format() const { return format_for(config_.formats, role_); }
  ScaleLayout layout() const { return scale_layout_for(config_.recipe, role_); }
  cudaStream_t stream() const { return stream_; }

  /// Amax of the last quantized source (NaN if it held a NaN). Synchronizes.
  float last_amax() const;
  /// Counts of the last quantization: {underflow, saturated} of the row-wise (0) or column-wise
  /// (1) copy. Synchronizes.
  void last_counts(int copy, int64_t* underflow, int64_t* saturated) const;
  /// tensor-delayed state (synchronizes): the next scale, the overflow flag and count.
  float delayed_scale() const;
  bool last_overflow() const;
  int64_t overflow_count() const;
  /// tensor-delayed: the state to checkpoint, downloaded (synchronizes), the circular device
  /// history unrolled to most recent last; quant.h's Quantizer::delayed_state twin.
  DelayedState delayed_state() const;
  /// tensor-delayed: uploads a delayed_state() (validated by check_delayed_state; synchronizes).
  /// The quantizer then acts like the saving one from its next advancing quantize() on, as
  /// Quantizer::load_delayed_state. Both throw octet::Error for the stateless recipes.
  void load_delayed_state(const DelayedState& state);

 private:
  QuantConfig config_;
  Role role_;
  cudaStream_t stream_;
  DeviceBuffer<unsigned> amax_;                 // [1] amax bits
  DeviceBuffer<unsigned long long> counts_;     // [4]
  DeviceBuffer<unsigned> row_amax_, col_amax_;  // row recipe scratch
  DeviceBuffer<float> scale_;                   // [2]: next scale, last used scale
  DeviceBuffer<float> history_;                 // [H]
  DeviceBuffer<int> state_;                     // [4]: count, pos, overflow flag, overflow count
  bool history_nonempty_ = false;  // host cache: once true, the delayed history never empties
  bool quantized_once_ = false;
};

/// Downloads a device operand into octet's host QTensor form (codes without padding, scale_inv
/// row-major over blocks as quant.h lays it out). amax and counts are not filled.
QTensor to_host(const DevQTensor& q, cudaStream_t stream);

/// QuantStats (backend.h) of the copy `copy` (0 row-wise, 1 column-wise) of the last quantization.
QuantStats quant_stats(const CudaQuantizer& qz, const DevQTensor& q, int copy);

}  // namespace octet::cuda
