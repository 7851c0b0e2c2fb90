// src/bench/cuda/bench_quantize.cpp — the quantization benchmark of bench.h. (1) One FP32
// activation-sized tensor quantized into its row-wise and column-wise FP8 copies by each recipe
// (CudaQuantizer). (2) The training step's BF16 activations of GPT-2 small, [8192, 768] and
// [8192, 3072], and of the 1.3B model, [8192, 2048] and [8192, 8192] (8 x 1024 tokens), both copies, with the
// tensor scales training uses — tensor-current (amax pre-pass + cast), tensor-current with the producer's
// amax (the cast alone) and tensor-delayed in steady state (the cast, which reduces the amax) — each on the
// tensor-scaled kernel and on the 128x128 tile kernel it replaces (quantize.h QuantizeArgs::tile_kernel), so
// one run shows before and after. Sources and copies rotate past the L2 cache.
#include <cuda_runtime.h>

#include <vector>

#include "octet/bench.h"
#include "bench/cuda/bench_timer.h"
#include "cuda/runtime/buffer.h"
#include "cuda/runtime/check.h"
#include "cuda/runtime/cuda_backend.h"
#include "cuda/ops/ops.h"
#include "cuda/quantize/quantizer.h"

namespace octet::cuda {
namespace {

// (2): the tensor-scaled casts of a BF16 [rows, cols] tensor on both kernels.
void bench_tensor_scaled(CudaBackend& backend, EventTimer& timer, int64_t rows, int64_t cols, int warmup,
                         int reps, const std::function<void(const QuantBenchRow&)>& on_row) {
  const cudaStream_t stream = backend.stream();
  int dev = 0, l2 = 0;
  OCTET_CUDA_CHECK(cudaGetDevice(&dev));
  OCTET_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  const double bytes = double(rows) * double(cols) * (2.0 + 2.0);  // BF16 read, two FP8 writes
  const int n = rotation_copies(bytes, size_t(l2));
  std::vector<Buffer> x;
  std::vector<DevQ> rq(static_cast<size_t>(n)), cq(static_cast<size_t>(n));
  const Buffer f = backend.alloc(DType::F32, {rows, cols});
  for (int k = 0; k < n; ++k) {
    x.push_back(backend.alloc(DType::BF16, {rows, cols}));
    fill_random_launch(f.tensor().f32(), size_t(rows * cols), 11u + uint32_t(k), 1.0f, stream);
    convert_launch(x.back().tensor(), f.tensor(), stream);
    rq[size_t(k)].ensure(rows, cols, Format::E4M3, ScaleLayout::Tensor, backend);
    cq[size_t(k)].ensure(cols, rows, Format::E4M3, ScaleLayout::Tensor, backend);
  }
  DeviceBuffer<QuantCounters> counters;
  DeviceBuffer<unsigned> amax;
  DeviceBuffer<float> scale;
  counters.reserve(1, stream);
  amax.reserve(1, stream);
  scale.reserve(1, stream);
  OCTET_CUDA_CHECK(cudaMemsetAsync(amax.get(), 0, sizeof(unsigned), stream));
  tensor_amax_launch(x[0].tensor().data, true, rows * cols, nullptr, amax.get(), stream);
  const float s = 100.0f;  // a delayed scale: x·s covers E4M3's range for unit-normal x
  OCTET_CUDA_CHECK(cudaMemcpyAsync(scale.get(), &s, sizeof(float), cudaMemcpyHostToDevice, stream));
  backend.synchronize();
  struct Mode {
    const char* recipe;
    ScaleSource source;
    bool given;
  };
  const Mode modes[] = {{"tensor-current", ScaleSource::TensorAmax, false},
                        {"tensor-current(given-amax)", ScaleSource::TensorAmax, true},  // no pre-pass
                        {"tensor-delayed", ScaleSource::Pointer, false}};
  for (const Mode& m : modes)
    for (const bool tile : {false, true}) {
      auto call = [&](int i) {
        const size_t k = size_t(i % n);
        QuantizeArgs a;
        a.x = x[k].tensor().data;
        a.x_bf16 = true;
        a.rows = rows;
        a.cols = cols;
        a.source = m.source;
        a.amax_given = m.given ? amax.get() : nullptr;
        a.scale_ptr = m.source == ScaleSource::Pointer ? scale.get() : nullptr;
        a.rowwise = &rq[k].view;
        a.colwise = &cq[k].view;
        a.accum.counters = counters.get();
        a.tile_kernel = tile;
        quantize_launch(a, stream);
      };
      QuantBenchRow r;
      r.recipe = m.recipe;
      r.role = "activation";
      r.dtype = "bf16";
      r.kernel = tile ? "tile" : "tensor";
      r.rows = rows;
      r.cols = cols;
      r.reps = reps;
      r.ms = timer.median_ms(warmup, reps, call);
      r.gbps = bytes / (r.ms * 1e-3) / 1e9;
      on_row(r);
    }
}

}  // namespace

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
  // GPT-2 small's activations, then the 1.3B model's (d_model 2048, MLP 8192)
  for (const int64_t c : {768, 3072, 2048, 8192})
    bench_tensor_scaled(backend, timer, 8192, c, warmup, reps, on_row);
  backend.synchronize();
}

}  // namespace octet::cuda
