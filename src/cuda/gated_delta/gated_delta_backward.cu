// src/cuda/gated_delta/gated_delta_backward.cu — the Gated DeltaNet backward on the GPU in the chunked WY/UT
// form (arXiv 2412.06464 §3.3; include/octet/recurrent.h). The chunk-entering states come from the forward
// kernel (states only, gated_delta_forward.cu); one CTA per (value-column block, batch·head) walks the chunks
// in reverse with G = dL/dS at the chunk's end (its d_k × 32 slice), recomputes Δ and differentiates the
// chunk's matrix forms:
//   dΔ = scale·(QKᵀ ⊙ M)ᵀ dO + diag(e^{γ_C−γ}) K G,   dR = (I + A)^{-T} dΔ,   dV = diag(β) dR,
//   P = scale·M ⊙ (dO Δᵀ) (i <= r),   Z = −diag(β) E ⊙ (dR Δᵀ) (i < r),   E_ri = e^{γ_r−γ_i},
//   dQ = scale·diag(Γ) dO S_0ᵀ + P K,   dK = Pᵀ Q + (Z + Zᵀ) K − diag(βΓ) dR S_0ᵀ + diag(e^{γ_C−γ}) Δ Gᵀ,
//   dS_0 = Γ_C G + scale·Qᵀ diag(Γ) dO − Kᵀ diag(βΓ) dR,
// and dγ from every e^{γ_r − γ_i} and Γ factor, dg = reverse cumulative sum of dγ, dβ from R and A.
// dq, dk, dg, dβ are partial sums over this block's value columns (FP32 workspace); the finish
// kernel adds the blocks in order and applies the gates' derivatives. CPU twin:
// gated_delta_chunked_backward (src/cpu/gated_delta_chunked.cpp), the same terms.
#include "cuda/runtime/check.h"
#include "cuda/gated_delta/gated_delta_chunk.cuh"

