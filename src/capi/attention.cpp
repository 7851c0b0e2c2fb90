// src/capi/attention.cpp — the C ABI's attention (include/octet/c_api.h): one forward or backward
// of octet's Attention (octet/backend.h) on caller memory, or of the FP64 oracle
// (octet/attention.h attention_forward_fp64 / attention_backward_fp64) for FP64 tensors.
//
// The config is the precision arms' (model.h attention_config, default_attn_form): FP8 attention
// here is exactly what the fp8-stale / fp8-matched arms run on the same backend. An op boundary
// (PyTorch's custom ops) carries tensors only: the caller passes a block of its memory (`saved`,
// octet_attention_saved_bytes() bytes) where the forward places the backend's saved state
// (Attention::forward_to) and from which the backward reads it (saved_from). Without it the
// backward re-runs the forward into scratch first; the forward is deterministic (same codes, O, row
// max and row sum), so that backward sees the forward's saved state too (docs/pytorch.md). The
// layers are built once per (shape, config) and kept in the backend handle. Packed sequences
// (attention_varlen.cpp) are split into these dense calls.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
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
  OCTET_CHECK(p.layout == OCTET_C_HEADS_MAJOR || p.layout == OCTET_C_TOKENS_MAJOR,
              "attention params: layout must be OCTET_C_HEADS_MAJOR (0) or OCTET_C_TOKENS_MAJOR (1), got " +
                  std::to_string(p.layout));
  s.layout = p.layout == OCTET_C_TOKENS_MAJOR ? AttnLayout::TokensMajor : AttnLayout::HeadsMajor;
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
  Tensor q, k, v, o, lse, d_o, dq, dk, dv, residual, saved;
};

// The caller's `saved` block as one-byte elements (E4M3 here only names the width), or empty.
Tensor saved_of(const octet_attention_params& p) {
  if (!p.saved) return Tensor();
  OCTET_CHECK(p.saved_size > 0, "attention params: saved_size must be > 0 when saved is given, got " +
                                    std::to_string(p.saved_size));
  return Tensor(p.saved, DType::E4M3, {p.saved_size});
}

// Forward: q, k, v, o, lse. Backward: d_o, dq, dk, dv, and either saved with the forward's o and
// lse, or q, k, v (re-run).
Views views_of(const octet_attention_params& p, const AttentionShape& s, DType t, bool backward) {
  const Shape sq = s.q_shape(), sk = s.kv_shape();
  const DType lse_t = t == DType::F64 ? DType::F64 : DType::F32;
  Views w;
  w.saved = saved_of(p);
  if (!backward || w.saved.empty()) {
    require(p.q, "attention params: q");
    require(p.k, "attention params: k");
    require(p.v, "attention params: v");
    w.q = view(p.q, t, sq), w.k = view(p.k, t, sk), w.v = view(p.v, t, sk);
  }
  if (!backward || !w.saved.empty()) {
    require(p.o, "attention params: o");
    require(p.lse, "attention params: lse");
    w.o = view(p.o, t, sq), w.lse = view(p.lse, lse_t, {s.batch, s.n_heads, s.seq_q});
  }
  if (!backward) return w;
  require(p.d_o, "attention params: d_o");
  require(p.dq, "attention params: dq");
  require(p.dk, "attention params: dk");
  require(p.dv, "attention params: dv");
  w.d_o = view(p.d_o, t, sq), w.dq = view(p.dq, t, sq);
  w.dk = view(p.dk, t, sk), w.dv = view(p.dv, t, sk);
  if (p.residual) w.residual = view(p.residual, DType::F64, {2});
  return w;
}

// The FP64 oracle's saved state: Q, K, V themselves (FP64, one after another, no padding).
std::vector<AttnSizeTerm> fp64_saved_terms() {
  constexpr int64_t q = kAttnBatch | kAttnHeads | kAttnSeqQ | kAttnHeadDim;
  constexpr int64_t k = kAttnBatch | kAttnKvHeads | kAttnSeqK | kAttnHeadDim;
  constexpr int64_t e = sizeof(double);
  return {{e, q, 1, 1}, {e, k, 1, 1}, {e, k, 1, 1}};
}
int64_t fp64_saved_bytes(const AttentionShape& s) { return attention_saved_bytes(fp64_saved_terms(), s); }

void run_fp64(const octet_c_backend& be, const Views& w, const AttentionShape& s, bool backward);

