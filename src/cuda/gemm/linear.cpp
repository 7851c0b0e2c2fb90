// src/cuda/gemm/linear.cpp — CudaLinear: the three GEMMs of a linear layer Y = X Wᵀ on the GPU, the twin
// of src/cpu/backend/linear.cpp. (docs/design.md §"Saved state")
//
// Shapes: X [M, in], W [out, in], Y [M, out]; "TN" GEMMs C[M,N] = A[M,K]·B[N,K]ᵀ (gemm.h):
//   forward  Y  = X̂ Ŵᵀ      A = X̂   [M, in],   B = Ŵ   [out, in]
//   dgrad    dX = dŶ Ŵ      A = dŶ  [M, out],  B = Ŵᵀ  [in, out]
//   wgrad    dW += dŶᵀ X̂    A = dŶᵀ [out, M],  B = X̂ᵀ  [in, M]    (beta = 1)
// FP8: one CudaQuantizer per slot (X activation, W weight, dY gradient). The forward quantizes X and
// W into both orientations in one pass each (quantize.h) with the slot's current scale; the
// row-wise copies feed its GEMM (scratch), the column-wise copies X̂ᵀ and Ŵᵀ go into the returned
// SavedLinear's state (stream-ordered Buffers), so the backward's operands are the forward's —
// quantized from the high-precision source, never from FP8 — however many forwards are
// outstanding. dY is quantized into the orientations the backward needs, once. update_scales() is
// the delayed recipe's update step. With spec.cache_weight (backend.h) W is quantized once and its
// Ŵ / Ŵᵀ reused until update_scales(), load_quant_state() or weights_changed(): the scale_inv each
// GEMM applies is the one stored with the codes, so cached and uncached results are bitwise equal.
// BF16: operands rounded to BF16 (RNE, a BF16 input is used as is), cuBLASLt BF16 GEMMs with FP32
// accumulation; with spec.cache_weight W's BF16 copy is likewise made once per cache period.
// FP32: cuBLASLt FP32 (no TF32), the reference path. X, Y, dY, dX are F32 or BF16 each: the FP8 and BF16
// GEMMs write Y and dX in their dtype (a BF16 output is the FP32 result rounded once, by cuBLASLt's epilogue:
// gemm.h); the FP32 path writes FP32 and rounds a BF16 output once (act_f32.h). dW accumulates in FP32 (beta
// = 1).
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/linear_args.h"
#include "core/weight_gather_args.h"
#include "cuda/runtime/act_f32.h"
#include "cuda/runtime/check.h"
#include "cuda/runtime/cuda_backend.h"
#include "cuda/runtime/saved_placement.h"
#include "cuda/ops/ops.h"
#include "cuda/quantize/quantize.h"
#include "cuda/quantize/quantizer.h"
#include "fp8/linear_state.h"
#include "octet/error.h"

namespace octet::cuda {
namespace {

// What a CudaLinear forward keeps for its backward (FP8: X̂ᵀ and Ŵᵀ; BF16/FP32: nothing beyond the
// views in SavedLinear).
struct LinearState final : SavedState {
  const void* owner = nullptr;     // the CudaLinear that made it (validation only)
  DevQ xt;                         // FP8: X̂ᵀ [in, M]
  std::shared_ptr<const DevQ> wt;  // FP8: Ŵᵀ [in, out] (shared with the weight cache)
};

class CudaLinear final : public Linear {
 public:
  CudaLinear(const LinearSpec& spec, CudaBackend& backend)
      : spec_(spec), be_(backend), gemm_(backend.gemm()), s_(backend.stream()) {
    OCTET_CHECK(spec.in_features >= 1 && spec.out_features >= 1,
                "linear: in_features and out_features must be >= 1, got " + std::to_string(spec.in_features) +
                    " and " + std::to_string(spec.out_features));
    if (spec.precision == LinearPrecision::FP8) {
      qx_ = std::make_unique<CudaQuantizer>(spec.quant, Role::Activation, be_, s_);
      qw_ = std::make_unique<CudaQuantizer>(spec.quant, Role::Weight, be_, s_);
      qdy_ = std::make_unique<CudaQuantizer>(spec.quant, Role::Gradient, be_, s_);
      OCTET_CHECK(!(qdy_->format() == Format::E5M2 && qw_->format() == Format::E5M2),
                  "linear: E5M2 x E5M2 GEMMs are not supported");
      saved_terms_ = make_saved_terms();
    }
  }

