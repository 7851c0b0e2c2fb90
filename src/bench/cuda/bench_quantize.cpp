// src/bench/cuda/bench_quantize.cpp — the quantization benchmark of bench.h: one FP32 activation-sized
// tensor quantized into its row-wise and column-wise FP8 copies by each recipe (CudaQuantizer).
#include <cuda_runtime.h>

#include "octet/bench.h"
#include "bench/cuda/bench_timer.h"
#include "cuda/check.h"
#include "cuda/cuda_backend.h"
#include "cuda/ops.h"
#include "cuda/quantizer.h"

namespace octet::cuda {

void bench_quantize(int64_t rows, int64_t cols, int warmup, int reps,
                    const std::function<void(const QuantBenchRow&)>& on_row) {
  CudaBackend backend(CudaOptions{});
  const cudaStream_t stream = backend.stream();
  EventTimer timer(stream);
  const Buffer x = backend.alloc(DType::F32, {rows, cols});
  fill_random_launch(x.tensor().f32(), size_t(rows * cols), 7, 1.0f, stream);
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
    CudaQuantizer q(cfg, c.role, backend, stream);
    DevQ row, col;
    q.quantize(x, &row, &col);  // tensor-delayed: one update, then steady state (non-empty history)
    q.update();
    QuantBenchRow r;
    r.recipe = to_string(c.recipe);
    r.role = c.role_name;
    r.rows = rows;
    r.cols = cols;
    r.reps = reps;
    r.ms = timer.median_ms(warmup, reps, [&](int) { q.quantize(x, &row, &col); });
    r.gbps = 6.0 * double(rows) * double(cols) / (r.ms * 1e-3) / 1e9;
    on_row(r);
  }
  backend.synchronize();
}

}  // namespace octet::cuda
