// src/train/config.cpp — the run configuration: one registry of dotted keys (model.*, precision.*,
// train.*, data.*, device) with a typed parser and printer each, used by the TOML reader (toml++,
// TOML v1.0), the --set overrides, the start-up table and the config.toml a run writes.
// Unknown keys, wrong types and out-of-range values are errors naming the key (torchtitan-style
// TOML configs, but strict).
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <type_traits>
#include <utility>
#include <toml++/toml.h>

#include "octet/error.h"
#include "octet/names.h"
#include "octet/train.h"

namespace octet {

namespace {

struct Key {
  std::string key;
  std::function<std::string(const RunConfig&)> get;
  std::function<void(RunConfig&, const std::string&)> set;
  bool is_string = false;  // TOML: quoted
};

int64_t parse_int(const std::string& key, const std::string& v) {
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  OCTET_CHECK(!v.empty() && end && *end == '\0' && errno == 0,
              "config key '" + key + "': expected an integer, got '" + v + "'");
  return x;
}
float parse_float(const std::string& key, const std::string& v) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  OCTET_CHECK(!v.empty() && end && *end == '\0' && std::isfinite(x),
              "config key '" + key + "': expected a finite number, got '" + v + "'");
  return float(x);
}
bool parse_bool(const std::string& key, const std::string& v) {
  if (v == "true" || v == "on" || v == "1") return true;
  if (v == "false" || v == "off" || v == "0") return false;
  OCTET_FAIL("config key '" + key + "': expected true/false (or on/off), got '" + v + "'");
}
std::string fmt_float(float x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", double(x));
  std::string s(buf);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}
std::string fmt_bool(bool b) { return b ? "true" : "false"; }

// Registry helpers: a member reached by a lambda returning a reference.
template <class F>
Key int_key(std::string k, F ref) {
  return {k, [ref](const RunConfig& c) { return std::to_string(ref(const_cast<RunConfig&>(c))); },
          [ref, k](RunConfig& c, const std::string& v) { ref(c) = parse_int(k, v); }};
}
template <class F>
Key float_key(std::string k, F ref) {
  return {k, [ref](const RunConfig& c) { return fmt_float(ref(const_cast<RunConfig&>(c))); },
          [ref, k](RunConfig& c, const std::string& v) { ref(c) = parse_float(k, v); }};
}
template <class F>
Key bool_key(std::string k, F ref) {
  return {k, [ref](const RunConfig& c) { return fmt_bool(ref(const_cast<RunConfig&>(c))); },
          [ref, k](RunConfig& c, const std::string& v) { ref(c) = parse_bool(k, v); }};
}
template <class F>
Key string_key(std::string k, F ref) {
  Key key{k, [ref](const RunConfig& c) { return std::string(ref(const_cast<RunConfig&>(c))); },
          [ref](RunConfig& c, const std::string& v) { ref(c) = v; }};
  key.is_string = true;
  return key;
}
// Enum: stored as its name, parsed and printed by the one name table (octet/names.h).
template <class F>
Key enum_key(std::string k, F ref) {
  using E = std::remove_reference_t<decltype(ref(std::declval<RunConfig&>()))>;
  Key key{k, [ref](const RunConfig& c) { return enum_name<E>(ref(const_cast<RunConfig&>(c))); },
          [ref](RunConfig& c, const std::string& v) { ref(c) = parse_enum<E>(v); }};
  key.is_string = true;
  return key;
}

#define REF(expr) [](RunConfig & c) -> auto& { return c.expr; }

const std::vector<Key>& registry() {
  static const std::vector<Key> keys = [] {
    std::vector<Key> k;
    k.push_back(string_key("device", REF(device)));
    // model
    k.push_back(int_key("model.n_layer", REF(model.n_layer)));
    k.push_back(int_key("model.d_model", REF(model.d_model)));
    k.push_back(int_key("model.n_head", REF(model.n_head)));
    k.push_back(int_key("model.n_kv_head", REF(model.n_kv_head)));
    k.push_back(int_key("model.d_ff", REF(model.d_ff)));
    k.push_back(int_key("model.vocab_size", REF(model.vocab_size)));
    k.push_back(int_key("model.seq_len", REF(model.seq_len)));
    k.push_back(enum_key("model.norm", REF(model.norm)));
    k.push_back(enum_key("model.norm_placement", REF(model.norm_placement)));
    k.push_back(bool_key("model.qk_norm", REF(model.qk_norm)));
    k.push_back(bool_key("model.qk_norm_trainable", REF(model.qk_norm_trainable)));
    k.push_back(enum_key("model.positions", REF(model.positions)));
    k.push_back(float_key("model.rope_theta", REF(model.rope_theta)));
    k.push_back(enum_key("model.mlp", REF(model.mlp)));
    k.push_back(bool_key("model.tied_embeddings", REF(model.tied_embeddings)));
    k.push_back(float_key("model.init_std", REF(model.init_std)));
    k.push_back(float_key("model.norm_eps", REF(model.norm_eps)));
    k.push_back(bool_key("model.unit_scaling", REF(model.unit_scaling)));
    k.push_back(float_key("model.residual_tau", REF(model.residual_tau)));
    // precision
    k.push_back(enum_key("precision.arm", REF(precision.arm)));
    k.push_back({"precision.activations", [](const RunConfig& c) { return c.activations; },
                 [](RunConfig& c, const std::string& v) {
                   OCTET_CHECK(v == "auto" || v == "f32" || v == "bf16",
                               "config key 'precision.activations': expected auto, f32 or bf16, "
                               "got '" + v + "'");
                   c.activations = v;
                   if (v != "auto") c.precision.activations = parse_dtype(v);
                 },
                 true});
    k.push_back(enum_key("precision.recipe", REF(precision.quant.recipe)));
    k.push_back(enum_key("precision.formats", REF(precision.quant.formats)));
    k.push_back(int_key("precision.amax_history_len", REF(precision.quant.amax_history_len)));
    k.push_back(enum_key("precision.amax_algo", REF(precision.quant.amax_algo)));
    k.push_back(int_key("precision.margin", REF(precision.quant.margin)));
    k.push_back(bool_key("precision.pow2_scales", REF(precision.quant.pow2_scales)));
    k.push_back(float_key("precision.unit_scale", REF(precision.quant.unit_scale)));
    k.push_back(enum_key("precision.attn_form", REF(precision.attn_form)));
    k.push_back(enum_key("precision.qkv_scaling", REF(precision.qkv_scaling)));
    k.push_back(float_key("precision.p_scale", REF(precision.p_scale)));
    // train
    k.push_back(int_key("train.steps", REF(train.steps)));
    k.push_back(int_key("train.batch_size", REF(train.batch_size)));
    k.push_back(int_key("train.grad_accum", REF(train.grad_accum)));
    k.push_back(float_key("train.lr", REF(train.lr)));
    k.push_back(float_key("train.min_lr_ratio", REF(train.min_lr_ratio)));
    k.push_back(int_key("train.warmup_steps", REF(train.warmup_steps)));
    k.push_back(float_key("train.weight_decay", REF(train.weight_decay)));
    k.push_back(float_key("train.beta1", REF(train.beta1)));
    k.push_back(float_key("train.beta2", REF(train.beta2)));
    k.push_back(float_key("train.eps", REF(train.eps)));
    k.push_back(float_key("train.grad_clip", REF(train.grad_clip)));
    k.push_back({"train.seed",
                 [](const RunConfig& c) { return std::to_string(c.train.seed); },
                 [](RunConfig& c, const std::string& v) {
                   const int64_t s = parse_int("train.seed", v);
                   OCTET_CHECK(s >= 0, "config key 'train.seed' must be >= 0");
                   c.train.seed = uint64_t(s);
                 }});
    k.push_back(int_key("train.eval_every", REF(train.eval_every)));
    k.push_back(int_key("train.eval_batches", REF(train.eval_batches)));
    k.push_back(int_key("train.sample_tokens", REF(train.sample_tokens)));
    k.push_back(int_key("train.checkpoint_every", REF(train.checkpoint_every)));
    k.push_back(int_key("train.log_every", REF(train.log_every)));
    k.push_back(int_key("train.max_bad_steps", REF(train.max_bad_steps)));
    // data
    k.push_back(string_key("data.path", REF(data.path)));
    k.push_back(string_key("data.tokenizer", REF(data.tokenizer)));
    k.push_back({"data.val_fraction",
                 [](const RunConfig& c) { return fmt_float(float(c.data.val_fraction)); },
                 [](RunConfig& c, const std::string& v) {
                   c.data.val_fraction = parse_float("data.val_fraction", v);
                 }});
    k.push_back(string_key("data.cache_dir", REF(data.cache_dir)));
    k.push_back(int_key("data.max_bytes", REF(data.max_bytes)));
    return k;
  }();
  return keys;
}
#undef REF

const Key& find_key(const std::string& key) {
  for (auto& k : registry())
    if (k.key == key) return k;
  OCTET_FAIL("unknown config key '" + key + "'");
}

std::string toml_leaf_to_string(const std::string& key, const toml::node& n) {
  if (auto v = n.as_string()) return v->get();
  if (auto v = n.as_integer()) return std::to_string(v->get());
  if (auto v = n.as_floating_point()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v->get());
    return buf;
  }
  if (auto v = n.as_boolean()) return v->get() ? "true" : "false";
  OCTET_FAIL("config key '" + key + "': unsupported TOML value type");
}

