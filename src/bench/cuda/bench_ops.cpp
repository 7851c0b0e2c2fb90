// src/bench/cuda/bench_ops.cpp — the memory-bound kernels of a training step timed one at a time
// (bench.h bench_ops): FP8 quantization (tensor amax + both copies) of activations and weights, the
// head layouts, GELU forward/backward, LayerNorm forward/backward and the fused cross-entropy, on
// the 124M, 350M and 1.3B shapes of `octet bench train` (8 x 1024 tokens, BF16 activations).
// Bandwidth is the fewest bytes the op must move (each input read once, each output written once)
// over the median time, so 100 % of the HBM bandwidth is the ceiling and a pre-pass shows as a
// lower figure (docs/cuda.md §"Memory-bound kernels").
#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "bench/cuda/bench_timer.h"
#include "cuda/runtime/check.h"
#include "cuda/runtime/cuda_backend.h"
#include "cuda/ops/ops.h"
#include "cuda/quantize/quantizer.h"
#include "octet/bench.h"

namespace octet::cuda {
namespace {

struct Shape4 {
  const char* model;
  int64_t d, ff, heads, head_dim;
};

constexpr int64_t kVocab = 50304, kBatch = 8, kSeq = 1024;

}  // namespace

void bench_ops(int warmup, int reps, const std::function<void(const OpsBenchRow&)>& on_row) {
  CudaBackend backend(CudaOptions{});
  const cudaStream_t s = backend.stream();
  EventTimer timer(s);
  int dev = 0, l2 = 0;
  OCTET_CUDA_CHECK(cudaGetDevice(&dev));
  OCTET_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  const int64_t rows = kBatch * kSeq;
  uint32_t seed = 1;
  // A random act tensor of `dtype` (BF16 rounded from a unit normal FP32 fill).
  auto random = [&](DType dtype, ::octet::Shape shape) {
    Buffer b = backend.alloc(dtype, shape);
    if (dtype == DType::F32) {
      fill_random_launch(b.tensor().f32(), size_t(b.tensor().numel()), seed++, 1.0f, s);
    } else {
      Buffer f = backend.alloc(DType::F32, shape);
      fill_random_launch(f.tensor().f32(), size_t(f.tensor().numel()), seed++, 1.0f, s);
      convert_launch(b.tensor(), f.tensor(), s);
      backend.synchronize();
    }
    return b;
  };
  // Times op(k) over the rotation of k in [0, copies) and reports one row.
  auto measure = [&](const std::string& op, const char* model, int64_t r, int64_t c, double bytes, int copies,
                     const std::function<void(int)>& op_k) {
    OpsBenchRow row;
    row.op = op;
    row.model = model;
    row.rows = r;
    row.cols = c;
    row.bytes = bytes;
    row.reps = reps;
    row.ms = timer.median_ms(warmup, reps, [&](int i) { op_k(i % copies); });
    row.gbps = bytes / (row.ms * 1e-3) / 1e9;
    on_row(row);
  };
  const Shape4 shapes[] = {
      {"124M", 768, 3072, 12, 64}, {"350M", 1024, 4096, 16, 64}, {"1.3B", 2048, 8192, 16, 128}};
  for (const Shape4& m : shapes) {
    const int64_t d = m.d, ff = m.ff;
    // FP8 quantization, tensor-current: an activation [rows, d] (BF16) and a weight [ff, d] (F32)
    // into their row-wise and column-wise copies (read once, two FP8 writes).
    for (const bool weight : {false, true}) {
      const int64_t r = weight ? ff : rows, c = d;
      const DType dt = weight ? DType::F32 : DType::BF16;
      const double bytes = double(r * c) * (dtype_size(dt) + 2.0);
      const int n = rotation_copies(bytes, size_t(l2));
      std::vector<Buffer> x;
      for (int k = 0; k < n; ++k) x.push_back(random(dt, {r, c}));
      QuantConfig cfg;
      cfg.recipe = Recipe::TensorCurrent;
      CudaQuantizer q(cfg, weight ? Role::Weight : Role::Activation, backend, s);
      DevQ rq, cq;
      measure(weight ? "quantize.weight" : "quantize.act", m.model, r, c, bytes, n,
              [&](int k) { q.quantize(x[size_t(k)].tensor(), &rq, &cq); });
      DeviceBuffer<QuantCounters> counters;
      counters.reserve(1, s);
      measure(weight ? "amax.weight" : "amax.act", m.model, r, c, double(r * c) * dtype_size(dt), n,
              [&](int k) {
                tensor_amax_launch(x[size_t(k)].tensor().data, dt == DType::BF16, r * c, nullptr,
                                   &counters.get()->amax_bits, s);
              });
    }
    {  // head layouts: [B, T, H·D] <-> [B, H, T, D], BF16
      const double bytes = double(rows * d) * 4.0;
      const int n = rotation_copies(bytes, size_t(l2));
      std::vector<Buffer> tok, heads;
      for (int k = 0; k < n; ++k) {
        tok.push_back(random(DType::BF16, {rows, d}));
        heads.push_back(backend.alloc(DType::BF16, {rows, d}));
      }
      measure("layout.to_heads", m.model, rows, d, bytes, n, [&](int k) {
        heads_tokens_launch(tok[size_t(k)].tensor(), heads[size_t(k)].tensor(), kBatch, m.heads, kSeq,
                            m.head_dim, false, s);
      });
      measure("layout.to_tokens", m.model, rows, d, bytes, n, [&](int k) {
        heads_tokens_launch(heads[size_t(k)].tensor(), tok[size_t(k)].tensor(), kBatch, m.heads, kSeq,
                            m.head_dim, true, s);
      });
    }
    {  // GELU [rows, ff], BF16
      const double bytes = double(rows * ff) * 2.0;
      const int n = rotation_copies(2.0 * bytes, size_t(l2));
      std::vector<Buffer> x, y, dy;
      for (int k = 0; k < n; ++k) {
        x.push_back(random(DType::BF16, {rows, ff}));
        dy.push_back(random(DType::BF16, {rows, ff}));
        y.push_back(backend.alloc(DType::BF16, {rows, ff}));
      }
      measure("gelu.fwd", m.model, rows, ff, 2.0 * bytes, n,
              [&](int k) { gelu_forward_launch(x[size_t(k)].tensor(), y[size_t(k)].tensor(), s); });
      measure("gelu.bwd", m.model, rows, ff, 3.0 * bytes, n, [&](int k) {
        gelu_backward_launch(x[size_t(k)].tensor(), dy[size_t(k)].tensor(), y[size_t(k)].tensor(), s);
      });
    }
    {  // LayerNorm [rows, d], BF16, with weight and bias (and their gradients)
      const double bytes = double(rows * d) * 2.0;
      const int n = rotation_copies(3.0 * bytes, size_t(l2));
      std::vector<Buffer> x, y, dy;
      for (int k = 0; k < n; ++k) {
        x.push_back(random(DType::BF16, {rows, d}));
        dy.push_back(random(DType::BF16, {rows, d}));
        y.push_back(backend.alloc(DType::BF16, {rows, d}));
      }
      const Buffer w = random(DType::F32, {d}), b = random(DType::F32, {d});
      const Buffer dw = backend.alloc(DType::F32, {d}), db = backend.alloc(DType::F32, {d});
      const Buffer mean = backend.alloc(DType::F32, {rows}), rstd = backend.alloc(DType::F32, {rows});
      measure("layernorm.fwd", m.model, rows, d, 2.0 * bytes, n, [&](int k) {
        layernorm_forward_launch(x[size_t(k)].tensor(), w.tensor().f32(), b.tensor().f32(),
                                 y[size_t(k)].tensor(), mean.tensor().f32(), rstd.tensor().f32(), rows, d,
                                 1e-5f, s);
      });
      measure("layernorm.bwd", m.model, rows, d, 3.0 * bytes, n, [&](int k) {
        layernorm_backward_launch(x[size_t(k)].tensor(), w.tensor().f32(), mean.tensor().f32(),
                                  rstd.tensor().f32(), dy[size_t(k)].tensor(), y[size_t(k)].tensor(),
                                  dw.tensor().f32(), db.tensor().f32(), rows, d, s);
      });
    }
    if (&m == &shapes[0]) {  // cross-entropy [rows, vocab], BF16, in place (the model's use); once
      const double bytes = double(rows * kVocab) * 4.0;  // one read, one write
      Buffer logits = random(DType::BF16, {rows, kVocab});
      Buffer targets = backend.alloc(DType::I32, {rows});
      fill_launch(targets.tensor(), 17.0, s);
      DeviceBuffer<double> loss;
      loss.reserve(size_t(rows), s);
      measure("cross_entropy", "any", rows, kVocab, bytes, 1, [&](int) {
        cross_entropy_launch(logits.tensor(), targets.tensor().i32(), logits.tensor(), loss.get(), rows,
                             kVocab, 1.0f, s);
      });
    }
  }
  backend.synchronize();
}

}  // namespace octet::cuda