  SavedLinear forward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& x_amax = {},
                      const Tensor& residual = {}) override {
    return run_forward(x, w, y, x_amax, residual, nullptr);
  }

  // Saved state in caller memory (backend.h): X̂ᵀ, then Ŵᵀ, each its codes then its scales
  // (place_saved), the quantize kernel writing them there directly; the size terms are made once
  // (make_saved_terms), and place_saved checks that it takes exactly their sum.
  std::vector<SavedSizeTerm> saved_size_terms() const override { return saved_terms_; }
  SavedLinear forward_to(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& memory,
                         const Tensor& x_amax = {}, const Tensor& residual = {}) override {
    if (spec_.precision != LinearPrecision::FP8)
      return Linear::forward_to(x, w, y, memory, x_amax, residual);  // refuses
    return run_forward(x, w, y, x_amax, residual, &memory);
  }
  SavedLinear saved_from(int64_t rows, const Tensor& memory) const override {
    if (spec_.precision != LinearPrecision::FP8) return Linear::saved_from(rows, memory);  // refuses
    SavedPlacement at = SavedPlacement::into(memory, saved_bytes(rows), "linear saved_from: memory");
    auto st = std::make_unique<LinearState>();
    st->owner = this;
    place_saved(*st, rows, at);
    return SavedLinear{Tensor(), Tensor(), std::move(st)};
  }

  void backward(const SavedLinear& saved, const Tensor& dy, const Tensor& dx, const Tensor& dw,
                const Tensor& dy_amax = {}) override {
    DeviceGuard g(be_.device());
    const auto* st = dynamic_cast<const LinearState*>(saved.state.get());
    OCTET_CHECK(st && st->owner == this,
                "linear backward: the saved state does not come from this linear's forward");
    const int64_t in = spec_.in_features, out = spec_.out_features;
    // FP8: M from X̂ᵀ [in, M] (a saved_from state has no x)
    const int64_t m = spec_.precision == LinearPrecision::FP8 ? st->xt.view.cols : saved.x.rows();
    check_activation(dy, "linear backward: dy");
    check_amax_out(dy_amax, "linear backward: dy_amax");
    OCTET_CHECK(dy.cols() == out && dy.rows() == m, "linear backward: dy must be [" + std::to_string(m) +
                                                        ", " + std::to_string(out) + "], got " + dy.str());
    if (!dx.empty()) {
      check_activation(dx, "linear backward: dx");
      OCTET_CHECK(dx.cols() == in && dx.rows() == m, "linear backward: dx must be [" + std::to_string(m) +
                                                         ", " + std::to_string(in) + "], got " + dx.str());
    }
    if (!dw.empty()) check_weight(dw, "linear backward: dw");
    if (dx.empty() && dw.empty()) return;
    switch (spec_.precision) {
      case LinearPrecision::FP8: {
        qdy_->quantize(dy, dx.empty() ? nullptr : &dyq_, dw.empty() ? nullptr : &dytq_,
                       dy_amax.empty() ? nullptr : reinterpret_cast<const unsigned*>(dy_amax.data));
        if (!dx.empty()) gemm_.fp8(dyq_.view, st->wt->view, dx);
        if (!dw.empty()) gemm_.fp8(dytq_.view, st->xt.view, dw.f32(), 1.0f);
        return;
      }
      case LinearPrecision::BF16: {
        const uint16_t* dyb = as_bf16(dy, dyb_);
        if (!dx.empty()) gemm_.bf16(dyb, false, w_bf16(saved.w), false, dx, m, in, out);
        if (!dw.empty()) gemm_.bf16(dyb, true, as_bf16(saved.x, xb_), false, dw.f32(), out, in, m, 1.0f);
        return;
      }
      case LinearPrecision::FP32: {
        const float* dyf = as_f32(dy, dyf_);
        if (!dx.empty()) {
          gemm_.f32(dyf, false, saved.w.f32(), false, f32_out(dx), m, in, out);
          finish(dx);
        }
        if (!dw.empty()) gemm_.f32(dyf, true, as_f32(saved.x, xf_), false, dw.f32(), out, in, m, 1.0f);
        return;
      }
    }
  }

