// src/model/model.cpp — the Model of model.h around its forward/backward (transformer.cpp):
// construction of every backend tensor and layer (model/impl.h), parameters and gradients,
// initialization, diagnostics and the quantizer state of checkpoints.
#include <cmath>
#include <limits>
#include <map>

#include "model/impl.h"
#include "model/layout.h"
#include "octet/error.h"

namespace octet {

using model_detail::LinearOp;
using model_detail::NormOp;

std::vector<std::pair<std::string, LinearOp*>> Model::Impl::linears() {
  std::vector<std::pair<std::string, LinearOp*>> v;
  for (size_t l = 0; l < attn.size(); ++l) {
    const std::string h = "h." + std::to_string(l);
    if (attn[l].attn) {
      v.emplace_back(h + ".attn.qkv", &attn[l].qkv);
      v.emplace_back(h + ".attn.proj", &attn[l].proj);
    } else {
      v.emplace_back(h + ".gdn.qkv", &gdn[l].qkv);
      v.emplace_back(h + ".gdn.gates", &gdn[l].gates);
      v.emplace_back(h + ".gdn.proj", &gdn[l].proj);
    }
    v.emplace_back(h + ".mlp.fc1", &mlp[l].fc1);
    v.emplace_back(h + ".mlp.fc2", &mlp[l].fc2);
  }
  v.emplace_back("head", &head);
  return v;
}

Model::Model(const ModelConfig& config, const PrecisionConfig& precision, Backend& backend, int64_t batch,
             const ModelMemory& memory)
    : config_(config), precision_(precision), backend_(backend), batch_(batch), memory_(memory) {
  validate_model_precision(config_, precision_, batch);  // the checks a run makes up front
  params_ = model_detail::build_param_table(config_);
  n_params_ = params_.back().offset + params_.back().numel;
  impl_ = std::make_unique<Impl>(backend_);
  Impl& m = *impl_;
  Arena& A = m.arena;
  const ModelConfig& c = config_;
  const DType act = precision_.activations;
  // A layer's activation buffer: its own, or under activation checkpointing the one buffer of that
  // role (key) that every layer shares — the backward re-runs each layer's forward into it.
  std::map<std::string, Tensor> shared;
  auto layer_buf = [&](const std::string& key, DType t, Shape sh) {
    if (!memory_.activation_checkpointing) return A.make(t, std::move(sh));
    auto it = shared.find(key);
    if (it == shared.end()) it = shared.emplace(key, A.make(t, std::move(sh))).first;
    return it->second;
  };
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
  m.params = backend_.alloc(DType::F32, {int64_t(n_params_)});
  m.grads = backend_.alloc(DType::F32, {int64_t(n_params_)});
  // F32 views of one parameter and of its gradient.
  auto view = [&](const std::string& name, const Buffer& buf) {
    const ParamInfo& p = param(name);
    Shape s;
    for (int64_t e : p.shape) s.dims[size_t(s.rank++)] = e;
    return Tensor(buf.tensor().f32() + p.offset, DType::F32, s);
  };
  const int64_t qkv_w = (m.H + 2 * m.G) * m.Dh;
  const int64_t fc1_w = c.mlp == MlpKind::SwiGLU ? 2 * m.F : m.F;
  const Shape Nd{m.N, m.d}, rows{m.N};
  // the attention's q (o, dq, dO) and k (v, dk, dv) in its layout (tokens-major: impl.h AttnLayer)
  const AttentionShape shape = attention_shape(c, m.B);
  const Shape sq = shape.q_shape(), sk = shape.kv_shape();

  auto make_norm = [&](const std::string& prefix) {
    NormOp n;
    n.kind = c.norm;
    n.eps = c.norm_eps;
    n.w = view(prefix + ".weight", m.params);
    n.dw = view(prefix + ".weight", m.grads);
    if (c.norm == NormKind::LayerNorm) {
      n.b = view(prefix + ".bias", m.params);
      n.db = view(prefix + ".bias", m.grads);
    }
    return n;
  };
  auto make_linear = [&](const std::string& name, const std::string& pname, int64_t in, int64_t out,
                         LinearPrecision prec) {
    LinearOp op;
    op.name = name;
    op.w = view(pname, m.params);
    op.dw = view(pname, m.grads);
    op.mult = c.unit_scaling ? float(1.0 / std::sqrt(double(in))) : 1.0f;
    LinearSpec spec;
    spec.in_features = in;
    spec.out_features = out;
    spec.precision = prec;
    spec.quant = precision_.quant;
    // The weights change only in the optimizer step (after update_quant_scales) and in
    // upload_params (which tells the linears): one FP8 weight quantization per step (backend.h).
    spec.cache_weight = true;
    op.lin = backend_.make_linear(spec);
    return op;
  };

  const LinearPrecision lp = linear_precision(precision_.arm);
  // A Gated DeltaNet layer (hybrid mixer): H heads of Dh for q, k and v; gates [N, 2H].
  const Shape sh{m.B, m.H, m.T, m.Dh};
  auto make_gdn_layer = [&](const std::string& h) {
    const LinearPrecision rp = recurrent_precision(precision_.arm);
    GdnLayer g;
    g.qkv = make_linear("gdn.qkv", h + ".gdn.qkv.weight", m.d, 3 * m.H * m.Dh, rp);
    g.gates = make_linear("gdn.gates", h + ".gdn.gates.weight", m.d, 2 * m.H, rp);
    g.proj = make_linear("gdn.proj", h + ".gdn.proj.weight", m.H * m.Dh, m.d, rp);
    for (NormOp* qn : {&g.q_norm, &g.k_norm}) {
      qn->kind = NormKind::RMSNorm;
      qn->eps = c.norm_eps;
    }
    g.scale = float(1.0 / std::sqrt(double(m.Dh)));
    g.chunk = c.gdn_chunk;
    g.qkv_out = layer_buf("gdn.qkv_out", act, {m.N, 3 * m.H * m.Dh});
    g.gate_out = layer_buf("gdn.gate_out", act, {m.N, 2 * m.H});
    g.q_raw = layer_buf("gdn.q_raw", act, sh);
    g.k_raw = layer_buf("gdn.k_raw", act, sh);
    g.q = layer_buf("gdn.q", act, sh);
    g.k = layer_buf("gdn.k", act, sh);
    g.v = layer_buf("gdn.v", act, sh);
    g.o = layer_buf("gdn.o", act, sh);
    g.q_rstd = layer_buf("gdn.q_rstd", DType::F32, {m.B * m.H * m.T});
    g.k_rstd = layer_buf("gdn.k_rstd", DType::F32, {m.B * m.H * m.T});
    g.ot = layer_buf("gdn.ot", act, {m.N, m.H * m.Dh});
    return g;
  };
  const AttentionConfig acfg = attention_config(precision_);
  auto make_attn_layer = [&](const std::string& h) {
    AttnLayer al;
    al.qkv = make_linear("qkv", h + ".attn.qkv.weight", m.d, qkv_w, lp);
    al.proj = make_linear("proj", h + ".attn.proj.weight", m.H * m.Dh, m.d, lp);
    for (NormOp* qn : {&al.q_norm, &al.k_norm}) {
      qn->kind = NormKind::RMSNorm;
      qn->eps = c.norm_eps;
    }
    if (c.qk_norm && c.qk_norm_trainable) {
      al.q_norm.w = view(h + ".attn.q_norm.weight", m.params);
      al.q_norm.dw = view(h + ".attn.q_norm.weight", m.grads);
      al.k_norm.w = view(h + ".attn.k_norm.weight", m.params);
      al.k_norm.dw = view(h + ".attn.k_norm.weight", m.grads);
    }
    al.attn = backend_.make_attention(shape, acfg);
    al.qkv_out = layer_buf("attn.qkv_out", act, {m.N, qkv_w});
    al.q = layer_buf("attn.q", act, sq);
    al.k = layer_buf("attn.k", act, sk);
    al.v = layer_buf("attn.v", act, sk);
    if (c.qk_norm) {
      al.q_raw = layer_buf("attn.q_raw", act, sq);
      al.k_raw = layer_buf("attn.k_raw", act, sk);
      al.q_rstd = layer_buf("attn.q_rstd", DType::F32, {m.B * m.H * m.T});
      al.k_rstd = layer_buf("attn.k_rstd", DType::F32, {m.B * m.G * m.T});
    }
    al.ot = layer_buf("attn.ot", act, {m.N, m.H * m.Dh});
    OCTET_CHECK(shape.layout == AttnLayout::TokensMajor, "model: o aliases ot only tokens-major");
    al.o = al.ot.reshape(sq);  // tokens-major o is the projection's input as it lies
    al.lse = layer_buf("attn.lse", DType::F32, {m.B, m.H, m.T});
    al.residual = A.make(DType::F64, {2});  // an accumulator of this layer's: never shared
    return al;
  };

  for (int64_t i = 0; i <= 2 * c.n_layer; ++i) m.stream.push_back(A.make(act, Nd));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l);
    for (int k = 0; k < 2; ++k) {
      UnitBuffers u;
      u.norm = make_norm(h + (k == 0 ? ".norm1" : ".norm2"));
      const std::string unit = "unit" + std::to_string(k);  // the two units of a layer: two sets
      if (c.norm_placement == NormPlacement::Pre) u.u = layer_buf(unit + ".u", act, Nd);
      if (c.norm_placement == NormPlacement::Post) u.s = layer_buf(unit + ".s", act, Nd);
      u.f = layer_buf(unit + ".f", act, Nd);
      u.mean = layer_buf(unit + ".mean", DType::F32, rows);
      u.rstd = layer_buf(unit + ".rstd", DType::F32, rows);
      m.units.push_back(std::move(u));
    }
    if (c.attention_layer(l)) {
      m.attn.push_back(make_attn_layer(h));
      m.gdn.emplace_back();
    } else {
      m.attn.emplace_back();
      m.gdn.push_back(make_gdn_layer(h));
    }
    MlpLayer ml;
    ml.fc1 = make_linear("fc1", h + ".mlp.fc1.weight", m.d, fc1_w, lp);
    ml.fc2 = make_linear("fc2", h + ".mlp.fc2.weight", m.F, m.d, lp);
    ml.h = layer_buf("mlp.h", act, {m.N, fc1_w});
    ml.a = layer_buf("mlp.a", act, {m.N, m.F});
    m.mlp.push_back(std::move(ml));
  }
  m.norm_f = make_norm("norm_f");
  m.xf = A.make(act, Nd);
  m.mean_f = A.make(DType::F32, rows);
  m.rstd_f = A.make(DType::F32, rows);
  m.logits = A.make(act, {m.N, m.V});
  const std::string head_name = c.tied_embeddings ? "wte" : "lm_head.weight";
  m.head = make_linear("head", head_name, m.d, m.V, head_precision(precision_.arm));
  m.wte = view("wte", m.params);
  m.dwte = view("wte", m.grads);
  if (c.positions == PositionKind::Learned) {
    m.wpe = view("wpe", m.params);
    m.dwpe = view("wpe", m.grads);
  }
  m.ids = A.make(DType::I32, rows);
  m.targets = A.make(DType::I32, rows);
  m.loss = A.make(DType::F64, {1});
  for (Tensor* p : {&m.dcur, &m.dt1, &m.dt2, &m.dt3, &m.gtmp}) *p = A.make(act, Nd);
  m.dqkv = A.make(act, {m.N, qkv_w});
  m.dq = A.make(act, sq);
  m.dk = A.make(act, sk);
  m.dv = A.make(act, sk);
  m.dq2 = A.make(act, sq);
  m.dk2 = A.make(act, sk);
  m.dot = A.make(act, {m.N, m.H * m.Dh});
  m.dout = m.dot.reshape(sq);
  m.dh = A.make(act, {m.N, fc1_w});
  m.da = A.make(act, {m.N, m.F});
  // Producers' amaxes (impl.h): only the tensor-current recipe reduces X and dY before casting them.
  if (lp == LinearPrecision::FP8 && precision_.quant.recipe == Recipe::TensorCurrent)
    m.amax = A.make(DType::I32, {Impl::kProducerAmaxSlots * c.n_layer});
  if (c.mixer == MixerKind::Hybrid) {
    GdnScratch& s = m.gdn_scratch;
    s.dot = A.make(act, {m.N, m.H * m.Dh});
    for (Tensor* t : {&s.dout, &s.dq, &s.dk, &s.dv, &s.dq2, &s.dk2}) *t = A.make(act, sh);
    s.dgates = A.make(act, {m.N, 2 * m.H});
    s.dqkv = A.make(act, {m.N, 3 * m.H * m.Dh});
    s.dx = A.make(act, Nd);
  }
}

