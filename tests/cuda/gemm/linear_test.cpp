// linear_test.cpp — the CUDA Linear (src/cuda/gemm/linear.cpp) against the CPU Linear
// (src/cpu/backend/linear.cpp) for every precision and FP8 recipe, with F32 and with BF16
// activations: forward Y, backward dX and the accumulated dW, over several steps with an
// update_scales() after each (tensor-delayed state must evolve identically). Both quantize bitwise
// equally (quantize_test.cpp), so the outputs differ only by GEMM accumulation order and Hopper's
// FP8 accumulator: bound |gpu − cpu| <= 2^-9·max|cpu| per output (FP8; the per-element bound is
// checked in gemm_test.cpp), 1e-5·max|cpu| for BF16/FP32 GEMMs, plus one BF16 ulp of |cpu| for
// BF16 outputs. Saved state: two forwards then two backwards equal one at a time, bitwise, a
// forward without y (the C ABI's re-quantization) saves what a full forward saves, and the state
// placed in caller memory (forward_to / saved_from) gives the same bits. And
// the checkpoint state (quant_state): equal to the CPU's, and a second CudaLinear restored from it
// continues bitwise. The FP8 weight cache equals no cache, bitwise, and is invalidated where
// backend.h says. Producers' amaxes (x_amax, dy_amax) give the bits of the linear's own reduction.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "octet/backend.h"
#include "octet/error.h"
#include "octet/fp8.h"

