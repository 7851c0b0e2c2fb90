// src/model/transformer.cpp — forward and backward of the decoder-only transformer of model.h,
// written once against the Backend interface (the CPU reference and the CUDA backend run this
// same code, as karpathy/llm.c keeps one readable trainer per layer structure).
//
// Every layer is two residual units x ← R(x, g(f(u(x)))) [+ post-norm]; the unit's norm sits at
// u (pre), g (output, FOG arXiv 2505.20524) or after R (post). Backward walks the same units in
// reverse: d(post-norm) → split by R → d(output norm) → d(sublayer) → d(pre-norm) + residual.
#include <cmath>
#include <map>

#include "model/layout.h"
#include "model/ops.h"
#include "octet/error.h"
#include "octet/model.h"

namespace octet {

using model_detail::LinearOp;
using model_detail::NormOp;

namespace {
/// Owns backend buffers; releases them all at destruction.
class Arena {
 public:
  explicit Arena(Backend& be) : be_(be) {}
  ~Arena() {
    for (void* p : owned_) be_.release(p);
  }
  float* f(size_t n) {
    float* p = be_.alloc(n == 0 ? 1 : n);
    owned_.push_back(p);
    return p;
  }
  int32_t* i(size_t n) {
    int32_t* p = be_.alloc_i32(n == 0 ? 1 : n);
    owned_.push_back(p);
    return p;
  }

 private:
  Backend& be_;
  std::vector<void*> owned_;
};
}  // namespace

// One residual unit's saved tensors (the sublayer's own live in AttnLayer / MlpLayer).
struct UnitBuffers {
  NormOp norm;
  float* u = nullptr;      // pre-norm output (pre placement)
  float* f = nullptr;      // sublayer output [N, d]
  float* s = nullptr;      // residual sum before the post-norm (post placement)
  float* mean = nullptr;   // norm statistics [N]
  float* rstd = nullptr;
};

struct AttnLayer {
  LinearOp qkv, proj;
  NormOp q_norm, k_norm;
  std::unique_ptr<Attention> attn;
  float *qkv_out, *q_raw, *k_raw, *q, *k, *v, *q_rstd, *k_rstd, *o, *lse, *ot;
  double res_max = 0, res_mean_sum = 0;
  int64_t res_count = 0;
};

struct MlpLayer {
  LinearOp fc1, fc2;
  float *h, *a;
};

struct Model::Impl {
  Arena arena;
  int64_t N, B, T, d, H, G, Dh, F, V;
  float res_a = 1.0f, res_b = 1.0f;  // R(x, y) = a·x + b·y
  std::vector<float*> stream;        // 2L+1 residual-stream tensors [N, d]
  std::vector<UnitBuffers> units;    // 2L
  std::vector<AttnLayer> attn;
  std::vector<MlpLayer> mlp;
  NormOp norm_f;
  float *xf, *mean_f, *rstd_f, *logits;
  LinearOp head;
  int32_t *ids, *targets;
  const int32_t* host_ids = nullptr;
  // gradient scratch
  float *dcur, *dt1, *dt2, *dt3, *dqkv, *dq, *dk, *dv, *dq2, *dk2, *dout, *dot, *dh, *da, *gtmp;
  explicit Impl(Backend& be) : arena(be) {}