Model::~Model() = default;

const ParamInfo& Model::param(const std::string& name) const {
  for (auto& p : params_)
    if (p.name == name) return p;
  OCTET_FAIL("unknown parameter '" + name + "'");
}

Tensor Model::param_data() const { return impl_->params.tensor(); }
Tensor Model::grad_data() const { return impl_->grads.tensor(); }

void Model::init(uint64_t seed) {
  upload_params(model_detail::init_params(config_, params_, seed));
  zero_grad();
}

std::vector<float> Model::download_params() {
  std::vector<float> h(n_params_);
  backend_.download(h.data(), param_data());
  return h;
}
std::vector<float> Model::download_grads() {
  std::vector<float> h(n_params_);
  backend_.download(h.data(), grad_data());
  return h;
}
void Model::upload_params(const std::vector<float>& host) {
  OCTET_CHECK(host.size() == n_params_, "parameter count mismatch: got " + std::to_string(host.size()) +
                                            ", model has " + std::to_string(n_params_));
  backend_.upload(param_data(), host.data());
  for (auto& [key, op] : impl_->linears()) op->lin->weights_changed();
}

void Model::zero_grad() {
  backend_.fill(grad_data(), 0.0);
  for (auto& al : impl_->attn)
    if (al.attn) backend_.fill(al.residual, 0.0);
  impl_->n_backward = 0;
}

