// src/cpu/attention.cpp — the public entry points of the CPU attention (octet/attention.h): operand
// rounding and the dispatch to a form (whole or flash) and an arithmetic type (float for BF16/FP8 =
// FP32 accumulation, double for FP64); names and shape/config rules are src/core's. The backward also turns
// the per-row residual sums into the diagnostics r_i = |Σ_j dS_ij| / Σ_j P_ij (|dP_ij| + |D_i|)
// (attention.h's AttentionStats; docs/design.md §"The two deltas"). Results come out as FP32 or FP64 arrays:
// the FP64 precision computes in double throughout, so its FP64 outputs match the oracle to ~1e-15.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include "cpu/attention_impl.h"
#include "octet/error.h"

namespace octet {
namespace {

template <typename From, typename To>
void convert(const std::vector<From>& x, To* out) {
  std::transform(x.begin(), x.end(), out, [](From v) { return To(v); });
}

// The forward's results in T: O (as stored), and per row the LSE, m and l.
template <typename T>
struct ForwardOut {
  std::vector<T> o, lse, m, l;
};

// Runs the forward in T.
template <typename T>
ForwardOut<T> run_forward(const attn::Problem& p, const float* qh, const float* kh, const float* vh) {
  ForwardOut<T> f;
  f.o.resize(size_t(p.B * p.H * p.Tq * p.D));
  f.lse.resize(size_t(p.B * p.H * p.Tq));
  f.m.resize(f.lse.size());
  f.l.resize(f.lse.size());
  if (p.cfg.form == AttnForm::Whole)
    attn::forward_whole<T>(p, qh, kh, vh, f.o.data(), f.lse.data(), f.m.data(), f.l.data());
  else
    attn::forward_flash<T>(p, qh, kh, vh, f.o.data(), f.lse.data(), f.m.data(), f.l.data());
  return f;
}

// Converts a forward's results into the caller's o, lse and (if not null) `saved`.
template <typename T, typename Out>
void store_forward(ForwardOut<T>&& f, Out* o, Out* lse, AttentionSaved* saved) {
  convert(f.o, o), convert(f.lse, lse);
  if (!saved) return;
  saved->o.assign(f.o.begin(), f.o.end());
  saved->lse.assign(f.lse.begin(), f.lse.end());
  saved->row_max.assign(f.m.begin(), f.m.end());
  saved->row_sum.assign(f.l.begin(), f.l.end());
  if constexpr (std::is_same_v<T, double>)
    saved->o_fp64 = std::move(f.o);
  else
    saved->o_fp64.clear();
}

// The dQ row-sum projection (AttentionConfig::dq_projection): dQ_i −= τ r̂_i k̄, k̄ the mean of
// K̂ over the Tk keys of (b, KV head), in FP64.
template <typename T>
void project_dq(const attn::Problem& p, const float* k_hat, const double* ds_row_sum, T* dq) {
  std::vector<double> k_mean(size_t(p.D));
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h) {
      if (h % p.group == 0) {  // k̄ once per KV head, for the query heads of its group
        const float* K = k_hat + p.kv_off(b, h);
        std::fill(k_mean.begin(), k_mean.end(), 0.0);
        for (int64_t j = 0; j < p.Tk; ++j)
          for (int64_t c = 0; c < p.D; ++c) k_mean[c] += double(K[j * p.D + c]);
        for (auto& x : k_mean) x /= double(p.Tk);
      }
      T* dqh = dq + p.q_off(b, h);
      for (int64_t i = 0; i < p.Tq; ++i) {
        const double g = p.tau * ds_row_sum[p.row_off(b, h) + i];
        for (int64_t c = 0; c < p.D; ++c) dqh[i * p.D + c] -= T(g * k_mean[c]);
      }
    }
}

// Runs the backward in T into zeroed T accumulators dq, dk, dv.
template <typename T>
void run_backward(const attn::Problem& p, attn::BackwardArgs<T> a, std::vector<T>& dq, std::vector<T>& dk,
                  std::vector<T>& dv) {
  dq.assign(size_t(p.B * p.H * p.Tq * p.D), T(0));
  dk.assign(size_t(p.B * p.G * p.Tk * p.D), T(0));
  dv.assign(dk.size(), T(0));
  a.dq = dq.data(), a.dk = dk.data(), a.dv = dv.data();
  std::vector<double> ds_row_sum;
  if (p.cfg.dq_projection) {
    ds_row_sum.assign(size_t(p.B * p.H * p.Tq), 0.0);
    a.ds_row_sum = ds_row_sum.data();
  }
  if (p.cfg.form == AttnForm::Whole)
    attn::backward_whole<T>(p, a);
  else
    attn::backward_flash<T>(p, a);
  if (p.cfg.dq_projection) project_dq<T>(p, a.k_hat, ds_row_sum.data(), dq.data());
}

// The saved tensor x in T: FP32 ones as they are, or FP64's own copy x64 when it was saved.
template <typename T>
std::vector<T> saved_in(const std::vector<float>& x, const std::vector<double>& x64) {
  if (!x64.empty()) return {x64.begin(), x64.end()};
  return {x.begin(), x.end()};
}

template <typename Out>
void forward_impl(const AttentionShape& shape, const AttentionConfig& config, const float* q, const float* k,
                  const float* v, Out* o, Out* lse, AttentionSaved* saved) {
  shape.validate();
  check_heads_major(shape, "attention_forward");
  config.validate();
  const attn::Problem p(shape, config);
  std::vector<float> qh(size_t(p.B * p.H * p.Tq * p.D)), kh(size_t(p.B * p.G * p.Tk * p.D)), vh(kh.size());
  attn::round_qkv(p, q, p.H, p.Tq, qh.data());
  attn::round_qkv(p, k, p.G, p.Tk, kh.data());
  attn::round_qkv(p, v, p.G, p.Tk, vh.data());
  if (config.precision == AttnPrecision::FP64)
    store_forward(run_forward<double>(p, qh.data(), kh.data(), vh.data()), o, lse, saved);
  else
    store_forward(run_forward<float>(p, qh.data(), kh.data(), vh.data()), o, lse, saved);
  if (!saved) return;
  saved->shape = shape;
  saved->config = config;
  saved->q_hat = std::move(qh);
  saved->k_hat = std::move(kh);
  saved->v_hat = std::move(vh);
}

template <typename T>
void backward_in(const AttentionSaved& saved, const attn::Problem& p, const float* d_o, const float* do_hat,
                 std::vector<double>& res_sum, std::vector<double>& res_mag, double* mean_key,
                 std::vector<T>& dq, std::vector<T>& dk, std::vector<T>& dv) {
  const std::vector<T> o = saved_in<T>(saved.o, saved.o_fp64);
  const std::vector<T> m(saved.row_max.begin(), saved.row_max.end());
  const std::vector<T> l(saved.row_sum.begin(), saved.row_sum.end());
  // dV's operand dO_i / l_i (0 in a row that sees no key, where l = 0).
  std::vector<T> factor(l.size()), do_dv(o.size());
  for (size_t r = 0; r < l.size(); ++r) factor[r] = l[r] > 0 ? T(1) / l[r] : T(0);
  attn::round_do_dv<T>(p, d_o, factor.data(), do_dv.data());
  attn::BackwardArgs<T> a{};
  a.q_hat = saved.q_hat.data(), a.k_hat = saved.k_hat.data(), a.v_hat = saved.v_hat.data();
  a.d_o = d_o, a.do_hat = do_hat;
  a.o = o.data(), a.row_max = m.data(), a.row_sum = l.data(), a.do_dv = do_dv.data();
  a.res_sum = res_sum.data(), a.res_mag = res_mag.data();
  a.mean_key = mean_key;
  run_backward<T>(p, a, dq, dk, dv);
}

template <typename Out>
void backward_impl(const AttentionSaved& saved, const float* d_o, Out* dq, Out* dk, Out* dv,
                   AttentionStats* stats, bool want_rows) {
  saved.shape.validate();
  check_heads_major(saved.shape, "attention_backward");
  saved.config.validate();
  const attn::Problem p(saved.shape, saved.config);
  const size_t nq = size_t(p.B * p.H * p.Tq * p.D), nk = size_t(p.B * p.G * p.Tk * p.D);
  const size_t rows = size_t(p.B * p.H * p.Tq);
  auto fits = [](const std::vector<double>& x, size_t n) { return x.empty() || x.size() == n; };
  OCTET_CHECK(saved.q_hat.size() == nq && saved.k_hat.size() == nk && saved.v_hat.size() == nk &&
                  saved.o.size() == nq && saved.lse.size() == rows && saved.row_max.size() == rows &&
                  saved.row_sum.size() == rows && fits(saved.o_fp64, nq),
              "attention_backward: the saved tensors do not match the saved shape (was the "
              "forward run with a `saved` argument?)");
  std::vector<float> do_hat(nq);
  attn::round_do(p, d_o, do_hat.data());
  std::vector<double> res_sum(rows, 0.0), res_mag(rows, 0.0), mean_key;
  const bool rows_out = stats && want_rows;
  if (rows_out) mean_key.assign(nq, 0.0);  // k̄_i, only for the per-row diagnostics
  double* mk = rows_out ? mean_key.data() : nullptr;
  if (saved.config.precision == AttnPrecision::FP64) {
    std::vector<double> gq, gk, gv;
    backward_in<double>(saved, p, d_o, do_hat.data(), res_sum, res_mag, mk, gq, gk, gv);
    convert(gq, dq), convert(gk, dk), convert(gv, dv);
  } else {
    std::vector<float> gq, gk, gv;
    backward_in<float>(saved, p, d_o, do_hat.data(), res_sum, res_mag, mk, gq, gk, gv);
    convert(gq, dq), convert(gk, dk), convert(gv, dv);
  }
  if (!stats) return;
  stats->row_residual_max = 0.0;
  double total = 0.0;
  if (want_rows) {
    stats->row_residual.assign(rows, 0.0);
    stats->row_sum = res_sum;
    stats->mean_key = std::move(mean_key);
  } else {
    stats->row_sum.clear();
    stats->mean_key.clear();
  }
  // The denominator's floor: each visible key counts at least at the working type's smallest
  // normal number (attention.h AttentionStats: below it there is no relative precision to cancel).
  const double tiny = saved.config.precision == AttnPrecision::FP64
                          ? double(std::numeric_limits<double>::min())
                          : double(std::numeric_limits<float>::min());
  for (size_t r = 0; r < rows; ++r) {
    // 0 for a row whose terms are all 0; a NaN anywhere in the row is reported, never hidden.
    const bool nan = res_sum[r] != res_sum[r] || res_mag[r] != res_mag[r];
    const double mag = res_mag[r] + double(p.visible(int64_t(r) % p.Tq)) * tiny;
    const double rel = nan ? NAN : mag > 0 ? std::fabs(res_sum[r]) / mag : 0.0;
    double& mx = stats->row_residual_max;
    if (rel != rel || (mx == mx && rel > mx)) mx = rel;  // a NaN is reported, never hidden
    total += rel;
    if (want_rows) stats->row_residual[r] = rel;
  }
  stats->row_residual_mean = total / double(rows);
}

}  // namespace

