// src/cuda/gated_delta/gated_delta_forward.cu — the Gated DeltaNet forward on the GPU in the chunked WY/UT
// form (arXiv 2412.06464 §3.3; include/octet/recurrent.h): per chunk of C positions, entering with the state
// slice S_0 [d_k, 32] of this CTA's value columns,
//   R = diag(β)(V − diag(Γ) K S_0),  Δ = (I + A)^{-1} R,
//   O = scale·(diag(Γ) Q S_0 + (QKᵀ ⊙ M) Δ),  S ← Γ_C S_0 + Kᵀ diag(e^{γ_C − γ}) Δ.
// The same kernel, without Q and O, writes the chunk-entering states for the backward
// (gated_delta_backward.cu). CPU twin: gated_delta_chunked_forward (src/cpu/gated_delta_chunked.cpp).
#include "cuda/runtime/check.h"
#include "cuda/gated_delta/gated_delta_chunk.cuh"

namespace octet::cuda {
namespace gdn {
namespace {

// Shared-memory layout of the forward, in floats.
template <int K>
struct FwdSmem {
  static constexpr int KP = K + 1;
  static constexpr size_t S = 0, Q = S + K * VP, Kt = Q + C * KP, X = Kt + C * KP, KKe = X + C * VP,
                          QKe = KKe + C * CP, gam = QKe + C * CP, Gam = gam + C, beta = Gam + C,
                          eC = beta + C, end = eC + C;
  static constexpr size_t bytes = end * sizeof(float);
};

// One CTA per (value-column block, batch·head). WithO: also Q, the C × C q·k products and o.
template <int K, bool WithO>
__global__ void __launch_bounds__(kThreads) forward_kernel(GdnParams p) {
  using L = FwdSmem<K>;
  constexpr int KP = K + 1;
  extern __shared__ float sm[];
  float *S = sm + L::S, *Qs = WithO ? sm + L::Q : nullptr, *Ks = sm + L::Kt, *X = sm + L::X,
        *KKe = sm + L::KKe, *QKe = sm + L::QKe;
  const ChunkGates cg{sm + L::gam, sm + L::Gam, sm + L::beta, sm + L::eC};
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int vb = blockIdx.x;
  const int64_t bh = blockIdx.y, b = bh / p.heads, h = bh % p.heads, T = p.seq;
  const int64_t j0 = int64_t(vb) * VB, nch = p.n_chunks();
  for (int x = tid; x < K * VP; x += kThreads) S[x] = 0.0f;

  for (int64_t ch = 0; ch < nch; ++ch) {
    const int64_t t0 = ch * p.chunk;
    const int n = int(T - t0 < p.chunk ? T - t0 : p.chunk);
    __syncthreads();  // the previous chunk's readers of Ks, X, ... are done
    if (p.states) {   // S_0 of this chunk, [B·H, nvb, n_chunks, K, VB]
      float* dst = p.states + ((bh * p.col_blocks() + vb) * nch + ch) * K * VB;
      for (int x = tid; x < K * VB; x += kThreads) dst[x] = S[(x / VB) * VP + x % VB];
    }
    load_rows(Ks, KP, p.k, bh * T + t0, K, 0, n, K);
    if (WithO) load_rows(Qs, KP, p.q, bh * T + t0, K, 0, n, K);
    load_gates(p, b, h, t0, n, cg);  // ends with a barrier

    chunk_products<K>(Qs, Ks, cg.gam, n, KKe, QKe);
    float sq[C / kWarps];  // Σ_c q_r[c] S_0[c][j] of this thread's rows
#pragma unroll
    for (int m = 0; m < C / kWarps; ++m) {
      const int r = warp + m * kWarps;
      sq[m] = 0.0f;
      if (r < n) {
        const float v = load(p.v, (bh * T + t0 + r) * p.vdim + j0 + lane);
        s0k_and_r<K>(Ks, S, r, lane, v, cg, X);
        if (WithO) {
          float s = 0.0f;
#pragma unroll 8
          for (int c = 0; c < K; ++c) s += Qs[r * KP + c] * S[c * VP + lane];
          sq[m] = s;
        }
      }
    }
    __syncthreads();
    solve_lower(KKe, cg.beta, n, X);  // X = Δ
    __syncthreads();

    if (WithO) {  // O_r = scale·(Γ_r S_0ᵀ q_r + Σ_{i≤r} QKe[r][i] Δ_i)
#pragma unroll
      for (int m = 0; m < C / kWarps; ++m) {
        const int r = warp + m * kWarps;
        if (r < n) {
          float s = cg.Gam[r] * sq[m];
          for (int i = 0; i <= r; ++i) s += QKe[r * CP + i] * X[i * VP + lane];
          store(p.o, (bh * T + t0 + r) * p.vdim + j0 + lane, p.scale * s);
        }
      }
    }
    // S ← Γ_C S_0 + Σ_i eC_i k_i Δ_iᵀ (rows c of the state, lane = column)
    const float GC = cg.Gam[n - 1];
    for (int c = warp; c < K; c += kWarps) {
      float s = GC * S[c * VP + lane];
      for (int i = 0; i < n; ++i) s += cg.eC[i] * Ks[i * KP + c] * X[i * VP + lane];
      S[c * VP + lane] = s;
    }
  }
}

template <int K>
void launch_k(const GdnParams& p, cudaStream_t s) {
  const dim3 grid(unsigned(p.col_blocks()), unsigned(p.batch * p.heads));
  const size_t bytes = FwdSmem<K>::bytes;
  if (p.o.p) {
    allow_smem(forward_kernel<K, true>, bytes);
    forward_kernel<K, true><<<grid, kThreads, bytes, s>>>(p);
  } else {
    allow_smem(forward_kernel<K, false>, bytes);
    forward_kernel<K, false><<<grid, kThreads, bytes, s>>>(p);
  }
  OCTET_CUDA_LAUNCH_CHECK();
}

}  // namespace
}  // namespace gdn

void gated_delta_forward_launch(const GdnParams& p, cudaStream_t s) {
  switch (p.kdim) {
    case 32:
      return gdn::launch_k<32>(p, s);
    case 64:
      return gdn::launch_k<64>(p, s);
    case 128:
      return gdn::launch_k<128>(p, s);
    default:
      OCTET_FAIL("gated_delta_forward: d_k must be 32, 64 or 128 on cuda");
  }
}

}  // namespace octet::cuda
