// src/cuda/linear.cpp — CudaLinear: the three GEMMs of a linear layer Y = X Wᵀ on the GPU, the twin
// of src/cpu/backend/linear.cpp.
//
// Shapes: X [M, in], W [out, in], Y [M, out]; "TN" GEMMs C[M,N] = A[M,K]·B[N,K]ᵀ (gemm.h):
//   forward  Y  = X̂ Ŵᵀ      A = X̂   [M, in],   B = Ŵ   [out, in]
//   dgrad    dX = dŶ Ŵ      A = dŶ  [M, out],  B = Ŵᵀ  [in, out]
//   wgrad    dW += dŶᵀ X̂    A = dŶᵀ [out, M],  B = X̂ᵀ  [in, M]    (beta = 1)
// FP8: one CudaQuantizer per slot (X activation, W weight, dY gradient). The forward quantizes X and
// W into both orientations in one pass each (quantize.h), so the backward's X̂ᵀ and Ŵᵀ are the
// forward's copies — quantized from the FP32 source, never from FP8, with the forward's scale as
// quant.h's quantize_transposed prescribes — provided backward() gets the same x and w pointers
// (otherwise they are re-quantized from the given sources with the slot's last scale). dY is
// quantized into both orientations once. BF16: operands rounded to BF16 (fp8.h bf16_round),
// cuBLASLt BF16 GEMMs with FP32 accumulation. FP32: cuBLASLt FP32 (no TF32), the reference path.
#include <memory>
#include <string>
#include <vector>

#include "cuda/check.h"
#include "cuda/cuda_backend.h"
#include "cuda/quantize.h"
#include "cuda/quantizer.h"
#include "fp8/linear_state.h"
#include "octet/error.h"

namespace octet::cuda {
namespace {

class CudaLinear final : public Linear {
 public:
  CudaLinear(const LinearSpec& spec, GemmEngine& gemm) : spec_(spec), gemm_(gemm) {
    OCTET_CHECK(spec.in_features >= 1 && spec.out_features >= 1,
                "linear: in_features and out_features must be >= 1, got " +
                    std::to_string(spec.in_features) + " and " +
                    std::to_string(spec.out_features));
    if (spec.precision == LinearPrecision::FP8) {
      const cudaStream_t s = gemm.stream();
      qx_ = std::make_unique<CudaQuantizer>(spec.quant, Role::Activation, s);
      qw_ = std::make_unique<CudaQuantizer>(spec.quant, Role::Weight, s);
      qdy_ = std::make_unique<CudaQuantizer>(spec.quant, Role::Gradient, s);
      OCTET_CHECK(!(qdy_->format() == Format::E5M2 && qw_->format() == Format::E5M2),
                  "linear: E5M2 x E5M2 GEMMs are not supported");
    }
  }

  void forward(const float* x, const float* w, float* y, int64_t m) override {
    check_m(m);
    const int64_t in = spec_.in_features, out = spec_.out_features;
    switch (spec_.precision) {
      case LinearPrecision::FP8:
        qx_->quantize(x, m, in, &xq_, &xtq_);
        qw_->quantize(w, out, in, &wq_, &wtq_);
        gemm_.fp8(xq_.view, wq_.view, y);
        fwd_x_ = x;
        fwd_w_ = w;
        fwd_m_ = m;
        return;
      case LinearPrecision::BF16: {
        uint16_t* xb = bf16(x, size_t(m * in), xb_);
        uint16_t* wb = bf16(w, size_t(out * in), wb_);
        gemm_.bf16(xb, false, wb, true, y, m, out, in);
        return;
      }
      case LinearPrecision::FP32: gemm_.f32(x, false, w, true, y, m, out, in); return;
    }
  }

  void backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                int64_t m) override {
    check_m(m);
    const int64_t in = spec_.in_features, out = spec_.out_features;
    switch (spec_.precision) {
      case LinearPrecision::FP8: {
        qdy_->quantize(dy, m, out, &dyq_, dw ? &dytq_ : nullptr);
        if (dx) {
          if (w != fwd_w_) qw_->quantize(w, out, in, nullptr, &wtq_, false);
          gemm_.fp8(dyq_.view, wtq_.view, dx);
        }
        if (dw) {
          if (x != fwd_x_ || m != fwd_m_) qx_->quantize(x, m, in, nullptr, &xtq_, false);
          gemm_.fp8(dytq_.view, xtq_.view, dw, 1.0f);
        }
        return;
      }
      case LinearPrecision::BF16: {
        uint16_t* dyb = bf16(dy, size_t(m * out), dyb_);
        if (dx) gemm_.bf16(dyb, false, bf16(w, size_t(out * in), wb_), false, dx, m, in, out);
        if (dw) gemm_.bf16(dyb, true, bf16(x, size_t(m * in), xb_), false, dw, out, in, m, 1.0f);
        return;
      }
      case LinearPrecision::FP32:
        if (dx) gemm_.f32(dy, false, w, false, dx, m, in, out);
        if (dw) gemm_.f32(dy, true, x, false, dw, out, in, m, 1.0f);
        return;
    }
  }

  QuantStats stats_x() const override { return stats(qx_.get(), xq_); }
  QuantStats stats_w() const override { return stats(qw_.get(), wq_); }
  QuantStats stats_dy() const override { return stats(qdy_.get(), dyq_); }

  // Checkpoint state: as CpuLinear's, downloaded from / uploaded to the quantizers' device state.
  std::vector<float> quant_state() const override {
    return detail::linear_quant_state(delayed(), qx_.get(), qw_.get(), qdy_.get());
  }

  void load_quant_state(const std::vector<float>& state) override {
    detail::load_linear_quant_state(delayed(), state, spec_.quant.amax_history_len, qx_.get(),
                                    qw_.get(), qdy_.get());
    fwd_x_ = fwd_w_ = nullptr;  // the forward's transposed copies predate the restored state
    fwd_m_ = 0;
  }

 private:
  bool delayed() const {
    return spec_.precision == LinearPrecision::FP8 && spec_.quant.recipe == Recipe::TensorDelayed;
  }
  static void check_m(int64_t m) {
    OCTET_CHECK(m >= 1, "linear: the number of rows M must be >= 1, got " + std::to_string(m));
  }
  uint16_t* bf16(const float* src, size_t n, DeviceBuffer<uint16_t>& buf) {
    uint16_t* p = buf.reserve(n);
    to_bf16_launch(src, p, int64_t(n), gemm_.stream());
    return p;
  }
  static QuantStats stats(const CudaQuantizer* q, const DevQ& t) {
    if (!q || t.view.rows == 0) return {};
    return quant_stats(*q, t.view, 0);
  }

  LinearSpec spec_;
  GemmEngine& gemm_;
  std::unique_ptr<CudaQuantizer> qx_, qw_, qdy_;
  DevQ xq_, xtq_, wq_, wtq_, dyq_, dytq_;
  const float* fwd_x_ = nullptr;
  const float* fwd_w_ = nullptr;
  int64_t fwd_m_ = 0;
  DeviceBuffer<uint16_t> xb_, wb_, dyb_;
};

}  // namespace

std::unique_ptr<Linear> make_cuda_linear(const LinearSpec& spec, GemmEngine& gemm) {
  return std::make_unique<CudaLinear>(spec, gemm);
}

}  // namespace octet::cuda
