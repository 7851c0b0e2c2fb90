// src/bench/cuda/bench_attention.cpp — the attention benchmark of bench.h: the CUDA backend's attention
// (bf16, fp8 with stale delta, fp8 with matched delta: the unfused kernels; octet-fp8-fused and
// octet-fp8-fused-stale: form 'tiled', the fused FP8 forward and backward of src/cuda/flash/ with
// the matched or the stale delta, rows only for head_dim 64 and 128; the matched row's backward
// includes its recompute pre-pass, the stale row's a dO·O row pass; bf16-fused: form 'tiled' in
// BF16, cuDNN's fused SDPA with its deterministic backward, as the bf16 arms run it) forward and
// backward through the Attention interface, then the cuDNN peers called directly
// (bench_attention_cudnn.h: cudnn-bf16, cudnn-fp8-stale), at B x H x S x D, causal or not; timed
// with CUDA events (median of the repetitions). octet's rows take q, k, v, o, dO and the gradients
// in opt.input_dtype (BF16 by default: what the trainer passes, so the operand glue's cost is the
// training-time one; the values are the same N(0, 1) draws rounded to BF16). The unfused rows materialize S, dP and dS
// (~18 bytes per (query, key) pair): they are skipped, with a note on stderr, where that exceeds
// 80% of the free device memory (S = 16384 at B4 H16).
// FLOPs follow FlashAttention's convention: forward 4·B·H·Sq·Sk·D, halved when causal; backward
// 2.5x the forward (two of its five GEMMs recompute). The unfused kernels compute the masked half
// too, so their causal TFLOP/s are understated by that convention, as any unfused kernel's are.
#include <cuda_runtime.h>

#include <cstdio>
#include <memory>
#include <tuple>

#include "octet/bench.h"
#include "bench/cuda/bench_attention_cudnn.h"
#include "bench/cuda/bench_timer.h"
#include "cuda/check.h"
#include "cuda/cuda_backend.h"
#include "cuda/flash/flash_backward.h"
#include "cuda/flash/flash_forward.h"
#include "cuda/ops.h"