 private:
  // The saved state's size terms: X̂ᵀ [in, M]'s two buffers in M, then Ŵᵀ's as one fixed size
  // (counted by the placement itself).
  std::vector<SavedSizeTerm> make_saved_terms() const {
    std::vector<SavedSizeTerm> terms =
        size_terms_by_cols(spec_.in_features, qx_->layout(), SavedPlacement::kAlign);
    SavedPlacement at = SavedPlacement::counting();
    DevQ wt;
    wt.place(spec_.in_features, spec_.out_features, qw_->format(), qw_->layout(), at);
    terms.push_back({0, 1, at.bytes(), 1});
    return terms;
  }
  // X̂ᵀ [in, M] and Ŵᵀ [in, out] of a forward of `rows` rows, in that order, from `at`; returns st.wt.
  std::shared_ptr<DevQ> place_saved(LinearState& st, int64_t rows, SavedPlacement& at) const {
    const int64_t in = spec_.in_features, out = spec_.out_features;
    st.xt.place(in, rows, qx_->format(), qx_->layout(), at);
    auto wt = std::make_shared<DevQ>();
    wt->place(in, out, qw_->format(), qw_->layout(), at);
    OCTET_CHECK(at.bytes() == saved_bytes(rows),
                "linear saved state: the placement is not saved_bytes() long (a layout bug)");
    st.wt = wt;
    return wt;
  }

  // forward() / forward_to(): memory null or the caller's block for the saved state.
  SavedLinear run_forward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& x_amax,
                          const Tensor& residual, const Tensor* memory) {
    DeviceGuard g(be_.device());
    const int64_t in = spec_.in_features, out = spec_.out_features;
    check_activation(x, "linear forward: x");
    check_amax_out(x_amax, "linear forward: x_amax");
    OCTET_CHECK(x.cols() == in && x.rows() >= 1,
                "linear forward: x must be [M >= 1, " + std::to_string(in) + "], got " + x.str());
    const int64_t m = x.rows();
    check_weight(w, "linear forward: w");
    const bool gemm = !y.empty();  // empty: the backward's operands only (backend.h)
    if (gemm) {
      check_activation(y, "linear forward: y");
      OCTET_CHECK(y.cols() == out && y.rows() == m, "linear forward: y must be [" + std::to_string(m) + ", " +
                                                        std::to_string(out) + "], got " + y.str());
    }
    check_linear_residual(residual, y);
    const bool add = !residual.empty();
    auto st = std::make_unique<LinearState>();
    st->owner = this;
    std::shared_ptr<DevQ> placed_wt;  // forward_to: X̂ᵀ and Ŵᵀ in the caller's memory
    const uint8_t* placed_xt = nullptr;
    if (memory) {
      SavedPlacement at = SavedPlacement::into(*memory, saved_bytes(m), "linear forward_to: memory");
      placed_wt = place_saved(*st, m, at);
      placed_xt = st->xt.view.codes;
    }
    const Tensor w2 = w.reshape({out, in});
    switch (spec_.precision) {
      case LinearPrecision::FP8:
        // the producer's amax: tensor-current skips its amax pass over X (quantizer.h)
        qx_->quantize(x, gemm ? &xq_ : nullptr, &st->xt,
                      x_amax.empty() ? nullptr : reinterpret_cast<const unsigned*>(x_amax.data));
        // the quantizer kept the placed buffers (DevQ::ensure reallocates only what is too small)
        OCTET_CHECK(!memory || st->xt.view.codes == placed_xt,
                    "linear forward_to: X̂ᵀ left the caller's memory (a layout bug)");
        if (memory && !wt_) {  // Ŵ into wq_ (scratch) and Ŵᵀ into the caller's memory
          const uint8_t* placed = placed_wt->view.codes;
          qw_->quantize(w2, &wq_, placed_wt.get());
          OCTET_CHECK(placed_wt->view.codes == placed,
                      "linear forward_to: Ŵᵀ left the caller's memory (a layout bug)");
          installed_stats_ = false;
          if (spec_.cache_weight) wt_ = copy_of(*st->wt);  // the cache owns its Ŵᵀ
        } else {
          if (!wt_) {  // Ŵ into wq_ (scratch, kept while cached) and Ŵᵀ (shared with the saved states)
            auto wt = std::make_shared<DevQ>();
            qw_->quantize(w2, &wq_, wt.get());
            wt_ = std::move(wt);
            installed_stats_ = false;
          }
          if (memory)
            copy_into(*wt_, *placed_wt);  // the cached Ŵᵀ (cache_weight, install_weight_codes)
          else
            st->wt = wt_;
        }
        if (add)
          gemm_.fp8_add(xq_.view, wq_.view, y, residual);
        else if (gemm)
          gemm_.fp8(xq_.view, wq_.view, y);
        if (!spec_.cache_weight) wt_.reset();
        break;
      case LinearPrecision::BF16:
        if (add)
          gemm_.bf16_add(as_bf16(x, xb_), false, w_bf16(w2), true, y, residual, m, out, in);
        else if (gemm)
          gemm_.bf16(as_bf16(x, xb_), false, w_bf16(w2), true, y, m, out, in);
        break;
      case LinearPrecision::FP32:
        if (gemm) {
          float* c = f32_out(y);
          if (add) convert_launch(Tensor(c, DType::F32, {y.numel()}), residual, s_);  // none when it is c
          gemm_.f32(as_f32(x, xf_), false, w2.f32(), true, c, m, out, in, add ? 1.0f : 0.0f);
          finish(y);
        }
        break;
    }
    return SavedLinear{x, w, std::move(st)};
  }

