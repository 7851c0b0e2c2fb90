// src/cpu/attention_quant.cpp — how the operands of FP8 (and BF16) attention are rounded: the
// quantize-dequantize of Q, K, V, dO and dS, i.e. the exact values a tensor core multiplies.
//
// FP8 (docs/design.md §"The two deltas"; OCP OFP8 v1.0 formats, scales from fp8.h's scale_from_amax,
// Transformer Engine's current-scaling formula s = fp8_max / amax):
//   Q, K, V  E4M3, one scale per tensor or per (batch, head, 128-token block) (config.qkv_scaling);
//   dO       config.do_format (E5M2 in the `hybrid` policy), one scale per tensor; for the dV GEMM
//            dO_i / l_i (row factor of "P without underflow") with its own scale per tensor;
//   dS       config.ds_format, one power-of-two scale per (block_q x block_k) tile of one head;
//   P        E4M3 with the static power-of-two scale config.p_scale (attention_impl.h, round_p).
// A value x becomes decode(cast(x * s)) * (1/s), the cast saturating. BF16 rounds every operand
// to BF16 (ties to even); FP64 leaves them unchanged.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "cpu/attention_impl.h"
#include "octet/error.h"

namespace octet::attn {
namespace {

// max(m, |x_i|) where a NaN wins and stays (the scale becomes NaN: carried, never dropped).
template <typename T>
float amax_of(const T* x, int64_t n, float m = 0.0f) {
  for (int64_t i = 0; i < n && m == m; ++i) {
    const float a = std::fabs(float(x[i]));
    if (!(a <= m)) m = a;
  }
  return m;
}

// x_hat[i] = decode(cast(x[i] * s)) * (1/s) for one scale.
void fp8_qdq(const float* x, int64_t n, float s, Format f, float* x_hat) {
  const float s_inv = 1.0f / s;
  for (int64_t i = 0; i < n; ++i) x_hat[i] = fp8_round(x[i] * s, f) * s_inv;
}

// One current scale for the whole buffer.
void fp8_qdq_tensor(const float* x, int64_t n, Format f, float* x_hat) {
  fp8_qdq(x, n, scale_from_amax(amax_of(x, n), f), f, x_hat);
}

}  // namespace

void round_qkv(const Problem& p, const float* x, int64_t heads, int64_t seq, float* x_hat) {
  const int64_t n = p.B * heads * seq * p.D;
  switch (p.cfg.precision) {
    case AttnPrecision::FP64:
      std::copy(x, x + n, x_hat);
      return;
    case AttnPrecision::BF16:
      for (int64_t i = 0; i < n; ++i) x_hat[i] = bf16_round(x[i]);
      return;
    case AttnPrecision::FP8:
      if (p.cfg.qkv_scaling == QkvScaling::Tensor) {
        fp8_qdq_tensor(x, n, Format::E4M3, x_hat);
        return;
      }
      // One scale per (batch, head, block of 128 tokens): blocks are contiguous [tokens, D].
      for (int64_t bh = 0; bh < p.B * heads; ++bh)
        for (int64_t t0 = 0; t0 < seq; t0 += kQkvScaleBlock) {
          const int64_t off = (bh * seq + t0) * p.D;
          const int64_t len = (std::min(seq, t0 + kQkvScaleBlock) - t0) * p.D;
          fp8_qdq_tensor(x + off, len, Format::E4M3, x_hat + off);
        }
      return;
  }
}

void round_do(const Problem& p, const float* d_o, float* do_hat) {
  const int64_t n = p.B * p.H * p.Tq * p.D;
  switch (p.cfg.precision) {
    case AttnPrecision::FP64:
      std::copy(d_o, d_o + n, do_hat);
      return;
    case AttnPrecision::BF16:
      for (int64_t i = 0; i < n; ++i) do_hat[i] = bf16_round(d_o[i]);
      return;
    case AttnPrecision::FP8:
      fp8_qdq_tensor(d_o, n, p.cfg.do_format, do_hat);
      return;
  }
}

template <typename T>
void round_do_dv(const Problem& p, const float* d_o, const T* row_factor, T* out) {
  const int64_t rows = p.B * p.H * p.Tq, n = rows * p.D;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < p.D; ++c) out[r * p.D + c] = T(d_o[r * p.D + c]) * row_factor[r];
  if constexpr (std::is_same_v<T, float>) {  // BF16 and FP8 run in T = float, FP64 in double
    if (p.cfg.precision == AttnPrecision::BF16)
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_round(out[i]);
    else if (p.cfg.precision == AttnPrecision::FP8)
      fp8_qdq_tensor(out, n, p.cfg.do_format, out);
  }
}

template void round_do_dv<float>(const Problem&, const float*, const float*, float*);
template void round_do_dv<double>(const Problem&, const float*, const double*, double*);

template <typename T>
void round_ds_tile(const AttentionConfig& c, T* ds, int64_t rows, int64_t cols, int64_t ld) {
  if (c.precision == AttnPrecision::FP64) return;
  if (c.precision == AttnPrecision::BF16) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j) ds[r * ld + j] = T(bf16_round(float(ds[r * ld + j])));
    return;
  }
  float amax = 0.0f;
  for (int64_t r = 0; r < rows; ++r) amax = amax_of(ds + r * ld, cols, amax);
  // Power-of-two scale: x * s and decode * (1/s) are exact, only the cast rounds.
  const float s = scale_from_amax(amax, c.ds_format, 0, /*pow2=*/true);
  const float s_inv = 1.0f / s;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      T& x = ds[r * ld + j];
      x = T(fp8_round(float(x) * s, c.ds_format) * s_inv);
    }
}

template void round_ds_tile<float>(const AttentionConfig&, float*, int64_t, int64_t, int64_t);
template void round_ds_tile<double>(const AttentionConfig&, double*, int64_t, int64_t, int64_t);

}  // namespace octet::attn
