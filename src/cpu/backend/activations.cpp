// activations.cpp — GELU (tanh approximation) and SwiGLU, forward and backward, CPU backend.
//
// GELU (Hendrycks & Gimpel 2016, arXiv 1606.08415), the tanh form GPT-2 uses:
//   y = ½x(1 + tanh u),  u = √(2/π)(x + 0.044715x³);
//   dy/dx = ½(1 + tanh u) + ½x(1 − tanh²u)·√(2/π)(1 + 3·0.044715x²).
// SwiGLU (Shazeer 2020, arXiv 2002.05202): h [rows, 2F] = [gate | up] per row,
//   y = silu(gate)·up with silu(g) = g·σ(g);
//   d gate = dy·up·σ(g)(1 + g(1 − σ(g))),  d up = dy·silu(g).
// Evaluated in double, stored in FP32.
#include <cmath>
#include <numbers>
#include <string>

#include "cpu/backend/cpu_backend.h"
#include "octet/error.h"

namespace octet::cpu {
namespace {

constexpr double kGeluC = 0.044715;
const double kSqrt2OverPi = std::sqrt(2.0 / std::numbers::pi);

inline double sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }

void check_swiglu(int64_t rows, int64_t f) {
  OCTET_CHECK(rows >= 0 && f >= 1, "swiglu: need rows >= 0 and f >= 1, got rows=" +
                                       std::to_string(rows) + " f=" + std::to_string(f));
}

}  // namespace

void CpuBackend::gelu_forward(const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const double v = x[i];
    const double u = kSqrt2OverPi * (v + kGeluC * v * v * v);
    y[i] = float(0.5 * v * (1.0 + std::tanh(u)));
  }
}

void CpuBackend::gelu_backward(const float* x, const float* dy, float* dx, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const double v = x[i];
    const double th = std::tanh(kSqrt2OverPi * (v + kGeluC * v * v * v));
    const double du = kSqrt2OverPi * (1.0 + 3.0 * kGeluC * v * v);
    const double d = 0.5 * (1.0 + th) + 0.5 * v * (1.0 - th * th) * du;
    dx[i] = float(double(dy[i]) * d);
  }
}

void CpuBackend::swiglu_forward(const float* h, float* y, int64_t rows, int64_t f) {
  check_swiglu(rows, f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = h + r * 2 * f;
    const float* up = gate + f;
    for (int64_t i = 0; i < f; ++i) {
      const double g = gate[i];
      y[r * f + i] = float(g * sigmoid(g) * double(up[i]));
    }
  }
}

void CpuBackend::swiglu_backward(const float* h, const float* dy, float* dh, int64_t rows,
                                 int64_t f) {
  check_swiglu(rows, f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = h + r * 2 * f;
    const float* up = gate + f;
    float* dgate = dh + r * 2 * f;
    float* dup = dgate + f;
    for (int64_t i = 0; i < f; ++i) {
      const double g = gate[i], u = up[i], d = dy[r * f + i];
      const double s = sigmoid(g);
      dgate[i] = float(d * u * s * (1.0 + g * (1.0 - s)));
      dup[i] = float(d * g * s);
    }
  }
}

}  // namespace octet::cpu
