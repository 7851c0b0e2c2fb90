// src/model/generate.cpp — the KV-cache decoder and the sampler of generate.h.
//
// feed() runs the new tokens through the same residual units as the training forward
// (transformer.cpp: x ← R(x, g(f(u(x)))), norm pre / output / post) on Backend calls, with the
// attention's keys and values coming from the cache. The cache holds each layer's keys after the
// QK-norm and before RoPE, [G, seq_len, Dh] per layer; at each feed the first L positions are
// copied into contiguous [1, G, L, Dh] views and rotated (RoPE by position index t, backend.h), and
// the new queries are rotated inside a zero-filled [1, H, L, Dh] scratch at their positions.
// A Gated DeltaNet layer of the hybrid mixer (gated_delta_layer.cpp) caches its normalized q̂, k̂,
// v [H, seq_len, Dh] and gate projections [seq_len, 2H] instead, and reruns the recurrence over the
// first L positions at each feed (the backend op keeps no state between calls): O(L) per new token,
// as the attention's read of the cache.
#include "octet/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>

#include "model/ops.h"
#include "octet/error.h"

namespace octet {

using model_detail::LinearOp;
using model_detail::NormOp;

DecodePrecision parse_decode_precision(const std::string& s) {
  if (s == "fp32") return DecodePrecision::FP32;
  if (s == "bf16") return DecodePrecision::BF16;
  OCTET_FAIL("unknown sampling precision '" + s + "' (known: fp32, bf16)");
}
std::string to_string(DecodePrecision p) { return p == DecodePrecision::FP32 ? "fp32" : "bf16"; }

void SampleOptions::validate() const {
  OCTET_CHECK(max_new_tokens >= 0,
              "max_new_tokens must be >= 0 (got " + std::to_string(max_new_tokens) + ")");
  OCTET_CHECK(std::isfinite(temperature) && temperature >= 0.0f,
              "temperature must be finite and >= 0 (got " + std::to_string(temperature) + ")");
  OCTET_CHECK(top_k >= 0, "top_k must be >= 0 (got " + std::to_string(top_k) + ")");
  OCTET_CHECK(top_p > 0.0f && top_p <= 1.0f, "top_p must be in (0, 1] (got " + std::to_string(top_p) + ")");
}

namespace {
// A scratch buffer viewed with any shape of at most its capacity.
struct Scratch {
  Buffer buf;
  int64_t cap = 0;
  Tensor as(Shape s) const {
    OCTET_CHECK(s.numel() <= cap,
                "generate: scratch of " + std::to_string(cap) + " too small for " + s.str());
    return Tensor(buf.tensor().data, buf.tensor().dtype, s);
  }
};
// Elements [offset, offset + numel(s)) of an F32 buffer as a tensor of shape s.
Tensor at(const Tensor& base, int64_t offset, Shape s) { return Tensor(base.f32() + offset, DType::F32, s); }
}  // namespace

struct Generator::Impl {
  Model& model;
  Backend& be;
  ModelConfig c;
  DecodePrecision precision;
  AttentionConfig acfg;
  int64_t T, d, H, G, Dh, F, V, fc1_w;
  int64_t KVH;             // heads of the k/v scratch: G, or H when some layer is Gated DeltaNet
  float gdn_scale = 1.0f;  // Gated DeltaNet: 1/√Dh (gated_delta_layer.cpp)
  float res_a = 1.0f, res_b = 1.0f;
  int64_t length = 0;
  struct Layer {
    bool gdn =
        false;  // a Gated DeltaNet layer (hybrid mixer): qkv, gates, proj and the caches qc, kc, vc, gc
    LinearOp qkv, proj, fc1, fc2, gates;
    NormOp norm1, norm2, q_norm, k_norm;
    Buffer kc, vc;  // F32 [G, T, Dh]: keys after the QK-norm, before RoPE; values (gdn: [H, T, Dh] k̂, v)
    Buffer qc, gc;  // gdn: F32 [H, T, Dh] q̂; [T, 2H] gate projections
  };
  std::vector<Layer> layers;
  NormOp norm_f;
  LinearOp head;
  Tensor wte, wpe;
  Buffer ids;  // I32 [T]
  Scratch x0, x1, u, f, g, s, mean, rstd, qkv, q, qr, k, kr, v, qs, kw, vw, o, lse, ot, h, a, logits;