  // Every linear with its checkpoint key (the parameter name without ".weight"; "head").
  std::vector<std::pair<std::string, const LinearOp*>> linears() const {
    std::vector<std::pair<std::string, const LinearOp*>> v;
    for (size_t l = 0; l < attn.size(); ++l) {
      const std::string h = "h." + std::to_string(l);
      v.emplace_back(h + ".attn.qkv", &attn[l].qkv);
      v.emplace_back(h + ".attn.proj", &attn[l].proj);
      v.emplace_back(h + ".mlp.fc1", &mlp[l].fc1);
      v.emplace_back(h + ".mlp.fc2", &mlp[l].fc2);
    }
    v.emplace_back("head", &head);
    return v;
  }
};

Model::Model(const ModelConfig& config, const PrecisionConfig& precision, Backend& backend,
             int64_t batch)
    : config_(config), precision_(precision), backend_(backend), batch_(batch) {
  validate_model_precision(config_, precision_, batch);  // the checks a run makes up front
  params_ = model_detail::build_param_table(config_);
  n_params_ = params_.back().offset + params_.back().numel;
  impl_ = std::make_unique<Impl>(backend_);
  Impl& m = *impl_;
  Arena& A = m.arena;
  const ModelConfig& c = config_;
  m.B = batch;
  m.T = c.seq_len;
  m.N = m.B * m.T;
  m.d = c.d_model;
  m.H = c.n_head;
  m.G = c.n_kv_head;
  m.Dh = c.head_dim();
  m.F = c.d_ff;
  m.V = c.vocab_size;
  if (c.unit_scaling) {
    m.res_a = std::sqrt(1.0f - c.residual_tau);
    m.res_b = std::sqrt(c.residual_tau);
  }
  params_buf_ = A.f(n_params_);
  grads_buf_ = A.f(n_params_);
  const size_t Nd = size_t(m.N * m.d);
  const int64_t qkv_w = (m.H + 2 * m.G) * m.Dh;
  const int64_t fc1_w = c.mlp == MlpKind::SwiGLU ? 2 * m.F : m.F;

  auto make_norm = [&](const std::string& prefix) {
    NormOp n;
    n.kind = c.norm;
    n.dim = m.d;
    n.eps = c.norm_eps;
    n.w_off = param(prefix + ".weight").offset;
    if (c.norm == NormKind::LayerNorm) n.b_off = param(prefix + ".bias").offset;
    return n;
  };
  auto make_linear = [&](const std::string& name, const std::string& pname, int64_t in, int64_t out,
                         LinearPrecision prec) {
    LinearOp op;
    op.name = name;
    op.in = in;
    op.out = out;
    op.w_off = param(pname).offset;
    op.mult = c.unit_scaling ? float(1.0 / std::sqrt(double(in))) : 1.0f;
    LinearSpec spec;
    spec.in_features = in;
    spec.out_features = out;
    spec.precision = prec;
    spec.quant = precision_.quant;
    op.lin = backend_.make_linear(spec);
    return op;
  };

  const LinearPrecision lp = linear_precision(precision_.arm);
  const AttentionShape shape = attention_shape(c, m.B);
  const AttentionConfig acfg = attention_config(precision_);

  for (int64_t i = 0; i <= 2 * c.n_layer; ++i) m.stream.push_back(A.f(Nd));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l);
    for (int k = 0; k < 2; ++k) {
      UnitBuffers u;
      u.norm = make_norm(h + (k == 0 ? ".norm1" : ".norm2"));
      if (c.norm_placement == NormPlacement::Pre) u.u = A.f(Nd);
      if (c.norm_placement == NormPlacement::Post) u.s = A.f(Nd);
      u.f = A.f(Nd);
      u.mean = A.f(size_t(m.N));
      u.rstd = A.f(size_t(m.N));
      m.units.push_back(std::move(u));
    }
    AttnLayer al;
    al.qkv = make_linear("qkv", h + ".attn.qkv.weight", m.d, qkv_w, lp);
    al.proj = make_linear("proj", h + ".attn.proj.weight", m.H * m.Dh, m.d, lp);
    for (NormOp* qn : {&al.q_norm, &al.k_norm}) {
      qn->kind = NormKind::RMSNorm;
      qn->dim = m.Dh;
      qn->eps = c.norm_eps;
      qn->has_weight = c.qk_norm && c.qk_norm_trainable;
    }
    if (al.q_norm.has_weight) {
      al.q_norm.w_off = param(h + ".attn.q_norm.weight").offset;
      al.k_norm.w_off = param(h + ".attn.k_norm.weight").offset;
    }
    al.attn = backend_.make_attention(shape, acfg);
    al.qkv_out = A.f(size_t(m.N * qkv_w));
    const size_t nq = size_t(m.B * m.H * m.T * m.Dh), nk = size_t(m.B * m.G * m.T * m.Dh);
    al.q = A.f(nq);
    al.k = A.f(nk);
    al.v = A.f(nk);
    al.q_raw = c.qk_norm ? A.f(nq) : nullptr;
    al.k_raw = c.qk_norm ? A.f(nk) : nullptr;
    al.q_rstd = c.qk_norm ? A.f(size_t(m.B * m.H * m.T)) : nullptr;
    al.k_rstd = c.qk_norm ? A.f(size_t(m.B * m.G * m.T)) : nullptr;
    al.o = A.f(nq);
    al.lse = A.f(size_t(m.B * m.H * m.T));
    al.ot = A.f(nq);
    m.attn.push_back(std::move(al));
    MlpLayer ml;
    ml.fc1 = make_linear("fc1", h + ".mlp.fc1.weight", m.d, fc1_w, lp);
    ml.fc2 = make_linear("fc2", h + ".mlp.fc2.weight", m.F, m.d, lp);
    ml.h = A.f(size_t(m.N * fc1_w));
    ml.a = A.f(size_t(m.N * m.F));
    m.mlp.push_back(std::move(ml));
  }
  m.norm_f = make_norm("norm_f");
  m.xf = A.f(Nd);
  m.mean_f = A.f(size_t(m.N));
  m.rstd_f = A.f(size_t(m.N));
  m.logits = A.f(size_t(m.N * m.V));
  m.head = make_linear("head", c.tied_embeddings ? "wte" : "lm_head.weight", m.d, m.V,
                       head_precision(precision_.arm));
  m.ids = A.i(size_t(m.N));
  m.targets = A.i(size_t(m.N));
  for (float** p : {&m.dcur, &m.dt1, &m.dt2, &m.dt3, &m.gtmp}) *p = A.f(Nd);
  const size_t nq = size_t(m.B * m.H * m.T * m.Dh), nk = size_t(m.B * m.G * m.T * m.Dh);
  m.dqkv = A.f(size_t(m.N * qkv_w));
  m.dq = A.f(nq);
  m.dk = A.f(nk);
  m.dv = A.f(nk);
  m.dq2 = A.f(nq);
  m.dk2 = A.f(nk);
  m.dout = A.f(nq);
  m.dot = A.f(nq);
  m.dh = A.f(size_t(m.N * fc1_w));
  m.da = A.f(size_t(m.N * m.F));
}

