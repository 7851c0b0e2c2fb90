// linear.cpp — CpuLinear: the three GEMMs of a linear layer Y = X Wᵀ in BF16, FP8 or FP32 (CPU).
//
// Shapes: X act [M, in], W param F32 [out, in], Y act [M, out]. Every GEMM uses the "TN"
// convention of octet/gemm.h, C[M, N] = A[M, K]·B[N, K]ᵀ, so each operand is given with the
// contracted dimension contiguous:
//   forward  Y  = X̂ Ŵᵀ      A = X   [M, in],   B = W   [out, in]
//   dgrad    dX = dŶ Ŵ      A = dY  [M, out],  B = Wᵀ  [in, out]
//   wgrad    dW += dŶᵀ X̂    A = dYᵀ [out, M],  B = Xᵀ  [in, M]    (beta = 1: accumulated)
// BF16: gemm_bf16 (operands rounded to BF16, FP32 accumulation); FP32 (the reference for gradient
// checks): gemm_f32, operands unrounded. In both, the transposes are FP32 copies made in the
// backward from the SavedLinear's views of X and W.
// FP8: one Quantizer per operand slot (X: Role::Activation, W: Role::Weight, dY: Role::Gradient).
// The forward quantizes X and W for its GEMM and, from the same high-precision sources, X̂ᵀ and Ŵᵀ
// for the backward; those two live in the SavedLinear's state, so the backward never re-quantizes
// X or W (DeepSeek-V3 §3.3, Transformer Engine). dY is quantized in the backward. Quantizers are
// quantize-then-update (octet/quant.h): a quantization uses the slot's current scale and records
// its amax; update_scales() folds the amaxes in. Activation tensors may be F32 or BF16
// (act_io.h: read as FP32, Y and dX rounded once on store). (docs/design.md §"Saved state")
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/linear_args.h"
#include "core/weight_gather_args.h"
#include "cpu/backend/act_io.h"
#include "cpu/backend/cpu_backend.h"
#include "cpu/parallel.h"
#include "fp8/linear_state.h"
#include "octet/error.h"
#include "octet/gemm.h"
#include "octet/quant.h"