  Impl(Model& m, DecodePrecision p) : model(m), be(m.backend()), c(m.config()), precision(p) {
    OCTET_CHECK(p == DecodePrecision::BF16 || be.name() == "cpu",
                "sampling precision fp32 needs FP64 attention, which only the cpu backend has; use bf16");
    T = c.seq_len, d = c.d_model, H = c.n_head, G = c.n_kv_head, Dh = c.head_dim(), F = c.d_ff;
    V = c.vocab_size;
    fc1_w = c.mlp == MlpKind::SwiGLU ? 2 * F : F;
    KVH = c.mixer == MixerKind::Hybrid ? H : G;
    gdn_scale = float(1.0 / std::sqrt(double(Dh)));
    if (c.unit_scaling) res_a = std::sqrt(1.0f - c.residual_tau), res_b = std::sqrt(c.residual_tau);
    acfg.precision = p == DecodePrecision::FP32 ? AttnPrecision::FP64 : AttnPrecision::BF16;
    const LinearPrecision lp = p == DecodePrecision::FP32 ? LinearPrecision::FP32 : LinearPrecision::BF16;
    const Tensor params = model.param_data();
    auto view = [&](const std::string& name) {
      const ParamInfo& pi = model.param(name);
      Shape s;
      for (int64_t e : pi.shape) s.dims[size_t(s.rank++)] = e;
      return at(params, int64_t(pi.offset), s);
    };
    auto norm = [&](const std::string& prefix) {
      NormOp n;
      n.kind = c.norm, n.eps = c.norm_eps;
      n.w = view(prefix + ".weight");
      if (c.norm == NormKind::LayerNorm) n.b = view(prefix + ".bias");
      return n;
    };
    auto linear = [&](const std::string& pname, int64_t in, int64_t out) {
      LinearOp op;
      op.name = pname;
      op.w = view(pname);
      op.mult = c.unit_scaling ? float(1.0 / std::sqrt(double(in))) : 1.0f;
      LinearSpec spec;
      spec.in_features = in, spec.out_features = out, spec.precision = lp;
      op.lin = be.make_linear(spec);
      return op;
    };
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const std::string hn = "h." + std::to_string(l);
      Layer L;
      L.norm1 = norm(hn + ".norm1");
      L.norm2 = norm(hn + ".norm2");
      L.gdn = !c.attention_layer(l);
      if (L.gdn) {
        L.qkv = linear(hn + ".gdn.qkv.weight", d, 3 * H * Dh);
        L.gates = linear(hn + ".gdn.gates.weight", d, 2 * H);
        L.proj = linear(hn + ".gdn.proj.weight", H * Dh, d);
      } else {
        L.qkv = linear(hn + ".attn.qkv.weight", d, (H + 2 * G) * Dh);
        L.proj = linear(hn + ".attn.proj.weight", H * Dh, d);
      }
      L.fc1 = linear(hn + ".mlp.fc1.weight", d, fc1_w);
      L.fc2 = linear(hn + ".mlp.fc2.weight", F, d);
      for (NormOp* qn : {&L.q_norm, &L.k_norm}) qn->kind = NormKind::RMSNorm, qn->eps = c.norm_eps;
      if (!L.gdn && c.qk_norm && c.qk_norm_trainable) {
        L.q_norm.w = view(hn + ".attn.q_norm.weight");
        L.k_norm.w = view(hn + ".attn.k_norm.weight");
      }
      const int64_t cache_heads = L.gdn ? H : G;
      L.kc = be.alloc(DType::F32, {cache_heads, T, Dh});
      L.vc = be.alloc(DType::F32, {cache_heads, T, Dh});
      if (L.gdn) {
        L.qc = be.alloc(DType::F32, {H, T, Dh});
        L.gc = be.alloc(DType::F32, {T, 2 * H});
      }
      layers.push_back(std::move(L));
    }
    norm_f = norm("norm_f");
    head = linear(c.tied_embeddings ? "wte" : "lm_head.weight", d, V);
    wte = view("wte");
    if (c.positions == PositionKind::Learned) wpe = view("wpe");
    ids = be.alloc(DType::I32, {T});
    auto make = [&](Scratch& sc, int64_t cap) {
      sc.cap = cap;
      sc.buf = be.alloc(DType::F32, {cap});
    };
    for (Scratch* sc : {&x0, &x1, &u, &f, &g, &s}) make(*sc, T * d);
    for (Scratch* sc : {&mean, &rstd}) make(*sc, T * std::max(H, int64_t(1)));
    make(qkv, T * std::max(H + 2 * G, KVH == H ? 3 * H : int64_t(0)) * Dh);
    for (Scratch* sc : {&q, &qr, &qs, &o, &ot}) make(*sc, H * T * Dh);
    for (Scratch* sc : {&k, &kr, &v, &kw, &vw}) make(*sc, KVH * T * Dh);
    make(lse, H * T);
    make(h, T * fc1_w);
    make(a, T * F);
    make(logits, T * V);
  }

