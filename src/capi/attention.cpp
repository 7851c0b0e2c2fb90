// src/capi/attention.cpp — the C ABI's attention (include/octet/c_api.h): one forward or backward
// of octet's Attention (octet/backend.h) on caller memory, or of the FP64 oracle
// (octet/attention.h attention_forward_fp64 / attention_backward_fp64) for FP64 tensors.
//
// The config is the precision arms' (model.h attention_config, default_attn_form): FP8 attention
// here is exactly what the fp8-stale / fp8-matched arms run on the same backend. An op boundary
// (PyTorch's custom ops) cannot carry the backend's SavedAttention, so the backward re-runs the
// forward into scratch first; the forward is deterministic (same codes, O, row max and row sum),
// so the backward sees exactly the forward's saved state (docs/pytorch.md, "The backward").
#include <string>
#include <vector>

#include "capi/capi_impl.h"
#include "octet/attention.h"
#include "octet/model.h"

namespace octet::capi {
namespace {

AttentionShape shape_of(const octet_attention_params& p) {
  AttentionShape s;
  s.batch = p.batch, s.n_heads = p.n_heads, s.n_kv_heads = p.n_kv_heads;
  s.seq_q = p.seq_q, s.seq_k = p.seq_k, s.head_dim = p.head_dim;
  s.causal = p.causal != 0;
  s.softmax_scale = p.softmax_scale;
  s.validate();
  return s;
}

std::string name_of(const char* s, const char* what) {
  require(s, what);
  return s;
}

// The arm whose attention config a (precision, delta) names; the delta is set afterwards, so that
// e.g. bf16 with the matched delta is expressible too.
AttentionConfig config_of(const octet_attention_params& p, const Backend& be) {
  const AttnPrecision precision = parse_attn_precision(name_of(p.precision, "attention params: precision"));
  const DeltaMode delta = parse_delta_mode(name_of(p.delta, "attention params: delta"));
  PrecisionConfig pc;
  pc.quant.formats = parse_format_policy(name_of(p.formats, "attention params: formats"));
  switch (precision) {
    case AttnPrecision::FP8:
      pc.arm = delta == DeltaMode::Matched ? Arm::FP8Matched : Arm::FP8Stale;
      break;
    case AttnPrecision::BF16:
      pc.arm = Arm::BF16;
      break;
    case AttnPrecision::FP64:
      pc.arm = Arm::FP32;
      break;
  }
  // default_attn_form reads the head_dim of a model: one head of width head_dim.
  ModelConfig m;
  m.d_model = p.head_dim;
  m.n_head = m.n_kv_head = 1;
  pc.attn_form = default_attn_form(m, pc, be.name());
  AttentionConfig cfg = attention_config(pc);
  cfg.precision = precision;
  cfg.delta = delta;
  cfg.validate();
  return cfg;
}

struct Views {
  Tensor q, k, v, o, lse, d_o, dq, dk, dv, residual;
};

Views views_of(const octet_attention_params& p, const AttentionShape& s, bool backward) {
  const DType t = dtype_of(p.dtype, "attention params");
  const Shape sq{s.batch, s.n_heads, s.seq_q, s.head_dim};
  const Shape sk{s.batch, s.n_kv_heads, s.seq_k, s.head_dim};
  require(p.q, "attention params: q");
  require(p.k, "attention params: k");
  require(p.v, "attention params: v");
  Views w;
  w.q = view(p.q, t, sq), w.k = view(p.k, t, sk), w.v = view(p.v, t, sk);
  if (!backward) {
    require(p.o, "attention params: o");
    require(p.lse, "attention params: lse");
    w.o = view(p.o, t, sq), w.lse = view(p.lse, DType::F32, {s.batch, s.n_heads, s.seq_q});
    return w;
  }
  require(p.d_o, "attention params: d_o");
  require(p.dq, "attention params: dq");
  require(p.dk, "attention params: dk");
  require(p.dv, "attention params: dv");
  w.d_o = view(p.d_o, t, sq), w.dq = view(p.dq, t, sq);
  w.dk = view(p.dk, t, sk), w.dv = view(p.dv, t, sk);
  if (p.residual) w.residual = view(p.residual, DType::F64, {2});
  return w;
}

// The FP64 oracle on FP64 caller memory (CPU only): the gradient-check path.
void run_fp64(const octet_c_backend& be, const octet_attention_params& p, const AttentionShape& s,
              bool backward) {
  OCTET_CHECK(be.backend->name() == "cpu",
              "attention: f64 tensors run the FP64 oracle, on the cpu backend only");
  require(p.q, "attention params: q");
  require(p.k, "attention params: k");
  require(p.v, "attention params: v");
  const auto* q = static_cast<const double*>(p.q);
  const auto* k = static_cast<const double*>(p.k);
  const auto* v = static_cast<const double*>(p.v);
  const size_t nq = size_t(s.batch * s.n_heads * s.seq_q * s.head_dim);
  const size_t rows = size_t(s.batch * s.n_heads * s.seq_q);
  if (!backward) {
    require(p.o, "attention params: o");
    require(p.lse, "attention params: lse");
    attention_forward_fp64(s, q, k, v, static_cast<double*>(p.o), static_cast<double*>(p.lse));
    return;
  }
  require(p.d_o, "attention params: d_o");
  require(p.dq, "attention params: dq");
  require(p.dk, "attention params: dk");
  require(p.dv, "attention params: dv");
  std::vector<double> o(nq), lse(rows);
  attention_forward_fp64(s, q, k, v, o.data(), lse.data());
  attention_backward_fp64(s, q, k, v, o.data(), lse.data(), static_cast<const double*>(p.d_o),
                          static_cast<double*>(p.dq), static_cast<double*>(p.dk), static_cast<double*>(p.dv));
}

void run(octet_c_backend* be, const octet_attention_params* p, bool backward) {
  require(be, "attention: backend");
  require(p, "attention: params");
  const AttentionShape s = shape_of(*p);
  const AttentionConfig cfg = config_of(*p, *be->backend);
  if (dtype_of(p->dtype, "attention params") == DType::F64) {
    OCTET_CHECK(cfg.precision == AttnPrecision::FP64,
                "attention: f64 tensors need precision fp64 (got " + to_string(cfg.precision) + ")");
    run_fp64(*be, *p, s, backward);
    return;
  }
  const Views w = views_of(*p, s, backward);
  Backend& b = *be->backend;
  auto attn = b.make_attention(s, cfg);
  if (!backward) {
    (void)attn->forward(w.q, w.k, w.v, w.o, w.lse);
    return;
  }
  // Re-run the forward into scratch of the forward's dtypes: the same saved state (see the header).
  Buffer o = b.alloc(w.q.dtype, w.q.shape);
  Buffer lse = b.alloc(DType::F32, {s.batch, s.n_heads, s.seq_q});
  const SavedAttention saved = attn->forward(w.q, w.k, w.v, o, lse);
  attn->backward(saved, w.d_o, w.dq, w.dk, w.dv, w.residual);
}

}  // namespace
}  // namespace octet::capi

extern "C" {

int octet_attention_forward(octet_c_backend* backend, const octet_attention_params* params) {
  return octet::capi::guarded([&] { octet::capi::run(backend, params, false); });
}

int octet_attention_backward(octet_c_backend* backend, const octet_attention_params* params) {
  return octet::capi::guarded([&] { octet::capi::run(backend, params, true); });
}

}  // extern "C"