// A tokens-major call of the oracle (which reads heads-major arrays): its tensors moved into
// heads-major copies, the heads-major run, its outputs moved back. The saved image holds the
// heads-major copies, the same in the forward and the backward.
void run_fp64_tokens_major(const octet_c_backend& be, const Views& w, AttentionShape s, bool backward) {
  s.layout = AttnLayout::HeadsMajor;
  const int64_t B = s.batch, H = s.n_heads, G = s.n_kv_heads, Tq = s.seq_q, Tk = s.seq_k, D = s.head_dim;
  std::vector<std::vector<double>> copies;
  Views h = w;
  auto heads_major = [&](Tensor& t, int64_t heads, int64_t T, bool read) {
    if (t.empty()) return;
    auto& c = copies.emplace_back(size_t(t.numel()));
    if (read) transpose_heads_tokens(t.f64(), c.data(), B, heads, T, D, /*to_tokens_major=*/false);
    t = Tensor(c.data(), DType::F64, {B, heads, T, D});
  };
  heads_major(h.q, H, Tq, true), heads_major(h.k, G, Tk, true), heads_major(h.v, G, Tk, true);
  heads_major(h.o, H, Tq, backward), heads_major(h.d_o, H, Tq, true);
  heads_major(h.dq, H, Tq, false), heads_major(h.dk, G, Tk, false), heads_major(h.dv, G, Tk, false);
  run_fp64(be, h, s, backward);
  auto back = [&](const Tensor& from, const Tensor& to, int64_t heads, int64_t T) {
    transpose_heads_tokens(from.f64(), to.f64(), B, heads, T, D, /*to_tokens_major=*/true);
  };
  if (!backward) {
    back(h.o, w.o, H, Tq);
    return;
  }
  back(h.dq, w.dq, H, Tq), back(h.dk, w.dk, G, Tk), back(h.dv, w.dv, G, Tk);
}

// The FP64 oracle on FP64 caller memory (CPU only): the gradient-check path. With `saved`, the
// forward copies Q, K, V there and the backward reads them back; without, the backward re-runs the
// forward for O and the LSE.
void run_fp64(const octet_c_backend& be, const Views& w, const AttentionShape& s, bool backward) {
  OCTET_CHECK(be.backend->name() == "cpu",
              "attention: f64 tensors run the FP64 oracle, on the cpu backend only");
  if (s.layout == AttnLayout::TokensMajor) {
    run_fp64_tokens_major(be, w, s, backward);
    return;
  }
  const size_t nq = size_t(s.batch * s.n_heads * s.seq_q * s.head_dim);
  const size_t nk = size_t(s.batch * s.n_kv_heads * s.seq_k * s.head_dim);
  OCTET_CHECK(w.saved.empty() || int64_t(w.saved.bytes()) >= fp64_saved_bytes(s),
              "attention params: saved_size " + std::to_string(w.saved.bytes()) + " is below the " +
                  std::to_string(fp64_saved_bytes(s)) + " bytes the FP64 oracle saves");
  auto* image = static_cast<double*>(w.saved.data);
  if (!backward) {
    attention_forward_fp64(s, w.q.f64(), w.k.f64(), w.v.f64(), w.o.f64(), w.lse.f64());
    if (image) {
      std::copy_n(w.q.f64(), nq, image);
      std::copy_n(w.k.f64(), nk, image + nq);
      std::copy_n(w.v.f64(), nk, image + nq + nk);
    }
    return;
  }
  if (image) {
    attention_backward_fp64(s, image, image + nq, image + nq + nk, w.o.f64(), w.lse.f64(), w.d_o.f64(),
                            w.dq.f64(), w.dk.f64(), w.dv.f64());
    return;
  }
  const size_t rows = size_t(s.batch * s.n_heads * s.seq_q);
  std::vector<double> o(nq), lse(rows);
  attention_forward_fp64(s, w.q.f64(), w.k.f64(), w.v.f64(), o.data(), lse.data());
  attention_backward_fp64(s, w.q.f64(), w.k.f64(), w.v.f64(), o.data(), lse.data(), w.d_o.f64(), w.dq.f64(),
                          w.dk.f64(), w.dv.f64());
}

// The dtype of the call; f64 only with precision fp64 (the oracle).
DType call_dtype(const octet_attention_params& p, const AttentionConfig& cfg) {
  const DType t = dtype_of(p.dtype, "attention params");
  if (t == DType::F64)
    OCTET_CHECK(cfg.precision == AttnPrecision::FP64,
                "attention: f64 tensors need precision fp64 (got " + to_string(cfg.precision) + ")");
  return t;
}

// The backend's attention layer for these params (octet_c_backend::attentions), built on first use.
Attention& attention_for(octet_c_backend& be, const octet_attention_params& p, const AttentionShape& s,
                         const AttentionConfig& cfg) {
  const std::string key =
      std::to_string(p.batch) + "," + std::to_string(p.n_heads) + "," + std::to_string(p.n_kv_heads) + "," +
      std::to_string(p.seq_q) + "," + std::to_string(p.seq_k) + "," + std::to_string(p.head_dim) + "," +
      std::to_string(p.causal) + "," + std::to_string(std::bit_cast<uint32_t>(p.softmax_scale)) + "," +
      p.precision + "," + p.delta + "," + p.formats + "," + std::to_string(p.layout);
  for (auto it = be.attentions.begin(); it != be.attentions.end(); ++it)
    if (it->first == key) {  // the most recently used goes last: the least recently used goes first
      auto entry = std::move(*it);
      be.attentions.erase(it);
      be.attentions.push_back(std::move(entry));
      return *be.attentions.back().second;
    }
  if (be.attentions.size() >= octet_c_backend::kMaxAttentions) be.attentions.pop_front();
  be.attentions.emplace_back(key, be.backend->make_attention(s, cfg));
  return *be.attentions.back().second;
}

}  // namespace