namespace octet {
namespace {

void expect_close(const std::vector<float>& g, const std::vector<float>& c, double rtol, bool bf16,
                  const std::string& what) {
  double peak = 0.0;
  for (float v : c) peak = std::max(peak, double(std::fabs(v)));
  ASSERT_GT(peak, 0.0) << what;
  for (size_t i = 0; i < c.size(); ++i)
    ASSERT_NEAR(g[i], c[i], rtol * peak + (bf16 ? std::fabs(c[i]) * 0x1p-7 : 0.0)) << what << " at " << i;
}

using test::upload_values;

// The tensors of one linear layer on one backend.
struct Io {
  Buffer x, w, y, dy, dx, dw;
  Io(Backend& be, int64_t m, int64_t in, int64_t out, DType act)
      : x(be.alloc(act, {m, in})),
        w(be.alloc(DType::F32, {out, in})),
        y(be.alloc(act, {m, out})),
        dy(be.alloc(act, {m, out})),
        dx(be.alloc(act, {m, in})),
        dw(be.alloc(DType::F32, {out, in})) {}
};

// y, dx and dw of two runs equal bit for bit, and not all zero (the comparison can fail).
void expect_same_outputs(Backend& be, const Io& a, const Io& b, const std::string& what) {
  for (auto [t, u, name] : {std::tuple{&a.y, &b.y, "y"}, {&a.dx, &b.dx, "dx"}, {&a.dw, &b.dw, "dw"}}) {
    const auto va = be.download_f32(*t), vb = be.download_f32(*u);
    ASSERT_EQ(va.size(), vb.size()) << what << " " << name;
    bool nonzero = false;
    for (size_t i = 0; i < va.size(); ++i) {
      nonzero |= va[i] != 0.0f;
      ASSERT_TRUE(test::same_float(va[i], vb[i])) << what << " " << name << " at " << i;
    }
    EXPECT_TRUE(nonzero) << what << " " << name << " is all zero (vacuous)";
  }
}

// Two linears of one spec and their tensors (dW zeroed), for tests that run the same steps two ways.
struct Pair {
  std::unique_ptr<Linear> la, lb;
  Io a, b;
  Pair(Backend& be, const LinearSpec& spec, int64_t m, int64_t in, int64_t out, DType act = DType::BF16)
      : la(be.make_linear(spec)), lb(be.make_linear(spec)), a(be, m, in, out, act), b(be, m, in, out, act) {
    be.fill(a.dw, 0.0);
    be.fill(b.dw, 0.0);
  }
  // The same x, w, dy into both (seeds seed, seed + 2, seed + 4; x scaled by x_std).
  void put_step(Backend& be, int64_t m, int64_t in, int64_t out, uint32_t seed, float x_std) {
    for (Io* io : {&a, &b}) {
      upload_values(be, io->x, test::gaussian(size_t(m * in), seed, x_std));
      upload_values(be, io->w, test::gaussian(size_t(out * in), seed + 2, 0.05f));
      upload_values(be, io->dy, test::gaussian(size_t(m * out), seed + 4, 1e-3f));
    }
  }
};

struct Case {
  LinearPrecision precision;
  Recipe recipe;
  FormatPolicy formats;
  int64_t m, in, out;
};

LinearSpec spec_of(const Case& c) {
  LinearSpec spec;
  spec.in_features = c.in;
  spec.out_features = c.out;
  spec.precision = c.precision;
  spec.quant.recipe = c.recipe;
  spec.quant.formats = c.formats;
  spec.quant.amax_history_len = 4;
  spec.quant.unit_scale = 8.0f;
  return spec;
}

TEST(CudaLinear, MatchesCpuLinearOverSteps) {
  OCTET_REQUIRE_GPU();
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  const Case cases[] = {
      {LinearPrecision::BF16, Recipe::TensorCurrent, FormatPolicy::E4M3, 64, 96, 80},
      {LinearPrecision::FP32, Recipe::TensorCurrent, FormatPolicy::E4M3, 33, 17, 9},
      {LinearPrecision::FP8, Recipe::TensorCurrent, FormatPolicy::Hybrid, 128, 256, 192},
      {LinearPrecision::FP8, Recipe::TensorDelayed, FormatPolicy::Hybrid, 64, 128, 96},
      {LinearPrecision::FP8, Recipe::Row, FormatPolicy::E4M3, 96, 160, 64},
      {LinearPrecision::FP8, Recipe::Block, FormatPolicy::E4M3, 256, 256, 384},
      {LinearPrecision::FP8, Recipe::Block, FormatPolicy::Hybrid, 130, 200, 72},
      {LinearPrecision::FP8, Recipe::MX, FormatPolicy::E4M3, 64, 96, 32},
      {LinearPrecision::FP8, Recipe::Unit, FormatPolicy::Hybrid, 48, 64, 32},
  };
  for (DType act : {DType::F32, DType::BF16}) {
    for (const auto& c : cases) {
      const LinearSpec spec = spec_of(c);
      const std::string what = std::to_string(int(c.precision)) + " " + to_string(c.recipe) + " " +
                               to_string(c.formats) + " act " + to_string(act);
      auto lc = cpu->make_linear(spec);
      auto lg = gpu->make_linear(spec);
      Io ic(*cpu, c.m, c.in, c.out, act), ig(*gpu, c.m, c.in, c.out, act);
      const double tol = c.precision == LinearPrecision::FP8 ? std::ldexp(1.0, -9) : 1e-5;
      const bool bf16 = act == DType::BF16;
      for (int step = 0; step < 3; ++step) {
        const auto x = test::gaussian(size_t(c.m * c.in), 30u + uint32_t(step), float(1 + step));
        const auto w = test::gaussian(size_t(c.out * c.in), 40u + uint32_t(step), 0.05f);
        const auto dy = test::gaussian(size_t(c.m * c.out), 50u + uint32_t(step), 1e-3f * float(step + 1));
        for (auto [be, io] : {std::pair{cpu.get(), &ic}, {gpu.get(), &ig}}) {
          upload_values(*be, io->x, x);
          upload_values(*be, io->w, w);
          upload_values(*be, io->dy, dy);
        }
        const SavedLinear sc = lc->forward(ic.x, ic.w, ic.y);
        const SavedLinear sg = lg->forward(ig.x, ig.w, ig.y);
        lc->backward(sc, ic.dy, ic.dx, ic.dw);
        lg->backward(sg, ig.dy, ig.dx, ig.dw);
        const std::string at = what + " step " + std::to_string(step);
        expect_close(gpu->download_f32(ig.y), cpu->download_f32(ic.y), tol, bf16, at + " y");
        expect_close(gpu->download_f32(ig.dx), cpu->download_f32(ic.dx), tol, bf16, at + " dx");
        expect_close(gpu->download_f32(ig.dw), cpu->download_f32(ic.dw), tol, false,
                     at + " dw (accumulated)");
        if (c.precision == LinearPrecision::FP8) {
          const QuantStats qg = lg->stats_x(), qc = lc->stats_x();
          EXPECT_TRUE(test::same_float(qg.amax, qc.amax)) << at;
          EXPECT_FLOAT_EQ(qg.scale_min, qc.scale_min) << at;
          EXPECT_FLOAT_EQ(qg.scale_max, qc.scale_max) << at;
          EXPECT_DOUBLE_EQ(qg.underflow_frac, qc.underflow_frac) << at;
          EXPECT_DOUBLE_EQ(lg->stats_dy().saturated_frac, lc->stats_dy().saturated_frac) << at;
          EXPECT_FLOAT_EQ(lg->stats_w().scale_max, lc->stats_w().scale_max) << at;
        }
        lc->update_scales();
        lg->update_scales();
        if (HasFailure()) return;
      }
      EXPECT_EQ(lg->quant_state(), lc->quant_state()) << what;
    }
  }
}

// Saved state instead of pointer identity (backend.h SavedLinear): forward(x1), forward(x2),
// backward(1), backward(2) gives bitwise the outputs of forward(x1), backward(1), forward(x2),
// backward(2) (a second linear with the same spec), for FP8 tensor-current, FP8 tensor-delayed
// (one scale between two updates) and BF16; the delayed state after update_scales() agrees too.
TEST(CudaLinear, TwoForwardsThenTwoBackwardsEqualOneAtATime) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  const Case cases[] = {
      {LinearPrecision::FP8, Recipe::TensorCurrent, FormatPolicy::Hybrid, 64, 128, 96},
      {LinearPrecision::FP8, Recipe::TensorDelayed, FormatPolicy::Hybrid, 64, 128, 96},
      {LinearPrecision::BF16, Recipe::TensorCurrent, FormatPolicy::E4M3, 48, 80, 64},
  };
  for (const auto& c : cases) {
    const LinearSpec spec = spec_of(c);
    const std::string what = std::to_string(int(c.precision)) + " " + to_string(c.recipe);
    auto la = gpu->make_linear(spec), lb = gpu->make_linear(spec);
    Io a1(*gpu, c.m, c.in, c.out, DType::BF16), a2(*gpu, c.m, c.in, c.out, DType::BF16);
    Io b1(*gpu, c.m, c.in, c.out, DType::BF16), b2(*gpu, c.m, c.in, c.out, DType::BF16);
    for (int rep = 0; rep < 2; ++rep) {  // rep 1: after an update (delayed: the history in use)
      int k = 0;
      for (Io* io : {&a1, &a2, &b1, &b2}) {
        const uint32_t seed = uint32_t(100 + 10 * rep + (k++ % 2));  // a1 == b1, a2 == b2
        upload_values(*gpu, io->x, test::gaussian(size_t(c.m * c.in), seed, 2.0f + float(seed % 2)));
        upload_values(*gpu, io->w, test::gaussian(size_t(c.out * c.in), seed + 1, 0.05f));
        upload_values(*gpu, io->dy, test::gaussian(size_t(c.m * c.out), seed + 2, 1e-3f));
        gpu->fill(io->dw, 0.0);
      }
      {  // interleaved: two forwards outstanding
        const SavedLinear s1 = la->forward(a1.x, a1.w, a1.y);
        const SavedLinear s2 = la->forward(a2.x, a2.w, a2.y);
        la->backward(s1, a1.dy, a1.dx, a1.dw);
        la->backward(s2, a2.dy, a2.dx, a2.dw);
      }
      {  // one at a time
        const SavedLinear s1 = lb->forward(b1.x, b1.w, b1.y);
        lb->backward(s1, b1.dy, b1.dx, b1.dw);
        const SavedLinear s2 = lb->forward(b2.x, b2.w, b2.y);
        lb->backward(s2, b2.dy, b2.dx, b2.dw);
      }
      for (auto [p, q] : {std::pair{&a1, &b1}, {&a2, &b2}})
        ASSERT_NO_FATAL_FAILURE(expect_same_outputs(*gpu, *p, *q, what + " rep " + std::to_string(rep)));
      la->update_scales();
      lb->update_scales();
      EXPECT_EQ(la->quant_state(), lb->quant_state()) << what;
    }
    // A state of another type or another linear is rejected.
    const SavedLinear s = la->forward(a1.x, a1.w, a1.y);
    EXPECT_THROW(lb->backward(s, a1.dy, a1.dx, a1.dw), Error) << what;
    SavedLinear empty{a1.x, a1.w, nullptr};
    EXPECT_THROW(la->backward(empty, a1.dy, a1.dx, a1.dw), Error) << what;
  }
}

// Linear::forward with an empty y (backend.h: the C ABI's backward re-quantizes without the GEMM):
// the backward from its SavedLinear equals the backward from the full forward's, bitwise, over two
// steps with an update between; the quantizer states stay equal.
TEST(CudaLinear, ForwardWithoutYSavesTheSameOperands) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  const Case cases[] = {
      {LinearPrecision::FP8, Recipe::TensorCurrent, FormatPolicy::Hybrid, 64, 128, 96},
      {LinearPrecision::FP8, Recipe::TensorDelayed, FormatPolicy::Hybrid, 64, 128, 96},
      {LinearPrecision::FP8, Recipe::Block, FormatPolicy::Hybrid, 64, 128, 96},
      {LinearPrecision::BF16, Recipe::TensorCurrent, FormatPolicy::E4M3, 48, 80, 64},
      {LinearPrecision::FP32, Recipe::TensorCurrent, FormatPolicy::E4M3, 48, 80, 64},
  };
  for (const auto& c : cases) {
    const LinearSpec spec = spec_of(c);
    const std::string what = std::to_string(int(c.precision)) + " " + to_string(c.recipe);
    Pair p(*gpu, spec, c.m, c.in, c.out);
    auto &la = p.la, &lb = p.lb;
    Io &a = p.a, &b = p.b;
    for (int step = 0; step < 2; ++step) {
      p.put_step(*gpu, c.m, c.in, c.out, uint32_t(300 + step), 2.0f);
      const SavedLinear sa = la->forward(a.x, a.w, a.y);
      la->backward(sa, a.dy, a.dx, a.dw);
      (void)lb->forward(b.x, b.w, b.y);                        // the op's forward
      const SavedLinear sb = lb->forward(b.x, b.w, Tensor{});  // the op's backward re-run
      lb->backward(sb, b.dy, b.dx, b.dw);
      ASSERT_NO_FATAL_FAILURE(expect_same_outputs(*gpu, a, b, what + " step " + std::to_string(step)));
      la->update_scales();
      lb->update_scales();
      EXPECT_EQ(la->quant_state(), lb->quant_state()) << what;
    }
  }
}