void Model::update_quant_scales() {
  for (auto& [key, op] : impl_->linears()) op->lin->update_scales();
}

int64_t Model::amax_slots() const {
  const bool delayed = linear_precision(precision_.arm) == LinearPrecision::FP8 &&
                       precision_.quant.recipe == Recipe::TensorDelayed;
  return delayed ? 3 * int64_t(impl_->linears().size()) : 0;
}

void Model::pending_amaxes(const Tensor& amax) {
  check_numel(amax, amax_slots(), "pending_amaxes");
  int64_t i = 0;
  for (auto& [key, op] : impl_->linears()) op->lin->pending_amaxes(amax.slice(3 * i++, 3));
}

void Model::set_pending_amaxes(const Tensor& amax) {
  check_numel(amax, amax_slots(), "set_pending_amaxes");
  int64_t i = 0;
  for (auto& [key, op] : impl_->linears()) op->lin->set_pending_amaxes(amax.slice(3 * i++, 3));
}

std::vector<Model::CodeWeight> Model::code_weights() {
  std::vector<CodeWeight> out;
  const float* base = param_data().f32();
  for (auto& [key, op] : impl_->linears()) {
    if (!op->lin->gathers_weight_codes()) continue;
    const size_t offset = size_t(op->w.f32() - base);
    const ParamInfo* p = nullptr;
    for (const ParamInfo& q : params_)
      if (q.offset == offset) p = &q;
    OCTET_CHECK(p && p->numel == size_t(op->w.numel()),
                "code_weights: linear " + key + " has no weight parameter");
    out.push_back({p, op->lin.get()});
  }
  return out;
}

