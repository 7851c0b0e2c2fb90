// linear.cpp — CpuLinear: the three GEMMs of a linear layer Y = X Wᵀ in BF16, FP8 or FP32 (CPU).
//
// Shapes: X [M, in], W [out, in], Y [M, out]. Every GEMM uses the "TN" convention of octet/gemm.h,
// C[M, N] = A[M, K]·B[N, K]ᵀ, so each operand is given with the contracted dimension contiguous:
//   forward  Y  = X̂ Ŵᵀ      A = X   [M, in],   B = W   [out, in]
//   dgrad    dX = dŶ Ŵ      A = dY  [M, out],  B = Wᵀ  [in, out]
//   wgrad    dW += dŶᵀ X̂    A = dYᵀ [out, M],  B = Xᵀ  [in, M]    (beta = 1: accumulated)
// BF16: gemm_bf16 (operands rounded to BF16, FP32 accumulation); FP32 (the reference for gradient
// checks): gemm_f32, operands unrounded. In both, the transposes are FP32 copies.
// FP8: one Quantizer per operand slot (X: Role::Activation, W: Role::Weight, dY: Role::Gradient),
// each operand quantized from its FP32 source in the orientation its GEMM needs, transposed ones
// with quantize_transposed (never re-quantized from FP8), as in DeepSeek-V3 §3.3 and Transformer
// Engine; then gemm_fp8. Under tensor-delayed scaling the transposed copies reuse the scale of
// their slot's last quantize() (octet/quant.h), so W's and X's backward copies share the forward
// scales. All buffers (QTensors, transposes) are members and reused: no allocation per step once
// the shapes have been seen. quant_state() saves the three slots' delayed-scaling state (quant.h
// DelayedState) for checkpoints.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cpu/backend/cpu_backend.h"
#include "fp8/linear_state.h"
#include "octet/error.h"
#include "octet/gemm.h"
#include "octet/quant.h"

namespace octet::cpu {
namespace {

// dst [cols, rows] = srcᵀ, src [rows, cols] row-major. dst is resized (capacity is kept).
void transpose(const float* src, int64_t rows, int64_t cols, std::vector<float>& dst) {
  dst.resize(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[size_t(c * rows + r)] = src[r * cols + c];
}

// Statistics of one quantized operand: amax, the range of scale = 1/scale_inv over the scale
// grid, and the underflow / saturation counts as fractions of all elements.
QuantStats stats_of(const QTensor& q) {
  QuantStats s;
  if (q.codes.empty()) return s;  // never quantized
  s.amax = q.amax;
  float lo = std::numeric_limits<float>::infinity(), hi = -lo;
  for (float si : q.scale_inv) {
    const float scale = float(1.0 / double(si));
    lo = std::min(lo, scale);
    hi = std::max(hi, scale);
  }
  s.scale_min = lo;
  s.scale_max = hi;
  const double n = double(q.rows) * double(q.cols);
  s.underflow_frac = double(q.n_underflow) / n;
  s.saturated_frac = double(q.n_saturated) / n;
  return s;
}

class CpuLinear final : public Linear {
 public:
  explicit CpuLinear(const LinearSpec& spec)
      : spec_(spec), dense_gemm_(spec.precision == LinearPrecision::FP32 ? gemm_f32 : gemm_bf16) {
    OCTET_CHECK(spec.in_features >= 1 && spec.out_features >= 1,
                "linear: in_features and out_features must be >= 1, got " +
                    std::to_string(spec.in_features) + " and " +
                    std::to_string(spec.out_features));
    if (spec.precision == LinearPrecision::FP8) {
      qx_ = std::make_unique<Quantizer>(spec.quant, Role::Activation);
      qw_ = std::make_unique<Quantizer>(spec.quant, Role::Weight);
      qdy_ = std::make_unique<Quantizer>(spec.quant, Role::Gradient);
    }
  }

  void forward(const float* x, const float* w, float* y, int64_t m) override {
    check_m(m);
    const int64_t in = spec_.in_features, out = spec_.out_features;
    if (!fp8()) {
      dense_gemm_(x, w, y, m, out, in, 0.0f);
      return;
    }
    qx_->quantize(x, m, in, x_q_);
    qw_->quantize(w, out, in, w_q_);
    gemm_fp8(x_q_, w_q_, y);
  }

  void backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                int64_t m) override {
    check_m(m);
    const int64_t in = spec_.in_features, out = spec_.out_features;
    if (!fp8()) {
      if (dx) {
        transpose(w, out, in, w_t_);
        dense_gemm_(dy, w_t_.data(), dx, m, in, out, 0.0f);
      }
      if (dw) {
        transpose(dy, m, out, dy_t_);
        transpose(x, m, in, x_t_);
        dense_gemm_(dy_t_.data(), x_t_.data(), dw, out, in, m, 1.0f);
      }
      return;
    }
    qdy_->quantize(dy, m, out, dy_q_);  // first: it sets dY's delayed scale for the transpose
    if (dx) {
      qw_->quantize_transposed(w, out, in, w_t_q_);
      gemm_fp8(dy_q_, w_t_q_, dx);
    }
    if (dw) {
      qdy_->quantize_transposed(dy, m, out, dy_t_q_);
      qx_->quantize_transposed(x, m, in, x_t_q_);
      gemm_fp8(dy_t_q_, x_t_q_, dw, 1.0f);
    }
  }

  QuantStats stats_x() const override { return stats_of(x_q_); }
  QuantStats stats_w() const override { return stats_of(w_q_); }
  QuantStats stats_dy() const override { return stats_of(dy_q_); }

  std::vector<float> quant_state() const override {
    return detail::linear_quant_state(delayed(), qx_.get(), qw_.get(), qdy_.get());
  }

  void load_quant_state(const std::vector<float>& state) override {
    detail::load_linear_quant_state(delayed(), state, spec_.quant.amax_history_len, qx_.get(),
                                    qw_.get(), qdy_.get());
  }

 private:
  bool fp8() const { return spec_.precision == LinearPrecision::FP8; }
  bool delayed() const { return fp8() && spec_.quant.recipe == Recipe::TensorDelayed; }
  static void check_m(int64_t m) {
    OCTET_CHECK(m >= 1, "linear: the number of rows M must be >= 1, got " + std::to_string(m));
  }

  using DenseGemm = void (*)(const float*, const float*, float*, int64_t, int64_t, int64_t, float);
  LinearSpec spec_;
  DenseGemm dense_gemm_;                               // BF16 / FP32: gemm_bf16 or gemm_f32
  std::vector<float> w_t_, dy_t_, x_t_;                // BF16 / FP32: FP32 transposes
  std::unique_ptr<Quantizer> qx_, qw_, qdy_;           // FP8: one quantizer per operand slot
  QTensor x_q_, w_q_, dy_q_, w_t_q_, dy_t_q_, x_t_q_;  // FP8: operands, reused between calls
};

}  // namespace

std::unique_ptr<Linear> CpuBackend::make_linear(const LinearSpec& spec) {
  return std::make_unique<CpuLinear>(spec);
}

}  // namespace octet::cpu