// Saved state in caller memory (backend.h forward_to / saved_from: the PyTorch ops' path): the
// backward from saved_from equals the backward from the linear's own state, bitwise, over two steps
// of two micro-batches (tensor-delayed's history moves; with the weight cache the second
// micro-batch copies the cached Ŵᵀ into the memory), x and w poisoned before the backward (it reads
// neither) and the memory filled with 0xFF first. A short memory is refused naming both sizes.
TEST(CudaLinear, ForwardToAndSavedFromEqualTheOwnState) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  for (bool cache : {false, true})
    for (const Case& c :
         {Case{LinearPrecision::FP8, Recipe::TensorCurrent, FormatPolicy::Hybrid, 64, 160, 96},
          Case{LinearPrecision::FP8, Recipe::TensorDelayed, FormatPolicy::Hybrid, 64, 160, 96},
          Case{LinearPrecision::FP8, Recipe::Block, FormatPolicy::Hybrid, 80, 160, 96},
          Case{LinearPrecision::FP8, Recipe::Row, FormatPolicy::E4M3, 48, 128, 64},
          Case{LinearPrecision::FP8, Recipe::MX, FormatPolicy::E4M3, 64, 160, 96},
          Case{LinearPrecision::FP8, Recipe::Unit, FormatPolicy::Hybrid, 37, 160, 96}}) {
      LinearSpec spec = spec_of(c);
      spec.cache_weight = cache;
      const std::string what = to_string(c.recipe) + (cache ? " cached" : "");
      Pair p(*gpu, spec, c.m, c.in, c.out);
      const int64_t bytes = p.lb->saved_bytes(c.m);
      ASSERT_GE(bytes, c.m * c.in + c.out * c.in) << what;
      Buffer words = gpu->alloc(DType::I32, {(bytes + 3) / 4});  // fill takes no FP8 dtype
      const Tensor memory(words.tensor().data, DType::E4M3, {bytes});
      for (int step = 0; step < 2; ++step) {
        for (int k = 0; k < 2; ++k) {
          p.put_step(*gpu, c.m, c.in, c.out, uint32_t(500 + 10 * step + k), 1.0f + float(k));
          gpu->fill(words, double(0x7E7E7E7E));  // 0x7E (E4M3 448) in every byte: each read is written
          const SavedLinear sa = p.la->forward(p.a.x, p.a.w, p.a.y);
          p.la->backward(sa, p.a.dy, p.a.dx, p.a.dw);
          (void)p.lb->forward_to(p.b.x, p.b.w, p.b.y, memory);
          gpu->fill(p.b.x, 1e4), gpu->fill(p.b.w, 1e4);  // the backward reads neither
          p.lb->backward(p.lb->saved_from(c.m, memory), p.b.dy, p.b.dx, p.b.dw);
          p.put_step(*gpu, c.m, c.in, c.out, uint32_t(500 + 10 * step + k), 1.0f + float(k));  // x, w back
          ASSERT_NO_FATAL_FAILURE(expect_same_outputs(
              *gpu, p.a, p.b, what + " step " + std::to_string(step) + " micro " + std::to_string(k)));
        }
        p.la->update_scales();
        p.lb->update_scales();
        EXPECT_EQ(p.la->quant_state(), p.lb->quant_state()) << what;
      }
      const Tensor small(words.tensor().data, DType::E4M3, {bytes - 1});
      try {
        (void)p.lb->forward_to(p.b.x, p.b.w, p.b.y, small);
        ADD_FAILURE() << what << ": a memory one byte short was taken";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("the saved state needs " + std::to_string(bytes)),
                  std::string::npos)
            << e.what();
      }
    }
  auto bf16 = gpu->make_linear(
      spec_of({LinearPrecision::BF16, Recipe::TensorCurrent, FormatPolicy::E4M3, 8, 32, 16}));
  EXPECT_EQ(bf16->saved_bytes(8), 0);
  // saved_from places a state of any row count in exactly saved_bytes(rows) (place_saved checks that
  // the placement and the size terms agree), for every FP8 recipe's scale layouts
  for (Recipe r :
       {Recipe::TensorCurrent, Recipe::TensorDelayed, Recipe::Block, Recipe::Row, Recipe::MX, Recipe::Unit}) {
    auto lin = gpu->make_linear(spec_of({LinearPrecision::FP8, r, FormatPolicy::E4M3, 8, 160, 96}));
    for (int64_t rows : {1, 15, 16, 17, 127, 128, 129, 511, 512, 513, 1000}) {
      const int64_t bytes = lin->saved_bytes(rows);
      Buffer words = gpu->alloc(DType::I32, {(bytes + 3) / 4});
      EXPECT_NO_THROW((void)lin->saved_from(rows, Tensor(words.tensor().data, DType::E4M3, {bytes})))
          << to_string(r) << " rows " << rows;
    }
  }
}