std::vector<LayerDiag> Model::diagnostics() {
  OCTET_CHECK(!memory_.activation_checkpointing,
              "layer diagnostics read every layer's activations of the last forward, which "
              "activation checkpointing does not keep (train.activation_checkpointing = false)");
  Impl& m = *impl_;
  Backend& be = backend_;
  const bool fp8 = linear_precision(precision_.arm) == LinearPrecision::FP8;
  const bool pre = config_.norm_placement == NormPlacement::Pre;
  std::vector<LayerDiag> out;
  for (int64_t l = 0; l < config_.n_layer; ++l) {
    LayerDiag dg;
    const UnitBuffers& ua = m.units[size_t(2 * l)];
    const UnitBuffers& um = m.units[size_t(2 * l + 1)];
    dg.kurtosis_attn_in = be.moments(pre ? ua.u : m.stream[size_t(2 * l)]).kurtosis;
    dg.kurtosis_mlp_in = be.moments(pre ? um.u : m.stream[size_t(2 * l + 1)]).kurtosis;
    dg.kurtosis_mlp_hidden = be.moments(m.mlp[size_t(l)].a).kurtosis;
    dg.kurtosis_out = be.moments(m.stream[size_t(2 * l + 2)]).kurtosis;
    AttnLayer& al = m.attn[size_t(l)];
    double res[2] = {0, 0};
    if (al.attn) be.download(res, al.residual);  // a Gated DeltaNet layer has no softmax
    dg.row_residual_max = res[0];
    dg.row_residual_mean = m.n_backward ? res[1] / double(m.n_backward) : 0.0;
    // not measured: no capturing backward since zero_grad, or an attention that keeps dS (cuDNN)
    if (al.attn && (m.n_backward == 0 || !al.attn->measures_row_residual()))
      dg.row_residual_max = dg.row_residual_mean = std::numeric_limits<double>::quiet_NaN();
    if (fp8) {
      MlpLayer& ml = m.mlp[size_t(l)];
      std::vector<const LinearOp*> ops;  // the FP8 ones (a Gated DeltaNet layer's are BF16)
      if (al.attn) ops = {&al.qkv, &al.proj};
      ops.insert(ops.end(), {&ml.fc1, &ml.fc2});
      for (const LinearOp* op : ops)
        dg.linears.push_back({op->name, op->lin->stats_x(), op->lin->stats_w(), op->lin->stats_dy()});
    }
    out.push_back(std::move(dg));
  }
  return out;
}