Model::~Model() = default;

const ParamInfo& Model::param(const std::string& name) const {
  for (auto& p : params_)
    if (p.name == name) return p;
  OCTET_FAIL("unknown parameter '" + name + "'");
}

void Model::init(uint64_t seed) {
  upload_params(model_detail::init_params(config_, params_, seed));
  zero_grad();
}

std::vector<float> Model::download_params() {
  std::vector<float> h(n_params_);
  backend_.download(h.data(), params_buf_, n_params_);
  return h;
}
std::vector<float> Model::download_grads() {
  std::vector<float> h(n_params_);
  backend_.download(h.data(), grads_buf_, n_params_);
  return h;
}
void Model::upload_params(const std::vector<float>& host) {
  OCTET_CHECK(host.size() == n_params_, "parameter count mismatch: got " +
                                            std::to_string(host.size()) + ", model has " +
                                            std::to_string(n_params_));
  backend_.upload(params_buf_, host.data(), n_params_);
}

void Model::zero_grad() {
  backend_.fill(grads_buf_, 0.0f, n_params_);
  for (auto& al : impl_->attn) al.res_max = al.res_mean_sum = 0, al.res_count = 0;
}

namespace {
// dst = a·x + b·y
void residual(Backend& be, float a, const float* x, float b, const float* y, float* dst, size_t n) {
  be.copy(dst, x, n);
  if (a != 1.0f) be.scale(a, dst, n);
  be.axpy(b, y, dst, n);
}
}  // namespace