// The producers' amaxes (backend.h Linear::forward x_amax, backward dy_amax): given the amax of
// X and of dY as stored, every recipe gives y, dx and dW bitwise equal to the run that reduces
// them itself (tensor-current skips its pre-pass; the others ignore the amax), and the recorded
// statistics agree; under tensor-current a different given amax does change them (it is used). A
// wrong-size amax is refused.
TEST(CudaLinear, ProducerAmaxEqualsOwnReductionBitwise) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  const Case cases[] = {
      {LinearPrecision::FP8, Recipe::TensorCurrent, FormatPolicy::Hybrid, 72, 136, 96},
      {LinearPrecision::FP8, Recipe::TensorCurrent, FormatPolicy::E4M3, 64, 128, 64},
      {LinearPrecision::FP8, Recipe::TensorDelayed, FormatPolicy::Hybrid, 64, 128, 96},
      {LinearPrecision::BF16, Recipe::TensorCurrent, FormatPolicy::E4M3, 48, 80, 64},
  };
  for (const auto& c : cases) {
    const LinearSpec spec = spec_of(c);
    const std::string what = std::to_string(int(c.precision)) + " " + to_string(c.recipe);
    Pair p(*gpu, spec, c.m, c.in, c.out);
    auto &la = p.la, &lb = p.lb;
    Io &a = p.a, &b = p.b;
    Buffer amax = gpu->alloc(DType::I32, {2});
    for (int step = 0; step < 2; ++step) {
      p.put_step(*gpu, c.m, c.in, c.out, uint32_t(400 + step), 3.0f);
      // the amaxes as a producer would leave them: |x| max as stored, float bits
      std::vector<int32_t> h(2, 0);
      for (float v : gpu->download_f32(b.x)) h[0] = std::max(h[0], int32_t(test::bits(std::fabs(v))));
      for (float v : gpu->download_f32(b.dy)) h[1] = std::max(h[1], int32_t(test::bits(std::fabs(v))));
      gpu->upload(amax, h.data());
      const Tensor xa = amax.tensor().slice(0, 1), dya = amax.tensor().slice(1, 1);
      const SavedLinear sa = la->forward(a.x, a.w, a.y);
      la->backward(sa, a.dy, a.dx, a.dw);
      const SavedLinear sb = lb->forward(b.x, b.w, b.y, xa);
      lb->backward(sb, b.dy, b.dx, b.dw, dya);
      ASSERT_NO_FATAL_FAILURE(expect_same_outputs(*gpu, a, b, what + " step " + std::to_string(step)));
      const QuantStats xa_s = la->stats_x(), xb_s = lb->stats_x(), da_s = la->stats_dy(),
                       db_s = lb->stats_dy();
      EXPECT_EQ(test::bits(xa_s.amax), test::bits(xb_s.amax)) << what;
      EXPECT_EQ(test::bits(da_s.amax), test::bits(db_s.amax)) << what;
      la->update_scales();
      lb->update_scales();
      EXPECT_EQ(la->quant_state(), lb->quant_state()) << what;
    }
    Buffer wrong = gpu->alloc(DType::F32, {1});
    EXPECT_THROW(lb->forward(b.x, b.w, b.y, wrong), Error) << what;
    EXPECT_THROW(lb->forward(b.x, b.w, b.y, amax), Error) << what << ": two elements";
    // The given amax is what tensor-current uses (a 3x larger one — not a power of two, which would
    // only shift the codes' exponents and dequantize to the same values: other scale, other y, the stats
    // report it); the other recipes and precisions ignore it (same y).
    std::vector<int32_t> big{int32_t(test::bits(3.0f * std::fabs(la->stats_x().amax)))};
    Buffer big_amax = gpu->alloc(DType::I32, {1});
    gpu->upload(big_amax, big.data());
    (void)la->forward(a.x, a.w, a.y);
    (void)lb->forward(b.x, b.w, b.y, big_amax);
    const auto ya = gpu->download_f32(a.y), yb = gpu->download_f32(b.y);
    const bool current = c.precision == LinearPrecision::FP8 && c.recipe == Recipe::TensorCurrent;
    if (current) {
      EXPECT_NE(ya, yb) << what << ": a given amax 3x too large must change the codes";
      EXPECT_EQ(test::bits(lb->stats_x().amax), uint32_t(big[0])) << what;
    } else {
      EXPECT_EQ(ya, yb) << what << ": the given amax must be ignored";
    }
  }
}

