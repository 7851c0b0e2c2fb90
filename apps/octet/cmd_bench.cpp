// `octet bench`: GPU benchmarks, one JSON object per line with --json (else a table).
//   octet bench gemm       cuBLASLt GEMMs of transformer shapes: FP8 per-tensor and block-scaled vs BF16
//   octet bench quantize   the quantization kernels (both FP8 copies in one pass) per recipe
//   octet bench attention  per case of octet/attention_cases.h: the cuDNN BF16 and FP8 SDPA peers
//                          called directly, then octet's attention (flash FP8 kernels, stale and
//                          matched delta; cuDNN behind octet's Attention; the unfused form), each
//                          row with its error against the FP64 oracle and its time over the peers';
//                          then PyTorch SDPA through bench/peers/sdpa.py
//   octet bench train      whole training steps (fwd, bwd, clip, AdamW) of GPT-2-family models
//                          (124M..1.3B) per precision arm on synthetic tokens: tokens/s, TFLOP/s,
//                          MFU against the BF16 and FP8 peaks, peak memory (octet/bench.h), then
//                          the PyTorch peers of bench/peers/gpt2_torch.py (BF16, torchao float8)
//   octet bench comm       the collectives of data parallel, 1 MiB..1 GiB (cmd_bench_comm.cpp)
// Every line carries the GPU name, CUDA runtime/driver, cuBLASLt and cuDNN versions and the UTC date, so a
// results file (bench/results/*.jsonl) says where and when it was measured. Method: CUDA events,
// warm-up, median of the repetitions, operands rotated beyond the L2 (octet/bench.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <map>
#include <sstream>
#include <tuple>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "octet/bench_output.h"
#include "octet/bench.h"
#include "octet/command.h"
#include "octet/enum_option.h"
#include "octet/error.h"