  // The attention sublayer for n new tokens at positions [p0, p0 + n): u [n, d] -> out [n, d].
  // res (may be empty): added by the projection's GEMM (LinearOp::forward residual), as in training.
  void attention(Layer& L, const Tensor& u_, int64_t p0, int64_t n, const Tensor& out, const Tensor& res) {
    const int64_t len = p0 + n;
    const Tensor qkv_t = qkv.as({n, (H + 2 * G) * Dh});
    L.qkv.forward(be, u_, qkv_t);
    const Tensor qn = q.as({1, H, n, Dh}), kn = k.as({1, G, n, Dh}), vn = v.as({1, G, n, Dh});
    const Tensor q0 = c.qk_norm ? qr.as({1, H, n, Dh}) : qn, k0 = c.qk_norm ? kr.as({1, G, n, Dh}) : kn;
    be.split_qkv(qkv_t.reshape({1, n, (H + 2 * G) * Dh}), q0, k0, vn, AttnLayout::HeadsMajor);
    if (c.qk_norm) {
      L.q_norm.forward(be, q0, qn, {}, rstd.as({H * n}));
      L.k_norm.forward(be, k0, kn, {}, rstd.as({G * n}));
    }
    const Tensor kc = L.kc.tensor(), vc = L.vc.tensor();
    const Tensor kl = kw.as({1, G, len, Dh}), vl = vw.as({1, G, len, Dh});
    for (int64_t j = 0; j < G; ++j) {  // append the new rows, then gather the first len of each head
      be.copy(at(kc, (j * T + p0) * Dh, {n, Dh}), at(kn, j * n * Dh, {n, Dh}));
      be.copy(at(vc, (j * T + p0) * Dh, {n, Dh}), at(vn, j * n * Dh, {n, Dh}));
      be.copy(at(kl, j * len * Dh, {len, Dh}), at(kc, j * T * Dh, {len, Dh}));
      be.copy(at(vl, j * len * Dh, {len, Dh}), at(vc, j * T * Dh, {len, Dh}));
    }
    if (c.positions == PositionKind::RoPE) {
      be.rope(kl, c.rope_theta, false, AttnLayout::HeadsMajor);
      const Tensor ql = qs.as({1, H, len, Dh});
      be.fill(ql, 0.0);
      for (int64_t j = 0; j < H; ++j)
        be.copy(at(ql, (j * len + p0) * Dh, {n, Dh}), at(qn, j * n * Dh, {n, Dh}));
      be.rope(ql, c.rope_theta, false, AttnLayout::HeadsMajor);
      for (int64_t j = 0; j < H; ++j)
        be.copy(at(qn, j * n * Dh, {n, Dh}), at(ql, (j * len + p0) * Dh, {n, Dh}));
    }
    AttentionShape shape;
    shape.batch = 1, shape.n_heads = H, shape.n_kv_heads = G, shape.seq_q = n, shape.seq_k = len;
    shape.head_dim = Dh, shape.causal = true;
    auto attn = be.make_attention(shape, acfg);
    const Tensor on = o.as({1, H, n, Dh});
    SavedAttention saved = attn->forward(qn, kl, vl, on, lse.as({1, H, n}));
    const Tensor otn = ot.as({1, n, H * Dh});
    be.heads_to_tokens(on, otn);
    L.proj.forward(be, otn.reshape({n, H * Dh}), out, {}, res);
  }

