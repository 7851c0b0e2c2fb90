// src/capi/linear.cpp — the C ABI's FP8 linear (include/octet/c_api.h): a handle owning one
// octet::Linear (octet/backend.h; recipes octet/quant.h, docs/numerics.md) of a backend, so that
// its quantizer state (tensor-delayed amax histories) lives as long as the caller's layer.
//
// An op boundary (PyTorch's custom ops) cannot carry the backend's SavedLinear. With the caller's
// `saved` block the forward places X̂ᵀ and Ŵᵀ there (Linear::forward_to) and the backward reads
// them back (saved_from): nothing is quantized twice. Without it the backward re-runs the forward's
// quantization of X and W first (Linear::forward with an empty y: no GEMM). The scales a
// quantization uses change only at update_scales(), so the re-run produces the forward's very
// codes; tensor-delayed records the same amax a second time, which leaves the recorded maximum
// unchanged (docs/pytorch.md, "The backward").
#include <algorithm>
#include <string>
#include <vector>

#include "capi/capi_impl.h"
#include "octet/names.h"
#include "octet/quant.h"

namespace octet::capi {
namespace {

LinearSpec spec_of(const octet_linear_spec& s) {
  require(s.recipe, "linear spec: recipe");
  require(s.formats, "linear spec: formats");
  require(s.amax_algo, "linear spec: amax_algo");
  OCTET_CHECK(s.in_features >= 1 && s.out_features >= 1,
              "linear spec: in_features and out_features must be >= 1 (got " + std::to_string(s.in_features) +
                  ", " + std::to_string(s.out_features) + ")");
  LinearSpec spec;
  spec.in_features = s.in_features;
  spec.out_features = s.out_features;
  spec.precision = LinearPrecision::FP8;
  spec.quant.recipe = parse_recipe(s.recipe);
  spec.quant.formats = parse_format_policy(s.formats);
  spec.quant.amax_history_len = s.amax_history_len;
  spec.quant.amax_algo = parse_enum<AmaxAlgo>(s.amax_algo);
  spec.quant.margin = s.margin;
  spec.quant.validate("linear spec: ");
  return spec;
}

struct Views {
  Tensor x, w, y, dy, dx, dw, saved;
};

Views views_of(const octet_c_linear& l, const octet_linear_call* c, bool backward) {
  require(c, "linear: call");
  OCTET_CHECK(c->rows >= 1, "linear: rows must be >= 1 (got " + std::to_string(c->rows) + ")");
  const DType t = dtype_of(c->dtype, "linear call");
  OCTET_CHECK(is_activation_dtype(t), "linear: activations must be f32 or bf16, got " + to_string(t));
  const int64_t in = l.spec.in_features, out = l.spec.out_features;
  Views v;
  if (c->saved) {  // one-byte elements (E4M3 only names the width)
    OCTET_CHECK(c->saved_size > 0, "linear call: saved_size must be > 0 when saved is given, got " +
                                       std::to_string(c->saved_size));
    v.saved = Tensor(c->saved, DType::E4M3, {c->saved_size});
  }
  if (!backward || v.saved.empty()) {  // the backward from `saved` reads neither x nor w
    require(c->x, "linear call: x");
    require(c->w, "linear call: w");
    v.x = view(c->x, t, {c->rows, in});
    v.w = view(c->w, DType::F32, {out, in});
  }
  if (!backward) {
    require(c->y, "linear call: y");
    v.y = view(c->y, t, {c->rows, out});
    return v;
  }
  require(c->dy, "linear call: dy");
  v.dy = view(c->dy, t, {c->rows, out});
  if (c->dx) v.dx = view(c->dx, t, {c->rows, in});
  if (c->dw) v.dw = view(c->dw, DType::F32, {out, in});
  return v;
}

}  // namespace
}  // namespace octet::capi

using octet::capi::guarded;
using octet::capi::require;

