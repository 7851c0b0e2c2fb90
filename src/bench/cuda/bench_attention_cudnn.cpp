// src/bench/cuda/bench_attention_cudnn.cpp — the cuDNN SDPA peer rows (bench_attention_cudnn.h).
// Inputs: BF16 rows from the same pseudo-normal fill as octet's rows; FP8 rows from random E4M3
// codes of magnitude < 2 (exponent field <= 7: never NaN), every descale/scale 1. Each pass runs
// once untimed (graph and plan built, workspace grown), then warm-up and the timed repetitions.
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "bench/cuda/bench_attention_cudnn.h"
#include "cuda/check.h"
#include "cuda/cudnn_sdpa.h"
#include "cuda/ops.h"
#include "octet/error.h"

namespace octet::cuda {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Median ms of fn under the timer, or NaN (note on stderr) if cuDNN refuses the graph.
template <typename Fn>
double time_or_nan(EventTimer& timer, const AttnBenchOptions& opt, const char* what, Fn&& fn) {
  try {
    fn(0);  // builds the graph and its plan
    return timer.median_ms(opt.warmup, opt.reps, fn);
  } catch (const Error& e) {
    std::fprintf(stderr, "octet bench attention: %s skipped: %s\n", what, e.what());
    return kNaN;
  }
}

// Random E4M3 codes of magnitude < 2 (xorshift64; bit 6, the exponent's top bit, cleared).
void fill_fp8(Backend& be, const Buffer& b, uint64_t seed) {
  std::vector<uint8_t> h(size_t(b.tensor().numel()));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& c : h) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    c = uint8_t(x >> 56) & 0xBF;
  }
  be.upload(b.tensor(), h.data());
}

}  // namespace

void bench_cudnn_sdpa(CudaBackend& backend, EventTimer& timer, const AttnBenchOptions& opt,
                      int64_t S, const std::function<void(const AttnBenchRow&)>& on_row) {
  SdpaEngine& engine = backend.sdpa();
  const cudaStream_t st = backend.stream();
  SdpaDims d;
  d.B = opt.batch, d.H = d.G = opt.heads, d.Tq = d.Tk = S, d.D = opt.head_dim;
  d.causal = opt.causal;
  d.tau = float(1.0 / std::sqrt(double(opt.head_dim)));
  const Shape qs{opt.batch, opt.heads, S, opt.head_dim};
  const double fwd_flop = 4.0 * double(opt.batch * opt.heads) * double(S) * double(S) *
                          double(opt.head_dim) * (opt.causal ? 0.5 : 1.0);
  auto emit = [&](const char* impl, double fwd_ms, double bwd_ms) {
    AttnBenchRow row;
    row.impl = impl;
    row.batch = opt.batch, row.heads = opt.heads, row.seq = S, row.head_dim = opt.head_dim;
    row.causal = opt.causal, row.reps = opt.reps;
    row.fwd_ms = fwd_ms, row.bwd_ms = bwd_ms;
    row.fwd_tflops = fwd_flop / (fwd_ms * 1e-3) / 1e12;
    row.bwd_tflops = 2.5 * fwd_flop / (bwd_ms * 1e-3) / 1e12;
    on_row(row);
  };
  Buffer lse = backend.alloc(DType::F32, {opt.batch, opt.heads, S});
  {  // BF16
    Buffer f = backend.alloc(DType::F32, qs);
    Buffer t[8];  // q k v o dO dq dk dv
    for (int i = 0; i < 8; ++i) {
      t[i] = backend.alloc_uninitialized(DType::BF16, qs);
      if (i == 3 || i > 4) continue;
      fill_random_launch(f.tensor().f32(), size_t(f.tensor().numel()), uint32_t(21 + i),
                         i == 4 ? 1e-3f : 1.0f, st);
      convert_launch(t[i].tensor(), f.tensor(), st);
    }
    auto p = [&](int i) { return t[i].tensor().data; };
    SdpaBf16Forward fa{p(0), p(1), p(2), p(3), lse.tensor().f32()};
    SdpaBf16Backward ba{p(0), p(1), p(2), p(3), p(4), lse.tensor().f32(), p(5), p(6), p(7)};
    const double fwd = time_or_nan(timer, opt, "cudnn-bf16 forward",
                                   [&](int) { engine.bf16_forward(d, fa); });
    const double bwd = time_or_nan(timer, opt, "cudnn-bf16 backward",
                                   [&](int) { engine.bf16_backward(d, ba, false); });
    emit("cudnn-bf16", fwd, bwd);
  }
  {  // FP8 (E4M3), unit scales
    Buffer t[8];
    for (int i = 0; i < 8; ++i) {
      t[i] = backend.alloc_uninitialized(DType::E4M3, qs);
      if (i < 3 || i == 4) fill_fp8(backend, t[i], uint64_t(31 + i));
    }
    Buffer ones = backend.alloc(DType::F32, {16}), amax = backend.alloc(DType::F32, {16});
    fill_launch(ones.tensor(), 1.0, st);
    const float* one = ones.tensor().f32();
    float* am = amax.tensor().f32();
    auto p = [&](int i) { return t[i].tensor().data; };
    SdpaFp8Forward fa;
    fa.q = p(0), fa.k = p(1), fa.v = p(2), fa.o = p(3), fa.lse = lse.tensor().f32();
    fa.descale_q = fa.descale_k = fa.descale_v = fa.descale_s = fa.scale_s = fa.scale_o = one;
    fa.amax_s = am, fa.amax_o = am + 1;
    SdpaFp8Backward ba;
    ba.q = p(0), ba.k = p(1), ba.v = p(2), ba.o = p(3), ba.d_o = p(4), ba.lse = lse.tensor().f32();
    ba.descale_q = ba.descale_k = ba.descale_v = ba.descale_o = ba.descale_do = ba.descale_s =
        ba.descale_dp = ba.scale_s = ba.scale_dq = ba.scale_dk = ba.scale_dv = ba.scale_dp = one;
    ba.dq = p(5), ba.dk = p(6), ba.dv = p(7);
    ba.amax_dq = am + 2, ba.amax_dk = am + 3, ba.amax_dv = am + 4, ba.amax_dp = am + 5;
    const double fwd = time_or_nan(timer, opt, "cudnn-fp8-stale forward",
                                   [&](int) { engine.fp8_forward(d, fa); });
    const std::string why = sdpa_unsupported(d, true, true);
    double bwd = kNaN;
    if (why.empty())
      bwd = time_or_nan(timer, opt, "cudnn-fp8-stale backward",
                        [&](int) { engine.fp8_backward(d, ba); });
    else
      std::fprintf(stderr, "octet bench attention: cudnn-fp8-stale backward skipped: %s\n",
                   why.c_str());
    emit("cudnn-fp8-stale", fwd, bwd);
  }
}

}  // namespace octet::cuda
