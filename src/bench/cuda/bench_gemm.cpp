// src/bench/cuda/bench_gemm.cpp — the GEMM benchmark of bench.h: the QKV, out-projection, MLP up and down
// GEMMs of a transformer of width d_model at `tokens` tokens per step, in their forward, dgrad and
// wgrad forms ("TN": C[M,N] = A[M,K]·B[N,K]ᵀ), timed for BF16, FP8 with per-tensor scales (E4M3
// forward, E5M2 gradients: TE's hybrid) and FP8 with 1x128 / 128x128 block scales (DeepSeek-V3).
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "octet/bench.h"
#include "bench/cuda/bench_timer.h"
#include "cuda/runtime/check.h"
#include "cuda/runtime/cuda_backend.h"
#include "cuda/attention/cudnn/cudnn_sdpa.h"
#include "cuda/gemm/gemm.h"
#include "cuda/ops/ops.h"
#include "cuda/quantize/quantize.h"
#include "cuda/quantize/quantizer.h"

namespace octet::cuda {

BenchEnv bench_env() {
  BenchEnv e;
  checked_cuda_device(0);  // one clear line where there is no GPU or driver
  int dev = 0;
  OCTET_CUDA_CHECK(cudaGetDevice(&dev));

  cudaDeviceProp p{};
  OCTET_CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
  e.gpu = p.name;
  e.sm_count = p.multiProcessorCount;
  e.l2_bytes = size_t(p.l2CacheSize);
  OCTET_CUDA_CHECK(cudaRuntimeGetVersion(&e.runtime_version));
  OCTET_CUDA_CHECK(cudaDriverGetVersion(&e.driver_version));
  e.cublaslt_version = cublasLtGetVersion();
  e.cudnn_version = SdpaEngine::version();
  return e;
}

namespace {

struct Shape {
  const char* layer;
  const char* pass;
  int64_t M, N, K;
  Role role_a, role_b;
};

// The 12 GEMMs of one layer's four linears (out x in weights) at T tokens.
std::vector<Shape> shapes_for(int64_t d, int64_t T, int mlp) {
  struct Lin {
    const char* name;
    int64_t in, out;
  };
  const Lin lins[] = {{"qkv", d, 3 * d}, {"out", d, d}, {"up", d, mlp * d}, {"down", mlp * d, d}};
  std::vector<Shape> v;
  for (const Lin& l : lins) {
    v.push_back({l.name, "fwd", T, l.out, l.in, Role::Activation, Role::Weight});
    v.push_back({l.name, "dgrad", T, l.in, l.out, Role::Gradient, Role::Weight});
    v.push_back({l.name, "wgrad", l.out, l.in, T, Role::Gradient, Role::Activation});
  }
  return v;
}

// Enough copies of the operands that one pass over them exceeds 3x the L2 (at most 8).
int rotation(size_t bytes_per_set, size_t l2) {
  const size_t want = 3 * l2;
  return int(std::clamp<size_t>((want + bytes_per_set - 1) / std::max<size_t>(bytes_per_set, 1), 1, 8));
}

}  // namespace

void bench_gemm(const GemmBenchOptions& opt, const std::function<void(const GemmBenchRow&)>& on_row) {
  const BenchEnv env = bench_env();
  CudaBackend backend(CudaOptions{});
  const cudaStream_t stream = backend.stream();
  GemmEngine& gemm = backend.gemm();
  EventTimer timer(stream);
  DeviceBuffer<float> src;
  for (int d : opt.d_models) {
    for (const Shape& s : shapes_for(d, opt.tokens, opt.mlp_ratio)) {
      float* C = nullptr;
      DeviceBuffer<float> cbuf;
      C = cbuf.reserve(size_t(s.M * s.N), stream);
      for (const std::string& mode : opt.modes) {
        GemmBenchRow row;
        row.d_model = d;
        row.layer = s.layer;
        row.pass = s.pass;
        row.mode = mode;
        row.M = s.M;
        row.N = s.N;
        row.K = s.K;
        row.reps = opt.reps;
        if (mode == "bf16") {
          const int rot = rotation(size_t(s.M + s.N) * size_t(s.K) * 2, env.l2_bytes);
          std::vector<DeviceBuffer<uint16_t>> a(static_cast<size_t>(rot)), b(static_cast<size_t>(rot));
          float* x = src.reserve(size_t(std::max(s.M, s.N) * s.K), stream);
          for (int i = 0; i < rot; ++i) {
            fill_random_launch(x, size_t(s.M * s.K), uint32_t(1 + 2 * i), 1.0f, stream);
            convert_launch(Tensor(a[size_t(i)].reserve(size_t(s.M * s.K), stream), DType::BF16, {s.M, s.K}),
                           Tensor(x, DType::F32, {s.M, s.K}), stream);
            fill_random_launch(x, size_t(s.N * s.K), uint32_t(2 + 2 * i), 0.02f, stream);
            convert_launch(Tensor(b[size_t(i)].reserve(size_t(s.N * s.K), stream), DType::BF16, {s.N, s.K}),
                           Tensor(x, DType::F32, {s.N, s.K}), stream);
          }
          row.ms = timer.median_ms(opt.warmup, opt.reps, [&](int i) {
            gemm.bf16(a[size_t(i % rot)].get(), false, b[size_t(i % rot)].get(), true, C, s.M, s.N, s.K);
          });
        } else {
          QuantConfig cfg;
          cfg.recipe = mode == "fp8-block" ? Recipe::Block : Recipe::TensorCurrent;
          cfg.formats = FormatPolicy::Hybrid;
          const int rot = rotation(size_t(s.M + s.N) * size_t(s.K), env.l2_bytes);
          std::vector<DevQ> a(static_cast<size_t>(rot)), b(static_cast<size_t>(rot));
          CudaQuantizer qa(cfg, s.role_a, backend, stream), qb(cfg, s.role_b, backend, stream);
          float* x = src.reserve(size_t(std::max(s.M, s.N) * s.K), stream);
          for (int i = 0; i < rot; ++i) {
            fill_random_launch(x, size_t(s.M * s.K), uint32_t(1 + 2 * i), 1.0f, stream);
            qa.quantize(Tensor(x, DType::F32, {s.M, s.K}), &a[size_t(i)], nullptr);
            fill_random_launch(x, size_t(s.N * s.K), uint32_t(2 + 2 * i), 0.02f, stream);
            qb.quantize(Tensor(x, DType::F32, {s.N, s.K}), &b[size_t(i)], nullptr);
          }
          const int64_t fb0 = gemm.fallback_count();
          row.ms = timer.median_ms(opt.warmup, opt.reps, [&](int i) {
            gemm.fp8(a[size_t(i % rot)].view, b[size_t(i % rot)].view, C);
          });
          row.fallback = gemm.fallback_count() > fb0;
        }
        row.tflops = 2.0 * double(s.M) * double(s.N) * double(s.K) / (row.ms * 1e-3) / 1e12;
        on_row(row);
      }
    }
  }
  backend.synchronize();
}

}  // namespace octet::cuda
