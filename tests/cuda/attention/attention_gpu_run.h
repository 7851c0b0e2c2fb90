// attention_gpu_run.h — the device tensors of one attention call (AttnIo) and one forward +
// backward of an octet::Backend attention on host inputs with the results copied back (run_gpu),
// and one CUDA attention configuration of the tests that loop over every form (GpuForm): the
// helpers of the GPU attention tests.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "octet/attention.h"
#include "octet/backend.h"
#include "octet/fp8.h"
#include "octet/tensor.h"
#include "cuda/cuda_test_util.h"

namespace octet {

// One CUDA form of attention (precision, form, delta, Q/K/V scaling, head_dim, dQ projection) and
// its name in failure messages.
struct GpuForm {
  const char* name;
  AttnPrecision precision;
  AttnForm form;
  DeltaMode delta;
  QkvScaling scaling;
  int64_t head_dim;
  bool dq_projection = false;
  AttentionConfig config() const {
    AttentionConfig c;
    c.precision = precision, c.form = form, c.delta = delta, c.qkv_scaling = scaling;
    c.dq_projection = dq_projection;
    return c;
  }
};

struct GpuRun {
  std::vector<float> o, lse, dq, dk, dv;
  AttentionStats stats;
};

// The device tensors of one attention call.
struct AttnIo {
  Buffer q, k, v, o, lse, d_o, dq, dk, dv, residual;
  AttnIo(Backend& be, const AttentionShape& s, DType act) {
    const Shape qs{s.batch, s.n_heads, s.seq_q, s.head_dim}, ks{s.batch, s.n_kv_heads, s.seq_k, s.head_dim};
    q = be.alloc(act, qs), k = be.alloc(act, ks), v = be.alloc(act, ks), o = be.alloc(act, qs);
    lse = be.alloc(DType::F32, {s.batch, s.n_heads, s.seq_q});
    d_o = be.alloc(act, qs), dq = be.alloc(act, qs), dk = be.alloc(act, ks), dv = be.alloc(act, ks);
    residual = be.alloc(DType::F64, {2});
  }
  // Uploads the inputs (rounded to BF16 for a BF16 dtype).
  void set(Backend& be, const AttentionInputs& in) {
    for (auto [t, h] : {std::pair{&q, &in.q}, {&k, &in.k}, {&v, &in.v}, {&d_o, &in.d_o}})
      test::upload_values(be, t->tensor(), *h);
  }
};

inline GpuRun run_gpu(Backend& gpu, const AttentionShape& s, const AttentionConfig& c,
                      const AttentionInputs& in) {
  auto attn = gpu.make_attention(s, c);
  AttnIo io(gpu, s, DType::F32);
  io.set(gpu, in);
  {
    const SavedAttention saved = attn->forward(io.q, io.k, io.v, io.o, io.lse);
    attn->backward(saved, io.d_o, io.dq, io.dk, io.dv, io.residual);
  }
  GpuRun r;
  double res[2];
  gpu.download(res, io.residual);
  r.stats.row_residual_max = res[0];
  r.stats.row_residual_mean = res[1];
  r.o = gpu.download_f32(io.o);
  r.lse = gpu.download_f32(io.lse);
  r.dq = gpu.download_f32(io.dq);
  r.dk = gpu.download_f32(io.dk);
  r.dv = gpu.download_f32(io.dv);
  return r;
}

}  // namespace octet