namespace octet::cpu {
namespace {

// dst [cols, rows] = srcᵀ, src [rows, cols] row-major, in bands of 32 source columns (one cache
// line of each source row; 32 destination rows written in step), on the backend's threads when
// the matrix is large enough to pay for starting them.
std::vector<float> transpose(const float* src, int64_t rows, int64_t cols) {
  constexpr int64_t kBand = 32, kParallelMin = int64_t(1) << 18;
  std::vector<float> dst(size_t(rows * cols));
  auto band = [&](int64_t k) {
    const int64_t c0 = k * kBand, c1 = std::min(cols, c0 + kBand);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = c0; c < c1; ++c) dst[size_t(c * rows + r)] = src[r * cols + c];
  };
  const int64_t bands = (cols + kBand - 1) / kBand;
  if (rows * cols >= kParallelMin) {
    parallel_for(bands, band);
  } else {
    for (int64_t k = 0; k < bands; ++k) band(k);
  }
  return dst;
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

// A saved QTensor's image in caller memory (Linear::forward_to / saved_from): its codes, then its
// scale_inv, each region rounded up to 16 bytes. The shape, format and block come from the linear's
// spec; the statistics (amax, counts) are not kept (no backward reads them).
constexpr int64_t kRegion = 16;
int64_t region(int64_t bytes) { return (bytes + kRegion - 1) / kRegion * kRegion; }
int64_t image_bytes(int64_t rows, int64_t cols, const BlockShape& block) {
  const int64_t grid = ((rows + block.rows - 1) / block.rows) * ((cols + block.cols - 1) / block.cols);
  return region(rows * cols) + region(grid * int64_t(sizeof(float)));
}
// The image of a [rows, n] QTensor as saved-size terms in n (octet/saved_size.h): rows·n codes, then
// one float per block of the scale grid, whose block (block_shape) spans either all n columns or a
// fixed number of them; each region rounded up to 16 bytes. Σ bytes(n) = image_bytes(rows, n, ·).
std::vector<SavedSizeTerm> image_terms_by_cols(int64_t rows, Recipe recipe, Role role) {
  constexpr int64_t kAll = int64_t(1) << 40;  // wider than any block that does not span all columns
  const BlockShape block = block_shape(recipe, role, rows, kAll);
  const int64_t scale_rows = (rows + block.rows - 1) / block.rows * int64_t(sizeof(float));
  const SavedSizeTerm codes{rows, 1, 0, kRegion};
  const SavedSizeTerm scales = block.cols == kAll ? SavedSizeTerm{0, 1, scale_rows, kRegion}
                                                  : SavedSizeTerm{scale_rows, block.cols, 0, kRegion};
  return {codes, scales};
}
int64_t image_length(const QTensor& q) {
  return region(int64_t(q.codes.size())) + region(int64_t(q.scale_inv.size() * sizeof(float)));
}
// Writes every byte of the image, the regions' rounding included (zeros): the image is a function
// of the inputs (a compiled caller compares the saved tensor's bytes with an eager run's).
char* to_image(const QTensor& q, char* at) {
  const auto put = [&at](const void* from, int64_t bytes) {
    std::memcpy(at, from, size_t(bytes));
    std::memset(at + bytes, 0, size_t(region(bytes) - bytes));
    at += region(bytes);
  };
  put(q.codes.data(), int64_t(q.codes.size()));
  put(q.scale_inv.data(), int64_t(q.scale_inv.size() * sizeof(float)));
  return at;
}
const char* from_image(const char* at, int64_t rows, int64_t cols, Format format, const BlockShape& block,
                       QTensor& q) {
  q.rows = rows;
  q.cols = cols;
  q.format = format;
  q.block = block;
  q.codes.assign(reinterpret_cast<const uint8_t*>(at), reinterpret_cast<const uint8_t*>(at) + rows * cols);
  at += region(rows * cols);
  q.scale_inv.resize(size_t(q.grid_rows() * q.grid_cols()));
  std::memcpy(q.scale_inv.data(), at, q.scale_inv.size() * sizeof(float));
  return at + region(int64_t(q.scale_inv.size() * sizeof(float)));
}

class CpuLinear;

// What one forward keeps for its backward: the layer it came from (so another layer's state is
// rejected) and, for FP8, X̂ᵀ [in, M] and Ŵᵀ [in, out] quantized from the forward's sources.
struct CpuLinearState final : SavedState {
  const CpuLinear* owner = nullptr;
  QTensor x_t_q, w_t_q;
};

class CpuLinear final : public Linear {
 public:
  explicit CpuLinear(const LinearSpec& spec)
      : spec_(spec), dense_gemm_(spec.precision == LinearPrecision::FP32 ? gemm_f32 : gemm_bf16) {
    OCTET_CHECK(spec.in_features >= 1 && spec.out_features >= 1,
                "linear: in_features and out_features must be >= 1, got " + std::to_string(spec.in_features) +
                    " and " + std::to_string(spec.out_features));
    if (fp8()) {
      qx_ = std::make_unique<Quantizer>(spec.quant, Role::Activation);
      qw_ = std::make_unique<Quantizer>(spec.quant, Role::Weight);
      qdy_ = std::make_unique<Quantizer>(spec.quant, Role::Gradient);
    }
  }

  // A producer's amax (backend.h x_amax, dy_amax): the CPU quantizer reduces the tensor itself; under
  // tensor-current, which would take the given one, the two must be the same bits — else the caller
  // handed this linear another tensor's amax (the reference catches the model's wiring).
  void check_given_amax(const Tensor& amax, const float* v, int64_t n, const char* what) const {
    if (amax.empty() || !fp8() || spec_.quant.recipe != Recipe::TensorCurrent) return;
    const uint32_t m = abs_max_bits(v, n);
    OCTET_CHECK(uint32_t(amax.i32()[0]) == m, std::string(what) + ": the given amax (float bits " +
                                                  std::to_string(uint32_t(amax.i32()[0])) +
                                                  ") is not the amax of the tensor (" + std::to_string(m) +
                                                  ")");
  }