double Model::step(const int32_t* ids, const int32_t* targets, bool backward, float grad_scale,
                   int64_t* n_counted) {
  Impl& m = *impl_;
  Backend& be = backend_;
  const ModelConfig& c = config_;
  float* P = params_buf_;
  float* Gd = grads_buf_;
  const size_t Nd = size_t(m.N * m.d);
  const NormPlacement place = c.norm_placement;
  be.upload_i32(m.ids, ids, size_t(m.N));
  be.upload_i32(m.targets, targets, size_t(m.N));
  if (n_counted) {
    int64_t n = 0;
    for (int64_t i = 0; i < m.N; ++i) n += targets[i] >= 0;
    *n_counted = n;
  }

  // ---- forward ----
  be.embedding_forward(m.ids, P + param("wte").offset, m.stream[0], m.N, m.d);
  if (c.positions == PositionKind::Learned) {
    const float* wpe = P + param("wpe").offset;
    for (int64_t b = 0; b < m.B; ++b) be.axpy(1.0f, wpe, m.stream[0] + b * m.T * m.d, size_t(m.T * m.d));
  }
  for (int64_t l = 0; l < c.n_layer; ++l) {
    for (int k = 0; k < 2; ++k) {
      UnitBuffers& U = m.units[size_t(2 * l + k)];
      const float* x = m.stream[size_t(2 * l + k)];
      float* out = m.stream[size_t(2 * l + k + 1)];
      const float* u = x;
      if (place == NormPlacement::Pre) {
        U.norm.forward(be, x, U.u, U.mean, U.rstd, P, m.N);
        u = U.u;
      }
      if (k == 0) {
        AttnLayer& al = m.attn[size_t(l)];
        al.qkv.forward(be, u, P, al.qkv_out, m.N);
        float* q0 = c.qk_norm ? al.q_raw : al.q;
        float* k0 = c.qk_norm ? al.k_raw : al.k;
        be.split_qkv(al.qkv_out, q0, k0, al.v, m.B, m.T, m.H, m.G, m.Dh);
        if (c.qk_norm) {
          al.q_norm.forward(be, al.q_raw, al.q, nullptr, al.q_rstd, P, m.B * m.H * m.T);
          al.k_norm.forward(be, al.k_raw, al.k, nullptr, al.k_rstd, P, m.B * m.G * m.T);
        }
        if (c.positions == PositionKind::RoPE) {
          be.rope(al.q, m.B, m.H, m.T, m.Dh, c.rope_theta, false);
          be.rope(al.k, m.B, m.G, m.T, m.Dh, c.rope_theta, false);
        }
        al.attn->forward(al.q, al.k, al.v, al.o, al.lse);
        be.heads_to_tokens(al.o, al.ot, m.B, m.H, m.T, m.Dh);
        al.proj.forward(be, al.ot, P, U.f, m.N);
      } else {
        MlpLayer& ml = m.mlp[size_t(l)];
        ml.fc1.forward(be, u, P, ml.h, m.N);
        if (c.mlp == MlpKind::SwiGLU) be.swiglu_forward(ml.h, ml.a, m.N, m.F);
        else be.gelu_forward(ml.h, ml.a, size_t(m.N * m.F));
        ml.fc2.forward(be, ml.a, P, U.f, m.N);
      }
      const float* g = U.f;
      if (place == NormPlacement::Output) {
        U.norm.forward(be, U.f, m.gtmp, U.mean, U.rstd, P, m.N);
        g = m.gtmp;
      }
      if (place == NormPlacement::Post) {
        residual(be, m.res_a, x, m.res_b, g, U.s, Nd);
        U.norm.forward(be, U.s, out, U.mean, U.rstd, P, m.N);
      } else {
        residual(be, m.res_a, x, m.res_b, g, out, Nd);
      }
    }
  }
  float* xL = m.stream.back();
  m.norm_f.forward(be, xL, m.xf, m.mean_f, m.rstd_f, P, m.N);
  m.head.forward(be, m.xf, P, m.logits, m.N);
  const double loss = be.cross_entropy(m.logits, m.targets, m.logits, m.N, m.V, grad_scale);
  if (!backward) return loss;

  // ---- backward (m.logits now holds dlogits) ----
  m.head.backward(be, m.xf, P, m.logits, m.dt1, Gd, m.N);
  m.norm_f.backward(be, xL, m.dt1, m.dcur, m.mean_f, m.rstd_f, P, Gd, m.N);
  for (int64_t l = c.n_layer - 1; l >= 0; --l) {
    for (int k = 1; k >= 0; --k) {
      UnitBuffers& U = m.units[size_t(2 * l + k)];
      const float* x = m.stream[size_t(2 * l + k)];
      // dcur = d(unit output). ds: gradient of the residual sum.
      if (place == NormPlacement::Post) {
        U.norm.backward(be, U.s, m.dcur, m.dt1, U.mean, U.rstd, P, Gd, m.N);
        be.copy(m.dcur, m.dt1, Nd);
      }
      be.copy(m.dt2, m.dcur, Nd);  // dt2 = dg = b·ds; dcur = dx = a·ds
      if (m.res_b != 1.0f) be.scale(m.res_b, m.dt2, Nd);
      if (m.res_a != 1.0f) be.scale(m.res_a, m.dcur, Nd);
      float* df = m.dt2;
      if (place == NormPlacement::Output) {
        U.norm.backward(be, U.f, m.dt2, m.dt1, U.mean, U.rstd, P, Gd, m.N);
        df = m.dt1;
      }
      const float* u = place == NormPlacement::Pre ? U.u : x;
      float* du = m.dt3;
      if (k == 0) {
        AttnLayer& al = m.attn[size_t(l)];
        al.proj.backward(be, al.ot, P, df, m.dot, Gd, m.N);
        be.tokens_to_heads(m.dot, m.dout, m.B, m.H, m.T, m.Dh);
        const AttentionStats st = al.attn->backward(m.dout, m.dq, m.dk, m.dv);
        al.res_max = std::max(al.res_max, st.row_residual_max);
        al.res_mean_sum += st.row_residual_mean;
        al.res_count += 1;
        if (c.positions == PositionKind::RoPE) {
          be.rope(m.dq, m.B, m.H, m.T, m.Dh, c.rope_theta, true);
          be.rope(m.dk, m.B, m.G, m.T, m.Dh, c.rope_theta, true);
        }
        float* dq = m.dq;
        float* dk = m.dk;
        if (c.qk_norm) {
          al.q_norm.backward(be, al.q_raw, m.dq, m.dq2, nullptr, al.q_rstd, P, Gd, m.B * m.H * m.T);
          al.k_norm.backward(be, al.k_raw, m.dk, m.dk2, nullptr, al.k_rstd, P, Gd, m.B * m.G * m.T);
          dq = m.dq2;
          dk = m.dk2;
        }
        be.merge_qkv(dq, dk, m.dv, m.dqkv, m.B, m.T, m.H, m.G, m.Dh);
        al.qkv.backward(be, u, P, m.dqkv, du, Gd, m.N);
      } else {
        MlpLayer& ml = m.mlp[size_t(l)];
        ml.fc2.backward(be, ml.a, P, df, m.da, Gd, m.N);
        if (c.mlp == MlpKind::SwiGLU) be.swiglu_backward(ml.h, m.da, m.dh, m.N, m.F);
        else be.gelu_backward(ml.h, m.da, m.dh, size_t(m.N * m.F));
        ml.fc1.backward(be, u, P, m.dh, du, Gd, m.N);
      }
      if (place == NormPlacement::Pre) {
        U.norm.backward(be, x, m.dt3, m.dt1, U.mean, U.rstd, P, Gd, m.N);
        du = m.dt1;
      }
      be.axpy(1.0f, du, m.dcur, Nd);
    }
  }
  be.embedding_backward(m.ids, m.dcur, Gd + param("wte").offset, m.N, m.d);
  if (c.positions == PositionKind::Learned) {
    float* dwpe = Gd + param("wpe").offset;
    for (int64_t b = 0; b < m.B; ++b) be.axpy(1.0f, m.dcur + b * m.T * m.d, dwpe, size_t(m.T * m.d));
  }
  return loss;
}