// Linear::forward's residual (backend.h) on the GPU: y = X̂Ŵᵀ + r by the GEMM's epilogue (or the
// FP32 fallback where M is not a multiple of 16): a zero r gives the plain forward's bits; a random
// r gives the plain y plus r within two roundings of y's dtype; r may be y itself (the same bits as a
// separate r). Every precision, block scales, a padded M, BF16 and F32 activations.
TEST(CudaLinear, ResidualIsAddedByTheGemm) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  const Case cases[] = {
      {LinearPrecision::FP8, Recipe::TensorCurrent, FormatPolicy::Hybrid, 64, 128, 96},
      {LinearPrecision::FP8, Recipe::TensorCurrent, FormatPolicy::Hybrid, 72, 136, 96},
      {LinearPrecision::FP8, Recipe::Block, FormatPolicy::E4M3, 128, 256, 128},
      {LinearPrecision::BF16, Recipe::TensorCurrent, FormatPolicy::E4M3, 48, 80, 64},
      {LinearPrecision::FP32, Recipe::TensorCurrent, FormatPolicy::E4M3, 40, 64, 32},
  };
  for (const auto& c : cases) {
    for (const DType act : {DType::BF16, DType::F32}) {
      const std::string what = std::to_string(int(c.precision)) + " " + to_string(c.recipe) + " m " +
                               std::to_string(c.m) + " " + to_string(act);
      const double eps = act == DType::BF16 ? 0x1p-8 : 0x1p-22;  // one rounding of y's dtype
      Pair p(*gpu, spec_of(c), c.m, c.in, c.out, act);
      p.put_step(*gpu, c.m, c.in, c.out, 450, 2.0f);
      Buffer r = gpu->alloc(act, {c.m, c.out});
      gpu->fill(r, 0.0);
      (void)p.la->forward(p.a.x, p.a.w, p.a.y);
      (void)p.lb->forward(p.b.x, p.b.w, p.b.y, {}, r);
      const auto y = gpu->download_f32(p.a.y), y0 = gpu->download_f32(p.b.y);
      const bool native = c.m % 16 == 0 && c.precision != LinearPrecision::FP32;
      for (size_t i = 0; i < y.size(); ++i) {
        if (native)
          ASSERT_TRUE(test::same_float(y[i], y0[i])) << what << ": zero residual at " << i;
        else
          ASSERT_NEAR(y0[i], y[i], 2 * eps * std::fabs(y[i])) << what << ": zero residual at " << i;
      }
      const auto rh = test::gaussian(size_t(c.m * c.out), 460, 4.0f);
      upload_values(*gpu, r, rh);
      const auto rq = gpu->download_f32(r);
      (void)p.lb->forward(p.b.x, p.b.w, p.b.y, {}, r);
      const auto yr = gpu->download_f32(p.b.y);
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_NEAR(yr[i], double(y[i]) + rq[i], 2 * eps * (std::fabs(y[i]) + std::fabs(rq[i])))
            << what << " at " << i;
      EXPECT_NE(yr, y) << what;        // r is not zero: the test can fail
      upload_values(*gpu, p.b.y, rh);  // y holds r: the sum in place
      (void)p.lb->forward(p.b.x, p.b.w, p.b.y, {}, p.b.y);
      const auto ya = gpu->download_f32(p.b.y);
      for (size_t i = 0; i < yr.size(); ++i)
        ASSERT_TRUE(test::same_float(ya[i], yr[i])) << what << " alias " << i;
      Buffer other = gpu->alloc(act == DType::BF16 ? DType::F32 : DType::BF16, {c.m, c.out});
      EXPECT_THROW((void)p.lb->forward(p.b.x, p.b.w, p.b.y, {}, other), Error) << what;
      EXPECT_THROW((void)p.lb->forward(p.b.x, p.b.w, Tensor{}, {}, r), Error) << what;
    }
  }
}