  SavedLinear forward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& x_amax = {},
                      const Tensor& residual = {}) override {
    const int64_t m = rows_of(x, spec_.in_features, "linear forward x");
    check_amax_out(x_amax, "linear forward x_amax");
    check_weight(w);
    const bool gemm = !y.empty();  // empty: the backward's operands only (backend.h)
    if (gemm) check_rows(y, m, spec_.out_features, "linear forward y");
    const int64_t in = spec_.in_features, out = spec_.out_features;
    auto state = std::make_unique<CpuLinearState>();
    state->owner = this;
    ActIn xin(x, "linear forward x");
    check_given_amax(x_amax, xin.data, m * spec_.in_features, "linear forward x_amax");
    std::optional<ActOut> yout;
    if (gemm) yout.emplace(y, "linear forward y");
    // residual: y = x·Wᵀ + residual, the GEMM's FP32 sum started from it, rounded once into y's dtype
    // (the CUDA epilogue adds it after the product: equal to FP32 accumulation error)
    check_linear_residual(residual, y);
    float beta = 0.0f;
    if (!residual.empty()) {
      ActIn r(residual, "linear forward residual");
      if (r.data != yout->data) std::copy(r.data, r.data + m * out, yout->data);
      beta = 1.0f;
    }
    if (!fp8()) {
      if (gemm) dense_gemm_(xin.data, w.f32(), yout->data, m, out, in, beta);
    } else {
      QTensor x_q, w_q;
      qx_->quantize(xin.data, m, in, x_q);
      qx_->quantize_transposed(xin.data, m, in, state->x_t_q);
      if (installed_) {  // gathered codes (install_weight_codes): bitwise quantize(W)
        state->w_t_q = w_t_inst_;
        if (gemm) gemm_fp8(x_q, w_inst_, yout->data, beta);
      } else {
        qw_->quantize(w.f32(), out, in, w_q);
        qw_->quantize_transposed(w.f32(), out, in, state->w_t_q);
        if (gemm) gemm_fp8(x_q, w_q, yout->data, beta);
        stats_w_ = stats_of(w_q);
      }
      stats_x_ = stats_of(x_q);
    }
    if (gemm) yout->store();
    SavedLinear saved;
    saved.x = x;
    saved.w = w;
    saved.state = std::move(state);
    return saved;
  }

  // Saved state in caller memory (backend.h): X̂ᵀ's image, then Ŵᵀ's (to_image), copied out of and
  // back into a CpuLinearState.
  std::vector<SavedSizeTerm> saved_size_terms() const override {
    if (!fp8()) return {};
    std::vector<SavedSizeTerm> terms =
        image_terms_by_cols(spec_.in_features, spec_.quant.recipe, Role::Activation);
    terms.push_back({0, 1, image_bytes(spec_.in_features, spec_.out_features, wt_block()), 1});
    return terms;
  }
  SavedLinear forward_to(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& memory,
                         const Tensor& x_amax = {}, const Tensor& residual = {}) override {
    if (!fp8()) return Linear::forward_to(x, w, y, memory, x_amax, residual);  // refuses
    // the memory checked first: a refused call changes nothing (no amax recorded)
    const int64_t rows = rows_of(x, spec_.in_features, "linear forward_to x");
    char* at = image(memory, rows, "linear forward_to: memory");
    SavedLinear saved = forward(x, w, y, x_amax, residual);
    const auto& st = static_cast<const CpuLinearState&>(*saved.state);
    OCTET_CHECK(image_length(st.x_t_q) + image_length(st.w_t_q) == saved_bytes(rows),
                "linear forward_to: the image is not saved_bytes() long (a layout bug)");
    to_image(st.w_t_q, to_image(st.x_t_q, at));
    return saved;
  }
  SavedLinear saved_from(int64_t rows, const Tensor& memory) const override {
    if (!fp8()) return Linear::saved_from(rows, memory);  // refuses
    const char* at = image(memory, rows, "linear saved_from: memory");
    auto st = std::make_unique<CpuLinearState>();
    st->owner = this;
    const int64_t in = spec_.in_features, out = spec_.out_features;
    at = from_image(at, in, rows, qx_->format(), xt_block(rows), st->x_t_q);
    from_image(at, in, out, qw_->format(), wt_block(), st->w_t_q);
    SavedLinear saved;
    saved.state = std::move(st);
    return saved;
  }

