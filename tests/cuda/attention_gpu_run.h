// attention_gpu_run.h — one forward + backward of the CUDA attention (octet::Backend) on host
// inputs, with the results copied back: the helper of the GPU attention tests (attention_test.cpp,
// attention_rows_test.cpp).
#pragma once

#include <vector>

#include "octet/attention.h"
#include "octet/backend.h"

namespace octet {

struct GpuRun {
  std::vector<float> o, lse, dq, dk, dv;
  AttentionStats stats;
};

inline GpuRun run_gpu(Backend& gpu, const AttentionShape& s, const AttentionConfig& c,
                      const AttentionInputs& in) {
  auto attn = gpu.make_attention(s, c);
  const size_t nq = in.q.size(), nk = in.k.size(), nl = size_t(s.batch * s.n_heads * s.seq_q);
  float *q = gpu.alloc(nq), *k = gpu.alloc(nk), *v = gpu.alloc(nk), *o = gpu.alloc(nq),
        *lse = gpu.alloc(nl), *d_o = gpu.alloc(nq), *dq = gpu.alloc(nq), *dk = gpu.alloc(nk),
        *dv = gpu.alloc(nk);
  gpu.upload(q, in.q.data(), nq);
  gpu.upload(k, in.k.data(), nk);
  gpu.upload(v, in.v.data(), nk);
  gpu.upload(d_o, in.d_o.data(), nq);
  attn->forward(q, k, v, o, lse);
  GpuRun r;
  r.stats = attn->backward(d_o, dq, dk, dv);
  r.o.resize(nq), r.lse.resize(nl), r.dq.resize(nq), r.dk.resize(nk), r.dv.resize(nk);
  gpu.download(r.o.data(), o, nq);
  gpu.download(r.lse.data(), lse, nl);
  gpu.download(r.dq.data(), dq, nq);
  gpu.download(r.dk.data(), dk, nk);
  gpu.download(r.dv.data(), dv, nk);
  for (float* p : {q, k, v, o, lse, d_o, dq, dk, dv}) gpu.release(p);
  return r;
}

}  // namespace octet