 public:
  void update_scales() override {
    wb_cached_ = false;  // the optimizer step that follows changes W (backend.h cache_weight)
    if (spec_.precision != LinearPrecision::FP8) return;
    wt_.reset();  // the optimizer step that follows changes W (backend.h cache_weight)
    DeviceGuard g(be_.device());
    qx_->update();
    qw_->update();
    qdy_->update();
  }

  QuantStats stats_x() const override { return stats(qx_.get()); }
  QuantStats stats_w() const override { return installed_stats_ ? installed_stats() : stats(qw_.get()); }
  QuantStats stats_dy() const override { return stats(qdy_.get()); }

  // Checkpoint state: as CpuLinear's, downloaded from / uploaded to the quantizers' device state.
  std::vector<float> quant_state() const override {
    DeviceGuard g(be_.device());
    return detail::linear_quant_state(delayed(), qx_.get(), qw_.get(), qdy_.get());
  }

  // Cross-rank amax exchange (backend.h): device int32 [3], enqueued on the stream.
  void pending_amaxes(const Tensor& amax) const override {
    check_dtype(amax, DType::I32, "linear pending_amaxes");
    check_numel(amax, 3, "linear pending_amaxes");
    DeviceGuard g(be_.device());
    if (!delayed()) {
      OCTET_CUDA_CHECK(cudaMemsetAsync(amax.data, 0xFF, 3 * sizeof(int32_t), s_));  // −1 each
      return;
    }
    qx_->pending_exchange(amax.i32());
    qw_->pending_exchange(amax.i32() + 1);
    qdy_->pending_exchange(amax.i32() + 2);
  }

  void set_pending_amaxes(const Tensor& amax) override {
    check_dtype(amax, DType::I32, "linear set_pending_amaxes");
    check_numel(amax, 3, "linear set_pending_amaxes");
    if (!delayed()) return;
    DeviceGuard g(be_.device());
    qx_->set_pending_exchange(amax.i32());
    qw_->set_pending_exchange(amax.i32() + 1);
    qdy_->set_pending_exchange(amax.i32() + 2);
  }

  void weights_changed() override {
    wt_.reset();
    wb_cached_ = false;
  }

