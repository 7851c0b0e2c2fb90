// src/bench/cuda/bench_attention.cpp — `octet bench attention` (bench.h): per case of
// octet/attention_cases.h, the cuDNN peers (bench_attention_cudnn.h), then octet's rows through the
// Attention interface —
//   octet-fp8-flash, octet-fp8-flash-stale, octet-fp8-flash-head-block: form 'flash', the flash FP8
//     kernels (src/cuda/attention/flash/) with the matched or stale delta (the matched row's backward
//     includes its recompute pre-pass, the stale row's a dO·O row pass), per-tensor or per-(head,
//     128-token block) Q, K, V scales; head_dim 64 and 128 only;
//   octet-bf16-cudnn: form 'flash' in BF16, cuDNN's SDPA with its deterministic backward, as the bf16
//     arms run it;
//   unfused-bf16, unfused-fp8-stale, unfused-fp8-matched: the unfused form, which materializes S, dP
//     and dS (~18 bytes per (query, key) pair): skipped, with a note on stderr, where that exceeds
//     half the free device memory or an allocation fails —
// each with its error against the FP64 oracle on sampled rows (attention_rows_check.h) and its time
// as a ratio to the peers of the same case; and the flash kernels alone from FP8 codes
// (bench_attention_flash.h, "input_dtype": "fp8"), as cuDNN's FP8 rows are timed. Timed with CUDA events
// (median of the repetitions). octet's rows take q, k, v, o, dO and the gradients in opt.input_dtype (BF16 by
// default: what the trainer passes, so the operand glue's cost is the training-time one): the time as a user
// calls it. The values are N(0, 1) draws (dO: N(0, 1e-3)) rounded to the dtype. FLOPs follow FlashAttention's
// convention: forward 4·B·H·Tq·Tk·D, halved when causal; backward 2.5x the forward (two of its five GEMMs
// recompute). The unfused form computes the masked half too, so its causal TFLOP/s are understated by that
// convention, as any unfused kernel's are.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <tuple>

#include "bench/cuda/attention_rows_check.h"
#include "bench/cuda/bench_attention_cudnn.h"
#include "bench/cuda/bench_attention_flash.h"
#include "bench/cuda/bench_timer.h"
#include "cuda/attention/flash/flash.h"
#include "cuda/attention/glue/glue.h"
#include "cuda/ops/ops.h"
#include "cuda/runtime/check.h"
#include "cuda/runtime/cuda_backend.h"
#include "octet/bench.h"
#include "octet/error.h"

