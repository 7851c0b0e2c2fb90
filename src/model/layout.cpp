// src/model/layout.cpp — parameter table and deterministic init (see layout.h).
#include "model/layout.h"

#include <cmath>

namespace octet::model_detail {

std::vector<ParamInfo> build_param_table(const ModelConfig& c) {
  std::vector<ParamInfo> t;
  size_t offset = 0;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool decay) {
    ParamInfo p;
    p.name = name;
    p.shape = std::move(shape);
    p.numel = 1;
    for (int64_t s : p.shape) p.numel *= size_t(s);
    p.offset = offset;
    p.decay = decay;
    offset += p.numel;
    t.push_back(std::move(p));
  };
  auto add_norm = [&](const std::string& prefix) {
    add(prefix + ".weight", {c.d_model}, false);
    if (c.norm == NormKind::LayerNorm) add(prefix + ".bias", {c.d_model}, false);
  };
  const int64_t d = c.d_model, hd = c.head_dim();
  const int64_t qkv_out = (c.n_head + 2 * c.n_kv_head) * hd;
  const int64_t fc1_out = c.mlp == MlpKind::SwiGLU ? 2 * c.d_ff : c.d_ff;
  add("wte", {c.vocab_size, d}, true);
  if (c.positions == PositionKind::Learned) add("wpe", {c.seq_len, d}, true);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l);
    add_norm(h + ".norm1");
    if (c.attention_layer(l)) {
      add(h + ".attn.qkv.weight", {qkv_out, d}, true);
      if (c.qk_norm && c.qk_norm_trainable) {
        add(h + ".attn.q_norm.weight", {hd}, false);
        add(h + ".attn.k_norm.weight", {hd}, false);
      }
      add(h + ".attn.proj.weight", {d, c.n_head * hd}, true);
    } else {  // Gated DeltaNet: q, k, v of n_head heads; the gate projections a, b
      add(h + ".gdn.qkv.weight", {3 * c.n_head * hd, d}, true);
      add(h + ".gdn.gates.weight", {2 * c.n_head, d}, true);
      add(h + ".gdn.proj.weight", {d, c.n_head * hd}, true);
    }
    add_norm(h + ".norm2");
    add(h + ".mlp.fc1.weight", {fc1_out, d}, true);
    add(h + ".mlp.fc2.weight", {d, c.d_ff}, true);
  }
  add_norm("norm_f");
  if (!c.tied_embeddings) add("lm_head.weight", {c.vocab_size, d}, true);
  return t;
}

std::vector<float> init_params(const ModelConfig& c, const std::vector<ParamInfo>& table, uint64_t seed) {
  size_t total = 0;
  for (auto& p : table) total = p.offset + p.numel;
  std::vector<float> out(total, 0.0f);
  const double resid_scale = c.unit_scaling ? 1.0 : 1.0 / std::sqrt(2.0 * double(c.n_layer));
  const double base = c.unit_scaling ? 1.0 : double(c.init_std);
  for (auto& p : table) {
    float* w = out.data() + p.offset;
    const bool is_bias = p.name.size() > 5 && p.name.compare(p.name.size() - 5, 5, ".bias") == 0;
    if (p.shape.size() == 1) {  // norm gains 1, biases 0
      for (size_t i = 0; i < p.numel; ++i) w[i] = is_bias ? 0.0f : 1.0f;
      continue;
    }
    double std = base;
    if (p.name.find(".attn.proj.") != std::string::npos || p.name.find(".gdn.proj.") != std::string::npos ||
        p.name.find(".mlp.fc2.") != std::string::npos)
      std *= resid_scale;
    uint64_t state = seed ^ fnv1a64(p.name.data(), p.name.size());
    for (size_t i = 0; i < p.numel; i += 2) {  // Box–Muller on 53-bit uniforms
      const double u1 = (double((splitmix64(state) >> 11) + 1)) * 0x1.0p-53;  // (0, 1]
      const double u2 = double(splitmix64(state) >> 11) * 0x1.0p-53;          // [0, 1)
      const double r = std::sqrt(-2.0 * std::log(u1));
      w[i] = float(std * r * std::cos(2.0 * M_PI * u2));
      if (i + 1 < p.numel) w[i + 1] = float(std * r * std::sin(2.0 * M_PI * u2));
    }
  }
  return out;
}

}  // namespace octet::model_detail