  void backward(const SavedLinear& saved, const Tensor& dy, const Tensor& dx, const Tensor& dw,
                const Tensor& dy_amax = {}) override {
    check_amax_out(dy_amax, "linear backward dy_amax");
    const auto* st = dynamic_cast<const CpuLinearState*>(saved.state.get());
    OCTET_CHECK(st != nullptr,
                "linear backward: the SavedLinear does not come from a CPU "
                "linear's forward");
    OCTET_CHECK(st->owner == this,
                "linear backward: the SavedLinear comes from another linear "
                "layer's forward");
    const int64_t in = spec_.in_features, out = spec_.out_features;
    // FP8: M from X̂ᵀ [in, M] (a saved_from state has no x)
    const int64_t m = fp8() ? st->x_t_q.cols : rows_of(saved.x, in, "linear backward saved x");
    check_rows(dy, m, out, "linear backward dy");
    if (!dx.empty()) check_rows(dx, m, in, "linear backward dx");
    float* dwp = dw.empty() ? nullptr : req_f32(dw, out * in, "linear backward dw");
    ActIn g(dy, "linear backward dy");
    check_given_amax(dy_amax, g.data, m * out, "linear backward dy_amax");
    if (!fp8()) {
      if (!dx.empty()) {
        const std::vector<float> w_t = transpose(saved.w.f32(), out, in);
        ActOut dxo(dx, "linear backward dx");
        dense_gemm_(g.data, w_t.data(), dxo.data, m, in, out, 0.0f);
        dxo.store();
      }
      if (dwp) {
        ActIn xin(saved.x, "linear backward saved x");
        const std::vector<float> dy_t = transpose(g.data, m, out);
        const std::vector<float> x_t = transpose(xin.data, m, in);
        dense_gemm_(dy_t.data(), x_t.data(), dwp, out, in, m, 1.0f);
      }
      return;
    }
    QTensor dy_q, dy_t_q;
    qdy_->quantize(g.data, m, out, dy_q);
    stats_dy_ = stats_of(dy_q);
    if (!dx.empty()) {
      ActOut dxo(dx, "linear backward dx");
      gemm_fp8(dy_q, st->w_t_q, dxo.data);
      dxo.store();
    }
    if (dwp) {
      qdy_->quantize_transposed(g.data, m, out, dy_t_q);
      gemm_fp8(dy_t_q, st->x_t_q, dwp, 1.0f);
    }
  }

  void update_scales() override {
    if (!fp8()) return;
    installed_ = false;  // as the CUDA weight cache: the optimizer step that follows changes W
    qx_->update();
    qw_->update();
    qdy_->update();
  }

  QuantStats stats_x() const override { return stats_x_; }
  QuantStats stats_w() const override { return stats_w_; }
  QuantStats stats_dy() const override { return stats_dy_; }

  std::vector<float> quant_state() const override {
    return detail::linear_quant_state(delayed(), qx_.get(), qw_.get(), qdy_.get());
  }

