// src/cpu/attention.cpp — the public entry points of the CPU attention (octet/attention.h): operand
// rounding and the dispatch to a form (whole or tiled) and an arithmetic type (float for BF16/FP8 =
// FP32 accumulation, double for FP64); names and shape/config rules are src/core's. The backward also turns the
// per-row residual sums into the diagnostics r_i = |Σ_j dS_ij| / Σ_j P_ij (|dP_ij| + |D_i|)
// (attention.h's AttentionStats; DESIGN.md §3).
#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>
#include <utility>

#include "cpu/attention_impl.h"
#include "octet/error.h"

namespace octet {
namespace {

// Runs the forward in T; lse_t receives the LSE in T, lse its FP32 rounding.
template <typename T>
void run_forward(const attn::Problem& p, const float* qh, const float* kh, const float* vh,
                 float* o, float* lse, std::vector<T>& lse_t) {
  lse_t.resize(size_t(p.B * p.H * p.Tq));
  if (p.cfg.form == AttnForm::Whole)
    attn::forward_whole<T>(p, qh, kh, vh, o, lse_t.data());
  else
    attn::forward_tiled<T>(p, qh, kh, vh, o, lse_t.data());
  std::transform(lse_t.begin(), lse_t.end(), lse, [](T x) { return float(x); });
}

// Runs the backward in T and writes dq, dk, dv. For T = float the outputs are the accumulators.
template <typename T>
void run_backward(const attn::Problem& p, attn::BackwardArgs<T> a, float* dq, float* dk,
                  float* dv) {
  const size_t nq = size_t(p.B * p.H * p.Tq * p.D), nk = size_t(p.B * p.G * p.Tk * p.D);
  std::vector<T> acc;
  if constexpr (std::is_same_v<T, float>) {
    a.dq = dq, a.dk = dk, a.dv = dv;
  } else {
    acc.assign(nq + 2 * nk, T(0));
    a.dq = acc.data(), a.dk = acc.data() + nq, a.dv = acc.data() + nq + nk;
  }
  std::fill(a.dq, a.dq + nq, T(0));
  std::fill(a.dk, a.dk + nk, T(0));
  std::fill(a.dv, a.dv + nk, T(0));
  if (p.cfg.form == AttnForm::Whole)
    attn::backward_whole<T>(p, a);
  else
    attn::backward_tiled<T>(p, a);
  if constexpr (!std::is_same_v<T, float>) {
    std::transform(a.dq, a.dq + nq, dq, [](T x) { return float(x); });
    std::transform(a.dk, a.dk + nk, dk, [](T x) { return float(x); });
    std::transform(a.dv, a.dv + nk, dv, [](T x) { return float(x); });
  }
}

}  // namespace

namespace attn {
Problem::Problem(const AttentionShape& s, const AttentionConfig& c)
    : B(s.batch), H(s.n_heads), G(s.n_kv_heads), Tq(s.seq_q), Tk(s.seq_k), D(s.head_dim),
      group(s.n_heads / s.n_kv_heads), causal(s.causal), tau(double(s.tau())), cfg(c) {}
}  // namespace attn

void attention_forward(const AttentionShape& shape, const AttentionConfig& config, const float* q,
                       const float* k, const float* v, float* o, float* lse,
                       AttentionSaved* saved) {
  shape.validate();
  config.validate();
  const attn::Problem p(shape, config);
  std::vector<float> qh(size_t(p.B * p.H * p.Tq * p.D)), kh(size_t(p.B * p.G * p.Tk * p.D)),
      vh(kh.size());
  attn::round_qkv(p, q, p.H, p.Tq, qh.data());
  attn::round_qkv(p, k, p.G, p.Tk, kh.data());
  attn::round_qkv(p, v, p.G, p.Tk, vh.data());
  std::vector<double> lse64;
  std::vector<float> lse32;
  if (config.precision == AttnPrecision::FP64)
    run_forward<double>(p, qh.data(), kh.data(), vh.data(), o, lse, lse64);
  else
    run_forward<float>(p, qh.data(), kh.data(), vh.data(), o, lse, lse32);
  if (saved) {
    saved->lse_fp64 = std::move(lse64);
    saved->shape = shape;
    saved->config = config;
    saved->q_hat = std::move(qh);
    saved->k_hat = std::move(kh);
    saved->v_hat = std::move(vh);
    saved->o.assign(o, o + p.B * p.H * p.Tq * p.D);
    saved->lse.assign(lse, lse + p.B * p.H * p.Tq);
  }
}

void attention_backward(const AttentionSaved& saved, const float* d_o, float* dq, float* dk,
                        float* dv, AttentionStats* stats, bool want_rows) {
  saved.shape.validate();
  saved.config.validate();
  const attn::Problem p(saved.shape, saved.config);
  const size_t nq = size_t(p.B * p.H * p.Tq * p.D), nk = size_t(p.B * p.G * p.Tk * p.D);
  OCTET_CHECK(saved.q_hat.size() == nq && saved.k_hat.size() == nk && saved.v_hat.size() == nk &&
                  saved.o.size() == nq && saved.lse.size() == size_t(p.B * p.H * p.Tq),
              "attention_backward: the saved tensors do not match the saved shape (was the "
              "forward run with a `saved` argument?)");
  std::vector<float> do_hat(nq);
  attn::round_do(p, d_o, do_hat.data());
  const size_t rows = size_t(p.B * p.H * p.Tq);
  std::vector<double> res_sum(rows, 0.0), res_mag(rows, 0.0);
  std::vector<double> lse64;  // FP64: the unrounded LSE if the forward saved it
  if (saved.config.precision == AttnPrecision::FP64) {
    if (saved.lse_fp64.size() == saved.lse.size())
      lse64 = saved.lse_fp64;
    else
      lse64.assign(saved.lse.begin(), saved.lse.end());
  }
  auto args = [&](auto* zero) {
    using T = std::remove_pointer_t<decltype(zero)>;
    attn::BackwardArgs<T> a{};
    a.q_hat = saved.q_hat.data(), a.k_hat = saved.k_hat.data(), a.v_hat = saved.v_hat.data();
    a.o = saved.o.data(), a.d_o = d_o, a.do_hat = do_hat.data();
    if constexpr (std::is_same_v<T, float>)
      a.lse = saved.lse.data();
    else
      a.lse = lse64.data();
    a.res_sum = res_sum.data(), a.res_mag = res_mag.data();
    return a;
  };
  if (saved.config.precision == AttnPrecision::FP64)
    run_backward<double>(p, args((double*)nullptr), dq, dk, dv);
  else
    run_backward<float>(p, args((float*)nullptr), dq, dk, dv);
  if (!stats) return;
  stats->row_residual_max = 0.0;
  double total = 0.0;
  if (want_rows) stats->row_residual.assign(rows, 0.0);
  for (size_t r = 0; r < rows; ++r) {
    const double rel = res_mag[r] > 0 ? std::fabs(res_sum[r]) / res_mag[r] : 0.0;
    double& mx = stats->row_residual_max;
    if (rel != rel || (mx == mx && rel > mx)) mx = rel;  // a NaN is reported, never hidden
    total += rel;
    if (want_rows) stats->row_residual[r] = rel;
  }
  stats->row_residual_mean = total / double(rows);
}

}  // namespace octet
