// gated_delta.cpp — the recurrent mixer of the hybrid model on the CPU backend: Gated DeltaNet
// (Yang, Kautz & Hatamizadeh, arXiv 2412.06464) through the chunked WY/UT form of octet/recurrent.h
// in FP32, with the model's gates g = log σ(a)/16, β = σ(b) (gated_delta_gates) taken from the raw
// gate projections [B, T, 2H] (backend.h GatedDeltaArgs). Tensors are F32 or BF16 (act_io.h: read
// as FP32, rounded once on store).
#include <string>
#include <vector>

#include "cpu/backend/act_io.h"
#include "cpu/backend/cpu_backend.h"
#include "octet/error.h"
#include "octet/recurrent.h"

namespace octet::cpu {
namespace {

// g, β [B, H, T] and their derivatives from the token-major gate projections.
struct Gates {
  std::vector<float> g, beta, dg_da, dbeta_db;
  Gates(const GatedDeltaShape& s, const Tensor& gates) {
    ActIn a(gates, "gated_delta gates");
    const int64_t n = s.batch * s.heads * s.seq, H = s.heads, T = s.seq;
    g.resize(size_t(n));
    beta.resize(size_t(n));
    dg_da.resize(size_t(n));
    dbeta_db.resize(size_t(n));
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h) {
          const int64_t tok = (b * T + t) * 2 * H, i = (b * H + h) * T + t;
          const GateValues v = gated_delta_gates(a[tok + h], a[tok + H + h]);
          g[size_t(i)] = float(v.g);
          beta[size_t(i)] = float(v.beta);
          dg_da[size_t(i)] = float(v.dg_da);
          dbeta_db[size_t(i)] = float(v.dbeta_db);
        }
  }
};

}  // namespace

void CpuBackend::gated_delta_forward(const GatedDeltaArgs& in, const Tensor& o) {
  const GatedDeltaShape s = in.shape("gated_delta_forward");
  check_shape(o, in.v.shape, "gated_delta_forward o");
  ActIn q(in.q, "gated_delta_forward q"), k(in.k, "gated_delta_forward k"), v(in.v, "gated_delta_forward v");
  const Gates gates(s, in.gates);
  ActOut out(o, "gated_delta_forward o");
  gated_delta_chunked_forward<float>(s, {q.data, k.data, v.data, gates.g.data(), gates.beta.data(), in.scale},
                                     in.chunk, out.data);
  out.store();
}

void CpuBackend::gated_delta_backward(const GatedDeltaArgs& in, const Tensor& d_o, const Tensor& dq,
                                      const Tensor& dk, const Tensor& dv, const Tensor& dgates) {
  const GatedDeltaShape s = in.shape("gated_delta_backward");
  check_shape(d_o, in.v.shape, "gated_delta_backward d_o");
  check_shape(dq, in.q.shape, "gated_delta_backward dq");
  check_shape(dk, in.q.shape, "gated_delta_backward dk");
  check_shape(dv, in.v.shape, "gated_delta_backward dv");
  check_shape(dgates, in.gates.shape, "gated_delta_backward dgates");
  ActIn q(in.q, "gated_delta_backward q"), k(in.k, "gated_delta_backward k"),
      v(in.v, "gated_delta_backward v"), go(d_o, "gated_delta_backward d_o");
  const Gates gates(s, in.gates);
  ActOut oq(dq, "gated_delta_backward dq"), ok(dk, "gated_delta_backward dk"),
      ov(dv, "gated_delta_backward dv"), og(dgates, "gated_delta_backward dgates");
  const int64_t n = s.batch * s.heads * s.seq, H = s.heads, T = s.seq;
  std::vector<float> dg(static_cast<size_t>(n)), dbeta(static_cast<size_t>(n));
  gated_delta_chunked_backward<float>(
      s, {q.data, k.data, v.data, gates.g.data(), gates.beta.data(), in.scale}, in.chunk, go.data,
      {oq.data, ok.data, ov.data, dg.data(), dbeta.data()});
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t tok = (b * T + t) * 2 * H, i = (b * H + h) * T + t;
        og[tok + h] = dg[size_t(i)] * gates.dg_da[size_t(i)];
        og[tok + H + h] = dbeta[size_t(i)] * gates.dbeta_db[size_t(i)];
      }
  oq.store();
  ok.store();
  ov.store();
  og.store();
}

}  // namespace octet::cpu