namespace octet::cuda {
namespace gdn {
namespace {

// Shared-memory layout of the backward, in floats.
template <int K>
struct BwdSmem {
  static constexpr int KP = K + 1;
  static constexpr size_t S0 = 0, G = S0 + K * VP, Q = G + K * VP, Kt = Q + C * KP, V = Kt + C * KP,
                          dO = V + C * VP, X = dO + C * VP, dR = X + C * VP, s0k = dR + C * VP,
                          KKe = s0k + C * VP, QKe = KKe + C * CP, Z = QKe + C * CP, gam = Z + C * CP,
                          Gam = gam + C, beta = Gam + C, eC = beta + C, dgA = eC + C, yC = dgA + C,
                          dgB = yC + C, dbA = dgB + C, dgC = dbA + C, dbB = dgC + C, colX = dbB + C,
                          dgam = colX + C, wpart = dgam + C, end = wpart + kWarps;
  static constexpr size_t bytes = end * sizeof(float);
};

template <int K>
__global__ void __launch_bounds__(kThreads) backward_kernel(GdnParams p) {
  using L = BwdSmem<K>;
  constexpr int KP = K + 1, KL = K / 32;  // d_k elements per lane
  extern __shared__ float sm[];
  float *S0 = sm + L::S0, *G = sm + L::G, *Qs = sm + L::Q, *Ks = sm + L::Kt, *Vs = sm + L::V,
        *dOs = sm + L::dO, *X = sm + L::X, *dR = sm + L::dR, *s0k = sm + L::s0k, *KKe = sm + L::KKe,
        *QKe = sm + L::QKe, *Z = sm + L::Z, *dgA = sm + L::dgA, *yC = sm + L::yC, *dgB = sm + L::dgB,
        *dbA = sm + L::dbA, *dgC = sm + L::dgC, *dbB = sm + L::dbB, *colX = sm + L::colX,
        *dgam = sm + L::dgam, *wpart = sm + L::wpart;
  const ChunkGates cg{sm + L::gam, sm + L::Gam, sm + L::beta, sm + L::eC};
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int vb = blockIdx.x;
  const int64_t bh = blockIdx.y, b = bh / p.heads, h = bh % p.heads, T = p.seq, Dv = p.vdim;
  const int64_t j0 = int64_t(vb) * VB, nch = p.n_chunks(), nvb = p.col_blocks();
  const float scale = p.scale;
  for (int x = tid; x < K * VP; x += kThreads) G[x] = 0.0f;

  for (int64_t ch = nch - 1; ch >= 0; --ch) {
    const int64_t t0 = ch * p.chunk, row0 = bh * T + t0;
    const int n = int(T - t0 < p.chunk ? T - t0 : p.chunk);
    __syncthreads();  // the previous chunk is done with every buffer; G holds dL/dS at this chunk's end
    // B1: the chunk's rows, S_0, the gates.
    {
      const float* src = p.states + ((bh * nvb + vb) * nch + ch) * K * VB;
      for (int x = tid; x < K * VB; x += kThreads) S0[(x / VB) * VP + x % VB] = src[x];
    }
    load_rows(Qs, KP, p.q, row0, K, 0, n, K);
    load_rows(Ks, KP, p.k, row0, K, 0, n, K);
    load_rows(Vs, VP, p.v, row0, Dv, j0, n, VB);
    load_rows(dOs, VP, p.d_o, row0, Dv, j0, n, VB);
    load_gates(p, b, h, t0, n, cg);  // ends with a barrier

    // B2: e^{γ_r−γ_i} k_r·k_i, e^{γ_r−γ_i} q_r·k_i; s0k and R (into X).
    chunk_products<K>(Qs, Ks, cg.gam, n, KKe, QKe);
    for (int r = warp; r < n; r += kWarps)
      s0k[r * VP + lane] = s0k_and_r<K>(Ks, S0, r, lane, Vs[r * VP + lane], cg, X);
    __syncthreads();
    // B3: Δ (the forward's).
    solve_lower(KKe, cg.beta, n, X);
    __syncthreads();

    // B4 (warp rows i, lane j): dΔ_i = scale Σ_{r≥i} QKe[r][i] dO_r + eC_i Gᵀk_i into dR;
    // dγ terms scale Γ_i dO_i·(S_0ᵀq_i) and ∓ eC_i k_iᵀGΔ_i.
    for (int i = warp; i < n; i += kWarps) {
      float kg = 0.0f, sq = 0.0f;
#pragma unroll 8
      for (int c = 0; c < K; ++c) {
        kg += Ks[i * KP + c] * G[c * VP + lane];
        sq += Qs[i * KP + c] * S0[c * VP + lane];
      }
      float d = 0.0f;
      for (int r = i; r < n; ++r) d += QKe[r * CP + i] * dOs[r * VP + lane];
      dR[i * VP + lane] = scale * d + cg.eC[i] * kg;
      const float y = warp_sum(kg * X[i * VP + lane]), w = warp_sum(dOs[i * VP + lane] * sq);
      if (lane == 0) {
        yC[i] = cg.eC[i] * y;
        dgA[i] = scale * cg.Gam[i] * w - cg.eC[i] * y;
      }
    }
    __syncthreads();
    // B5: dR = (I + A)^{-T} dΔ.
    solve_upper(KKe, cg.beta, n, dR);
    __syncthreads();

    // B6 (warp rows r, lanes i and i + 32): P into QKe, X_ri (the dγ pair terms) into KKe, Z;
    // row sums of X (dγ_r) and of −dR_r·Δ_i e k_r·k_i (dβ_r); and ⟨G, S_0⟩ per warp.
    for (int r = warp; r < n; r += kWarps) {
      float rowX = 0.0f, rowW = 0.0f;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int i = lane + 32 * half;
        if (i >= n) continue;
        float P = 0.0f, Xv = 0.0f, Zv = 0.0f;
        if (i <= r) {
          float dod = 0.0f, drd = 0.0f;
#pragma unroll 8
          for (int j = 0; j < VB; ++j) {
            dod += dOs[r * VP + j] * X[i * VP + j];
            drd += dR[r * VP + j] * X[i * VP + j];
          }
          const float e = expf(cg.gam[r] - cg.gam[i]);
          P = scale * e * dod;
          Xv = scale * dod * QKe[r * CP + i];
          if (i < r) {
            const float kke = KKe[r * CP + i];
            Zv = -cg.beta[r] * e * drd;
            Xv -= cg.beta[r] * drd * kke;
            rowW -= drd * kke;
          }
        }
        QKe[r * CP + i] = P;
        KKe[r * CP + i] = Xv;
        Z[r * CP + i] = Zv;
        rowX += Xv;
      }
      rowX = warp_sum(rowX);
      rowW = warp_sum(rowW);
      if (lane == 0) dgB[r] = rowX, dbA[r] = rowW;
    }
    {
      float gs = 0.0f;
      for (int c = warp; c < K; c += kWarps) gs += G[c * VP + lane] * S0[c * VP + lane];
      gs = warp_sum(gs);
      if (lane == 0) wpart[warp] = gs;
    }
    __syncthreads();

    // B7 (warp rows r): dv; the R terms of dβ_r, dγ_r; then dq_r, dk_r with lanes over d_k.
    for (int r = warp; r < n; r += kWarps) {
      const float br = cg.beta[r], Gr = cg.Gam[r];
      const float drj = dR[r * VP + lane], s0kj = s0k[r * VP + lane];
      store(p.dv, (row0 + r) * Dv + j0 + lane, br * drj);
      const float drv = warp_sum(drj * (Vs[r * VP + lane] - Gr * s0kj)), drs = warp_sum(drj * s0kj);
      if (lane == 0) dbB[r] = drv, dgC[r] = -br * Gr * drs;
      float a[KL], bb[KL], g[KL], dq[KL], dk[KL];
#pragma unroll
      for (int m = 0; m < KL; ++m) a[m] = bb[m] = g[m] = dq[m] = dk[m] = 0.0f;
      for (int j = 0; j < VB; ++j) {
        const float doj = dOs[r * VP + j], dr = dR[r * VP + j], xj = X[r * VP + j];
#pragma unroll
        for (int m = 0; m < KL; ++m) {
          const int c = lane + 32 * m;
          const float s = S0[c * VP + j];
          a[m] += s * doj;
          bb[m] += s * dr;
          g[m] += G[c * VP + j] * xj;
        }
      }
      for (int i = 0; i < n; ++i) {
        const float pri = QKe[r * CP + i], pir = QKe[i * CP + r], z = Z[r * CP + i] + Z[i * CP + r];
#pragma unroll
        for (int m = 0; m < KL; ++m) {
          const int c = lane + 32 * m;
          const float kc = Ks[i * KP + c];
          dq[m] += pri * kc;
          dk[m] += pir * Qs[i * KP + c] + z * kc;
        }
      }
      const int64_t out = (int64_t(vb) * p.batch * p.heads * T + row0 + r) * K;
#pragma unroll
      for (int m = 0; m < KL; ++m) {
        const int c = lane + 32 * m;
        p.dq_part[out + c] = dq[m] + scale * Gr * a[m];
        p.dk_part[out + c] = dk[m] - br * Gr * bb[m] + cg.eC[r] * g[m];
      }
    }
    if (tid < n) {  // column sums of X: dγ_i −= Σ_r X_ri
      float s = 0.0f;
      for (int r = 0; r < n; ++r) s += KKe[r * CP + tid];
      colX[tid] = s;
    }
    __syncthreads();

    // B8: G ← dS_0 = Γ_C G + scale·Σ_r Γ_r q_r dO_rᵀ − Σ_r β_r Γ_r k_r dR_rᵀ.
    const float GC = cg.Gam[n - 1];
    for (int c = warp; c < K; c += kWarps) {
      float s = GC * G[c * VP + lane];
      for (int r = 0; r < n; ++r)
        s += cg.Gam[r] *
             (scale * Qs[r * KP + c] * dOs[r * VP + lane] - cg.beta[r] * Ks[r * KP + c] * dR[r * VP + lane]);
      G[c * VP + lane] = s;
    }
    // B9: dγ_r, then dg = suffix sums of dγ within the chunk; dβ.
    if (tid < n) {
      float d = dgA[tid] + dgB[tid] + dgC[tid] - colX[tid];
      if (tid == n - 1) {
        float gs = 0.0f, ys = 0.0f;
        for (int w = 0; w < kWarps; ++w) gs += wpart[w];
        for (int i = 0; i < n; ++i) ys += yC[i];
        d += GC * gs + ys;
      }
      dgam[tid] = d;
      p.db_part[vb * p.batch * p.heads * T + row0 + tid] = dbA[tid] + dbB[tid];
    }
    __syncthreads();
    if (tid < 32) {
      warp_scan64(dgam, n, true, tid);
      __syncwarp();
      for (int r = tid; r < n; r += 32) p.dg_part[vb * p.batch * p.heads * T + row0 + r] = dgam[r];
    }
  }
}

// dq, dk = Σ over column blocks of the partials (in block order); dgates from dg, dβ and the gates'
// derivatives (gated_delta_gates), rounded once to the output dtypes. One thread per (row, c).
__global__ void finish_kernel(GdnParams p) {
  const int64_t K = p.kdim, rows = p.batch * p.heads * p.seq, nvb = p.col_blocks();
  const int64_t x = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (x >= rows * K) return;
  const int64_t row = x / K, c = x - row * K;
  float dq = 0.0f, dk = 0.0f;
  for (int64_t v = 0; v < nvb; ++v) {
    dq += p.dq_part[v * rows * K + x];
    dk += p.dk_part[v * rows * K + x];
  }
  store(p.dq, x, dq);
  store(p.dk, x, dk);
  if (c == 0) {
    const int64_t bh = row / p.seq, t = row - bh * p.seq, b = bh / p.heads, h = bh % p.heads;
    float dg = 0.0f, db = 0.0f;
    for (int64_t v = 0; v < nvb; ++v) {
      dg += p.dg_part[v * rows + row];
      db += p.db_part[v * rows + row];
    }
    const int64_t tok = (b * p.seq + t) * 2 * p.heads;
    const GateValues gv =
        gated_delta_gates(double(load(p.gates, tok + h)), double(load(p.gates, tok + p.heads + h)));
    store(p.dgates, tok + h, dg * float(gv.dg_da));
    store(p.dgates, tok + p.heads + h, db * float(gv.dbeta_db));
  }
}

template <int K>
void launch_k(const GdnParams& p, cudaStream_t s) {
  const dim3 grid(unsigned(p.col_blocks()), unsigned(p.batch * p.heads));
  const size_t bytes = BwdSmem<K>::bytes;
  allow_smem(backward_kernel<K>, bytes);
  backward_kernel<K><<<grid, kThreads, bytes, s>>>(p);
  OCTET_CUDA_LAUNCH_CHECK();
}

}  // namespace
}  // namespace gdn

void gated_delta_backward_launch(const GdnParams& p, cudaStream_t s) {
  switch (p.kdim) {
    case 32:
      gdn::launch_k<32>(p, s);
      break;
    case 64:
      gdn::launch_k<64>(p, s);
      break;
    case 128:
      gdn::launch_k<128>(p, s);
      break;
    default:
      OCTET_FAIL("gated_delta_backward: d_k must be 32, 64 or 128 on cuda");
  }
  const int64_t n = p.batch * p.heads * p.seq * p.kdim;
  gdn::finish_kernel<<<unsigned((n + 255) / 256), 256, 0, s>>>(p);
  OCTET_CUDA_LAUNCH_CHECK();
}

}  // namespace octet::cuda