  // FP8 weight all-gather (backend.h): the shard's amax and codes under the whole W's tensor scale
  // (quantize.h encode_piece_launch, the cast kernel's rule), and the gathered codes installed as
  // the weight cache (install_codes_launch: Ŵ into wq_, Ŵᵀ shared with the saved states).
  bool gathers_weight_codes() const override {
    return spec_.precision == LinearPrecision::FP8 && spec_.quant.recipe == Recipe::TensorCurrent &&
           spec_.cache_weight;
  }
  void weight_piece_amax(const Tensor& w_piece, const Tensor& amax) const override {
    check_gather("weight_piece_amax", w_piece, amax);
    DeviceGuard g(be_.device());
    tensor_amax_launch(w_piece.data, false, w_piece.numel(), nullptr, reinterpret_cast<unsigned*>(amax.i32()),
                       s_);
  }
  void encode_weight_piece(const Tensor& w_piece, const Tensor& amax, const Tensor& codes) const override {
    check_gather("encode_weight_piece", w_piece, amax);
    check_codes("linear encode_weight_piece: codes", codes, w_piece.numel());
    DeviceGuard g(be_.device());
    encode_piece_launch(w_piece.f32(), w_piece.numel(), reinterpret_cast<const unsigned*>(amax.i32()),
                        qw_->format(), spec_.quant.margin, spec_.quant.pow2_scales, spec_.quant.saturate,
                        codes.fp8(), s_);
  }
  void install_weight_codes(const Tensor& codes, const Tensor& amax) override {
    const int64_t in = spec_.in_features, out = spec_.out_features;
    check_install_codes_args(gathers_weight_codes(), qw_->format(), codes, amax, out * in);
    DeviceGuard g(be_.device());
    // A fresh Ŵᵀ: saved states of earlier forwards may still hold the previous one.
    auto wt = std::make_shared<DevQ>();
    wq_.ensure(out, in, qw_->format(), ScaleLayout::Tensor, be_);
    wt->ensure(in, out, qw_->format(), ScaleLayout::Tensor, be_);
    install_codes_launch(codes.fp8(), out, in, reinterpret_cast<const unsigned*>(amax.i32()),
                         spec_.quant.margin, spec_.quant.pow2_scales, &wq_.view, &wt->view, s_);
    wt_ = std::move(wt);
    // stats_w(): this amax and scale; the underflow/saturation counts need the FP32 W (NaN)
    OCTET_CUDA_CHECK(cudaMemcpyAsync(installed_amax_.reserve(1, s_), amax.data, sizeof(unsigned),
                                     cudaMemcpyDeviceToDevice, s_));
    installed_stats_ = true;
  }

  void load_quant_state(const std::vector<float>& state) override {
    wt_.reset();
    DeviceGuard g(be_.device());
    detail::load_linear_quant_state(delayed(), state, spec_.quant.amax_history_len, qx_.get(), qw_.get(),
                                    qdy_.get());
  }