namespace octet::cuda {

void bench_attention(const AttnBenchOptions& opt,
                     const std::function<void(const AttnBenchRow&)>& on_row) {
  CudaBackend backend(CudaOptions{});
  EventTimer timer(backend.stream());
  struct Impl {
    const char* name;
    AttnPrecision precision;
    DeltaMode delta;
    AttnForm form;
    QkvScaling qkv = QkvScaling::Tensor;
  };
  const Impl impls[] = {{"bf16", AttnPrecision::BF16, DeltaMode::Matched, AttnForm::Whole},
                        {"fp8-stale", AttnPrecision::FP8, DeltaMode::Stale, AttnForm::Whole},
                        {"fp8-matched", AttnPrecision::FP8, DeltaMode::Matched, AttnForm::Whole},
                        {"octet-fp8-fused", AttnPrecision::FP8, DeltaMode::Matched, AttnForm::Tiled},
                        {"octet-fp8-fused-stale", AttnPrecision::FP8, DeltaMode::Stale,
                         AttnForm::Tiled},
                        {"octet-fp8-fused-head-block", AttnPrecision::FP8, DeltaMode::Matched,
                         AttnForm::Tiled, QkvScaling::HeadBlock},
                        {"bf16-fused", AttnPrecision::BF16, DeltaMode::Stale, AttnForm::Tiled}};
  const bool fused_ok = opt.head_dim == 64 || opt.head_dim == 128;  // flash_forward/backward.h
  for (int64_t S : opt.seqs) {
    AttentionShape shape;
    shape.batch = opt.batch;
    shape.n_heads = shape.n_kv_heads = opt.heads;
    shape.seq_q = shape.seq_k = S;
    shape.head_dim = opt.head_dim;
    shape.causal = opt.causal;
    const Shape qs{opt.batch, opt.heads, S, opt.head_dim};
    const DType dt = opt.input_dtype;
    Buffer q = backend.alloc(dt, qs), k = backend.alloc(dt, qs), v = backend.alloc(dt, qs),
           o = backend.alloc(dt, qs), lse = backend.alloc(DType::F32, {opt.batch, opt.heads, S}),
           d_o = backend.alloc(dt, qs), dq = backend.alloc(dt, qs), dk = backend.alloc(dt, qs),
           dv = backend.alloc(dt, qs);
    const size_t n = size_t(q.tensor().numel());
    {
      Buffer f32 = backend.alloc(DType::F32, qs);  // drawn in FP32, then converted (BF16: rounded)
      for (auto [t, seed, sigma] : {std::tuple{&q, 11u, 1.0f}, {&k, 12u, 1.0f}, {&v, 13u, 1.0f},
                                    {&d_o, 14u, 1e-3f}}) {
        fill_random_launch(f32.tensor().f32(), n, seed, sigma, backend.stream());
        convert_launch(t->tensor(), f32.tensor(), backend.stream());
      }
      OCTET_CUDA_CHECK(cudaStreamSynchronize(backend.stream()));
    }
    const double fwd_flop = 4.0 * double(opt.batch * opt.heads) * double(S) * double(S) *
                            double(opt.head_dim) * (opt.causal ? 0.5 : 1.0);
    size_t free_bytes = 0, total_bytes = 0;
    OCTET_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const double unfused_bytes = 18.0 * double(opt.batch * opt.heads) * double(S) * double(S);
    for (const Impl& im : impls) {
      if (im.form == AttnForm::Tiled && !fused_ok) continue;
      if (im.form == AttnForm::Whole && unfused_bytes > 0.8 * double(free_bytes)) {
        std::fprintf(stderr, "octet bench attention: %s at S %lld skipped: its S x S buffers need "
                     "~%.0f GB, %.0f GB free\n", im.name, (long long)S, unfused_bytes / 1e9,
                     double(free_bytes) / 1e9);
        continue;
      }
      AttentionConfig cfg;
      cfg.precision = im.precision;
      cfg.delta = im.delta;
      cfg.form = im.form;
      cfg.qkv_scaling = im.qkv;
      auto attn = backend.make_attention(shape, cfg);
      AttnBenchRow row;
      row.impl = im.name;
      row.batch = opt.batch;
      row.heads = opt.heads;
      row.seq = S;
      row.head_dim = opt.head_dim;
      row.causal = opt.causal;
      row.reps = opt.reps;
      row.input_dtype = to_string(dt);
      if (im.form == AttnForm::Tiled && im.precision == AttnPrecision::FP8) {
        row.fwd_kernel = flash::forward_kernel_name(flash::select_forward_kernel());
        flash::BackwardParams bp;  // what select_backward_kernel reads of the fused backward's
        bp.D = opt.head_dim, bp.Tk = S, bp.block_q = cfg.block_q, bp.block_k = cfg.block_k;
        row.bwd_kernel = flash::backward_kernel_name(flash::select_backward_kernel(bp));
      }
      // Forwards include allocating (stream-ordered) and dropping their saved state; the
      // backwards all use the state of one forward.
      row.fwd_ms = timer.median_ms(opt.warmup, opt.reps, [&](int) { attn->forward(q, k, v, o, lse); });
      const SavedAttention saved = attn->forward(q, k, v, o, lse);
      row.bwd_ms = timer.median_ms(opt.warmup, opt.reps,
                                   [&](int) { attn->backward(saved, d_o, dq, dk, dv, Tensor()); });
      row.fwd_tflops = fwd_flop / (row.fwd_ms * 1e-3) / 1e12;
      row.bwd_tflops = 2.5 * fwd_flop / (row.bwd_ms * 1e-3) / 1e12;
      on_row(row);
    }
    bench_cudnn_sdpa(backend, timer, opt, S, on_row);
  }
}

}  // namespace octet::cuda