  // Cross-rank amax exchange (backend.h): the CPU tensors are host memory.
  void pending_amaxes(const Tensor& amax) const override {
    check_dtype(amax, DType::I32, "linear pending_amaxes");
    check_numel(amax, 3, "linear pending_amaxes");
    const Quantizer* q[3] = {qx_.get(), qw_.get(), qdy_.get()};
    for (int i = 0; i < 3; ++i)
      amax.i32()[i] = delayed() ? detail::amax_to_exchange(q[i]->pending_amax()) : -1;
  }

  void set_pending_amaxes(const Tensor& amax) override {
    check_dtype(amax, DType::I32, "linear set_pending_amaxes");
    check_numel(amax, 3, "linear set_pending_amaxes");
    if (!delayed()) return;
    Quantizer* q[3] = {qx_.get(), qw_.get(), qdy_.get()};
    for (int i = 0; i < 3; ++i) q[i]->set_pending_amax(detail::amax_from_exchange(amax.i32()[i]));
  }

  void weights_changed() override { installed_ = false; }

  // FP8 weight all-gather (backend.h): the host twin of the CUDA linear's, the rule of
  // Quantizer::run for a whole-tensor block (s = scale_from_amax(amax), q = fp8(x·s), 1/s).
  bool gathers_weight_codes() const override {
    return fp8() && spec_.quant.recipe == Recipe::TensorCurrent && spec_.cache_weight;
  }
  void weight_piece_amax(const Tensor& w_piece, const Tensor& amax) const override {
    check_gather("weight_piece_amax", w_piece, amax);
    float a = 0.0f;
    bool nan = false;
    const float* x = w_piece.f32();
    for (int64_t i = 0; i < w_piece.numel(); ++i) {
      const float v = std::fabs(x[i]);
      a = v > a ? v : a;
      nan |= v != v;
    }
    amax.i32()[0] = std::max(amax.i32()[0], detail::amax_to_exchange(nan ? NAN : a));
  }
  void encode_weight_piece(const Tensor& w_piece, const Tensor& amax, const Tensor& codes) const override {
    check_gather("encode_weight_piece", w_piece, amax);
    check_codes("encode_weight_piece: codes", codes, w_piece.numel());
    const Format f = qw_->format();
    const float s = tensor_scale(amax);
    const float* x = w_piece.f32();
    uint8_t* q = codes.fp8();
    for (int64_t i = 0; i < w_piece.numel(); ++i) q[i] = fp8_encode(x[i] * s, f, spec_.quant.saturate);
  }
  void install_weight_codes(const Tensor& codes, const Tensor& amax) override {
    const int64_t in = spec_.in_features, out = spec_.out_features;
    check_install_codes_args(gathers_weight_codes(), qw_->format(), codes, amax, out * in);
    const float s_inv = 1.0f / tensor_scale(amax);  // Quantizer's from_scale
    const uint8_t* q = codes.fp8();
    for (QTensor* t : {&w_inst_, &w_t_inst_}) {
      const bool tr = t == &w_t_inst_;
      t->rows = tr ? in : out;
      t->cols = tr ? out : in;
      t->format = qw_->format();
      t->block = block_shape(Recipe::TensorCurrent, Role::Weight, t->rows, t->cols);
      t->scale_inv.assign(1, s_inv);
      t->amax = detail::amax_from_exchange(amax.i32()[0]);
      t->n_underflow = t->n_saturated = 0;
      t->codes.resize(size_t(out * in));
    }
    std::copy_n(q, out * in, w_inst_.codes.begin());
    for (int64_t r = 0; r < out; ++r)
      for (int64_t c = 0; c < in; ++c) w_t_inst_.codes[size_t(c * out + r)] = q[r * in + c];
    installed_ = true;
    stats_w_ = stats_of(w_inst_);
    stats_w_.underflow_frac = stats_w_.saturated_frac = NAN;  // not counted without the FP32 W
  }

