// `octet attention-check`: runs the CPU attention (one precision, delta mode and form) forward and
// backward on generated inputs and measures it against the FP64 oracle: relative L2 errors of O,
// dQ, dK, dV, the cosine of dQ, the dQ error along the attention-weighted mean key, and the
// softmax-gradient row residual r_i = |Σ_j dS_ij| / Σ_j P_ij(|dP_ij| + |D_i|) that Delta-Matching
// drives to zero (docs/design.md §"The two deltas"; docs/delta-matching.md holds the measured table and its commands).
// --dump FILE writes inputs, results and the oracle as safetensors (octet/train.h's writer), for
// the PyTorch oracle test.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "octet/attention.h"
#include "octet/command.h"
#include "octet/enum_option.h"
#include "octet/error.h"
#include "octet/names.h"
#include "octet/quant.h"
#include "octet/train.h"

namespace {

struct Options {
  int64_t batch = 1, heads = 8, kv_heads = 0, seq = 1024, kv_seq = 0, dim = 128;
  bool causal = false, json = false;
  std::string precision = "fp8", delta = "matched", form = "whole", dist = "normal";
  std::string qkv_scaling = "tensor", do_format = "e5m2", ds_format = "e5m2", dump;
  int64_t block_q = 128, block_k = 128;
  float p_scale = 256.0f, scale = 0.0f;
  uint64_t seed = 1;
};

// A safetensors tensor (octet/train.h) holding a copy of x, F32 or F64.
template <typename T>
octet::StTensor st_of(const std::vector<T>& x, std::vector<int64_t> shape) {
  octet::StTensor t;
  t.dtype = sizeof(T) == 4 ? "F32" : "F64";
  t.shape = std::move(shape);
  t.data.resize(x.size() * sizeof(T));
  std::memcpy(t.data.data(), x.data(), t.data.size());
  return t;
}

void run(const Options& opt) {
  using namespace octet;
  AttentionShape shape;
  shape.batch = opt.batch;
  shape.n_heads = opt.heads;
  shape.n_kv_heads = opt.kv_heads ? opt.kv_heads : opt.heads;
  shape.seq_q = opt.seq;
  shape.seq_k = opt.kv_seq ? opt.kv_seq : opt.seq;
  shape.head_dim = opt.dim;
  shape.causal = opt.causal;
  shape.softmax_scale = opt.scale;
  shape.validate();
  AttentionConfig cfg;
  cfg.precision = parse_attn_precision(opt.precision);
  cfg.delta = parse_delta_mode(opt.delta);
  cfg.form = parse_attn_form(opt.form);
  cfg.qkv_scaling = parse_enum<QkvScaling>(opt.qkv_scaling);
  cfg.do_format = parse_format(opt.do_format);
  cfg.ds_format = parse_format(opt.ds_format);
  cfg.block_q = opt.block_q;
  cfg.block_k = opt.block_k;
  cfg.p_scale = opt.p_scale;
  validate_p_scale(cfg.p_scale, "--p-scale");
  cfg.validate();
  const AttnInputDist dist = parse_attn_input_dist(opt.dist);

  const AttentionInputs in = make_attention_inputs(shape, dist, opt.seed);
  // Results in double: FP32 values exactly, and the FP64 precision's own values unrounded.
  std::vector<double> o(in.q.size()), lse(size_t(shape.batch * shape.n_heads * shape.seq_q));
  std::vector<double> dq(in.q.size()), dk(in.k.size()), dv(in.k.size());
  AttentionSaved saved;
  AttentionStats stats;
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  attention_forward(shape, cfg, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data(),
                    &saved);
  const auto t1 = clock::now();
  attention_backward(saved, in.d_o.data(), dq.data(), dk.data(), dv.data(), &stats,
                     !opt.dump.empty());
  const auto t2 = clock::now();
  const AttentionOracle ref = run_attention_oracle(shape, in);
  const AttentionErrors err = attention_errors(shape, in, ref, o.data(), lse.data(), dq.data(),
                                               dk.data(), dv.data());
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };

  nlohmann::json j = {
      {"batch", shape.batch}, {"heads", shape.n_heads}, {"kv_heads", shape.n_kv_heads},
      {"seq", shape.seq_q}, {"kv_seq", shape.seq_k}, {"dim", shape.head_dim},
      {"causal", shape.causal}, {"softmax_scale", shape.tau()},
      {"precision", to_string(cfg.precision)}, {"delta", to_string(cfg.delta)},
      {"form", to_string(cfg.form)}, {"dist", to_string(dist)}, {"seed", opt.seed},
      {"qkv_scaling", opt.qkv_scaling}, {"do_format", to_string(cfg.do_format)},
      {"ds_format", to_string(cfg.ds_format)}, {"block_q", cfg.block_q},
      {"block_k", cfg.block_k}, {"p_scale", cfg.p_scale},
      {"o_rel_err", err.o_rel_err}, {"lse_max_abs_err", err.lse_max_abs_err},
      {"dq_rel_err", err.dq_rel_err}, {"dk_rel_err", err.dk_rel_err},
      {"dv_rel_err", err.dv_rel_err}, {"dq_cos", err.dq_cos},
      {"dq_bias_mean_key", err.dq_bias_mean_key},
      {"row_residual_max", stats.row_residual_max},
      {"row_residual_mean", stats.row_residual_mean},
      {"forward_ms", ms(t0, t1)}, {"backward_ms", ms(t1, t2)}};
  if (opt.json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("| key | value |\n|---|---|\n");
    for (auto& [k, v] : j.items()) std::printf("| %s | %s |\n", k.c_str(), v.dump().c_str());
  }
  if (opt.dump.empty()) return;
  const int64_t B = shape.batch, H = shape.n_heads, G = shape.n_kv_heads, Tq = shape.seq_q,
                Tk = shape.seq_k, D = shape.head_dim;
  StFile f;
  for (auto& [k, v] : j.items()) f.metadata[k] = v.is_string() ? v.get<std::string>() : v.dump();
  f.tensors = {{"q", st_of(in.q, {B, H, Tq, D})},
               {"k", st_of(in.k, {B, G, Tk, D})},
               {"v", st_of(in.v, {B, G, Tk, D})},
               {"d_o", st_of(in.d_o, {B, H, Tq, D})},
               {"o", st_of(o, {B, H, Tq, D})},
               {"lse", st_of(lse, {B, H, Tq})},
               {"dq", st_of(dq, {B, H, Tq, D})},
               {"dk", st_of(dk, {B, G, Tk, D})},
               {"dv", st_of(dv, {B, G, Tk, D})},
               {"row_residual", st_of(stats.row_residual, {B, H, Tq})},
               {"ref_o", st_of(ref.o, {B, H, Tq, D})},
               {"ref_lse", st_of(ref.lse, {B, H, Tq})},
               {"ref_dq", st_of(ref.dq, {B, H, Tq, D})},
               {"ref_dk", st_of(ref.dk, {B, G, Tk, D})},
               {"ref_dv", st_of(ref.dv, {B, G, Tk, D})}};
  write_safetensors(opt.dump, f);
}

}  // namespace

OCTET_COMMAND("attention-check", [](CLI::App& app) {
  using namespace octet;
  using octet::cli::add_enum_option;
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "attention-check",
      "Run FP8/BF16/FP64 attention forward+backward (stale or matched delta) on generated inputs "
      "and measure it against the FP64 oracle");
  cmd->add_option("--batch", opt->batch, "batch size B")->capture_default_str();
  cmd->add_option("--heads", opt->heads, "query heads H")->capture_default_str();
  cmd->add_option("--kv-heads", opt->kv_heads, "KV heads G, dividing H (default: H)");
  cmd->add_option("--seq", opt->seq, "query length Tq")->capture_default_str();
  cmd->add_option("--kv-seq", opt->kv_seq, "key length Tk (default: Tq)");
  cmd->add_option("--dim", opt->dim, "head dim D")->capture_default_str();
  cmd->add_flag("--causal", opt->causal, "causal mask, aligned to the bottom-right");
  add_enum_option<AttnPrecision>(cmd, "--precision", opt->precision, "operand precision")
      ->capture_default_str();
  add_enum_option<DeltaMode>(cmd, "--delta", opt->delta, "softmax delta")->capture_default_str();
  add_enum_option<AttnForm>(cmd, "--form", opt->form, "attention form")->capture_default_str();
  add_enum_option<AttnInputDist>(cmd, "--dist", opt->dist, "inputs")->capture_default_str();
  cmd->add_option("--seed", opt->seed, "input seed")->capture_default_str();
  add_enum_option<QkvScaling>(cmd, "--qkv-scaling", opt->qkv_scaling, "fp8 Q/K/V scales")
      ->capture_default_str();
  add_enum_option<Format>(cmd, "--do-format", opt->do_format, "fp8 dO format")->capture_default_str();
  add_enum_option<Format>(cmd, "--ds-format", opt->ds_format, "fp8 dS format")->capture_default_str();
  cmd->add_option("--block-q", opt->block_q, "query block Bq (tiled form; dS scale tile)")
      ->capture_default_str();
  cmd->add_option("--block-k", opt->block_k, "key block Bc (tiled form; dS scale tile)")
      ->capture_default_str();
  cmd->add_option("--p-scale", opt->p_scale, "static power-of-two scale of P before E4M3, in [1, 256]")
      ->capture_default_str();
  cmd->add_option("--scale", opt->scale, "softmax scale tau (0: 1/sqrt(dim))")
      ->capture_default_str();
  cmd->add_flag("--json", opt->json, "print one JSON object");
  cmd->add_option("--dump", opt->dump, "write inputs, results and oracle to a safetensors file");
  cmd->callback([opt] { run(*opt); });
});