void apply_table(RunConfig& cfg, const toml::table& t, const std::string& prefix) {
  for (auto&& [k, v] : t) {
    const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (auto sub = v.as_table()) {
      apply_table(cfg, *sub, key);
    } else {
      set_config_value(cfg, key, toml_leaf_to_string(key, v));
    }
  }
}

std::string toml_quote(const std::string& s) {
  std::string o = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') o += '\\';
    if (ch == '\n') {
      o += "\\n";
      continue;
    }
    o += ch;
  }
  return o + "\"";
}

}  // namespace

void set_config_value(RunConfig& cfg, const std::string& key, const std::string& value) {
  find_key(key).set(cfg, value);
}

RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  RunConfig cfg;
  if (!path.empty()) {
    toml::table t;
    try {
      t = toml::parse_file(path);
    } catch (const toml::parse_error& e) {
      std::ostringstream os;
      os << "cannot parse config " << path << ": " << e.description() << " (line "
         << e.source().begin.line << ")";
      OCTET_FAIL(os.str());
    }
    apply_table(cfg, t, "");
  }
  for (const std::string& o : overrides) {
    const auto eq = o.find('=');
    OCTET_CHECK(eq != std::string::npos && eq > 0, "--set expects key=value, got '" + o + "'");
    set_config_value(cfg, o.substr(0, eq), o.substr(eq + 1));
  }
  cfg.validate();
  return cfg;
}