  // The Gated DeltaNet sublayer (hybrid) for n new tokens at [p0, p0 + n): u [n, d] -> out [n, d].
  void gated_delta(Layer& L, const Tensor& u_, int64_t p0, int64_t n, const Tensor& out) {
    const int64_t len = p0 + n;
    const Tensor qkv_t = qkv.as({n, 3 * H * Dh});
    L.qkv.forward(be, u_, qkv_t);
    const Tensor qn = q.as({1, H, n, Dh}), kn = k.as({1, H, n, Dh}), vn = v.as({1, H, n, Dh});
    const Tensor q0 = qr.as({1, H, n, Dh}), k0 = kr.as({1, H, n, Dh});
    be.split_qkv(qkv_t.reshape({1, n, 3 * H * Dh}), q0, k0, vn, AttnLayout::HeadsMajor);
    L.q_norm.forward(be, q0, qn, {}, rstd.as({H * n}));
    L.k_norm.forward(be, k0, kn, {}, rstd.as({H * n}));
    be.scale(gdn_scale, kn);
    const Tensor gc = L.gc.tensor();
    L.gates.forward(be, u_, at(gc, p0 * 2 * H, {n, 2 * H}));
    const Tensor qc = L.qc.tensor(), kc = L.kc.tensor(), vc = L.vc.tensor();
    const Tensor ql = qs.as({1, H, len, Dh}), kl = kw.as({1, H, len, Dh}), vl = vw.as({1, H, len, Dh});
    for (int64_t j = 0; j < H; ++j) {  // append the new rows, then gather the first len of each head
      for (auto [cache, fresh, all] :
           {std::tuple{qc, qn, ql}, std::tuple{kc, kn, kl}, std::tuple{vc, vn, vl}}) {
        be.copy(at(cache, (j * T + p0) * Dh, {n, Dh}), at(fresh, j * n * Dh, {n, Dh}));
        be.copy(at(all, j * len * Dh, {len, Dh}), at(cache, j * T * Dh, {len, Dh}));
      }
    }
    const Tensor ol = o.as({1, H, len, Dh});
    be.gated_delta_forward({ql, kl, vl, at(gc, 0, {len, 2 * H}), gdn_scale, c.gdn_chunk}, ol);
    for (int64_t j = 0; j < H; ++j)  // the new positions' outputs (qn is free again)
      be.copy(at(qn, j * n * Dh, {n, Dh}), at(ol, (j * len + p0) * Dh, {n, Dh}));
    const Tensor otn = ot.as({1, n, H * Dh});
    be.heads_to_tokens(qn, otn);
    L.proj.forward(be, otn.reshape({n, H * Dh}), out);
  }

  void mlp(Layer& L, const Tensor& u_, int64_t n, const Tensor& out, const Tensor& res) {
    const Tensor hn = h.as({n, fc1_w}), an = a.as({n, F});
    L.fc1.forward(be, u_, hn);
    if (c.mlp == MlpKind::SwiGLU)
      be.swiglu_forward(hn, an);
    else
      be.gelu_forward(hn, an);
    L.fc2.forward(be, an, out, {}, res);
  }

  std::vector<float> feed(const std::vector<int32_t>& tok) {
    const int64_t n = int64_t(tok.size()), p0 = length;
    OCTET_CHECK(n >= 1, "generate: nothing to feed");
    OCTET_CHECK(p0 + n <= T, "the context holds " + std::to_string(T) + " tokens (model.seq_len); " +
                                 std::to_string(p0) + " cached + " + std::to_string(n) + " new do not fit");
    for (int32_t t : tok)
      OCTET_CHECK(t >= 0 && t < V,
                  "token id " + std::to_string(t) + " outside the vocabulary of " + std::to_string(V));
    const Tensor idn = ids.tensor().slice(0, n);
    be.upload(idn, tok.data());
    const Shape nd{n, d};
    Tensor x = x0.as(nd), y = x1.as(nd);
    be.embedding_forward(idn, wte, x);
    if (c.positions == PositionKind::Learned) be.axpy(1.0f, wpe.slice(p0, n), x);
    const Tensor un = u.as(nd), fn = f.as(nd), gn = g.as(nd), sn = s.as(nd);
    const Tensor mn = mean.as({n}), rn = rstd.as({n});
    for (Layer& L : layers) {
      for (int k = 0; k < 2; ++k) {
        NormOp& nrm = k == 0 ? L.norm1 : L.norm2;
        Tensor in = x;
        if (c.norm_placement == NormPlacement::Pre) {
          nrm.forward(be, x, un, mn, rn);
          in = un;
        }
        // Pre-norm with R(x, f) = x + f: the sublayer's last linear adds x in its GEMM (rounded
        // once, as training's forward in transformer.cpp); a Gated DeltaNet mixer's sum is an axpy.
        const bool fused =
            c.norm_placement == NormPlacement::Pre && res_a == 1.0f && res_b == 1.0f && !(k == 0 && L.gdn);
        const Tensor res = fused ? x : Tensor{}, fo = fused ? y : fn;
        if (k == 0 && L.gdn)
          gated_delta(L, in, p0, n, fn);
        else if (k == 0)
          attention(L, in, p0, n, fo, res);
        else
          mlp(L, in, n, fo, res);
        if (fused) {
          std::swap(x, y);
          continue;
        }
        Tensor gv = fn;
        if (c.norm_placement == NormPlacement::Output) {
          nrm.forward(be, fn, gn, mn, rn);
          gv = gn;
        }
        const Tensor dst = c.norm_placement == NormPlacement::Post ? sn : y;
        be.copy(dst, x);  // dst = a·x + b·g
        if (res_a != 1.0f) be.scale(res_a, dst);
        be.axpy(res_b, gv, dst);
        if (c.norm_placement == NormPlacement::Post) nrm.forward(be, sn, y, mn, rn);
        std::swap(x, y);
      }
    }
    norm_f.forward(be, x, un, mn, rn);
    const Tensor lg = logits.as({n, V});
    head.forward(be, un, lg);
    std::vector<float> out(size_t(n * V));
    be.download(out.data(), lg);
    length = p0 + n;
    return out;
  }
};