namespace octet::cuda {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Impl {
  const char* name;
  AttnPrecision precision;
  DeltaMode delta;
  AttnForm form;
  QkvScaling qkv = QkvScaling::Tensor;
};

constexpr Impl kImpls[] = {{"octet-fp8-flash", AttnPrecision::FP8, DeltaMode::Matched, AttnForm::Flash},
                           {"octet-fp8-flash-stale", AttnPrecision::FP8, DeltaMode::Stale, AttnForm::Flash},
                           {"octet-fp8-flash-head-block", AttnPrecision::FP8, DeltaMode::Matched,
                            AttnForm::Flash, QkvScaling::HeadBlock},
                           {"octet-bf16-cudnn", AttnPrecision::BF16, DeltaMode::Stale, AttnForm::Flash},
                           {"unfused-bf16", AttnPrecision::BF16, DeltaMode::Matched, AttnForm::Whole},
                           {"unfused-fp8-stale", AttnPrecision::FP8, DeltaMode::Stale, AttnForm::Whole},
                           {"unfused-fp8-matched", AttnPrecision::FP8, DeltaMode::Matched, AttnForm::Whole}};

// The row's config; `tile` is block_q = block_k of the FP8 flash rows (the others keep the default).
AttentionConfig config_of(const Impl& im, int64_t tile) {
  AttentionConfig cfg;
  cfg.precision = im.precision;
  cfg.delta = im.delta;
  cfg.form = im.form;
  cfg.qkv_scaling = im.qkv;
  if (im.form == AttnForm::Flash && im.precision == AttnPrecision::FP8) cfg.block_q = cfg.block_k = tile;
  return cfg;
}

const Impl& impl_named(const std::string& name) {
  for (const Impl& im : kImpls)
    if (name == im.name) return im;
  std::string known;
  for (const Impl& im : kImpls) known += (known.empty() ? "" : ", ") + std::string(im.name);
  OCTET_FAIL("unknown attention bench row '" + name + "' (known: " + known + ")");
}

// Whether octet's Attention takes impl at this case (the flash kernels: head_dim 64 or 128).
bool runs(const Impl& im, const AttentionShape& s) {
  return im.form != AttnForm::Flash || im.precision != AttnPrecision::FP8 ||
         flash_attention_size_supported(s.head_dim);
}

// The device tensors of one case, drawn in FP32 then converted (BF16: rounded).
struct CaseTensors {
  Buffer q, k, v, o, lse, d_o, dq, dk, dv;
  CaseTensors(CudaBackend& be, const AttentionShape& s, DType dt) {
    const Shape qs{s.batch, s.n_heads, s.seq_q, s.head_dim};
    const Shape ks{s.batch, s.n_kv_heads, s.seq_k, s.head_dim};
    q = be.alloc(dt, qs), k = be.alloc(dt, ks), v = be.alloc(dt, ks), o = be.alloc(dt, qs);
    lse = be.alloc(DType::F32, {s.batch, s.n_heads, s.seq_q});
    d_o = be.alloc(dt, qs), dq = be.alloc(dt, qs), dk = be.alloc(dt, ks), dv = be.alloc(dt, ks);
    Buffer f32 = be.alloc(DType::F32, qs.numel() > ks.numel() ? qs : ks);
    for (auto [t, seed, sigma] :
         {std::tuple{&q, 11u, 1.0f}, {&k, 12u, 1.0f}, {&v, 13u, 1.0f}, {&d_o, 14u, 1e-3f}}) {
      const Tensor dst = t->tensor();
      const Tensor src(f32.tensor().data, DType::F32, dst.shape);
      fill_random_launch(src.f32(), size_t(dst.numel()), seed, sigma, be.stream());
      convert_launch(dst, src, be.stream());
    }
    OCTET_CUDA_CHECK(cudaStreamSynchronize(be.stream()));
  }
  AttnBenchInputs inputs() const { return {q.tensor(), k.tensor(), v.tensor(), d_o.tensor()}; }
};

// One forward and backward of impl on the case's tensors; its errors against the check, and the
// CPU twin's bound.
void check_row(CudaBackend& be, const Impl& im, int64_t tile, const AttentionShape& s, CaseTensors& t,
               const AttentionRowsCheck& check, AttnBenchRow& row) {
  auto attn = be.make_attention(s, config_of(im, tile));
  const SavedAttention saved =
      attn->forward(t.q.tensor(), t.k.tensor(), t.v.tensor(), t.o.tensor(), t.lse.tensor());
  attn->backward(saved, t.d_o.tensor(), t.dq.tensor(), t.dk.tensor(), t.dv.tensor(), Tensor());
  const RowsError e = check.error(t.o.tensor(), t.dq.tensor(), be.stream());
  row.err_o = e.o, row.err_dq = e.dq;
  // The twin: the CPU reference in the same precision; cuDNN's BF16 is measured against the
  // CPU's BF16 flash form.
  const RowsError b = AttentionRowsCheck::bound(check.twin_error(config_of(im, tile)));
  row.err_bound_o = b.o, row.err_bound_dq = b.dq;
}

void set_kernels(const Impl& im, int64_t tile, const AttentionShape& s, AttnBenchRow& row) {
  if (im.form != AttnForm::Flash || im.precision != AttnPrecision::FP8) return;
  const AttentionConfig cfg = config_of(im, tile);
  row.tile = tile;
  set_forward_kernel(row);
  flash::BackwardParams bp;  // what select_backward_kernel reads of the flash backward's
  bp.B = s.batch, bp.H = s.n_heads, bp.G = s.n_kv_heads, bp.Tq = s.seq_q, bp.Tk = s.seq_k;
  bp.D = s.head_dim, bp.block_q = cfg.block_q, bp.block_k = cfg.block_k;
  set_backward_kernel(row, bp);
  if (row.bwd_kernel == flash::backward_kernel_name(flash::BackwardKernel::Wgmma))
    row.bwd_dkv_direct = flash::resolved_dkv_direct(bp) ? 1 : 0;  // the bench's tensors: one dtype, aligned
  // The timed glue's pack (from BF16/F32): Q's, as the forward packs it (glue.h).
  PackArgs q;
  q.fp8 = true;
  q.B = s.batch, q.heads = s.n_heads, q.T = s.seq_q, q.T_p = (s.seq_q + 15) / 16 * 16, q.D = s.head_dim;
  q.scale_block = cfg.qkv_scaling == QkvScaling::HeadBlock ? kQkvScaleBlock : 0;
  q.row_kind = q.trans_kind = PackKind::Fp8Code;
  row.pack_kernel = pack_kernel_name(quantized_pack_kernel(&q, 1));
}

// FlashAttention's FLOP convention: causal halves the square (Tq = Tk); with Tq ≠ Tk, the fraction of
// (query, key) pairs the bottom-right mask keeps.
double causal_fraction(const AttentionShape& s) {
  if (!s.causal) return 1.0;
  if (s.seq_q == s.seq_k) return 0.5;
  double kept = 0;
  for (int64_t i = 0; i < s.seq_q; ++i)
    kept += double(std::clamp<int64_t>(i + s.seq_k - s.seq_q + 1, 0, s.seq_k));
  return kept / (double(s.seq_q) * double(s.seq_k));
}

// The peers' times over the row's (NaN where a peer did not run: NaN stays NaN).
void set_ratios(AttnBenchRow& row, const AttnBenchRow* bf16, const AttnBenchRow* fp8) {
  if (bf16) {
    row.fwd_vs_cudnn_bf16 = bf16->fwd_ms / row.fwd_ms;
    row.bwd_vs_cudnn_bf16 = bf16->bwd_ms / row.bwd_ms;
  }
  if (fp8) {
    row.fwd_vs_cudnn_fp8 = fp8->fwd_ms / row.fwd_ms;
    row.bwd_vs_cudnn_fp8 = fp8->bwd_ms / row.bwd_ms;
  }
}

}  // namespace

