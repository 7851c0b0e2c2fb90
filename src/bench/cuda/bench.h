// src/bench/cuda/bench.h — GPU benchmarks behind `octet bench` (apps/octet/cmd_bench.cpp): cuBLASLt GEMMs
// of transformer shapes (FP8 per-tensor and block-scaled vs BF16) and the FP8/BF16 attention.
//
// Method (/work/.library/device/METHOD.md): CUDA events around each repetition, warm-up first,
// median of many repetitions, operands rotated among enough copies to exceed the L2 cache,
// inputs random (never zeros). Each measurement is one JSON object (nlohmann-free: a ready string)
// so the CLI can print JSON lines or a table.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace octet::cuda {

struct BenchEnv {
  std::string gpu;          ///< cudaDeviceProp::name
  int runtime_version = 0;  ///< cudaRuntimeGetVersion
  int driver_version = 0;
  size_t cublaslt_version = 0;
  int sm_count = 0;
  size_t l2_bytes = 0;
};
BenchEnv bench_env();

struct GemmBenchRow {
  int d_model = 0;
  std::string layer, pass, mode;  ///< layer: qkv|out|up|down; pass: fwd|dgrad|wgrad; mode: bf16|fp8-tensor|fp8-block
  int64_t M = 0, N = 0, K = 0;
  double ms = 0, tflops = 0;
  int reps = 0;
  bool fallback = false;  ///< the FP8 GEMM ran through the dequantize fallback
};

struct GemmBenchOptions {
  std::vector<int> d_models{768, 1024, 2048, 4096};
  int64_t tokens = 16384;  ///< tokens per step (M of the forward)
  int mlp_ratio = 4;
  int warmup = 10, reps = 50;
  std::vector<std::string> modes{"bf16", "fp8-tensor", "fp8-block"};
};

/// Runs the sweep; on_row is called after each measurement.
void bench_gemm(const GemmBenchOptions& opt, const std::function<void(const GemmBenchRow&)>& on_row);

struct QuantBenchRow {
  std::string recipe, role;
  int64_t rows = 0, cols = 0;
  double ms = 0, gbps = 0;  ///< gbps: (4 B read + 2 x 1 B written) per element / time
  int reps = 0;
};

/// The quantize kernels (quantize.h) producing both copies of an FP32 [rows, cols] tensor, per
/// recipe; bandwidth counts the fewest bytes (one FP32 read, two FP8 writes), so pre-passes show.
void bench_quantize(int64_t rows, int64_t cols, int warmup, int reps,
                    const std::function<void(const QuantBenchRow&)>& on_row);

struct AttnBenchRow {
  std::string impl;  ///< bf16 | fp8-stale | fp8-matched
  int64_t batch = 0, heads = 0, seq = 0, head_dim = 0;
  bool causal = true;
  double fwd_ms = 0, bwd_ms = 0, fwd_tflops = 0, bwd_tflops = 0;
  int reps = 0;
};

struct AttnBenchOptions {
  int64_t batch = 4, heads = 16, head_dim = 128;
  std::vector<int64_t> seqs{1024, 4096};
  bool causal = true;
  int warmup = 3, reps = 20;
};

/// FP8 (stale, matched) and BF16 attention of the CUDA backend, forward and backward.
/// FLOPs counted as FlashAttention does: forward 4·B·H·S²·D (halved if causal), backward 2.5x that.
void bench_attention(const AttnBenchOptions& opt,
                     const std::function<void(const AttnBenchRow&)>& on_row);

}  // namespace octet::cuda
