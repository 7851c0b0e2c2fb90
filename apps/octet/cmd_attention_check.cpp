// `octet attention-check`: runs the CPU attention (one precision, delta mode and form) — or, with
// --device cuda, the CUDA backend's (form flash: the fused FP8 kernels or cuDNN's fused BF16 SDPA;
// whole: the unfused path; docs/cuda.md) — forward and
// backward on generated inputs and measures it against the FP64 oracle: relative L2 errors of O,
// dQ, dK, dV, the cosine of dQ, the dQ error along the attention-weighted mean key, and the
// softmax-gradient row residual r_i = |Σ_j dS_ij| / Σ_j P_ij(|dP_ij| + |D_i|) that Delta-Matching
// drives to zero (docs/design.md §"The two deltas"; docs/delta-matching.md holds the measured table and its
// commands). On CUDA the row residual is the backend's device accumulator (max and mean; the per-row values
// of --dump are CPU-only) and the times include the first call's plan building.
// --dump FILE writes inputs, results and the oracle as safetensors (octet/train.h's writer), for
// the PyTorch oracle test. Before any allocation the run's memory and time are estimated (docs/cli.md
// §"attention-check"): a run that needs more memory than the machine has available is refused
// or one estimated to take over an hour unless --force, and a run over 10 s reports its phases on
// stderr as they finish.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "octet/attention.h"
#include "octet/backend.h"
#include "octet/command.h"
#include "octet/enum_option.h"
#include "octet/error.h"
#include "octet/names.h"
#include "octet/quant.h"
#include "octet/train.h"