extern "C" {

octet_c_linear* octet_linear_new(octet_c_backend* backend, const octet_linear_spec* spec) {
  octet_c_linear* out = nullptr;
  guarded([&] {
    require(backend, "octet_linear_new: backend");
    require(spec, "octet_linear_new: spec");
    const octet::LinearSpec s = octet::capi::spec_of(*spec);
    auto l = std::make_unique<octet_c_linear>();
    l->backend = backend->backend.get();
    l->spec = s;
    l->linear = backend->backend->make_linear(s);
    out = l.release();
  });
  return out;
}

void octet_linear_free(octet_c_linear* linear) { delete linear; }

int64_t octet_linear_saved_bytes(octet_c_linear* linear, int64_t rows) {
  int64_t n = -1;
  guarded([&] {
    require(linear, "octet_linear_saved_bytes: linear");
    n = linear->linear->saved_bytes(rows);
  });
  return n;
}

int64_t octet_linear_saved_size_terms(octet_c_linear* linear, int64_t* terms, int64_t capacity) {
  int64_t n = -1;
  guarded([&] {
    require(linear, "octet_linear_saved_size_terms: linear");
    octet::capi::check_terms_room("octet_linear_saved_size_terms", terms, capacity);
    n = octet::capi::write_terms(
        linear->linear->saved_size_terms(), terms, capacity, [](const octet::SavedSizeTerm& t) {
          return std::array<int64_t, 4>{t.step_bytes, t.step_rows, t.fixed_bytes, t.align};
        });
  });
  return n;
}

int octet_linear_forward(octet_c_linear* linear, const octet_linear_call* call) {
  return guarded([&] {
    require(linear, "octet_linear_forward: linear");
    const auto v = octet::capi::views_of(*linear, call, false);
    if (v.saved.empty())
      (void)linear->linear->forward(v.x, v.w, v.y);
    else
      (void)linear->linear->forward_to(v.x, v.w, v.y, v.saved);
  });
}

int octet_linear_backward(octet_c_linear* linear, const octet_linear_call* call) {
  return guarded([&] {
    require(linear, "octet_linear_backward: linear");
    const auto v = octet::capi::views_of(*linear, call, true);
    if (!v.saved.empty()) {
      linear->linear->backward(linear->linear->saved_from(call->rows, v.saved), v.dy, v.dx, v.dw);
      return;
    }
    // Re-run the forward's quantization (same codes: see the header), without its GEMM.
    const octet::SavedLinear saved = linear->linear->forward(v.x, v.w, octet::Tensor{});
    linear->linear->backward(saved, v.dy, v.dx, v.dw);
  });
}

int octet_linear_update_scales(octet_c_linear* linear) {
  return guarded([&] {
    require(linear, "octet_linear_update_scales: linear");
    linear->linear->update_scales();
  });
}

int64_t octet_linear_quant_state(octet_c_linear* linear, float* out, int64_t capacity) {
  int64_t n = -1;
  guarded([&] {
    require(linear, "octet_linear_quant_state: linear");
    const std::vector<float> state = linear->linear->quant_state();
    if (out) std::copy_n(state.begin(), std::min<int64_t>(capacity, int64_t(state.size())), out);
    n = int64_t(state.size());
  });
  return n;
}

int octet_linear_load_quant_state(octet_c_linear* linear, const float* state, int64_t count) {
  return guarded([&] {
    require(linear, "octet_linear_load_quant_state: linear");
    OCTET_CHECK(count >= 0 && (count == 0 || state != nullptr),
                "octet_linear_load_quant_state: state is NULL or count < 0");
    linear->linear->load_quant_state(std::vector<float>(state, state + count));
  });
}

int octet_linear_amax(octet_c_linear* linear, float* out) {
  return guarded([&] {
    require(linear, "octet_linear_amax: linear");
    require(out, "octet_linear_amax: out");
    out[0] = linear->linear->stats_x().amax;
    out[1] = linear->linear->stats_w().amax;
    out[2] = linear->linear->stats_dy().amax;
  });
}

}  // extern "C"