void validate_attention_params(const octet_c_backend& be, const octet_attention_params& p) {
  (void)shape_of(p);
  (void)call_dtype(p, config_of(p, *be.backend));
}

std::vector<AttnSizeTerm> dense_attention_saved_size_terms(octet_c_backend* be,
                                                           const octet_attention_params* p) {
  require(be, "attention: backend");
  require(p, "attention: params");
  const AttentionShape s = shape_of(*p);
  const AttentionConfig cfg = config_of(*p, *be->backend);
  if (call_dtype(*p, cfg) == DType::F64) return fp64_saved_terms();
  const std::lock_guard<std::mutex> lock(be->mutex);
  return attention_for(*be, *p, s, cfg).saved_size_terms();
}

int64_t dense_attention_saved_bytes(octet_c_backend* be, const octet_attention_params* p) {
  return attention_saved_bytes(dense_attention_saved_size_terms(be, p), shape_of(*p));
}

void dense_attention_run(octet_c_backend* be, const octet_attention_params* p, bool backward) {
  require(be, "attention: backend");
  require(p, "attention: params");
  const AttentionShape s = shape_of(*p);
  const AttentionConfig cfg = config_of(*p, *be->backend);
  const DType t = call_dtype(*p, cfg);
  const Views w = views_of(*p, s, t, backward);
  if (t == DType::F64) {
    run_fp64(*be, w, s, backward);
    return;
  }
  Backend& b = *be->backend;
  const std::lock_guard<std::mutex> lock(be->mutex);
  Attention& attn = attention_for(*be, *p, s, cfg);
  if (!backward) {
    if (w.saved.empty())
      (void)attn.forward(w.q, w.k, w.v, w.o, w.lse);
    else
      (void)attn.forward_to(w.q, w.k, w.v, w.o, w.lse, w.saved);
    return;
  }
  if (!w.saved.empty()) {
    attn.backward(attn.saved_from(w.o, w.lse, w.saved), w.d_o, w.dq, w.dk, w.dv, w.residual);
    return;
  }
  // Re-run the forward into scratch of the forward's dtypes: the same saved state (see the header).
  Buffer o = b.alloc(w.q.dtype, w.q.shape);
  Buffer lse = b.alloc(DType::F32, {s.batch, s.n_heads, s.seq_q});
  const SavedAttention saved = attn.forward(w.q, w.k, w.v, o, lse);
  attn.backward(saved, w.d_o, w.dq, w.dk, w.dv, w.residual);
}

namespace {

// A call with packed sequences (attention_varlen.cpp) or one dense call.
bool packed(const octet_attention_params* p) {
  return p && (p->n_seqs != 0 || p->cu_seqlens_q || p->cu_seqlens_k);
}

}  // namespace
}  // namespace octet::capi

extern "C" {

int64_t octet_attention_saved_bytes(octet_c_backend* backend, const octet_attention_params* params) {
  int64_t bytes = -1;
  using namespace octet::capi;
  const auto answer = [&] {
    bytes = packed(params) ? varlen_attention_saved_bytes(backend, params)
                           : dense_attention_saved_bytes(backend, params);
  };
  if (guarded(answer) != 0) return -1;
  return bytes;
}

int64_t octet_attention_saved_size_terms(octet_c_backend* backend, const octet_attention_params* params,
                                         int64_t* terms, int64_t capacity) {
  int64_t n = -1;
  using namespace octet::capi;
  guarded([&] {
    check_terms_room("octet_attention_saved_size_terms", terms, capacity);
    OCTET_CHECK(!packed(params),
                "octet_attention_saved_size_terms: packed sequences (n_seqs, cu_seqlens_q, cu_seqlens_k) "
                "save a size that depends on their offsets: ask octet_attention_saved_bytes");
    n = write_terms(dense_attention_saved_size_terms(backend, params), terms, capacity,
                    [](const octet::AttnSizeTerm& t) {
                      return std::array<int64_t, 4>{t.unit_bytes, t.dims, t.seq_step, t.align};
                    });
  });
  return n;
}

int octet_attention_forward(octet_c_backend* backend, const octet_attention_params* params) {
  using namespace octet::capi;
  return guarded([&] {
    packed(params) ? varlen_attention_run(backend, params, false)
                   : dense_attention_run(backend, params, false);
  });
}

int octet_attention_backward(octet_c_backend* backend, const octet_attention_params* params) {
  using namespace octet::capi;
  return guarded([&] {
    packed(params) ? varlen_attention_run(backend, params, true) : dense_attention_run(backend, params, true);
  });
}

}  // extern "C"
