// src/model/gated_delta_layer.cpp — the token mixer of the hybrid model's recurrent layers, Gated
// DeltaNet (Yang, Kautz & Hatamizadeh, arXiv 2412.06464; octet/recurrent.h), on Backend calls:
//   qkv = Linear(u) → q, k, v [B, H, T, Dh];  q̂ = RMSNorm(q), k̂ = RMSNorm(k)/√Dh (unit rows: the
//   paper's L2-normalized keys, with the norm's ε);  gates = Linear(u) [N, 2H] → α = σ(a)^{1/16},
//   β = σ(b);  o = GatedDeltaNet(q̂, k̂, v, gates) with read-out scale 1/√Dh (so q̂/√Dh has unit
//   rows);  f = Linear(heads_to_tokens(o)).
// No short convolution, no SiLU on q/k/v and no output gate/norm (the paper's layer has them; this
// is the mixer alone). The three linears use recurrent_precision(arm): BF16 (FP32 in the fp32 arm).
#include "model/impl.h"

namespace octet {

void GdnLayer::forward(Backend& be, const Tensor& u, const Tensor& f) {
  qkv.forward(be, u, qkv_out);
  be.split_qkv(qkv_out, q_raw, k_raw, v, AttnLayout::HeadsMajor);
  q_norm.forward(be, q_raw, q, {}, q_rstd);
  k_norm.forward(be, k_raw, k, {}, k_rstd);
  be.scale(scale, k);
  gates.forward(be, u, gate_out);
  be.gated_delta_forward({q, k, v, gate_out, scale, chunk}, o);
  be.heads_to_tokens(o, ot);
  proj.forward(be, ot, f);
}

void GdnLayer::backward(Backend& be, const Tensor& df, const Tensor& du, const GdnScratch& s) {
  proj.backward(be, df, s.dot);
  be.tokens_to_heads(s.dot, s.dout);
  be.gated_delta_backward({q, k, v, gate_out, scale, chunk}, s.dout, s.dq, s.dk, s.dv, s.dgates);
  be.scale(scale, s.dk);  // k̂ = scale·RMSNorm(k)
  q_norm.backward(be, q_raw, s.dq, s.dq2, {}, q_rstd);
  k_norm.backward(be, k_raw, s.dk, s.dk2, {}, k_rstd);
  be.merge_qkv(s.dq2, s.dk2, s.dv, s.dqkv, AttnLayout::HeadsMajor);
  qkv.backward(be, s.dqkv, du);
  gates.backward(be, s.dgates, s.dx);
  be.axpy(1.0f, s.dx, du);
}

}  // namespace octet