namespace {

struct Options {
  int64_t batch = 1, heads = 8, kv_heads = 0, seq = 1024, kv_seq = 0, dim = 128;
  bool causal = false, json = false, force = false, progress = false;
  std::string precision = "fp8", delta = "matched", form = "whole", dist = "normal";
  std::string qkv_scaling = "tensor", do_format = "e5m2", ds_format = "e5m2", dump;
  std::string device = "cpu";
  int64_t block_q = 128, block_k = 128;
  float p_scale = 256.0f;
  double scale = 0.0;  // read in double: a value FP32 would round to 0 or infinity is refused
  uint64_t seed = 1;
};

// What a run will take, from its shape alone, in double (sizes beyond int64 included).
struct Cost {
  double bytes = 0, seconds = 0, elements = 0;
};

// Peak resident memory and CPU time of one attention-check, from the shape. Constants measured on
// a 2-core x86-64 with the release build (docs/cli.md): ~66 bytes per element of Q, K, V and dO
// together (inputs, the implementation's saved tensors and results in FP64, the FP64 oracle), ~128
// with --dump (the safetensors copies), plus per query row and the whole form's three Bq x Tk rows
// of P, dP and E; time ~0.4 us + 15 ns * D per (query, key) pair seen (half of them when causal).
// The constants below are rounded up (72, 136 bytes), as a budget should be.
Cost estimate_cost(const Options& opt) {
  const double B = double(opt.batch), H = double(opt.heads),
               G = double(opt.kv_heads ? opt.kv_heads : opt.heads), Tq = double(opt.seq),
               Tk = double(opt.kv_seq ? opt.kv_seq : opt.seq), D = double(opt.dim);
  Cost c;
  c.elements = B * H * Tq * D + B * G * Tk * D;
  c.bytes = c.elements * (opt.dump.empty() ? 72.0 : 136.0) + B * H * Tq * 136.0 +
            3.0 * std::min(double(opt.block_q), Tq) * Tk * 8.0 + 64e6;  // + the process itself
  const double pairs = B * H * Tq * Tk * (opt.causal ? 0.5 : 1.0);
  c.seconds = pairs * (0.4e-6 + 15e-9 * D);
  return c;
}

std::string human_bytes(double b) {
  char buf[32];
  if (b >= 1e9)
    std::snprintf(buf, sizeof buf, "%.3g GB", b / 1e9);
  else
    std::snprintf(buf, sizeof buf, "%.3g MB", b / 1e6);
  return buf;
}

std::string human_seconds(double s) {
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%.3g h", s / 3600);
  else if (s >= 60)
    std::snprintf(buf, sizeof buf, "%.3g min", s / 60);
  else
    std::snprintf(buf, sizeof buf, "%.2g s", s);
  return buf;
}

// Refuses a run beyond the machine's available memory or longer than an hour (unless --force), or
// beyond what int64 sizes can address; returns whether the run is long enough to report its phases.
bool check_budget(const Options& opt) {
  const Cost c = estimate_cost(opt);
  char n[32];
  std::snprintf(n, sizeof n, "%.3g", c.elements);
  OCTET_CHECK(c.elements < 0x1p52, "attention-check: Q, K, V and dO would hold " + std::string(n) +
                                       " elements, beyond what can be allocated");
  const double avail = octet::host_memory_available();
  OCTET_CHECK(opt.force || avail <= 0 || c.bytes <= avail,
              "attention-check: this run needs about " + human_bytes(c.bytes) + " of memory (and ~" +
                  human_seconds(c.seconds) + ") but " + human_bytes(avail) +
                  " is available; use a smaller --seq/--heads/--dim/--batch, or --force to try anyway");
  OCTET_CHECK(opt.force || c.seconds <= 3600.0,
              "attention-check: this run would take about " + human_seconds(c.seconds) + " (and " +
                  human_bytes(c.bytes) +
                  " of memory); use a smaller --seq/--heads/--dim/--batch, or --force to run it anyway");
  const bool long_run = c.seconds > 10.0;
  if (long_run)
    std::fprintf(stderr, "attention-check: estimated %s of memory and ~%s\n", human_bytes(c.bytes).c_str(),
                 human_seconds(c.seconds).c_str());
  return long_run;
}

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

// Forward and backward of the CUDA backend's attention on the inputs (uploaded as F32), results
// widened to double; times in ms (each phase synchronized), the row residual's max and mean.
struct DeviceRun {
  double forward_ms = 0, backward_ms = 0;
};
DeviceRun run_cuda(const octet::AttentionShape& shape, const octet::AttentionConfig& cfg,
                   const octet::AttentionInputs& in, std::vector<double>& o, std::vector<double>& lse,
                   std::vector<double>& dq, std::vector<double>& dk, std::vector<double>& dv,
                   octet::AttentionStats& stats) {
  using namespace octet;
  auto be = make_cuda_backend();
  auto attn = be->make_attention(shape, cfg);
  const Shape qs{shape.batch, shape.n_heads, shape.seq_q, shape.head_dim},
      ks{shape.batch, shape.n_kv_heads, shape.seq_k, shape.head_dim};
  Buffer q = be->alloc(DType::F32, qs), k = be->alloc(DType::F32, ks), v = be->alloc(DType::F32, ks),
         d_o = be->alloc(DType::F32, qs), out = be->alloc(DType::F32, qs),
         l = be->alloc(DType::F32, {shape.batch, shape.n_heads, shape.seq_q}), gq = be->alloc(DType::F32, qs),
         gk = be->alloc(DType::F32, ks), gv = be->alloc(DType::F32, ks), res = be->alloc(DType::F64, {2});
  be->upload(q, in.q.data());
  be->upload(k, in.k.data());
  be->upload(v, in.v.data());
  be->upload(d_o, in.d_o.data());
  be->synchronize();
  using clock = std::chrono::steady_clock;
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  DeviceRun r;
  {
    const auto t0 = clock::now();
    const SavedAttention saved = attn->forward(q, k, v, out, l);
    be->synchronize();
    const auto t1 = clock::now();
    attn->backward(saved, d_o, gq, gk, gv, res);
    be->synchronize();
    r.forward_ms = ms(t0, t1);
    r.backward_ms = ms(t1, clock::now());
  }
  auto widen = [&](const Buffer& b, std::vector<double>& x) {
    const std::vector<float> f = be->download_f32(b);
    x.assign(f.begin(), f.end());
  };
  widen(out, o), widen(l, lse), widen(gq, dq), widen(gk, dk), widen(gv, dv);
  double r2[2];
  be->download(r2, res);
  // cuDNN's SDPA keeps dS inside: not measured (NaN, written null), not a residual of 0.
  const bool measured = attn->measures_row_residual();
  stats.row_residual_max = measured ? r2[0] : std::nan("");
  stats.row_residual_mean = measured ? r2[1] : std::nan("");
  return r;
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
  shape.softmax_scale = softmax_scale_fp32(opt.scale, "--scale");
  shape.validate();
  if (!opt.dump.empty()) require_new_file(opt.dump, "--dump");  // before the work, not after
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
  const bool cuda = opt.device == "cuda";

  const bool progress = check_budget(opt) || opt.progress;  // before anything is allocated
  using clock = std::chrono::steady_clock;
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  const auto start = clock::now();
  auto phase_done = [&](const char* what) {
    if (progress)
      std::fprintf(stderr, "attention-check: %s done (%s elapsed)\n", what,
                   human_seconds(ms(start, clock::now()) / 1000.0).c_str());
  };

  const AttentionInputs in = make_attention_inputs(shape, dist, opt.seed);
  // Results in double: FP32 values exactly, and the FP64 precision's own values unrounded.
  std::vector<double> o(in.q.size()), lse(size_t(shape.batch * shape.n_heads * shape.seq_q));
  std::vector<double> dq(in.q.size()), dk(in.k.size()), dv(in.k.size());
  AttentionSaved saved;
  AttentionStats stats;
  double forward_ms = 0, backward_ms = 0;
  if (cuda) {
    const DeviceRun r = run_cuda(shape, cfg, in, o, lse, dq, dk, dv, stats);
    forward_ms = r.forward_ms, backward_ms = r.backward_ms;
    phase_done("CUDA forward and backward");
  } else {
    const auto t0 = clock::now();
    attention_forward(shape, cfg, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data(), &saved);
    const auto t1 = clock::now();
    phase_done("forward");
    attention_backward(saved, in.d_o.data(), dq.data(), dk.data(), dv.data(), &stats, !opt.dump.empty());
    const auto t2 = clock::now();
    phase_done("backward");
    forward_ms = ms(t0, t1), backward_ms = ms(t1, t2);
  }
  const AttentionOracle ref = run_attention_oracle(shape, in);
  phase_done("FP64 oracle");
  const AttentionErrors err =
      attention_errors(shape, in, ref, o.data(), lse.data(), dq.data(), dk.data(), dv.data());

  nlohmann::json j = {{"batch", shape.batch},
                      {"heads", shape.n_heads},
                      {"kv_heads", shape.n_kv_heads},
                      {"seq", shape.seq_q},
                      {"kv_seq", shape.seq_k},
                      {"dim", shape.head_dim},
                      {"causal", shape.causal},
                      {"softmax_scale", shape.tau()},
                      {"precision", to_string(cfg.precision)},
                      {"delta", to_string(cfg.delta)},
                      {"form", to_string(cfg.form)},
                      {"dist", to_string(dist)},
                      {"seed", opt.seed},
                      {"qkv_scaling", opt.qkv_scaling},
                      {"do_format", to_string(cfg.do_format)},
                      {"ds_format", to_string(cfg.ds_format)},
                      {"block_q", cfg.block_q},
                      {"block_k", cfg.block_k},
                      {"p_scale", cfg.p_scale},
                      {"o_rel_err", err.o_rel_err},
                      {"lse_max_abs_err", err.lse_max_abs_err},
                      {"dq_rel_err", err.dq_rel_err},
                      {"dk_rel_err", err.dk_rel_err},
                      {"dv_rel_err", err.dv_rel_err},
                      {"dq_cos", err.dq_cos},
                      {"dq_bias_mean_key", err.dq_bias_mean_key},
                      {"row_residual_max", stats.row_residual_max},
                      {"row_residual_mean", stats.row_residual_mean},
                      {"forward_ms", forward_ms},
                      {"backward_ms", backward_ms},
                      {"device", opt.device}};
  if (opt.json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("| key | value |\n|---|---|\n");
    for (auto& [k, v] : j.items()) std::printf("| %s | %s |\n", k.c_str(), v.dump().c_str());
  }
  if (opt.dump.empty()) return;
  const int64_t B = shape.batch, H = shape.n_heads, G = shape.n_kv_heads, Tq = shape.seq_q, Tk = shape.seq_k,
                D = shape.head_dim;
  StFile f;
  for (auto& [k, v] : j.items()) f.metadata[k] = v.is_string() ? v.get<std::string>() : v.dump();
  f.tensors = {{"q", st_of(in.q, {B, H, Tq, D})},        {"k", st_of(in.k, {B, G, Tk, D})},
               {"v", st_of(in.v, {B, G, Tk, D})},        {"d_o", st_of(in.d_o, {B, H, Tq, D})},
               {"o", st_of(o, {B, H, Tq, D})},           {"lse", st_of(lse, {B, H, Tq})},
               {"dq", st_of(dq, {B, H, Tq, D})},         {"dk", st_of(dk, {B, G, Tk, D})},
               {"dv", st_of(dv, {B, G, Tk, D})},         {"ref_o", st_of(ref.o, {B, H, Tq, D})},
               {"ref_lse", st_of(ref.lse, {B, H, Tq})},  {"ref_dq", st_of(ref.dq, {B, H, Tq, D})},
               {"ref_dk", st_of(ref.dk, {B, G, Tk, D})}, {"ref_dv", st_of(ref.dv, {B, G, Tk, D})}};
  if (!stats.row_residual.empty())  // per row: CPU only
    f.tensors.emplace("row_residual", st_of(stats.row_residual, {B, H, Tq}));
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
  octet::cli::add_count_option(cmd, "--kv-heads", opt->kv_heads, "KV heads G >= 1, dividing H (default: H)");
  cmd->add_option("--seq", opt->seq, "query length Tq")->capture_default_str();
  octet::cli::add_count_option(cmd, "--kv-seq", opt->kv_seq, "key length Tk >= 1 (default: Tq)");
  cmd->add_option("--dim", opt->dim, "head dim D")->capture_default_str();
  cmd->add_flag("--causal", opt->causal, "causal mask, aligned to the bottom-right");
  cmd->add_option("--device", opt->device,
                  "cpu: the reference; cuda: the CUDA backend (form flash: flash kernels / cuDNN "
                  "SDPA; whole: unfused)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  add_enum_option<AttnPrecision>(cmd, "--precision", opt->precision, "operand precision")
      ->capture_default_str();
  add_enum_option<DeltaMode>(cmd, "--delta", opt->delta, "softmax delta")->capture_default_str();
  add_enum_option<AttnForm>(cmd, "--form", opt->form, "attention form")->capture_default_str();
  add_enum_option<AttnInputDist>(cmd, "--dist", opt->dist, "inputs")->capture_default_str();
  octet::cli::add_seed_option(cmd, "--seed", opt->seed, "input seed")->capture_default_str();
  add_enum_option<QkvScaling>(cmd, "--qkv-scaling", opt->qkv_scaling, "fp8 Q/K/V scales")
      ->capture_default_str();
  add_enum_option<Format>(cmd, "--do-format", opt->do_format, "fp8 dO format")->capture_default_str();
  add_enum_option<Format>(cmd, "--ds-format", opt->ds_format, "fp8 dS format")->capture_default_str();
  cmd->add_option("--block-q", opt->block_q,
                  "query block Bq: the flash form's query tile and, in both forms, the dS scale tile")
      ->capture_default_str();
  cmd->add_option("--block-k", opt->block_k,
                  "key block Bc: the flash form's key tile and, in both forms, the dS scale tile")
      ->capture_default_str();
  cmd->add_option("--p-scale", opt->p_scale, "static power-of-two scale of P before E4M3, in [1, 256]")
      ->capture_default_str();
  cmd->add_option("--scale", opt->scale, "softmax scale tau (0: 1/sqrt(dim))")->capture_default_str();
  cmd->add_flag("--json", opt->json, "print one JSON object");
  cmd->add_option("--dump", opt->dump, "write inputs, results and oracle to a safetensors file");
  cmd->add_flag("--force", opt->force, "run even if the estimate exceeds the available memory or an hour");
  cmd->add_flag("--progress", opt->progress, "report each phase on stderr (default: runs over ~10 s)");
  cmd->callback([opt] { run(*opt); });
});