void RunConfig::validate() const {
  const TrainConfig& t = train;
  auto at_least = [](int64_t v, int64_t lo, const char* name) {
    OCTET_CHECK(v >= lo, std::string(name) + " must be >= " + std::to_string(lo) + " (got " +
                             std::to_string(v) + ")");
  };
  at_least(t.batch_size, 1, "train.batch_size");
  // The model and precision rules, and what the model's attention and linears would reject when
  // built (octet/model.h): a run fails here, before it writes anything.
  validate_model_precision(model, precision, t.batch_size);
  at_least(t.steps, 1, "train.steps");
  at_least(t.grad_accum, 1, "train.grad_accum");
  at_least(t.warmup_steps, 0, "train.warmup_steps");
  at_least(t.eval_every, 1, "train.eval_every");
  at_least(t.eval_batches, 1, "train.eval_batches");
  at_least(t.sample_tokens, 0, "train.sample_tokens");
  at_least(t.checkpoint_every, 0, "train.checkpoint_every");
  at_least(t.log_every, 1, "train.log_every");
  at_least(t.max_bad_steps, 1, "train.max_bad_steps");
  at_least(data.max_bytes, 0, "data.max_bytes");
  OCTET_CHECK(t.lr > 0, "train.lr must be > 0");
  OCTET_CHECK(t.min_lr_ratio >= 0 && t.min_lr_ratio <= 1, "train.min_lr_ratio must be in [0, 1]");
  OCTET_CHECK(t.weight_decay >= 0, "train.weight_decay must be >= 0");
  OCTET_CHECK(t.beta1 >= 0 && t.beta1 < 1, "train.beta1 must be in [0, 1)");
  OCTET_CHECK(t.beta2 >= 0 && t.beta2 < 1, "train.beta2 must be in [0, 1)");
  OCTET_CHECK(t.eps > 0, "train.eps must be > 0");
  OCTET_CHECK(t.grad_clip >= 0, "train.grad_clip must be >= 0 (0 disables clipping)");
  OCTET_CHECK(data.val_fraction > 0 && data.val_fraction <= 0.5, "data.val_fraction must be in (0, 0.5]");
  OCTET_CHECK(data.tokenizer == "bpe" || data.tokenizer == "byte",
              "unknown data.tokenizer '" + data.tokenizer + "' (expected one of: bpe, byte)");
  if (data.tokenizer == "byte")
    OCTET_CHECK(model.vocab_size >= 256, "model.vocab_size must be >= 256 for the byte tokenizer (got " +
                                             std::to_string(model.vocab_size) + ")");
  else
    OCTET_CHECK(model.vocab_size >= 300 && model.vocab_size <= 65536,
                "model.vocab_size must be in [300, 65536] for the bpe tokenizer (got " +
                    std::to_string(model.vocab_size) + ")");
  OCTET_CHECK(device == "cpu" || device == "cuda",
              "unknown device '" + device + "' (expected one of: cpu, cuda)");
}

void resolve_activations(RunConfig& cfg, const Backend& backend) {
  if (cfg.activations == "auto") cfg.precision.activations = backend.preferred_activation_dtype();
  cfg.activations = to_string(cfg.precision.activations);
}

std::string to_toml(const RunConfig& cfg) {
  std::ostringstream os;
  os << "# octet run configuration (resolved)\n";
  std::string section;
  for (const Key& k : registry()) {
    const auto dot = k.key.find('.');
    const std::string sec = dot == std::string::npos ? "" : k.key.substr(0, dot);
    const std::string name = dot == std::string::npos ? k.key : k.key.substr(dot + 1);
    if (sec != section) {
      os << "\n[" << sec << "]\n";
      section = sec;
    }
    const std::string v = k.get(cfg);
    os << name << " = " << (k.is_string ? toml_quote(v) : v) << "\n";
  }
  return os.str();
}

std::vector<std::pair<std::string, std::string>> config_rows(const RunConfig& cfg) {
  std::vector<std::pair<std::string, std::string>> rows;
  for (const Key& k : registry()) rows.emplace_back(k.key, k.get(cfg));
  return rows;
}

}  // namespace octet
