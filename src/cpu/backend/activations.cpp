// activations.cpp — GELU (tanh approximation) and SwiGLU, forward and backward, CPU backend.
//
// GELU (Hendrycks & Gimpel 2016, arXiv 1606.08415), the tanh form GPT-2 uses:
//   y = ½x(1 + tanh u),  u = √(2/π)(x + 0.044715x³);
//   dy/dx = ½(1 + tanh u) + ½x(1 − tanh²u)·√(2/π)(1 + 3·0.044715x²).
// SwiGLU (Shazeer 2020, arXiv 2002.05202): h [rows, 2F] = [gate | up] per row,
//   y = silu(gate)·up with silu(g) = g·σ(g);
//   d gate = dy·up·σ(g)(1 + g(1 − σ(g))),  d up = dy·silu(g).
// Evaluated in double; tensors are F32 or BF16 (act_io.h: read as FP32, rounded once on store).
#include <cmath>
#include <numbers>
#include <string>

#include "cpu/backend/act_io.h"
#include "cpu/backend/cpu_backend.h"
#include "octet/error.h"

namespace octet::cpu {
namespace {

constexpr double kGeluC = 0.044715;
const double kSqrt2OverPi = std::sqrt(2.0 / std::numbers::pi);

inline double sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }

// h [rows, 2F], y [rows, F]: returns F; throws on a mismatch.
int64_t check_swiglu(const char* op, const Tensor& h, const Tensor& y) {
  const int64_t two_f = h.cols(), f = y.cols();
  OCTET_CHECK(
      f >= 1 && two_f == 2 * f && h.rows() == y.rows(),
      std::string(op) + ": expected h [rows, 2F] and y [rows, F], got h " + h.str() + " and y " + y.str());
  return f;
}

}  // namespace

void CpuBackend::gelu_forward(const Tensor& x, const Tensor& y, const Tensor& amax) {
  check_same_numel(x, y, "gelu_forward");
  check_amax_out(amax, "gelu_forward amax");
  ActIn in(x, "gelu_forward x");
  ActOut out(y, "gelu_forward y");
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = in[i];
    const double u = kSqrt2OverPi * (v + kGeluC * v * v * v);
    out[i] = float(0.5 * v * (1.0 + std::tanh(u)));
  }
  out.store();
  accumulate_stored_amax(y, amax, "gelu_forward amax");
}

void CpuBackend::gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx, const Tensor& amax) {
  check_same_numel(x, dy, "gelu_backward");
  check_amax_out(amax, "gelu_backward amax");
  check_same_numel(x, dx, "gelu_backward");
  ActIn in(x, "gelu_backward x"), g(dy, "gelu_backward dy");
  ActOut out(dx, "gelu_backward dx");
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = in[i];
    const double th = std::tanh(kSqrt2OverPi * (v + kGeluC * v * v * v));
    const double du = kSqrt2OverPi * (1.0 + 3.0 * kGeluC * v * v);
    const double d = 0.5 * (1.0 + th) + 0.5 * v * (1.0 - th * th) * du;
    out[i] = float(double(g[i]) * d);
  }
  out.store();
  accumulate_stored_amax(dx, amax, "gelu_backward amax");
}

void CpuBackend::swiglu_forward(const Tensor& h, const Tensor& y) {
  const int64_t f = check_swiglu("swiglu_forward", h, y), rows = y.rows();
  ActIn hin(h, "swiglu_forward h");
  ActOut out(y, "swiglu_forward y");
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = hin.data + r * 2 * f;
    const float* up = gate + f;
    for (int64_t i = 0; i < f; ++i) {
      const double g = gate[i];
      out[r * f + i] = float(g * sigmoid(g) * double(up[i]));
    }
  }
  out.store();
}

void CpuBackend::swiglu_backward(const Tensor& h, const Tensor& dy, const Tensor& dh) {
  const int64_t f = check_swiglu("swiglu_backward", h, dy), rows = dy.rows();
  check_same_numel(h, dh, "swiglu_backward");
  ActIn hin(h, "swiglu_backward h"), g(dy, "swiglu_backward dy");
  ActOut out(dh, "swiglu_backward dh");
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = hin.data + r * 2 * f;
    const float* up = gate + f;
    float* dgate = out.data + r * 2 * f;
    float* dup = dgate + f;
    for (int64_t i = 0; i < f; ++i) {
      const double gv = gate[i], u = up[i], d = g[r * f + i];
      const double s = sigmoid(gv);
      dgate[i] = float(d * u * s * (1.0 + gv * (1.0 - s)));
      dup[i] = float(d * gv * s);
    }
  }
  out.store();
}

}  // namespace octet::cpu