 private:
  bool delayed() const {
    return spec_.precision == LinearPrecision::FP8 && spec_.quant.recipe == Recipe::TensorDelayed;
  }
  void check_weight(const Tensor& w, const char* what) const {
    check_dtype(w, DType::F32, what);
    OCTET_CHECK(w.numel() == spec_.out_features * spec_.in_features && w.cols() == spec_.in_features,
                std::string(what) + ": expected [" + std::to_string(spec_.out_features) + ", " +
                    std::to_string(spec_.in_features) + "], got " + w.str());
  }
  void check_gather(const char* what, const Tensor& w_piece, const Tensor& amax) const {
    check_weight_piece_args(gathers_weight_codes(), spec_, what, w_piece, amax);
  }
  void check_codes(const char* what, const Tensor& codes, int64_t n) const {
    check_weight_codes_args(qw_->format(), what, codes, n);
  }
  // Ŵᵀ's codes and scales copied device to device (stream-ordered): into `to`, placed with the same
  // shape, format and layout; or into a new owning DevQ.
  void copy_into(const DevQ& from, const DevQ& to) const {
    OCTET_CHECK(
        from.view.code_count() == to.view.code_count() && from.view.scale_count() == to.view.scale_count(),
        "linear forward_to: the cached weight operand is not the placed one's size (a layout bug)");
    OCTET_CUDA_CHECK(cudaMemcpyAsync(to.view.codes, from.view.codes, size_t(from.view.code_count()),
                                     cudaMemcpyDeviceToDevice, s_));
    OCTET_CUDA_CHECK(cudaMemcpyAsync(to.view.scale_inv, from.view.scale_inv,
                                     size_t(from.view.scale_count()) * sizeof(float),
                                     cudaMemcpyDeviceToDevice, s_));
  }
  std::shared_ptr<const DevQ> copy_of(const DevQ& from) const {
    auto q = std::make_shared<DevQ>();
    q->ensure(from.view.rows, from.view.cols, from.view.format, from.view.layout, be_);
    copy_into(from, *q);
    return q;
  }
  QuantStats installed_stats() const {  // synchronizes (diagnostics only)
    DeviceGuard g(be_.device());
    int32_t bits = 0;
    OCTET_CUDA_CHECK(cudaMemcpyAsync(&bits, installed_amax_.get(), sizeof(bits), cudaMemcpyDeviceToHost, s_));
    OCTET_CUDA_CHECK(cudaStreamSynchronize(s_));
    QuantStats st;
    st.amax = detail::amax_from_exchange(bits);
    // 1 / scale_inv, as the cast kernel's statistics report a scale
    st.scale_min = st.scale_max =
        1.0f / (1.0f / scale_from_amax(st.amax, qw_->format(), spec_.quant.margin, spec_.quant.pow2_scales));
    st.underflow_frac = st.saturated_frac = NAN;
    return st;
  }
  QuantStats stats(const CudaQuantizer* q) const {
    if (!q) return {};
    DeviceGuard g(be_.device());
    return q->stats();
  }
  // BF16 bits of t: t itself if BF16, else rounded (RNE) into `buf`.
  const uint16_t* as_bf16(const Tensor& t, DeviceBuffer<uint16_t>& buf) {
    if (t.dtype == DType::BF16) return t.bf16();
    const Tensor b(buf.reserve(size_t(t.numel()), s_), DType::BF16, t.shape);
    convert_launch(b, t, s_);
    return b.bf16();
  }
  const float* as_f32(const Tensor& t, DeviceBuffer<float>& buf) { return f32_in(t, buf, s_); }
  // BF16: W rounded to BF16 (RNE) into wb_, once per weight-cache period with spec.cache_weight
  // (the BF16 twin of the FP8 weight cache: kept until update_scales() or weights_changed(), the
  // points where W may change) — the forward, its backward's dgrad and every micro-batch of a
  // gradient-accumulation step read the same copy, bitwise what each would have rounded. A W that
  // is BF16 already is read in place (nothing cached).
  const uint16_t* w_bf16(const Tensor& w) {
    if (spec_.cache_weight && wb_cached_) return wb_.get();
    const uint16_t* p = as_bf16(w, wb_);
    wb_cached_ = spec_.cache_weight && p == wb_.get();
    return p;
  }
  float* f32_out(const Tensor& t) { return cuda::f32_out(t, acc_, s_); }
  void finish(const Tensor& t) { f32_out_finish(t, acc_, s_); }

  LinearSpec spec_;
  CudaBackend& be_;
  GemmEngine& gemm_;
  cudaStream_t s_;
  std::unique_ptr<CudaQuantizer> qx_, qw_, qdy_;
  std::vector<SavedSizeTerm> saved_terms_;  // FP8: make_saved_terms(), fixed by the spec
  DevQ xq_, wq_, dyq_, dytq_;               // scratch: the GEMM operands not kept for a backward
  // The Ŵᵀ of the current weight quantization while it is cached (wq_ holds its Ŵ); null: the
  // next forward quantizes W. Held only between forwards with spec.cache_weight.
  std::shared_ptr<const DevQ> wt_;
  // install_weight_codes: the installed W's amax (device bits) for stats_w(), while no forward has
  // quantized W since.
  DeviceBuffer<unsigned> installed_amax_;
  bool installed_stats_ = false;
  DeviceBuffer<uint16_t> xb_, wb_, dyb_;
  bool wb_cached_ = false;  // BF16: wb_ holds W's BF16 copy of this weight-cache period (w_bf16)
  DeviceBuffer<float> xf_, dyf_, acc_;
};

}  // namespace

std::unique_ptr<Linear> make_cuda_linear(const LinearSpec& spec, CudaBackend& backend) {
  return std::make_unique<CudaLinear>(spec, backend);
}

}  // namespace octet::cuda