void Model::set_attention_capture(bool on) {
  Impl& m = *impl_;
  if (on)
    for (AttnLayer& al : m.attn)
      if (al.attn && al.d_o_sample.empty())
        al.d_o_sample = m.arena.make(precision_.activations, {1, m.T, m.H, m.Dh});
  m.capture = on;
}

AttentionSample Model::attention_sample(int64_t layer) {
  OCTET_CHECK(!memory_.activation_checkpointing,
              "attention_sample: activation checkpointing does not keep the layers' q, k, v "
              "(train.activation_checkpointing = false)");
  Impl& m = *impl_;
  OCTET_CHECK(layer >= 0 && layer < config_.n_layer, "attention_sample: layer " + std::to_string(layer) +
                                                         " is out of range [0, " +
                                                         std::to_string(config_.n_layer) + ")");
  AttnLayer& al = m.attn[size_t(layer)];
  OCTET_CHECK(al.attn != nullptr, "attention_sample: layer " + std::to_string(layer) +
                                      " has no attention (a Gated DeltaNet layer)");
  AttentionSample s;
  s.shape = attention_shape(config_, 1);
  s.shape.layout = AttnLayout::HeadsMajor;  // the sample is heads-major (model.h AttentionSample)
  s.config = attention_config(precision_);
  // batch element 0 of a tokens-major activation, moved to heads-major on the host
  auto heads_major = [&](const Tensor& t, int64_t heads) {
    const std::vector<float> tm = backend_.download_f32(t);
    std::vector<float> hm(tm.size());
    transpose_heads_tokens(tm.data(), hm.data(), 1, heads, m.T, m.Dh, false);
    return hm;
  };
  s.q = heads_major(al.q.slice(0, 1), m.H);
  s.k = heads_major(al.k.slice(0, 1), m.G);
  s.v = heads_major(al.v.slice(0, 1), m.G);
  if (m.captured && !al.d_o_sample.empty()) s.d_o = heads_major(al.d_o_sample, m.H);
  return s;
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