std::vector<LayerDiag> Model::diagnostics() {
  Impl& m = *impl_;
  Backend& be = backend_;
  const size_t Nd = size_t(m.N * m.d);
  const bool fp8 = linear_precision(precision_.arm) == LinearPrecision::FP8;
  std::vector<LayerDiag> out;
  for (int64_t l = 0; l < config_.n_layer; ++l) {
    LayerDiag dg;
    const UnitBuffers& ua = m.units[size_t(2 * l)];
    const UnitBuffers& um = m.units[size_t(2 * l + 1)];
    const bool pre = config_.norm_placement == NormPlacement::Pre;
    dg.kurtosis_attn_in = be.moments(pre ? ua.u : m.stream[size_t(2 * l)], Nd).kurtosis;
    dg.kurtosis_mlp_in = be.moments(pre ? um.u : m.stream[size_t(2 * l + 1)], Nd).kurtosis;
    dg.kurtosis_mlp_hidden = be.moments(m.mlp[size_t(l)].a, size_t(m.N * m.F)).kurtosis;
    dg.kurtosis_out = be.moments(m.stream[size_t(2 * l + 2)], Nd).kurtosis;
    const AttnLayer& al = m.attn[size_t(l)];
    dg.row_residual_max = al.res_max;
    dg.row_residual_mean = al.res_count ? al.res_mean_sum / double(al.res_count) : 0.0;
    if (fp8) {
      const MlpLayer& ml = m.mlp[size_t(l)];
      for (const LinearOp* op : {&al.qkv, &al.proj, &ml.fc1, &ml.fc2})
        dg.linears.push_back({op->name, op->lin->stats_x(), op->lin->stats_w(), op->lin->stats_dy()});
    }
    out.push_back(std::move(dg));
  }
  return out;
}

std::map<std::string, std::vector<float>> Model::quant_states() const {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [key, op] : impl_->linears()) {
    std::vector<float> s = op->lin->quant_state();
    if (!s.empty()) out.emplace(key, std::move(s));
  }
  return out;
}

void Model::load_quant_states(const std::map<std::string, std::vector<float>>& states) {
  const std::map<std::string, std::vector<float>> before = quant_states();
  for (const auto& [key, s] : before)
    OCTET_CHECK(states.count(key), "quantizer state: missing the state of linear " + key);
  for (const auto& [key, s] : states)
    OCTET_CHECK(before.count(key), "quantizer state: " + key +
                                       " is not a linear with quantizer state in this model (" +
                                       std::to_string(before.size()) + " have one)");
  std::vector<std::pair<std::string, const LinearOp*>> done;
  for (const auto& [key, op] : impl_->linears()) {
    auto it = states.find(key);
    if (it == states.end()) continue;
    try {
      op->lin->load_quant_state(it->second);
    } catch (const Error& e) {
      for (const auto& [k, o] : done) o->lin->load_quant_state(before.at(k));  // all or nothing
      OCTET_FAIL("linear " + key + ": " + e.what());
    }
    done.emplace_back(key, op);
  }
}

}  // namespace octet