  void load_quant_state(const std::vector<float>& state) override {
    installed_ = false;
    detail::load_linear_quant_state(delayed(), state, spec_.quant.amax_history_len, qx_.get(), qw_.get(),
                                    qdy_.get());
  }

 private:
  bool fp8() const { return spec_.precision == LinearPrecision::FP8; }
  // The scale blocks of X̂ᵀ [in, rows] and Ŵᵀ [in, out], as Quantizer::quantize_transposed sets them.
  BlockShape xt_block(int64_t rows) const {
    return block_shape(spec_.quant.recipe, Role::Activation, spec_.in_features, rows);
  }
  BlockShape wt_block() const {
    return block_shape(spec_.quant.recipe, Role::Weight, spec_.in_features, spec_.out_features);
  }
  // The caller's memory for the image of a forward of `rows` rows (host memory, any alignment).
  char* image(const Tensor& memory, int64_t rows, const std::string& what) const {
    const int64_t need = saved_bytes(rows);
    OCTET_CHECK(!memory.empty(), what + ": no memory given");
    OCTET_CHECK(int64_t(memory.bytes()) >= need, what + ": " + std::to_string(memory.bytes()) +
                                                     " bytes given, the saved state needs " +
                                                     std::to_string(need));
    return static_cast<char*>(memory.data);
  }
  bool delayed() const { return fp8() && spec_.quant.recipe == Recipe::TensorDelayed; }

  // An act tensor [M, cols] with M >= 1; returns M.
  static int64_t rows_of(const Tensor& t, int64_t cols, const char* what) {
    check_activation(t, what);
    OCTET_CHECK(t.cols() == cols && t.rows() >= 1,
                std::string(what) + ": expected [M >= 1, " + std::to_string(cols) + "], got " + t.str());
    return t.rows();
  }
  static void check_rows(const Tensor& t, int64_t m, int64_t cols, const char* what) {
    check_activation(t, what);
    OCTET_CHECK(t.rows() == m && t.cols() == cols, std::string(what) + ": expected [" + std::to_string(m) +
                                                       ", " + std::to_string(cols) + "], got " + t.str());
  }
  void check_weight(const Tensor& w) const {
    check_dtype(w, DType::F32, "linear forward w");
    OCTET_CHECK(w.numel() == spec_.out_features * spec_.in_features && w.cols() == spec_.in_features,
                "linear forward w: expected [" + std::to_string(spec_.out_features) + ", " +
                    std::to_string(spec_.in_features) + "], got " + w.str());
  }

  void check_gather(const char* what, const Tensor& w_piece, const Tensor& amax) const {
    check_weight_piece_args(gathers_weight_codes(), spec_, what, w_piece, amax);
  }
  void check_codes(const char* what, const Tensor& codes, int64_t n) const {
    check_weight_codes_args(qw_->format(), what, codes, n);
  }
  // The weight slot's tensor scale for the I32 amax bits (Quantizer::scale_for_tensor's rule).
  float tensor_scale(const Tensor& amax) const {
    return scale_from_amax(detail::amax_from_exchange(amax.i32()[0]), qw_->format(), spec_.quant.margin,
                           spec_.quant.pow2_scales);
  }

  using DenseGemm = void (*)(const float*, const float*, float*, int64_t, int64_t, int64_t, float);
  LinearSpec spec_;
  DenseGemm dense_gemm_;                      // BF16 / FP32: gemm_bf16 or gemm_f32
  std::unique_ptr<Quantizer> qx_, qw_, qdy_;  // FP8: one quantizer per operand slot
  QuantStats stats_x_, stats_w_, stats_dy_;   // FP8: at the last quantization of each slot
  // FP8: W's gathered codes (install_weight_codes), used instead of quantizing W while installed_
  bool installed_ = false;
  QTensor w_inst_, w_t_inst_;
};

}  // namespace

std::unique_ptr<Linear> CpuBackend::make_linear(const LinearSpec& spec) {
  return std::make_unique<CpuLinear>(spec);
}

}  // namespace octet::cpu