namespace {

using octet::cli::emit;
using octet::cli::utc_now;
#ifdef OCTET_WITH_CUDA
using octet::cli::env_json;
#endif

#ifndef OCTET_WITH_CUDA
[[noreturn]] void no_cuda() {
  OCTET_FAIL("octet bench needs the CUDA backend (configure with -DOCTET_CUDA=ON and run on a GPU)");
}
#endif

struct GemmArgs {
  bool json = false;
  std::vector<int> d_models{768, 1024, 2048, 4096};
  int64_t tokens = 16384;
  int reps = 50, warmup = 10;
  std::vector<std::string> modes{"bf16", "fp8-tensor", "fp8-block"};
};

void run_gemm(const GemmArgs& a) {
#ifdef OCTET_WITH_CUDA
  octet::cuda::GemmBenchOptions o;
  o.d_models = a.d_models;
  o.tokens = a.tokens;
  o.reps = a.reps;
  o.warmup = a.warmup;
  o.modes = a.modes;
  const nlohmann::json env = env_json();
  // per d_model and mode: total time of its 12 GEMMs (the speed-up that a training step sees)
  std::map<int, std::map<std::string, double>> total_ms;
  std::map<std::string, double> bf16_ms;  // per shape key, for the per-row speed-up
  if (!a.json)
    std::printf("%-6s %-5s %-6s %-11s %6s %6s %6s %9s %8s %7s\n", "d", "layer", "pass", "mode", "M", "N", "K",
                "ms", "TFLOP/s", "vs bf16");
  octet::cuda::bench_gemm(o, [&](const octet::cuda::GemmBenchRow& r) {
    const std::string key = std::to_string(r.d_model) + r.layer + r.pass;
    if (r.mode == "bf16") bf16_ms[key] = r.ms;
    total_ms[r.d_model][r.mode] += r.ms;
    const double speedup = bf16_ms.count(key) ? bf16_ms[key] / r.ms : 0.0;
    nlohmann::json j = env;
    j.update({{"bench", "gemm"},
              {"d_model", r.d_model},
              {"tokens", a.tokens},
              {"layer", r.layer},
              {"pass", r.pass},
              {"mode", r.mode},
              {"M", r.M},
              {"N", r.N},
              {"K", r.K},
              {"ms_median", r.ms},
              {"tflops", r.tflops},
              {"reps", r.reps},
              {"speedup_vs_bf16", speedup},
              {"fallback", r.fallback}});
    char line[160];
    std::snprintf(line, sizeof(line), "%-6d %-5s %-6s %-11s %6lld %6lld %6lld %9.4f %8.1f %7.2f%s", r.d_model,
                  r.layer.c_str(), r.pass.c_str(), r.mode.c_str(), (long long)r.M, (long long)r.N,
                  (long long)r.K, r.ms, r.tflops, speedup, r.fallback ? " (fallback)" : "");
    emit(a.json, j, line);
  });
  for (auto& [d, modes] : total_ms) {
    if (!modes.count("bf16")) continue;
    for (auto& [mode, ms] : modes) {
      if (mode == "bf16") continue;
      nlohmann::json j = env;
      j.update({{"bench", "gemm-summary"},
                {"d_model", d},
                {"tokens", a.tokens},
                {"mode", mode},
                {"total_ms", ms},
                {"bf16_total_ms", modes["bf16"]},
                {"speedup_vs_bf16", modes["bf16"] / ms}});
      char line[160];
      std::snprintf(line, sizeof(line), "summary d_model %d: %s total %.3f ms vs bf16 %.3f ms: %.2fx", d,
                    mode.c_str(), ms, modes["bf16"], modes["bf16"] / ms);
      emit(a.json, j, line);
    }
  }
#else
  (void)a;
  no_cuda();
#endif
}

struct QuantArgs {
  bool json = false;
  int64_t rows = 16384, cols = 4096;
  int reps = 50, warmup = 5;
};

void run_quantize(const QuantArgs& a) {
#ifdef OCTET_WITH_CUDA
  const nlohmann::json env = env_json();
  if (!a.json)
    std::printf("%-20s %-10s %-4s %-6s %6s %6s %9s %8s\n", "recipe", "role", "src", "kernel", "rows", "cols",
                "ms", "GB/s");
  octet::cuda::bench_quantize(a.rows, a.cols, a.warmup, a.reps, [&](const octet::cuda::QuantBenchRow& r) {
    nlohmann::json j = env;
    j.update({{"bench", "quantize"},
              {"recipe", r.recipe},
              {"role", r.role},
              {"dtype", r.dtype},
              {"kernel", r.kernel},
              {"rows", r.rows},
              {"cols", r.cols},
              {"ms_median", r.ms},
              {"gbps", r.gbps},
              {"reps", r.reps}});
    char line[160];
    std::snprintf(line, sizeof(line), "%-20s %-10s %-4s %-6s %6lld %6lld %9.4f %8.0f", r.recipe.c_str(),
                  r.role.c_str(), r.dtype.c_str(), r.kernel.c_str(), (long long)r.rows, (long long)r.cols,
                  r.ms, r.gbps);
    emit(a.json, j, line);
  });
#else
  (void)a;
  no_cuda();
#endif
}

struct OpsArgs {
  bool json = false;
  int reps = 50, warmup = 5;
};

void run_ops(const OpsArgs& a) {
#ifdef OCTET_WITH_CUDA
  const nlohmann::json env = env_json();
  if (!a.json) std::printf("%-18s %-5s %6s %6s %9s %8s\n", "op", "model", "rows", "cols", "ms", "GB/s");
  octet::cuda::bench_ops(a.warmup, a.reps, [&](const octet::cuda::OpsBenchRow& r) {
    nlohmann::json j = env;
    j.update({{"bench", "ops"},
              {"op", r.op},
              {"model", r.model},
              {"rows", r.rows},
              {"cols", r.cols},
              {"bytes", r.bytes},
              {"ms_median", r.ms},
              {"gbps", r.gbps},
              {"reps", r.reps}});
    char line[160];
    std::snprintf(line, sizeof(line), "%-18s %-5s %6lld %6lld %9.4f %8.0f", r.op.c_str(), r.model.c_str(),
                  (long long)r.rows, (long long)r.cols, r.ms, r.gbps);
    emit(a.json, j, line);
  });
#else
  (void)a;
  no_cuda();
#endif
}

struct AttnArgs {
  bool json = false;
  /// bench | check (octet/attention_cases.h) | case names of either set, comma-separated
  std::string cases = "bench";
  /// A custom shape instead of the cases, when any of these is given on the command line.
  int64_t batch = 4, heads = 16, kv_heads = 0, head_dim = 128;
  std::vector<int64_t> seqs{1024, 4096, 8192, 16384};
  bool causal = true;
  bool custom = false;       ///< a custom-shape option was given
  bool cases_given = false;  ///< --cases was given
  int reps = 20, warmup = 3;
  std::string peer = "bench/peers/sdpa.py";  ///< PyTorch SDPA peer script ("" to skip)
  std::string python = "python3";
  std::string input_dtype = "bf16";  ///< octet's rows: bf16 (as the trainer) | f32
  std::string rows;                  ///< only these rows, comma-separated ("" every row)
  int64_t tile = 128;                ///< block_q = block_k of octet's FP8 flash rows: 64 | 128
};

// The cases `octet bench attention` runs: the custom shape, or the named set or cases.
std::vector<octet::AttentionCase> attention_cases_of(const AttnArgs& a) {
  OCTET_CHECK(!(a.custom && a.cases_given),
              "octet bench attention: give --cases or a custom shape (--batch, --heads, --kv-heads, "
              "--head-dim, --seq, --causal), not both");
  if (a.custom) {
    std::vector<octet::AttentionCase> out;
    for (int64_t S : a.seqs) {
      octet::AttentionShape s;
      s.batch = a.batch, s.n_heads = a.heads, s.n_kv_heads = a.kv_heads ? a.kv_heads : a.heads;
      s.head_dim = a.head_dim, s.seq_q = s.seq_k = S, s.causal = a.causal;
      s.validate();
      out.push_back({octet::attention_case_name(s), s});
    }
    return out;
  }
  return octet::select_attention_cases(a.cases);
}

// Runs a peer script (python + script + args) after octet's rows, so both sets of numbers come from
// one machine and one moment; its lines go to stdout after octet's. A missing script is skipped.
void run_peer_script(const std::string& what, const std::string& python, const std::string& script,
                     const std::string& args) {
  if (script.empty()) return;
  errno = 0;
  if (std::FILE* f = std::fopen(script.c_str(), "r")) {
    std::fclose(f);
  } else {
    std::fprintf(stderr, "octet bench %s: %s, skipped\n", what.c_str(),
                 octet::io_error("cannot open peer script", script).c_str());
    return;
  }
  const std::string cmd = python + " " + script + " " + args;
  std::fflush(stdout);
  const int rc = std::system(cmd.c_str());
  if (rc != 0)
    std::fprintf(stderr, "octet bench %s: peer script failed (%d): %s\n", what.c_str(), rc, cmd.c_str());
}

#ifdef OCTET_WITH_CUDA
// The PyTorch SDPA peer once per (B, H, D, causal) of the cases it can take (H = G, Tq = Tk), with
// that group's sequence lengths.
void run_peer(const AttnArgs& a, const std::vector<octet::AttentionCase>& cases) {
  std::string peer = a.peer;  // relative: the working directory's, else octet's home's
  if (!peer.empty() && peer[0] != '/' && !std::filesystem::exists(peer) &&
      std::filesystem::exists(octet::octet_home() + "/" + peer))
    peer = octet::octet_home() + "/" + peer;
  if (!peer.empty() && !std::filesystem::exists(peer)) {  // one note, not one per group
    std::fprintf(stderr,
                 "octet bench attention: peer script %s not found (here or in octet's home), skipped\n",
                 peer.c_str());
    return;
  }
  std::map<std::tuple<int64_t, int64_t, int64_t, bool>, std::string> groups;
  for (const octet::AttentionCase& c : cases) {
    const octet::AttentionShape& s = c.shape;
    if (s.n_kv_heads != s.n_heads || s.seq_q != s.seq_k) continue;
    std::string& seqs = groups[{s.batch, s.n_heads, s.head_dim, s.causal}];
    seqs += (seqs.empty() ? "" : ",") + std::to_string(s.seq_q);
  }
  for (const auto& [key, seqs] : groups) {
    const auto& [B, H, D, causal] = key;
    run_peer_script("attention", a.python, peer,
                    "--batch " + std::to_string(B) + " --heads " + std::to_string(H) + " --head-dim " +
                        std::to_string(D) + " --seq " + seqs + " --causal " + (causal ? "1" : "0") +
                        " --reps " + std::to_string(a.reps) + " --warmup " + std::to_string(a.warmup) +
                        (a.json ? " --json" : ""));
  }
}
#endif

void run_attention(const AttnArgs& a) {
  const std::vector<std::string> rows = octet::parse_attention_bench_rows(a.rows);  // on any build
#ifdef OCTET_WITH_CUDA
  octet::cuda::AttnBenchOptions o;
  o.rows = rows;
  o.cases = attention_cases_of(a);
  o.reps = a.reps;
  o.warmup = a.warmup;
  o.input_dtype = octet::parse_dtype(a.input_dtype);
  o.tile = a.tile;
  const nlohmann::json env = env_json();
  if (!a.json)
    std::printf("%-29s %-4s %-29s %8s %8s %7s %7s %7s %7s %8s %8s %8s %8s  %s\n", "impl", "in", "case",
                "fwd ms", "bwd ms", "fwd/bf", "bwd/bf", "fwd/f8", "bwd/f8", "err O", "err dQ", "bound O",
                "bound dQ", "kernels");
  auto num = [](double x) { return std::isnan(x) ? nlohmann::json() : nlohmann::json(x); };
  octet::cuda::bench_attention(o, [&](const octet::cuda::AttnBenchRow& r) {
    // the larger error, NaN if either is NaN (std::max would hide a NaN in its second argument)
    const double err =
        std::isnan(r.err_o) || std::isnan(r.err_dq) ? r.err_o + r.err_dq : std::max(r.err_o, r.err_dq);
    nlohmann::json j = env;
    j.update({{"bench", "attention"},
              {"impl", r.impl},
              {"case", r.case_name},
              {"batch", r.batch},
              {"heads", r.heads},
              {"kv_heads", r.kv_heads},
              {"seq", r.seq},
              {"seq_k", r.seq_k},
              {"head_dim", r.head_dim},
              {"causal", r.causal},
              {"fwd_ms", num(r.fwd_ms)},
              {"bwd_ms", num(r.bwd_ms)},
              {"fwd_tflops", num(r.fwd_tflops)},
              {"bwd_tflops", num(r.bwd_tflops)},
              {"reps", r.reps},
              {"err_o_vs_fp64", num(r.err_o)},
              {"err_dq_vs_fp64", num(r.err_dq)},
              {"err_vs_fp64", num(err)},
              {"err_bound_o", num(r.err_bound_o)},
              {"err_bound_dq", num(r.err_bound_dq)},
              {"fwd_vs_cudnn_bf16", num(r.fwd_vs_cudnn_bf16)},
              {"bwd_vs_cudnn_bf16", num(r.bwd_vs_cudnn_bf16)},
              {"fwd_vs_cudnn_fp8", num(r.fwd_vs_cudnn_fp8)},
              {"bwd_vs_cudnn_fp8", num(r.bwd_vs_cudnn_fp8)}});
    if (!std::isnan(r.err_bound_o))  // false for a NaN error (NaN compares false)
      j["err_ok"] = r.err_o <= r.err_bound_o && r.err_dq <= r.err_bound_dq;
    if (!r.fwd_kernel.empty()) j["fwd_kernel"] = r.fwd_kernel;       // octet's flash FP8 rows
    if (r.fwd_exp2_poly >= 0) j["fwd_exp2_poly"] = r.fwd_exp2_poly;  // its wgmma rows
    if (r.fwd_persistent >= 0) j["fwd_persistent"] = r.fwd_persistent;
    if (r.fwd_pingpong >= 0) j["fwd_pingpong"] = r.fwd_pingpong;
    if (r.head_group >= 0) j["head_group"] = r.head_group;
    if (!r.bwd_kernel.empty()) j["bwd_kernel"] = r.bwd_kernel;
    if (r.bwd_head_group >= 0) j["bwd_head_group"] = r.bwd_head_group;
    if (r.bwd_dq_tma >= 0) j["bwd_dq_tma"] = r.bwd_dq_tma;
    if (r.bwd_sdp_overlap >= 0) j["bwd_sdp_overlap"] = r.bwd_sdp_overlap;
    if (r.bwd_dkv_direct >= 0) j["bwd_dkv_direct"] = r.bwd_dkv_direct;
    if (!r.pack_kernel.empty()) j["pack_kernel"] = r.pack_kernel;  // octet's rows from BF16/F32
    if (!r.input_dtype.empty()) j["input_dtype"] = r.input_dtype;  // octet's rows
    if (r.tile > 0) j["tile"] = r.tile;                            // octet's FP8 flash rows
    char line[256];
    std::snprintf(line, sizeof(line),
                  "%-29s %-4s %-29s %8.3f %8.3f %7.2f %7.2f %7.2f %7.2f %8.1e %8.1e %8.1e %8.1e  %s/%s",
                  r.impl.c_str(), r.input_dtype.empty() ? "-" : r.input_dtype.c_str(), r.case_name.c_str(),
                  r.fwd_ms, r.bwd_ms, r.fwd_vs_cudnn_bf16, r.bwd_vs_cudnn_bf16, r.fwd_vs_cudnn_fp8,
                  r.bwd_vs_cudnn_fp8, r.err_o, r.err_dq, r.err_bound_o, r.err_bound_dq,
                  r.fwd_kernel.empty() ? "-" : r.fwd_kernel.c_str(),
                  r.bwd_kernel.empty() ? "-" : r.bwd_kernel.c_str());
    emit(a.json, j, line);
  });
  run_peer(a, o.cases);
#else
  (void)a;
  (void)rows;
  (void)attention_cases_of;
  no_cuda();
#endif
}

struct TrainArgs {
  bool json = false;
  octet::TrainBenchOptions o;
  std::vector<std::string> model_batch;            ///< NAME=N entries of --model-batch
  std::string peer = "bench/peers/gpt2_torch.py";  ///< PyTorch peer script
  /// The peer's arms, one script call each: bf16 (autocast), torchao-tensorwise, torchao-rowwise.
  std::vector<std::string> peer_arms{"bf16"};
  bool no_peer = false;
  std::string python = "python3";
};

// "NAME=N" entries -> TrainBenchOptions::model_batch (N an integer; bench_train checks N >= 1).
std::map<std::string, int64_t> parse_model_batch(const std::vector<std::string>& items) {
  std::map<std::string, int64_t> out;
  for (const std::string& item : items) {
    const size_t eq = item.find('=');
    size_t used = 0;
    int64_t n = 0;
    try {
      if (eq != std::string::npos) n = std::stoll(item.substr(eq + 1), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    OCTET_CHECK(eq != std::string::npos && eq > 0 && used > 0 && used == item.size() - eq - 1,
                "--model-batch: expected NAME=N (e.g. 1.3b=4), got '" + item + "'");
    OCTET_CHECK(!out.count(item.substr(0, eq)),
                "--model-batch: model '" + item.substr(0, eq) + "' is given twice");
    out[item.substr(0, eq)] = n;
  }
  return out;
}

// The peer script's arguments for one of its arms (the same models, batches, steps and peaks).
std::string peer_args(const TrainArgs& a, const std::string& arm) {
  const auto& o = a.o;
  std::string models, batches;
  for (const std::string& m : o.models) models += (models.empty() ? "" : ",") + m;
  for (const auto& [m, b] : o.model_batch)
    batches += (batches.empty() ? "" : ",") + m + "=" + std::to_string(b);
  char peaks[96];
  std::snprintf(peaks, sizeof peaks, " --peak-tflops %g --peak-tflops-fp8 %g", o.peak_tflops,
                o.peak_tflops_fp8);
  const std::string fp8 = arm == "bf16" ? "none" : arm.substr(std::string("torchao-").size());
  return "--models " + models + " --batch " + std::to_string(o.batch) + " --tokens-per-step " +
         std::to_string(o.tokens_per_step) + " --grad-accum " + std::to_string(o.grad_accum) +
         (batches.empty() ? "" : " --model-batch " + batches) + " --seq " + std::to_string(o.seq_len) +
         " --vocab " + std::to_string(o.vocab_size) + " --warmup " + std::to_string(o.warmup) + " --steps " +
         std::to_string(o.steps) + peaks + " --fp8 " + fp8 + (a.json ? " --json" : "");
}

void run_train(TrainArgs& a) {
  a.o.model_batch = parse_model_batch(a.model_batch);
  for (size_t i = 0; i < a.peer_arms.size(); ++i)  // as bench_train's models and arms: a typo
    OCTET_CHECK(
        std::find(a.peer_arms.begin(), a.peer_arms.begin() + i, a.peer_arms[i]) == a.peer_arms.begin() + i,
        "bench train: peer arm '" + a.peer_arms[i] + "' is given twice");
  const auto& o = a.o;
#ifdef OCTET_WITH_CUDA
  const nlohmann::json env =
      o.device == "cuda" ? env_json() : nlohmann::json{{"gpu", "cpu"}, {"date", utc_now()}};
#else
  const nlohmann::json env = {{"gpu", "cpu"}, {"date", utc_now()}};
#endif
  bool header = a.json;  // the table's header with the first row: a rejected option prints nothing
  octet::bench_train(
      o,
      [&](const octet::TrainBenchRow& r) {
        if (!header)
          std::printf("%-22s %-11s %-18s %5s %10s %9s %11s %8s %6s %6s %6s %8s\n", "impl", "model", "arm",
                      "batch", "params", "step ms", "tokens/s", "TFLOP/s", "MFU16", "MFU8", "GiB", "loss");
        header = true;
        nlohmann::json j = env;
        j.update({{"bench", "train"},
                  {"impl", "octet"},
                  {"model", r.model},
                  {"arm", r.arm},
                  {"recipe", r.arm == "bf16" ? "" : o.recipe},
                  {"attn_form", r.attn_form},
                  {"attn_tile", o.attn_tile},
                  {"activation_checkpointing", o.train.activation_checkpointing},
                  {"n_layer", r.config.n_layer},
                  {"d_model", r.config.d_model},
                  {"n_head", r.config.n_head},
                  {"d_ff", r.config.d_ff},
                  {"seq_len", r.config.seq_len},
                  {"vocab_size", r.config.vocab_size},
                  {"batch", r.batch},
                  {"grad_accum", r.grad_accum},
                  {"tokens_per_step", r.batch * r.config.seq_len * r.grad_accum},
                  {"n_params", r.n_params},
                  {"n_matmul_params", r.n_matmul_params},
                  {"flops_per_token", r.flops_per_token},
                  {"warmup", r.warmup},
                  {"steps", r.steps},
                  {"step_ms_median", r.step_ms_median},
                  {"step_ms_mean", r.step_ms_mean},
                  {"tokens_per_s", r.tokens_per_s},
                  {"tflops", r.tflops},
                  {"mfu", r.mfu},
                  {"mfu_bf16", r.mfu_bf16},
                  {"mfu_fp8", r.mfu_fp8},
                  {"peak_tflops", o.peak_tflops},
                  {"peak_tflops_fp8", o.peak_tflops_fp8},
                  {"peak_mem_gib", r.peak_mem_gib ? nlohmann::json(*r.peak_mem_gib) : nlohmann::json()},
                  {"device_mem_gib", r.device_mem_gib ? nlohmann::json(*r.device_mem_gib) : nlohmann::json()},
                  {"loss_first", r.loss_first},
                  {"loss_last", r.loss_last}});
        char mem[16] = "     -";
        if (r.peak_mem_gib) std::snprintf(mem, sizeof mem, "%6.1f", *r.peak_mem_gib);
        char line[220];
        std::snprintf(line, sizeof(line),
                      "%-22s %-11s %-18s %5lld %10lld %9.2f %11.0f %8.1f %5.1f%% %5.1f%% %s %8.4f", "octet",
                      r.model.c_str(), r.arm.c_str(), (long long)r.batch, (long long)r.n_params,
                      r.step_ms_median, r.tokens_per_s, r.tflops, 100.0 * r.mfu_bf16, 100.0 * r.mfu_fp8, mem,
                      r.loss_last);
        emit(a.json, j, line);
      },
      [&](const octet::TrainBenchRow& r, const std::vector<octet::TrainBenchOp>& ops) {
        double total = 0;
        for (const auto& op : ops) total += op.ms_per_step;
        for (const auto& op : ops) {
          nlohmann::json j = env;
          j.update({{"bench", "train-profile"},
                    {"model", r.model},
                    {"arm", r.arm},
                    {"op", op.op},
                    {"calls_per_step", op.calls_per_step},
                    {"ms_per_step", op.ms_per_step},
                    {"share_of_ops", op.ms_per_step / total},
                    {"step_ms_median", r.step_ms_median}});
          char line[200];
          std::snprintf(line, sizeof(line), "  profile %-11s %-12s %-34s %7.1f calls %9.3f ms/step %5.1f%%",
                        r.model.c_str(), r.arm.c_str(), op.op.c_str(), op.calls_per_step, op.ms_per_step,
                        100.0 * op.ms_per_step / total);
          emit(a.json, j, line);
        }
      });
  if (o.device != "cuda" || o.profile || a.no_peer) return;  // the peer is a GPU measurement, unprofiled
  for (const std::string& arm : a.peer_arms) run_peer_script("train", a.python, a.peer, peer_args(a, arm));
}

}  // namespace

OCTET_COMMAND("bench", [](CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "GPU benchmarks (JSON lines with --json)");
  bench->require_subcommand(1);

  static GemmArgs g;
  auto* gemm = bench->add_subcommand("gemm", "FP8 (per-tensor, block-scaled) vs BF16 cuBLASLt GEMMs");
  gemm->add_flag("--json", g.json, "one JSON object per line");
  gemm->add_option("--d-model", g.d_models, "model widths")->delimiter(',');
  gemm->add_option("--tokens", g.tokens, "tokens per step (forward M)")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->capture_default_str();
  gemm->add_option("--reps", g.reps, "timed repetitions (median reported)")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->capture_default_str();
  gemm->add_option("--warmup", g.warmup, "untimed warm-up calls")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()))
      ->capture_default_str();
  gemm->add_option("--modes", g.modes, "bf16, fp8-tensor, fp8-block")->delimiter(',');
  gemm->callback([] { run_gemm(g); });