Generator::Generator(Model& model, DecodePrecision precision)
    : impl_(std::make_unique<Impl>(model, precision)) {}
Generator::~Generator() = default;
int64_t Generator::length() const { return impl_->length; }
int64_t Generator::context() const { return impl_->T; }
void Generator::reset() { impl_->length = 0; }
std::vector<float> Generator::feed(const std::vector<int32_t>& ids) { return impl_->feed(ids); }

int32_t sample_token(const float* logits, int64_t vocab, const SampleOptions& opt, std::mt19937_64& rng) {
  OCTET_CHECK(vocab >= 1, "sample_token: empty vocabulary");
  if (opt.temperature == 0.0f) return int32_t(std::max_element(logits, logits + vocab) - logits);
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t i, int32_t j) { return logits[i] > logits[j]; });
  const int64_t k = opt.top_k > 0 ? std::min(opt.top_k, vocab) : vocab;
  std::vector<double> p(static_cast<size_t>(k));
  const double top = double(logits[order[0]]) / opt.temperature;
  double sum = 0;
  for (int64_t i = 0; i < k; ++i)
    sum += p[size_t(i)] = std::exp(double(logits[order[size_t(i)]]) / opt.temperature - top);
  int64_t keep = 0;  // nucleus: the smallest prefix whose mass reaches top_p
  for (double mass = 0; keep < k && (keep == 0 || mass < double(opt.top_p) * sum); ++keep)
    mass += p[size_t(keep)];
  std::discrete_distribution<int64_t> pick(p.begin(), p.begin() + keep);
  return order[size_t(pick(rng))];
}

std::vector<int32_t> generate(Generator& gen, const std::vector<int32_t>& prompt, const SampleOptions& opt,
                              const std::function<void(int32_t)>& on_token) {
  opt.validate();
  OCTET_CHECK(!prompt.empty(), "the prompt is empty (it needs at least one token)");
  OCTET_CHECK(int64_t(prompt.size()) <= gen.context(),
              "the prompt has " + std::to_string(prompt.size()) + " tokens; the context holds " +
                  std::to_string(gen.context()) + " (model.seq_len)");
  gen.reset();
  std::mt19937_64 rng(opt.seed);
  std::vector<float> logits = gen.feed(prompt);
  const int64_t V = int64_t(logits.size()) / int64_t(prompt.size());
  const float* last = logits.data() + (prompt.size() - 1) * size_t(V);
  std::vector<int32_t> out;
  while (int64_t(out.size()) < opt.max_new_tokens) {
    const int32_t t = sample_token(last, V, opt, rng);
    out.push_back(t);
    if (on_token) on_token(t);
    if (int64_t(out.size()) == opt.max_new_tokens || gen.length() == gen.context()) break;
    logits = gen.feed({t});
    last = logits.data();
  }
  return out;
}

}  // namespace octet
