// gated_delta_chunked.cpp — Gated DeltaNet in the chunked WY/UT form of Yang, Kautz & Hatamizadeh
// (arXiv 2412.06464 §3.3), forward and backward, on the CPU (octet/recurrent.h has the equations).
// One (batch, head) at a time; inside a chunk of C positions the work is C×C matrices (A, QKᵀ) and
// C×d products, across chunks only the d_k×d_v state is carried. The backward recomputes the
// chunk-entering states with the forward's state update and then walks the chunks in reverse.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cpu/gated_delta_impl.h"
#include "octet/recurrent.h"

namespace octet {
namespace {

// One head's views and sizes.
template <typename T>
struct Head {
  const T *q, *k, *v, *g, *beta;
  T scale;
  int64_t K, V;
};

// Per-chunk quantities the forward and backward share (n = chunk length).
template <typename T>
struct ChunkForm {
  int64_t n = 0;
  std::vector<T> gam;    // γ_r = Σ_{i≤r} g_i                     [n]
  std::vector<T> kk;     // k_r·k_i                               [n, n]
  std::vector<T> s0k;    // S_0ᵀ k_r                              [n, V]
  std::vector<T> delta;  // Δ, solved from (I + A) Δ = R          [n, V]

  T e(int64_t r, int64_t i) const { return std::exp(gam[size_t(r)] - gam[size_t(i)]); }
  T a(const Head<T>& h, int64_t t0, int64_t r, int64_t i) const {  // A_ri, i < r
    return h.beta[t0 + r] * e(r, i) * kk[size_t(r * n + i)];
  }

  // Builds γ, kᵀk, S_0ᵀk and Δ for positions [t0, t0 + n) entering with state S0 [K, V].
  void build(const Head<T>& h, int64_t t0, int64_t len, const T* S0) {
    n = len;
    const int64_t K = h.K, V = h.V;
    gam.assign(size_t(n), T(0));
    kk.assign(size_t(n * n), T(0));
    s0k.assign(size_t(n * V), T(0));
    delta.assign(size_t(n * V), T(0));
    T acc = 0;
    for (int64_t r = 0; r < n; ++r) gam[size_t(r)] = acc += h.g[t0 + r];
    for (int64_t r = 0; r < n; ++r) {
      const T* kr = h.k + (t0 + r) * K;
      for (int64_t i = 0; i <= r; ++i) {
        const T* ki = h.k + (t0 + i) * K;
        T d = 0;
        for (int64_t c = 0; c < K; ++c) d += kr[c] * ki[c];
        kk[size_t(r * n + i)] = kk[size_t(i * n + r)] = d;
      }
      for (int64_t c = 0; c < K; ++c)
        for (int64_t j = 0; j < V; ++j) s0k[size_t(r * V + j)] += S0[c * V + j] * kr[c];
    }
    // R_r = β_r v_r − β_r Γ_r S_0ᵀk_r, then forward substitution Δ_r = R_r − Σ_{i<r} A_ri Δ_i.
    for (int64_t r = 0; r < n; ++r) {
      const T b = h.beta[t0 + r], G = std::exp(gam[size_t(r)]);
      T* dr = delta.data() + r * V;
      const T* vr = h.v + (t0 + r) * V;
      for (int64_t j = 0; j < V; ++j) dr[j] = b * vr[j] - b * G * s0k[size_t(r * V + j)];
      for (int64_t i = 0; i < r; ++i) {
        const T air = a(h, t0, r, i);
        const T* di = delta.data() + i * V;
        for (int64_t j = 0; j < V; ++j) dr[j] -= air * di[j];
      }
    }
  }