AttnBenchRow attn_bench_row(const AttentionCase& c, const AttnBenchOptions& opt, const char* impl,
                            double fwd_ms, double bwd_ms) {
  const AttentionShape& s = c.shape;
  AttnBenchRow row;
  row.impl = impl;
  row.case_name = c.name;
  row.batch = s.batch, row.heads = s.n_heads, row.kv_heads = s.n_kv_heads;
  row.seq = s.seq_q, row.seq_k = s.seq_k, row.head_dim = s.head_dim, row.causal = s.causal;
  row.reps = opt.reps;
  row.fwd_ms = fwd_ms, row.bwd_ms = bwd_ms;
  const double fwd_flop = 4.0 * double(s.batch * s.n_heads) * double(s.seq_q) * double(s.seq_k) *
                          double(s.head_dim) * causal_fraction(s);
  row.fwd_tflops = fwd_flop / (fwd_ms * 1e-3) / 1e12;
  row.bwd_tflops = 2.5 * fwd_flop / (bwd_ms * 1e-3) / 1e12;
  row.err_bound_o = row.err_bound_dq = row.fwd_vs_cudnn_bf16 = row.bwd_vs_cudnn_bf16 = kNaN;
  row.fwd_vs_cudnn_fp8 = row.bwd_vs_cudnn_fp8 = kNaN;
  return row;
}

std::vector<std::string> attention_bench_impls() {
  std::vector<std::string> out;
  for (const Impl& im : kImpls) out.emplace_back(im.name);
  return out;
}

AttnBenchRow check_attention_case(const AttentionCase& c, const std::string& impl, DType input_dtype) {
  const Impl& im = impl_named(impl);
  CudaBackend backend(CudaOptions{});
  CaseTensors t(backend, c.shape, input_dtype);
  const AttentionRowsCheck check(c.shape, t.q.tensor(), t.k.tensor(), t.v.tensor(), t.d_o.tensor(),
                                 backend.stream());
  AttnBenchOptions opt;
  opt.reps = 0;
  AttnBenchRow row = attn_bench_row(c, opt, im.name, kNaN, kNaN);
  row.input_dtype = to_string(input_dtype);
  set_kernels(im, opt.tile, c.shape, row);
  check_row(backend, im, opt.tile, c.shape, t, check, row);
  return row;
}