namespace attn {
Problem::Problem(const AttentionShape& s, const AttentionConfig& c)
    : B(s.batch),
      H(s.n_heads),
      G(s.n_kv_heads),
      Tq(s.seq_q),
      Tk(s.seq_k),
      D(s.head_dim),
      group(s.n_heads / s.n_kv_heads),
      causal(s.causal),
      tau(double(s.tau())),
      cfg(c) {}
}  // namespace attn

void attention_forward(const AttentionShape& shape, const AttentionConfig& config, const float* q,
                       const float* k, const float* v, float* o, float* lse, AttentionSaved* saved) {
  forward_impl(shape, config, q, k, v, o, lse, saved);
}
void attention_forward(const AttentionShape& shape, const AttentionConfig& config, const float* q,
                       const float* k, const float* v, double* o, double* lse, AttentionSaved* saved) {
  forward_impl(shape, config, q, k, v, o, lse, saved);
}

void attention_backward(const AttentionSaved& saved, const float* d_o, float* dq, float* dk, float* dv,
                        AttentionStats* stats, bool want_rows) {
  backward_impl(saved, d_o, dq, dk, dv, stats, want_rows);
}
void attention_backward(const AttentionSaved& saved, const float* d_o, double* dq, double* dk, double* dv,
                        AttentionStats* stats, bool want_rows) {
  backward_impl(saved, d_o, dq, dk, dv, stats, want_rows);
}

}  // namespace octet
