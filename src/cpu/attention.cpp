// src/cpu/attention.cpp — the public entry points of the CPU attention (octet/attention.h): names,
// shape checks, operand rounding, and the dispatch to a form (whole or tiled) and an arithmetic
// type (float for BF16/FP8 = FP32 accumulation, double for FP64). The backward also turns the
// per-row residual sums into the diagnostics r_i = |Σ_j dS_ij| / Σ_j P_ij (|dP_ij| + |D_i|)
// (attention.h's AttentionStats; DESIGN.md §3).
#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>
#include <utility>

#include "cpu/attention_impl.h"
#include "fp8/name_table.h"
#include "octet/error.h"

namespace octet {
namespace {

using detail::name_of;
using detail::parse_name;

constexpr std::array<std::pair<const char*, AttnPrecision>, 3> kPrecisions{
    {{"fp64", AttnPrecision::FP64}, {"bf16", AttnPrecision::BF16}, {"fp8", AttnPrecision::FP8}}};
constexpr std::array<std::pair<const char*, DeltaMode>, 2> kDeltas{
    {{"stale", DeltaMode::Stale}, {"matched", DeltaMode::Matched}}};
constexpr std::array<std::pair<const char*, AttnForm>, 2> kForms{
    {{"whole", AttnForm::Whole}, {"tiled", AttnForm::Tiled}}};
constexpr std::array<std::pair<const char*, AttnInputDist>, 3> kDists{
    {{"normal", AttnInputDist::Normal}, {"heavy", AttnInputDist::Heavy},
     {"sink", AttnInputDist::Sink}}};

void validate_config(const AttentionConfig& c) {
  OCTET_CHECK(c.block_k >= 1 && c.block_q >= 1,
              "attention block sizes must be >= 1 (block_q " + std::to_string(c.block_q) +
                  ", block_k " + std::to_string(c.block_k) + ")");
  OCTET_CHECK(c.p_scale > 0 && c.p_scale <= fp8_max(Format::E4M3) &&
                  pow2_round_down(c.p_scale) == c.p_scale,
              "attention p_scale must be a power of two in (0, 448] so that P in [0, 1] fits "
              "E4M3 exactly scaled (got " + std::to_string(c.p_scale) + ")");
}

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

AttnPrecision parse_attn_precision(const std::string& s) {
  return parse_name(kPrecisions, s, "attention precision");
}
DeltaMode parse_delta_mode(const std::string& s) { return parse_name(kDeltas, s, "delta mode"); }
AttnForm parse_attn_form(const std::string& s) { return parse_name(kForms, s, "attention form"); }
AttnInputDist parse_attn_input_dist(const std::string& s) {
  return parse_name(kDists, s, "input distribution");
}
std::string to_string(AttnPrecision p) { return name_of(kPrecisions, p); }
std::string to_string(DeltaMode d) { return name_of(kDeltas, d); }
std::string to_string(AttnForm f) { return name_of(kForms, f); }
std::string to_string(AttnInputDist d) { return name_of(kDists, d); }

float AttentionShape::tau() const {
  return softmax_scale != 0.0f ? softmax_scale : 1.0f / std::sqrt(float(head_dim));
}

void AttentionShape::validate() const {
  const std::pair<const char*, int64_t> sizes[] = {{"batch", batch},   {"heads", n_heads},
                                                   {"kv-heads", n_kv_heads}, {"seq", seq_q},
                                                   {"kv-seq", seq_k},  {"dim", head_dim}};
  for (auto& [name, v] : sizes)
    OCTET_CHECK(v >= 1, "attention shape: " + std::string(name) + " must be >= 1, got " +
                            std::to_string(v));
  OCTET_CHECK(n_heads % n_kv_heads == 0,
              "attention shape: kv-heads (" + std::to_string(n_kv_heads) +
                  ") must divide heads (" + std::to_string(n_heads) + ")");
  OCTET_CHECK(std::isfinite(softmax_scale) && softmax_scale >= 0.0f,
              "attention shape: softmax scale must be finite and >= 0 (0: 1/sqrt(dim)), got " +
                  std::to_string(softmax_scale));
}

namespace attn {
Problem::Problem(const AttentionShape& s, const AttentionConfig& c)
    : B(s.batch), H(s.n_heads), G(s.n_kv_heads), Tq(s.seq_q), Tk(s.seq_k), D(s.head_dim),
      group(s.n_heads / s.n_kv_heads), causal(s.causal), tau(double(s.tau())), cfg(c) {}
}  // namespace attn

void attention_forward(const AttentionShape& shape, const AttentionConfig& config, const float* q,
                       const float* k, const float* v, float* o, float* lse,
                       AttentionSaved* saved) {
  shape.validate();
  validate_config(config);
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
  validate_config(saved.config);
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