  static QuantArgs qa;
  auto* quant = bench->add_subcommand(
      "quantize",
      "FP8 quantization kernels (row + column copies) per recipe, then BF16 [8192, 768] and [8192, 3072] "
      "with tensor scales on the tensor-scaled and the tile kernel (needs CUDA)");
  quant->add_flag("--json", qa.json, "one JSON object per line");
  quant->add_option("--rows", qa.rows, "tensor rows")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->capture_default_str();
  quant->add_option("--cols", qa.cols, "tensor columns")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->capture_default_str();
  quant->add_option("--reps", qa.reps, "timed repetitions (median reported)")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->capture_default_str();
  quant->callback([] { run_quantize(qa); });

  static OpsArgs oa;
  auto* ops = bench->add_subcommand(
      "ops",
      "memory-bound kernels (quantize, layouts, GELU, LayerNorm, cross-entropy) alone: GB/s (needs CUDA)");
  ops->add_flag("--json", oa.json, "one JSON object per line");
  ops->add_option("--reps", oa.reps, "timed repetitions (median reported)")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->capture_default_str();
  ops->add_option("--warmup", oa.warmup, "untimed warm-up calls")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()))
      ->capture_default_str();
  ops->callback([] { run_ops(oa); });

  static AttnArgs t;
  auto* attn = bench->add_subcommand(
      "attention", "FP8 attention (stale, matched) vs BF16 and the cuDNN SDPA peers, fwd+bwd");
  attn->add_flag("--json", t.json, "one JSON object per line");
  attn->add_option("--cases", t.cases,
                   "bench | check (the shape sets of octet/attention_cases.h) or case names, "
                   "comma-separated (e.g. b4-h16-d128-s4096-causal)")
      ->capture_default_str()
      ->each([](const std::string&) { t.cases_given = true; });
  attn->add_option(
      "--rows", t.rows,
      "only these of octet's rows, comma-separated (e.g. octet-fp8-flash-kernels,cudnn-fp8-stale; "
      "the names: docs/benchmarks.md); unset or '' every row. The PyTorch SDPA rows "
      "come from --peer's script, which still runs ('' skips it)");
  attn->add_option("--batch", t.batch, "a custom shape instead of --cases: batch B")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->capture_default_str()
      ->each([](const std::string&) { t.custom = true; });
  attn->add_option("--heads", t.heads, "custom shape: query heads H")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->capture_default_str()
      ->each([](const std::string&) { t.custom = true; });
  attn->add_option("--kv-heads", t.kv_heads, "custom shape: KV heads G (default H)")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->each([](const std::string&) { t.custom = true; });
  attn->add_option("--head-dim", t.head_dim, "custom shape: head dim D (the flash and cuDNN rows: 64 or 128)")
      ->capture_default_str()
      ->each([](const std::string&) { t.custom = true; });
  attn->add_option("--seq", t.seqs, "custom shape: sequence lengths")
      ->delimiter(',')
      ->capture_default_str()
      ->each([](const std::string&) { t.custom = true; });
  attn->add_option("--causal", t.causal, "custom shape: causal mask (true/false)")
      ->capture_default_str()
      ->each([](const std::string&) { t.custom = true; });
  attn->add_option("--reps", t.reps, "timed repetitions (median reported)")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->capture_default_str();
  attn->add_option("--warmup", t.warmup, "untimed warm-up calls")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()))
      ->capture_default_str();
  attn->add_option("--input-dtype", t.input_dtype,
                   "dtype of q, k, v, o, dO and the gradients for octet's rows (bf16: as the trainer)")
      ->check(CLI::IsMember({"bf16", "f32"}))
      ->capture_default_str();
  attn->add_option("--tile", t.tile,
                   "block_q = block_k of octet's FP8 flash rows: the dS scale tile and the forward's key "
                   "tile (64 runs the warp-specialized backward on sm_90)")
      ->check(CLI::IsMember({int64_t(64), int64_t(128)}))
      ->capture_default_str();
  attn->add_option("--peer", t.peer,
                   "PyTorch SDPA peer script run after octet's rows ('' skips); a relative path is "
                   "looked up in the working directory, then in octet's home")
      ->capture_default_str();
  attn->add_option("--python", t.python, "interpreter for the peer script")->capture_default_str();
  attn->callback([] { run_attention(t); });

  static TrainArgs tr;
  auto* train = bench->add_subcommand(
      "train", "whole training steps per arm: tokens/s, TFLOP/s, MFU, peak memory; then the PyTorch peers");
  train->add_flag("--json", tr.json, "one JSON object per line");
  train->add_option("--device", tr.o.device, "cuda | cpu (cpu: for testing, with --models tiny)")
      ->capture_default_str();
  train->add_option("--models", tr.o.models, "gpt2-small, 350m, 760m, 1.3b, 2.7b, tiny")->delimiter(',');
  octet::cli::add_enum_option<octet::Arm>(train, "--arms", tr.o.arms, "precision arms");
  train->add_option("--batch", tr.o.batch, "sequences per micro-batch")->capture_default_str();
  train
      ->add_option("--tokens-per-step", tr.o.tokens_per_step,
                   "tokens per optimizer step: batch = this / (--seq x --grad-accum) for every model "
                   "(a multiple of it; overrides --batch)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  train
      ->add_option("--grad-accum", tr.o.grad_accum,
                   "micro-batches per optimizer step (gradient accumulation, as train.grad_accum)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  train->add_option("--model-batch", tr.model_batch, "NAME=N,...: one model's batch (overrides both)")
      ->delimiter(',');
  train->add_option("--seq", tr.o.seq_len, "tokens per sequence")->capture_default_str();
  train->add_option("--vocab", tr.o.vocab_size, "vocabulary (GPT-2's 50257 padded to 50304)")
      ->capture_default_str();
  train
      ->add_option("--warmup", tr.o.warmup,
                   "untimed warm-up steps (>= 1: the first gives the loss_first column)")
      ->capture_default_str();
  train->add_option("--steps", tr.o.steps, "timed steps (median reported)")->capture_default_str();
  train->add_option("--peak-tflops", tr.o.peak_tflops, "mfu/mfu_bf16 denominator (dense BF16 H100/H200 SXM)")
      ->capture_default_str()
      ->check(CLI::Range(1e-3, 1e6));
  train
      ->add_option("--peak-tflops-fp8", tr.o.peak_tflops_fp8, "mfu_fp8 denominator (dense FP8 H100/H200 SXM)")
      ->capture_default_str()
      ->check(CLI::Range(1e-3, 1e6));
  octet::cli::add_enum_option<octet::Recipe>(train, "--recipe", tr.o.recipe, "FP8 linears' scaling recipe")
      ->capture_default_str();
  train->add_option("--attn-form", tr.o.attn_form, "auto (cuda FP8: the flash kernels), whole, flash")
      ->check(CLI::IsMember({"auto", "whole", "flash"}))
      ->capture_default_str();
  train
      ->add_option("--attn-tile", tr.o.attn_tile,
                   "FP8 attention's block_q = block_k (precision.attn_tile): 128 or 64")
      ->check(CLI::IsMember({int64_t(64), int64_t(128)}))
      ->capture_default_str();
  train->add_flag("--activation-checkpointing", tr.o.train.activation_checkpointing,
                  "recompute each layer's forward in the backward (peak memory vs one more forward)");
  train->add_flag("--profile", tr.o.profile, "time every backend op by class (synchronizes after each op)");
  train->add_option("--peer", tr.peer, "PyTorch peer script run after octet's rows")->capture_default_str();
  train->add_option("--peer-arms", tr.peer_arms, "the peer's arms: bf16, torchao-tensorwise, torchao-rowwise")
      ->delimiter(',')
      ->check(CLI::IsMember({"bf16", "torchao-tensorwise", "torchao-rowwise"}));
  train->add_flag("--no-peer", tr.no_peer, "skip the PyTorch peer");
  train->add_option("--python", tr.python, "interpreter for the peer script");
  train->callback([] { run_train(tr); });

  octet::cli::add_bench_comm(bench);
});