// Checkpoint state (backend.h quant_state): after the same steps the GPU linear's tensor-delayed
// state equals the CPU linear's bitwise (same amaxes, the device ring buffer unrolled most recent
// last, same scales), and a second CudaLinear loaded with it continues bitwise like the first (a
// fresh one does not); a malformed state is rejected and leaves the state unchanged.
TEST(CudaLinear, QuantStateRoundTripContinuesBitwise) {
  OCTET_REQUIRE_GPU();
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  constexpr int64_t m = 64, in = 128, out = 96;
  LinearSpec spec;
  spec.in_features = in;
  spec.out_features = out;
  spec.precision = LinearPrecision::FP8;
  spec.quant.recipe = Recipe::TensorDelayed;
  spec.quant.formats = FormatPolicy::Hybrid;
  spec.quant.amax_history_len = 3;  // 5 steps: the device ring buffer wraps
  auto lc = cpu->make_linear(spec);
  auto la = gpu->make_linear(spec);
  auto lb = gpu->make_linear(spec);
  auto lf = gpu->make_linear(spec);
  Io ic(*cpu, m, in, out, DType::F32), ig(*gpu, m, in, out, DType::F32);
  auto set_inputs = [&](int step) {
    const auto x = test::gaussian(size_t(m * in), 60u + uint32_t(step), float(1 + step % 3));
    const auto w = test::gaussian(size_t(out * in), 70u + uint32_t(step), 0.05f);
    const auto dy = test::gaussian(size_t(m * out), 80u + uint32_t(step), 1e-3f * float(1 + step % 4));
    for (auto [be, io] : {std::pair{cpu.get(), &ic}, {gpu.get(), &ig}}) {
      upload_values(*be, io->x, x);
      upload_values(*be, io->w, w);
      upload_values(*be, io->dy, dy);
    }
  };
  // One step of `lin` (forward, backward, update) on the current inputs; returns y, dx, dw.
  auto run_gpu = [&](Linear& lin) {
    gpu->fill(ig.dw, 0.0);
    const SavedLinear s = lin.forward(ig.x, ig.w, ig.y);
    lin.backward(s, ig.dy, ig.dx, ig.dw);
    lin.update_scales();
    std::vector<float> r = gpu->download_f32(ig.y);
    for (const Buffer* b : {&ig.dx, &ig.dw}) {
      const auto v = gpu->download_f32(*b);
      r.insert(r.end(), v.begin(), v.end());
    }
    return r;
  };
  for (int step = 0; step < 5; ++step) {
    set_inputs(step);
    const SavedLinear s = lc->forward(ic.x, ic.w, ic.y);
    lc->backward(s, ic.dy, ic.dx, ic.dw);
    lc->update_scales();
    run_gpu(*la);
  }
  const std::vector<float> saved = la->quant_state();
  ASSERT_EQ(saved.size(), 3u * (3 + 3));
  EXPECT_EQ(saved, lc->quant_state()) << "GPU and CPU delayed state after the same steps";

  lb->load_quant_state(saved);
  EXPECT_EQ(lb->quant_state(), saved);
  for (int step = 5; step < 7; ++step) {
    set_inputs(step);
    const auto a = run_gpu(*la), b = run_gpu(*lb), f = run_gpu(*lf);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_TRUE(test::same_float(a[i], b[i])) << "step " << step << " at " << i;
    if (step == 5) {
      const size_t ny = size_t(m * out);
      EXPECT_NE(std::vector<float>(a.begin(), a.begin() + int64_t(ny)),
                std::vector<float>(f.begin(), f.begin() + int64_t(ny)))
          << "a fresh history scales differently";
    }
  }
  EXPECT_EQ(la->quant_state(), lb->quant_state());

  const std::vector<float> before = lb->quant_state();
  std::vector<float> bad = before;
  bad.push_back(0.0f);
  EXPECT_THROW(lb->load_quant_state(bad), Error);
  bad = before;
  bad[0] = 4.0f;  // X history longer than amax_history_len
  EXPECT_THROW(lb->load_quant_state(bad), Error);
  EXPECT_EQ(lb->quant_state(), before);
}

