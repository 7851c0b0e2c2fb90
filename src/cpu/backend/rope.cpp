// rope.cpp — rotary position embedding (RoPE; Su et al., RoFormer, arXiv 2104.09864), CPU backend.
//
// Rotate-half pairing (GPT-NeoX / Llama convention): for i < D/2 the pair (x_i, x_{i+D/2}) at
// position t is rotated by the angle a = t·theta^(−2i/D):
//   x_i' = x_i cos a − x_{i+D/2} sin a,   x_{i+D/2}' = x_i sin a + x_{i+D/2} cos a.
// The rotation is orthogonal, so its backward (the transpose) is the rotation by −a:
// inverse=true. Angles, sines and cosines are computed in double. x is an act tensor
// [B, H, T, D] (or [B, T, H, D], AttnLayout::TokensMajor) rotated in place (act_io.h: read as
// FP32, rounded once on store); t indexes T.
#include <cmath>
#include <string>
#include <vector>

#include "cpu/backend/act_io.h"
#include "cpu/backend/cpu_backend.h"
#include "octet/error.h"

namespace octet::cpu {

void CpuBackend::rope(const Tensor& x, float theta, bool inverse, AttnLayout layout) {
  const bool tm = layout == AttnLayout::TokensMajor;
  OCTET_CHECK(x.shape.rank == 4, std::string("rope: expected x ") + layout_dims(layout) + ", got " + x.str());
  const int64_t seq = x.shape[seq_axis(layout)], heads = x.shape[heads_axis(layout)], head_dim = x.shape[3];
  const int64_t rows = x.shape[0] * x.shape[1] * x.shape[2];
  OCTET_CHECK(head_dim >= 2 && head_dim % 2 == 0,
              "rope: head_dim must be even and >= 2, got " + std::to_string(head_dim));
  OCTET_CHECK(theta > 0.0f && std::isfinite(theta),
              "rope: theta must be positive and finite, got " + std::to_string(theta));
  const int64_t half = head_dim / 2;
  // cos/sin table [seq, half], shared by every (batch, head).
  std::vector<double> cos_t(size_t(seq * half)), sin_t(size_t(seq * half));
  for (int64_t t = 0; t < seq; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const double inv_freq = std::pow(double(theta), -2.0 * double(i) / double(head_dim));
      const double a = double(t) * inv_freq * (inverse ? -1.0 : 1.0);
      cos_t[size_t(t * half + i)] = std::cos(a);
      sin_t[size_t(t * half + i)] = std::sin(a);
    }
  ActOut out(x, "rope x", true);
  for (int64_t r = 0; r < rows; ++r) {  // the r-th row in memory
    const int64_t t = tm ? r / heads % seq : r % seq;
    float* v = out.data + r * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const double c = cos_t[size_t(t * half + i)], s = sin_t[size_t(t * half + i)];
      const double x1 = v[i], x2 = v[i + half];
      v[i] = float(x1 * c - x2 * s);
      v[i + half] = float(x1 * s + x2 * c);
    }
  }
  out.store();
}

}  // namespace octet::cpu