  // S ← Γ_C S_0 + Kᵀ diag(e^{γ_C − γ}) Δ (in place).
  void advance(const Head<T>& h, int64_t t0, T* S) const {
    const int64_t K = h.K, V = h.V;
    const T GC = std::exp(gam[size_t(n - 1)]);
    for (int64_t x = 0; x < K * V; ++x) S[x] *= GC;
    for (int64_t i = 0; i < n; ++i) {
      const T w = e(n - 1, i);
      const T* ki = h.k + (t0 + i) * K;
      const T* di = delta.data() + i * V;
      for (int64_t c = 0; c < K; ++c)
        for (int64_t j = 0; j < V; ++j) S[c * V + j] += w * ki[c] * di[j];
    }
  }
};

template <typename T>
Head<T> head_of(const GatedDeltaShape& s, const GatedDeltaInputs<T>& in, int64_t bh) {
  const int64_t T_ = s.seq;
  return {in.q + bh * T_ * s.dk,
          in.k + bh * T_ * s.dk,
          in.v + bh * T_ * s.dv,
          in.g + bh * T_,
          in.beta + bh * T_,
          in.scale,
          s.dk,
          s.dv};
}

void check_chunk(int64_t chunk) {
  OCTET_CHECK(chunk >= 1, "gated delta: chunk must be >= 1 (got " + std::to_string(chunk) + ")");
}

}  // namespace

template <typename T>
void gated_delta_chunked_forward(const GatedDeltaShape& s, const GatedDeltaInputs<T>& in, int64_t chunk,
                                 T* o) {
  cpu::check_gated_delta(s, in, "o", o);
  check_chunk(chunk);
  const int64_t K = s.dk, V = s.dv;
  std::vector<T> S(static_cast<size_t>(K * V));
  ChunkForm<T> f;
  for (int64_t bh = 0; bh < s.batch * s.heads; ++bh) {
    const Head<T> h = head_of(s, in, bh);
    T* oh = o + bh * s.seq * V;
    std::fill(S.begin(), S.end(), T(0));
    for (int64_t t0 = 0; t0 < s.seq; t0 += chunk) {
      const int64_t n = std::min(chunk, s.seq - t0);
      f.build(h, t0, n, S.data());
      // O_r = scale·(Γ_r S_0ᵀq_r + Σ_{i≤r} e^{γ_r−γ_i} (q_r·k_i) Δ_i)
      for (int64_t r = 0; r < n; ++r) {
        const T* qr = h.q + (t0 + r) * K;
        T* out = oh + (t0 + r) * V;
        const T G = std::exp(f.gam[size_t(r)]);
        for (int64_t j = 0; j < V; ++j) out[j] = 0;
        for (int64_t c = 0; c < K; ++c)
          for (int64_t j = 0; j < V; ++j) out[j] += G * S[size_t(c * V + j)] * qr[c];
        for (int64_t i = 0; i <= r; ++i) {
          const T* ki = h.k + (t0 + i) * K;
          T qk = 0;
          for (int64_t c = 0; c < K; ++c) qk += qr[c] * ki[c];
          const T w = f.e(r, i) * qk;
          const T* di = f.delta.data() + i * V;
          for (int64_t j = 0; j < V; ++j) out[j] += w * di[j];
        }
        for (int64_t j = 0; j < V; ++j) out[j] *= h.scale;
      }
      f.advance(h, t0, S.data());
    }
  }
}

template <typename T>
void gated_delta_chunked_backward(const GatedDeltaShape& s, const GatedDeltaInputs<T>& in, int64_t chunk,
                                  const T* d_o, const GatedDeltaGrads<T>& gr) {
  cpu::check_gated_delta(s, in, "d_o", d_o);
  cpu::check_gated_delta_grads(gr);
  check_chunk(chunk);
  const int64_t K = s.dk, V = s.dv, KV = K * V, Tn = s.seq;
  const int64_t n_chunks = (Tn + chunk - 1) / chunk;
  std::vector<T> states(static_cast<size_t>(n_chunks * KV)), G(static_cast<size_t>(KV)),
      dS0(static_cast<size_t>(KV));
  std::vector<T> dDelta, dR, dgam, GD(static_cast<size_t>(K)), s0q(static_cast<size_t>(V));
  ChunkForm<T> f;
  for (int64_t bh = 0; bh < s.batch * s.heads; ++bh) {
    const Head<T> h = head_of(s, in, bh);
    const T* dOh = d_o + bh * Tn * V;
    T* dq = gr.dq + bh * Tn * K;
    T* dk = gr.dk + bh * Tn * K;
    T* dv = gr.dv + bh * Tn * V;
    T* dg = gr.dg + bh * Tn;
    T* db = gr.dbeta + bh * Tn;
    // The state entering each chunk.
    std::fill(states.begin(), states.begin() + KV, T(0));
    for (int64_t c = 0; c + 1 < n_chunks; ++c) {
      T* next = states.data() + (c + 1) * KV;
      std::copy(states.begin() + c * KV, states.begin() + (c + 1) * KV, next);
      f.build(h, c * chunk, chunk, states.data() + c * KV);
      f.advance(h, c * chunk, next);
    }
    std::fill(G.begin(), G.end(), T(0));  // dL/dS at the end of the chunk
    for (int64_t c = n_chunks - 1; c >= 0; --c) {
      const int64_t t0 = c * chunk, n = std::min(chunk, Tn - t0);
      const T* S0 = states.data() + c * KV;
      f.build(h, t0, n, S0);
      const T GC = std::exp(f.gam[size_t(n - 1)]);
      dDelta.assign(size_t(n * V), T(0));
      dR.assign(size_t(n * V), T(0));
      dgam.assign(size_t(n), T(0));
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t c2 = 0; c2 < K; ++c2) dq[(t0 + r) * K + c2] = dk[(t0 + r) * K + c2] = 0;
        db[t0 + r] = 0;
      }
      // dS_0 from the direct terms: scale·Σ_r Γ_r q_r dO_rᵀ + Γ_C G.
      for (int64_t x = 0; x < KV; ++x) dS0[size_t(x)] = GC * G[size_t(x)];
      T g_s0 = 0;  // ⟨G, S_0⟩
      for (int64_t x = 0; x < KV; ++x) g_s0 += G[size_t(x)] * S0[x];
      dgam[size_t(n - 1)] += GC * g_s0;
      for (int64_t r = 0; r < n; ++r) {
        const T* qr = h.q + (t0 + r) * K;
        const T* dor = dOh + (t0 + r) * V;
        const T Gr = std::exp(f.gam[size_t(r)]);
        // O term 1: scale·Γ_r S_0ᵀ q_r.
        std::fill(s0q.begin(), s0q.end(), T(0));
        for (int64_t c2 = 0; c2 < K; ++c2) {
          T sdo = 0;
          for (int64_t j = 0; j < V; ++j) {
            s0q[size_t(j)] += S0[c2 * V + j] * qr[c2];
            sdo += S0[c2 * V + j] * dor[j];
            dS0[size_t(c2 * V + j)] += h.scale * Gr * qr[c2] * dor[j];
          }
          dq[(t0 + r) * K + c2] += h.scale * Gr * sdo;
        }
        T dos = 0;
        for (int64_t j = 0; j < V; ++j) dos += dor[j] * s0q[size_t(j)];
        dgam[size_t(r)] += h.scale * Gr * dos;
        // O term 2: scale·Σ_{i≤r} e_ri (q_r·k_i) Δ_i.
        for (int64_t i = 0; i <= r; ++i) {
          const T* ki = h.k + (t0 + i) * K;
          const T* di = f.delta.data() + i * V;
          T qk = 0, dod = 0;
          for (int64_t c2 = 0; c2 < K; ++c2) qk += qr[c2] * ki[c2];
          for (int64_t j = 0; j < V; ++j) dod += dor[j] * di[j];
          const T e = f.e(r, i), w = h.scale * e;
          for (int64_t j = 0; j < V; ++j) dDelta[size_t(i * V + j)] += w * qk * dor[j];
          for (int64_t c2 = 0; c2 < K; ++c2) {
            dq[(t0 + r) * K + c2] += w * dod * ki[c2];
            dk[(t0 + i) * K + c2] += w * dod * qr[c2];
          }
          const T X = w * qk * dod;
          dgam[size_t(r)] += X;
          dgam[size_t(i)] -= X;
        }
      }
      // S_C term: Kᵀ diag(e^{γ_C − γ}) Δ.
      for (int64_t i = 0; i < n; ++i) {
        const T* ki = h.k + (t0 + i) * K;
        const T* di = f.delta.data() + i * V;
        const T e = f.e(n - 1, i);
        T y = 0;
        for (int64_t c2 = 0; c2 < K; ++c2) {
          T gd = 0;
          for (int64_t j = 0; j < V; ++j) gd += G[size_t(c2 * V + j)] * di[j];
          GD[size_t(c2)] = gd;
          y += ki[c2] * gd;
          dk[(t0 + i) * K + c2] += e * gd;
        }
        for (int64_t j = 0; j < V; ++j) {
          T gk = 0;
          for (int64_t c2 = 0; c2 < K; ++c2) gk += G[size_t(c2 * V + j)] * ki[c2];
          dDelta[size_t(i * V + j)] += e * gk;
        }
        dgam[size_t(n - 1)] += e * y;
        dgam[size_t(i)] -= e * y;
      }
      // Through the solve: (I + A)ᵀ dR = dΔ (backward substitution), dA_ri = −dR_r·Δ_i (i < r).
      for (int64_t i = n - 1; i >= 0; --i) {
        T* dri = dR.data() + i * V;
        for (int64_t j = 0; j < V; ++j) dri[j] = dDelta[size_t(i * V + j)];
        for (int64_t r = i + 1; r < n; ++r) {
          const T ari = f.a(h, t0, r, i);
          const T* drr = dR.data() + r * V;
          for (int64_t j = 0; j < V; ++j) dri[j] -= ari * drr[j];
        }
      }
      for (int64_t r = 0; r < n; ++r) {
        const T* drr = dR.data() + r * V;
        const T* kr = h.k + (t0 + r) * K;
        const T* vr = h.v + (t0 + r) * V;
        const T b = h.beta[t0 + r], Gr = std::exp(f.gam[size_t(r)]);
        // R_r = β_r v_r − β_r Γ_r S_0ᵀ k_r
        T drv = 0, drs = 0;
        for (int64_t j = 0; j < V; ++j) {
          dv[(t0 + r) * V + j] = b * drr[j];
          drv += drr[j] * vr[j];
          drs += drr[j] * f.s0k[size_t(r * V + j)];
        }
        db[t0 + r] += drv - Gr * drs;
        dgam[size_t(r)] -= b * Gr * drs;
        for (int64_t c2 = 0; c2 < K; ++c2) {
          T sdr = 0;
          for (int64_t j = 0; j < V; ++j) {
            sdr += S0[c2 * V + j] * drr[j];
            dS0[size_t(c2 * V + j)] -= b * Gr * kr[c2] * drr[j];
          }
          dk[(t0 + r) * K + c2] -= b * Gr * sdr;
        }
        // A_ri = β_r e_ri (k_r·k_i), i < r
        for (int64_t i = 0; i < r; ++i) {
          const T* di = f.delta.data() + i * V;
          T cdot = 0;
          for (int64_t j = 0; j < V; ++j) cdot += drr[j] * di[j];
          const T cA = -cdot;  // dA_ri
          const T e = f.e(r, i), kki = f.kk[size_t(r * n + i)];
          db[t0 + r] += cA * e * kki;
          const T X = cA * b * e * kki;
          dgam[size_t(r)] += X;
          dgam[size_t(i)] -= X;
          const T* ki = h.k + (t0 + i) * K;
          for (int64_t c2 = 0; c2 < K; ++c2) {
            dk[(t0 + r) * K + c2] += cA * b * e * ki[c2];
            dk[(t0 + i) * K + c2] += cA * b * e * kr[c2];
          }
        }
      }
      // dg_j = Σ_{r≥j} dγ_r
      T run = 0;
      for (int64_t r = n - 1; r >= 0; --r) dg[t0 + r] = run += dgam[size_t(r)];
      std::copy(dS0.begin(), dS0.end(), G.begin());
    }
  }
}

template void gated_delta_chunked_forward<float>(const GatedDeltaShape&, const GatedDeltaInputs<float>&,
                                                 int64_t, float*);
template void gated_delta_chunked_forward<double>(const GatedDeltaShape&, const GatedDeltaInputs<double>&,
                                                  int64_t, double*);
template void gated_delta_chunked_backward<float>(const GatedDeltaShape&, const GatedDeltaInputs<float>&,
                                                  int64_t, const float*, const GatedDeltaGrads<float>&);
template void gated_delta_chunked_backward<double>(const GatedDeltaShape&, const GatedDeltaInputs<double>&,
                                                   int64_t, const double*, const GatedDeltaGrads<double>&);

}  // namespace octet