// Weight cache (backend.h LinearSpec::cache_weight; FP8 codes, or a BF16 linear's rounded copy of
// W): with gradient accumulation (2 micro-batches
// per step, update_scales() between steps, W changed by an "optimizer step" after it), a caching
// linear's Y, dX, dW and delayed state equal an uncaching one's bitwise. The cache is really used:
// W changed without update_scales() leaves the caching linear's Y as it was (the uncached one
// follows the new W); weights_changed() drops it, and both agree again.
TEST(CudaLinear, WeightCacheEqualsUncachedBitwise) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  for (const Case& c :
       {Case{LinearPrecision::FP8, Recipe::TensorCurrent, FormatPolicy::Hybrid, 64, 160, 96},
        Case{LinearPrecision::FP8, Recipe::TensorDelayed, FormatPolicy::Hybrid, 64, 160, 96},
        Case{LinearPrecision::FP8, Recipe::Block, FormatPolicy::Hybrid, 64, 160, 96},
        Case{LinearPrecision::BF16, Recipe::TensorCurrent, FormatPolicy::Hybrid, 64, 160, 96}}) {
    LinearSpec spec = spec_of(c);
    auto plain = gpu->make_linear(spec);
    spec.cache_weight = true;
    auto cached = gpu->make_linear(spec);
    Io ia(*gpu, c.m, c.in, c.out, DType::BF16), ib(*gpu, c.m, c.in, c.out, DType::BF16);
    const std::string what = c.precision == LinearPrecision::BF16 ? std::string("bf16") : to_string(c.recipe);
    auto same = [&](const Tensor& a, const Tensor& b, const std::string& at) {
      const auto ha = gpu->download_f32(a), hb = gpu->download_f32(b);
      ASSERT_EQ(ha.size(), hb.size());
      for (size_t i = 0; i < ha.size(); ++i)
        ASSERT_TRUE(test::same_float(ha[i], hb[i])) << what << " " << at << " at " << i;
    };
    auto micro = [&](int step, int k) {  // one forward + backward on both
      const uint32_t seed = uint32_t(10 * step + k);
      const auto x = test::gaussian(size_t(c.m * c.in), 60u + seed, 1.0f + float(k));
      const auto dy = test::gaussian(size_t(c.m * c.out), 70u + seed, 1e-3f);
      for (Io* io : {&ia, &ib}) upload_values(*gpu, io->x, x), upload_values(*gpu, io->dy, dy);
      const SavedLinear sa = plain->forward(ia.x, ia.w, ia.y);
      const SavedLinear sb = cached->forward(ib.x, ib.w, ib.y);
      plain->backward(sa, ia.dy, ia.dx, ia.dw);
      cached->backward(sb, ib.dy, ib.dx, ib.dw);
    };
    for (int step = 0; step < 3; ++step) {
      const auto w = test::gaussian(size_t(c.out * c.in), 80u + uint32_t(step), 0.05f * float(step + 1));
      upload_values(*gpu, ia.w, w), upload_values(*gpu, ib.w, w);  // the optimizer step (after update_scales)
      gpu->fill(ia.dw, 0.0), gpu->fill(ib.dw, 0.0);
      for (int k = 0; k < 2; ++k) {
        micro(step, k);
        const std::string at = "step " + std::to_string(step) + " micro " + std::to_string(k);
        same(ia.y, ib.y, at + " y");
        same(ia.dx, ib.dx, at + " dx");
        if (HasFatalFailure()) return;
      }
      same(ia.dw, ib.dw, "step " + std::to_string(step) + " dw (accumulated)");
      plain->update_scales();
      cached->update_scales();
      EXPECT_EQ(plain->quant_state(), cached->quant_state()) << what;
    }
    // W changes without update_scales(): the cache keeps the old Ŵ.
    micro(3, 0);
    const auto y_before = gpu->download_f32(ib.y);
    const auto w2 = test::gaussian(size_t(c.out * c.in), 99u, 0.2f);
    upload_values(*gpu, ia.w, w2), upload_values(*gpu, ib.w, w2);
    micro(3, 0);
    EXPECT_EQ(gpu->download_f32(ib.y), y_before) << what << ": the cached Ŵ must be reused";
    EXPECT_NE(gpu->download_f32(ia.y), y_before) << what << ": the new W changes Y (test premise)";
    cached->weights_changed();
    micro(3, 1);
    same(ia.y, ib.y, "after weights_changed y");
  }
}

}  // namespace
}  // namespace octet
