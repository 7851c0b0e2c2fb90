// src/train/config.cpp — the run configuration: one registry of dotted keys (model.*, precision.*,
// train.*, data.*, dist.*, device) with a typed parser and printer each, used by the TOML reader (toml++,
// TOML v1.0), the --set overrides, the start-up table and the config.toml a run writes.
// Unknown keys, wrong types and out-of-range values are errors naming the key (torchtitan-style
// TOML configs, but strict).
#include <charconv>
#include <cerrno>
#include <filesystem>
#include <set>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <type_traits>
#include <utility>
#include <toml++/toml.h>

#include "octet/dist.h"
#include "octet/error.h"
#include "octet/names.h"
#include "octet/train.h"

namespace octet {

namespace {

struct Key {
  using Get = std::function<std::string(const RunConfig&)>;
  using Set = std::function<void(RunConfig&, const std::string&)>;
  Key(std::string k, Get g, Set s, bool str = false)
      : key(std::move(k)), get(std::move(g)), set(std::move(s)), is_string(str) {}
  std::string key;
  Get get;
  Set set;
  bool is_string = false;  // TOML: quoted
  std::string meaning;     // the settings table's third column (docs/training.md §"Config keys")
  bool on_resume = false;  // may change on --resume (a "schedule" key); otherwise a "meaning" key
  bool is_path = false;    // a relative value resolves against its config file's directory
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
  const float x = std::strtof(v.c_str(), &end);  // correctly rounded from the decimal text
  OCTET_CHECK(!v.empty() && end && *end == '\0' && std::isfinite(x),
              "config key '" + key + "': expected a finite number, got '" + v + "'");
  return x;
}
bool parse_bool(const std::string& key, const std::string& v) {
  if (v == "true" || v == "on" || v == "1") return true;
  if (v == "false" || v == "off" || v == "0") return false;
  OCTET_FAIL("config key '" + key + "': expected true/false (or on/off, 1/0), got '" + v + "'");
}
// The shortest decimal that reads back as the same float (0.003, not 0.00300000003): the value as a
// user types it, and still an exact round trip through config.toml.
std::string fmt_float(float x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}
std::string fmt_bool(bool b) { return b ? "true" : "false"; }

// Registry helpers: a member reached by a lambda returning a reference.
template <class F>
Key int_key(std::string k, F ref) {
  return {k, [ref](const RunConfig& c) { return std::to_string(ref(const_cast<RunConfig&>(c))); },
          [ref, k](RunConfig& c, const std::string& v) {
            // the field's own type (many are 32-bit): a value it cannot hold is refused, not wrapped
            using T = std::remove_reference_t<decltype(ref(c))>;
            const int64_t x = parse_int(k, v);
            OCTET_CHECK(std::in_range<T>(x), "config key '" + k + "': " + std::to_string(x) +
                                                 " does not fit its " + std::to_string(8 * sizeof(T)) +
                                                 "-bit integer");
            ref(c) = T(x);
          }};
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

#define REF(expr) \
  [](RunConfig & c) -> auto& { return c.expr; }

const std::vector<Key>& registry() {
  static const std::vector<Key> keys = [] {
    std::vector<Key> k;
    // meaning: the table's third column; flags: R = may change on --resume ("schedule": how long
    // and how fast the run goes, how often it reports, where it computes), P = a path; every key
    // without R is a "meaning" key that a resume refuses to change (docs/training.md §Resume).
    auto add = [&k](Key key, const char* meaning, const char* flags = "") {
      key.meaning = meaning;
      key.on_resume = std::string_view(flags).find('R') != std::string_view::npos;
      key.is_path = std::string_view(flags).find('P') != std::string_view::npos;
      k.push_back(std::move(key));
    };
    add(string_key("device", REF(device)), "where the run computes: cpu, cuda", "R");
    // model
    add(int_key("model.n_layer", REF(model.n_layer)), "transformer blocks");
    add(int_key("model.d_model", REF(model.d_model)), "residual-stream width");
    add(int_key("model.n_head", REF(model.n_head)), "query heads (divides d_model)");
    add(int_key("model.n_kv_head", REF(model.n_kv_head)), "key/value heads (GQA; divides n_head)");
    add(int_key("model.d_ff", REF(model.d_ff)), "MLP hidden width (SwiGLU's fc1 has 2x)");
    add(int_key("model.vocab_size", REF(model.vocab_size)),
        "tokens in the vocabulary (BPE pieces; byte: >= 256)");
    add(int_key("model.seq_len", REF(model.seq_len)), "tokens per training sequence");
    add(enum_key("model.norm", REF(model.norm)), "rmsnorm, layernorm");
    add(enum_key("model.norm_placement", REF(model.norm_placement)), "pre, post, output (FOG)");
    add(bool_key("model.qk_norm", REF(model.qk_norm)), "RMSNorm of each query and key head");
    add(bool_key("model.qk_norm_trainable", REF(model.qk_norm_trainable)),
        "QK-norm gain trained (else fixed at 1)");
    add(enum_key("model.positions", REF(model.positions)), "rope, learned, nope");
    add(float_key("model.rope_theta", REF(model.rope_theta)), "RoPE base");
    add(enum_key("model.mlp", REF(model.mlp)), "swiglu, gelu");
    add(enum_key("model.mixer", REF(model.mixer)),
        "attention, hybrid (every 4th layer attention, the others Gated DeltaNet)");
    add(bool_key("model.tied_embeddings", REF(model.tied_embeddings)), "LM head = token embedding");
    add(float_key("model.init_std", REF(model.init_std)),
        "sigma of the N(0, sigma) init of matrices and embeddings");
    add(float_key("model.norm_eps", REF(model.norm_eps)), "epsilon of the norms");
    add(bool_key("model.unit_scaling", REF(model.unit_scaling)),
        "unit scaling: N(0, 1) init, static 1/sqrt(fan_in) outputs");
    add(float_key("model.residual_tau", REF(model.residual_tau)), "unit scaling's residual mix tau");
    // precision
    add(enum_key("precision.arm", REF(precision.arm)), "bf16, fp8-linear, fp8-stale, fp8-matched, fp32");
    add({"precision.activations", [](const RunConfig& c) { return c.activations; },
         [](RunConfig& c, const std::string& v) {
           OCTET_CHECK(v == "auto" || v == "f32" || v == "bf16",
                       "config key 'precision.activations': expected auto, f32 or bf16, "
                       "got '" +
                           v + "'");
           c.activations = v;
           if (v != "auto") c.precision.activations = parse_dtype(v);
         },
         true},
        "dtype between ops: auto (the backend's), f32, bf16");
    add(enum_key("precision.recipe", REF(precision.quant.recipe)), "FP8 scaling of the linears");
    add(enum_key("precision.formats", REF(precision.quant.formats)),
        "e4m3 everywhere, or hybrid (E5M2 gradients)");
    add(int_key("precision.amax_history_len", REF(precision.quant.amax_history_len)),
        "tensor-delayed: amax history length");
    add(enum_key("precision.amax_algo", REF(precision.quant.amax_algo)),
        "tensor-delayed: max, most_recent of the history");
    add(int_key("precision.margin", REF(precision.quant.margin)),
        "scales leave 2^margin headroom below the format's max (0..32)");
    add(bool_key("precision.pow2_scales", REF(precision.quant.pow2_scales)),
        "round scales down to powers of two");
    add(float_key("precision.unit_scale", REF(precision.quant.unit_scale)), "the unit recipe's fixed scale");
    add({"precision.attn_form", [](const RunConfig& c) { return c.attn_form; },
         [](RunConfig& c, const std::string& v) {
           OCTET_CHECK(v == "auto" || v == "whole" || v == "flash" || v == "tiled",
                       "config key 'precision.attn_form': expected auto, whole or flash, got '" + v + "'");
           c.attn_form = v == "auto" ? v : to_string(parse_attn_form(v));  // "tiled": flash's former name
           if (v != "auto") c.precision.attn_form = parse_attn_form(v);
         },
         true},
        "attention form: auto (cuda FP8: flash = the flash kernels; else whole), whole, flash");
    add(enum_key("precision.qkv_scaling", REF(precision.qkv_scaling)), "Q, K, V scales: tensor, head-block");
    add(float_key("precision.p_scale", REF(precision.p_scale)), "static power-of-two scale of P before E4M3");
    add(int_key("precision.attn_tile", REF(precision.attn_tile)),
        "FP8 attention's block_q = block_k (the dS scale tile): 128 or 64");
    // train
    add(int_key("train.steps", REF(train.steps)), "optimizer steps", "R");
    add(int_key("train.batch_size", REF(train.batch_size)), "sequences per micro-batch");
    add(int_key("train.grad_accum", REF(train.grad_accum)), "micro-batches per optimizer step");
    add(float_key("train.lr", REF(train.lr)), "peak learning rate", "R");
    add(float_key("train.min_lr_ratio", REF(train.min_lr_ratio)), "cosine floor as a fraction of lr", "R");
    add(int_key("train.warmup_steps", REF(train.warmup_steps)), "steps of linear warmup", "R");
    add(float_key("train.weight_decay", REF(train.weight_decay)),
        "AdamW decoupled weight decay (matrices, embeddings)");
    add(float_key("train.beta1", REF(train.beta1)), "AdamW beta1");
    add(float_key("train.beta2", REF(train.beta2)), "AdamW beta2");
    add(float_key("train.eps", REF(train.eps)), "AdamW epsilon");
    add(float_key("train.grad_clip", REF(train.grad_clip)), "global gradient-norm clip (0: off)");
    add({"train.seed", [](const RunConfig& c) { return std::to_string(c.train.seed); },
         [](RunConfig& c, const std::string& v) {
           const int64_t s = parse_int("train.seed", v);
           OCTET_CHECK(s >= 0, "config key 'train.seed' must be >= 0");
           c.train.seed = uint64_t(s);
         }},
        "seed of the init and the data order");
    add(int_key("train.eval_every", REF(train.eval_every)), "steps between validation passes", "R");
    add(int_key("train.eval_batches", REF(train.eval_batches)), "validation micro-batches per pass");
    add(int_key("train.sample_tokens", REF(train.sample_tokens)),
        "tokens sampled and printed at each evaluation (0: off)", "R");
    add(int_key("train.checkpoint_every", REF(train.checkpoint_every)),
        "steps between checkpoints (0: only at the end)", "R");
    add(bool_key("train.save_weights", REF(train.save_weights)),
        "keep the run's weights at its end (false: metrics only; periodic checkpoints while it runs)", "R");
    add(int_key("train.log_every", REF(train.log_every)), "steps between progress lines", "R");
    add(int_key("train.max_bad_steps", REF(train.max_bad_steps)),
        "NaN/inf steps in a row before the run stops", "R");
    add(bool_key("train.activation_checkpointing", REF(train.activation_checkpointing)),
        "recompute each layer's forward in the backward (less memory, same bits)", "R");
    // data
    // a schedule key: the corpus may move, and a resume checks that its tokens are the same
    // (the checkpoint's tokens_hash; check_resume refuses a move without one)
    add(string_key("data.path", REF(data.path)), "corpus: a file, a directory or a glob", "RP");
    add(string_key("data.tokenizer", REF(data.tokenizer)), "bpe, byte");
    add({"data.val_fraction", [](const RunConfig& c) { return fmt_float(float(c.data.val_fraction)); },
         [](RunConfig& c, const std::string& v) {
           c.data.val_fraction = parse_float("data.val_fraction", v);
         }},
        "share of windows held out for validation");
    add(string_key("data.cache_dir", REF(data.cache_dir)), "tokenizer model and token cache", "RP");
    add(int_key("data.max_bytes", REF(data.max_bytes)), "read only the first N corpus bytes (0: all)");
    // dist (data parallel; docs/distributed.md)
    add(float_key("dist.bucket_mb", REF(dist.bucket_mb)),
        "MiB of gradients per bucket reduced during the backward (0: one, after it)", "R");
    add(bool_key("dist.allgather_fp8", REF(dist.allgather_fp8)),
        "all-gather the FP8 linears' weights as FP8 codes (tensor-current only)", "R");
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

// Sets every leaf of `t`; `set_keys` collects the dotted keys it set.
void apply_table(RunConfig& cfg, const toml::table& t, const std::string& prefix,
                 std::set<std::string>& set_keys) {
  for (auto&& [k, v] : t) {
    const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (auto sub = v.as_table()) {
      apply_table(cfg, *sub, key, set_keys);
    } else {
      set_config_value(cfg, key, toml_leaf_to_string(key, v));
      set_keys.insert(key);
    }
  }
}

// A relative path made absolute against `base` (empty stays empty: "not given").
std::string absolute_against(const std::string& value, const std::filesystem::path& base) {
  const std::filesystem::path p(value);
  if (value.empty() || p.is_absolute()) return value;
  return (base / p).lexically_normal().string();
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
  std::set<std::string> from_file;  // keys whose value comes from the file (not --set)
  if (!path.empty()) {
    OCTET_CHECK(!std::filesystem::is_directory(path),
                "--config " + path + " is a directory (expected a TOML file)");
    {  // a file that cannot be read: the system's reason, not the parser's "line 0"
      errno = 0;
      std::ifstream probe(path);
      OCTET_CHECK(probe.good(), io_error("cannot read config", path));
    }
    toml::table t;
    try {
      t = toml::parse_file(path);
    } catch (const toml::parse_error& e) {
      std::ostringstream os;
      os << "cannot parse config " << path << ": " << e.description() << " (line " << e.source().begin.line
         << ")";
      OCTET_FAIL(os.str());
    }
    apply_table(cfg, t, "", from_file);
  }
  for (const std::string& o : overrides) {
    const auto eq = o.find('=');
    OCTET_CHECK(eq != std::string::npos && eq > 0, "--set expects key=value, got '" + o + "'");
    set_config_value(cfg, o.substr(0, eq), o.substr(eq + 1));
    from_file.erase(o.substr(0, eq));
  }
  // Paths: a relative one from the file resolves against the file's directory, one from --set (or
  // a default) against the working directory; all end absolute, so that the config.toml a run
  // writes means the same from wherever it is resumed.
  namespace fs = std::filesystem;
  const fs::path file_dir = path.empty() ? fs::path() : fs::absolute(fs::path(path)).parent_path();
  for (const Key& k : registry()) {
    if (!k.is_path) continue;
    const std::string v = k.get(cfg);
    const std::string resolved = absolute_against(v, from_file.count(k.key) ? file_dir : fs::current_path());
    if (resolved != v) k.set(cfg, resolved);
  }
  cfg.validate();
  return cfg;
}

void RunConfig::validate() const {
  const TrainConfig& t = train;
  auto at_least = [](int64_t v, int64_t lo, const char* name) {
    OCTET_CHECK(v >= lo,
                std::string(name) + " must be >= " + std::to_string(lo) + " (got " + std::to_string(v) + ")");
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
  bucket_elems_from_mb(dist.bucket_mb);  // the rule of dist.bucket_mb (octet/dist.h)
  OCTET_CHECK(
      !dist.allgather_fp8 || precision.quant.recipe == Recipe::TensorCurrent,
      "dist.allgather_fp8 = true needs precision.recipe = tensor-current (got " +
          to_string(precision.quant.recipe) +
          "): only a whole-tensor scale from the current amax lets each rank quantize its shard alone "
          "(docs/distributed.md §\"FP8 all-gather\")");
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
  const bool cuda_n = device.rfind("cuda:", 0) == 0 && device.size() > 5 && device.size() <= 8 &&
                      device.find_first_not_of("0123456789", 5) == std::string::npos;
  OCTET_CHECK(device == "cpu" || device == "cuda" || cuda_n,
              "unknown device '" + device + "' (expected one of: cpu, cuda, cuda:N)");
}

void resolve_run_config(RunConfig& cfg, const Backend& backend) {
  // the default corpus and tokenizer cache under octet's home, recorded as absolute paths, so a run
  // resumes and evaluates on the same data wherever octet's home is later (docs/cli.md)
  cfg.data.path = resolve_corpus_path(cfg.data.path);
  cfg.data.cache_dir = resolve_cache_dir(cfg.data.cache_dir);
  if (cfg.activations == "auto") cfg.precision.activations = backend.preferred_activation_dtype();
  cfg.activations = to_string(cfg.precision.activations);
  if (cfg.attn_form == "auto")
    cfg.precision.attn_form = default_attn_form(cfg.model, cfg.precision, backend.name());
  cfg.attn_form = to_string(cfg.precision.attn_form);
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

std::vector<ConfigRow> config_rows(const RunConfig& cfg) {
  std::vector<ConfigRow> rows;
  for (const Key& k : registry()) rows.push_back({k.key, k.get(cfg), k.meaning});
  return rows;
}

void print_config_table(FILE* log, const std::vector<ConfigRow>& rows, const std::vector<ConfigRow>& base) {
  auto cell = [](const std::string& v) {  // a '|' in a value (a path) would split the Markdown cell
    std::string o;
    for (char ch : v) {
      if (ch == '|') o += '\\';
      o += ch;
    }
    return o;
  };
  std::fprintf(log, "| parameter | value | meaning |\n|---|---|---|\n");
  for (size_t i = 0; i < rows.size(); ++i)
    if (base.empty() || base[i].key != rows[i].key || base[i].value != rows[i].value)
      std::fprintf(log, "| %s | %s | %s |\n", rows[i].key.c_str(), cell(rows[i].value).c_str(),
                   rows[i].meaning.c_str());
}

std::vector<ConfigChange> resume_changes(const RunConfig& saved, const RunConfig& requested,
                                         const std::string& run_dir) {
  std::vector<ConfigChange> changes;
  for (const Key& k : registry()) {
    const std::string from = k.get(saved), to = k.get(requested);
    if (from == to) continue;
    OCTET_CHECK(k.on_resume, "cannot resume " + run_dir + " with " + k.key + " = " + to + " (it was " + from +
                                 "): " + k.key + " changes what the run is; start a new run with --out");
    changes.push_back({k.key, from, to});
  }
  return changes;
}

std::map<std::string, std::string> meaning_values(const RunConfig& cfg) {
  std::map<std::string, std::string> values;
  for (const Key& k : registry())
    if (!k.on_resume) values[k.key] = k.get(cfg);
  return values;
}

void check_recorded_meaning(const std::map<std::string, std::string>& recorded, const RunConfig& requested,
                            const std::string& run_dir, const std::string& action, const std::string& file) {
  for (const Key& k : registry()) {
    const auto it = recorded.find(k.key);
    if (k.on_resume || it == recorded.end()) continue;
    const std::string now = k.get(requested);
    std::string then = it->second;  // in the key's current spelling (e.g. attn_form "tiled" is "flash")
    try {
      RunConfig canon = requested;
      k.set(canon, then);
      then = k.get(canon);
    } catch (const Error&) {  // a value this version refuses: compared as recorded
    }
    OCTET_CHECK(now == then || !file.empty(),
                "cannot " + action + " " + run_dir + " with " + k.key + " = " + now +
                    " from its config.toml: its checkpoint was trained with " + k.key + " = " + it->second +
                    ", and " + k.key + " changes what the run is; restore it" +
                    (action == "resume" ? ", or start a new run with --out" : ""));
    OCTET_CHECK(now == then, "cannot " + action + " " + file + " into " + run_dir + ": it was trained with " +
                                 k.key + " = " + it->second + ", and " + run_dir + "'s config.toml has " +
                                 k.key + " = " + now + " (" + k.key + " changes what the run is)");
  }
}

}  // namespace octet
