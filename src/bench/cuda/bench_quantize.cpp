// src/bench/cuda/bench_quantize.cpp — the quantization benchmark of bench.h: one FP32 activation-sized
// tensor quantized into its row-wise and column-wise FP8 copies by each recipe (CudaQuantizer).
#include <cuda_runtime.h>

#include "bench/cuda/bench.h"
#include "bench/cuda/bench_timer.h"
#include "cuda/check.h"
#include "cuda/ops.h"
#include "cuda/quantizer.h"

namespace octet::cuda {

void bench_quantize(int64_t rows, int64_t cols, int warmup, int reps,
                    const std::function<void(const QuantBenchRow&)>& on_row) {
  cudaStream_t stream;
  OCTET_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  EventTimer timer(stream);
  DeviceBuffer<float> x(size_t(rows * cols));
  fill_random_launch(x.get(), size_t(rows * cols), 7, 1.0f, stream);
  struct Case {
    Recipe recipe;
    Role role;
    const char* role_name;
  };
  const Case cases[] = {{Recipe::TensorCurrent, Role::Activation, "activation"},
                        {Recipe::TensorDelayed, Role::Activation, "activation"},
                        {Recipe::Row, Role::Activation, "activation"},
                        {Recipe::Block, Role::Activation, "activation"},
                        {Recipe::Block, Role::Weight, "weight"},
                        {Recipe::MX, Role::Activation, "activation"}};
  for (const Case& c : cases) {
    QuantConfig cfg;
    cfg.recipe = c.recipe;
    CudaQuantizer q(cfg, c.role, stream);
    DevQ row, col;
    QuantBenchRow r;
    r.recipe = to_string(c.recipe);
    r.role = c.role_name;
    r.rows = rows;
    r.cols = cols;
    r.reps = reps;
    r.ms = timer.median_ms(warmup, reps, [&](int) { q.quantize(x.get(), rows, cols, &row, &col); });
    r.gbps = 6.0 * double(rows) * double(cols) / (r.ms * 1e-3) / 1e9;
    on_row(r);
  }
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream));
  OCTET_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace octet::cuda