void bench_attention(const AttnBenchOptions& opt, const std::function<void(const AttnBenchRow&)>& on_row) {
  for (const std::string& name : opt.rows)  // the options' rows, by attention_bench_row_names
    OCTET_CHECK(attention_bench_row_wanted(attention_bench_row_names(), name),
                "octet bench attention: unknown row '" + name + "'");
  for (const Impl& im : kImpls)  // every row this file runs has its name in the list
    OCTET_CHECK(
        attention_bench_row_wanted(attention_bench_row_names(), im.name),
        std::string("octet bench attention: row '") + im.name + "' missing from attention_bench_row_names");
  CudaBackend backend(CudaOptions{});
  EventTimer timer(backend.stream());
  for (const AttentionCase& c : opt.cases) {
    const AttentionShape& s = c.shape;
    CaseTensors t(backend, s, opt.input_dtype);
    const AttentionRowsCheck check(s, t.q.tensor(), t.k.tensor(), t.v.tensor(), t.d_o.tensor(),
                                   backend.stream());
    const std::vector<AttnBenchRow> peers = bench_cudnn_sdpa(backend, timer, opt, c, t.inputs(), check);
    const AttnBenchRow* bf16 = nullptr;
    const AttnBenchRow* fp8 = nullptr;
    for (const AttnBenchRow& p : peers) {
      (p.impl == "cudnn-bf16" ? bf16 : fp8) = &p;
      on_row(p);
    }
    // Kernel-only: the flash kernels from FP8 codes (what cuDNN's FP8 rows time).
    for (AttnBenchRow row : bench_flash_kernels(backend, timer, opt, c, t.inputs(), check)) {
      set_ratios(row, bf16, fp8);
      on_row(row);
    }
    size_t free_bytes = 0, total_bytes = 0;
    OCTET_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const double unfused_bytes = 18.0 * double(s.batch * s.n_heads) * double(s.seq_q) * double(s.seq_k);
    for (const Impl& im : kImpls) {
      if (!runs(im, s) || !attention_bench_row_wanted(opt.rows, im.name)) continue;
      if (im.form == AttnForm::Whole && unfused_bytes > 0.5 * double(free_bytes)) {
        std::fprintf(stderr,
                     "octet bench attention: %s at %s skipped: its S x S buffers need "
                     "~%.0f GB, %.0f GB free\n",
                     im.name, c.name.c_str(), unfused_bytes / 1e9, double(free_bytes) / 1e9);
        continue;
      }
      double fwd_ms = 0, bwd_ms = 0;
      try {
        auto attn = backend.make_attention(s, config_of(im, opt.tile));
        // Forwards include allocating (stream-ordered) and dropping their saved state; the
        // backwards all use the state of one forward.
        fwd_ms = timer.median_ms(opt.warmup, opt.reps, [&](int) {
          attn->forward(t.q.tensor(), t.k.tensor(), t.v.tensor(), t.o.tensor(), t.lse.tensor());
        });
        const SavedAttention saved =
            attn->forward(t.q.tensor(), t.k.tensor(), t.v.tensor(), t.o.tensor(), t.lse.tensor());
        bwd_ms = timer.median_ms(opt.warmup, opt.reps, [&](int) {
          attn->backward(saved, t.d_o.tensor(), t.dq.tensor(), t.dk.tensor(), t.dv.tensor(), Tensor());
        });
      } catch (const Error& e) {  // the unfused form's S x S buffers beyond what is free
        if (std::string(e.what()).find("out of memory") == std::string::npos) throw;
        (void)cudaGetLastError();  // the failed allocation's error is not sticky: clear it
        OCTET_CUDA_CHECK(cudaStreamSynchronize(backend.stream()));
        std::fprintf(stderr, "octet bench attention: %s at %s skipped: %s\n", im.name, c.name.c_str(),
                     e.what());
        continue;
      }
      AttnBenchRow row = attn_bench_row(c, opt, im.name, fwd_ms, bwd_ms);
      row.input_dtype = to_string(opt.input_dtype);
      set_kernels(im, opt.tile, s, row);
      check_row(backend, im, opt.tile, s, t, check, row);
      set_ratios(row, bf16, fp8);
      on_row(row);
    }
  }
}

}  // namespace octet::cuda
