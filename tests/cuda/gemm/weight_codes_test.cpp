// The CUDA side of ZeRO-1's FP8 weight all-gather (backend.h Linear::weight_piece_amax /
// encode_weight_piece / install_weight_codes; docs/distributed.md §"FP8 all-gather"), on one GPU:
// W cut into pieces at awkward offsets (as ranks' shards cut it), the pieces' amaxes max-reduced into
// one slot, each piece encoded with that slot's tensor scale. Right values: the amax is max |W|
// (bitwise); the codes equal, bit for bit, octet::Quantizer's tensor-current codes of the whole W
// (quant.h, the host reference) and the CPU linear's encode_weight_piece; a linear given the
// installed codes (and a zero `w`, which it must not read) computes Y, dX and dW bitwise equal to
// a linear that quantizes the true W itself, and stats_w() reports the same amax; update_scales()
// drops the installed codes (the zero w then changes Y).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "octet/backend.h"
#include "octet/fp8.h"
#include "octet/quant.h"

namespace octet {
namespace {

struct Shape3 {
  int64_t m, in, out;
};

std::vector<float> host(Backend& be, const Tensor& t) { return be.download_f32(t); }

TEST(CudaLinear, GatheredWeightCodesEqualTheWholeWeightsQuantization) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  auto cpu = make_cpu_backend();
  struct Q {
    FormatPolicy formats;
    int margin;
    bool pow2;
  };
  for (const Shape3 s :
       {Shape3{16, 40, 17}, Shape3{64, 160, 96}, Shape3{33, 33, 130}, Shape3{128, 1024, 256}})
    for (const Q q : {Q{FormatPolicy::E4M3, 0, false}, Q{FormatPolicy::Hybrid, 1, true}}) {
      const std::string what = std::to_string(s.out) + "x" + std::to_string(s.in) + " margin " +
                               std::to_string(q.margin) + (q.pow2 ? " pow2" : "");
      LinearSpec spec;
      spec.in_features = s.in;
      spec.out_features = s.out;
      spec.precision = LinearPrecision::FP8;
      spec.quant.recipe = Recipe::TensorCurrent;
      spec.quant.formats = q.formats;
      spec.quant.margin = q.margin;
      spec.quant.pow2_scales = q.pow2;
      spec.cache_weight = true;
      auto plain = gpu->make_linear(spec), gathered = gpu->make_linear(spec),
           cpu_lin = cpu->make_linear(spec);
      ASSERT_TRUE(gathered->gathers_weight_codes());
      const int64_t n = s.out * s.in;
      std::vector<float> w = test::awkward_values(size_t(n), 5u);  // zero, subnormal, normal, large
      for (float& v : w) v *= 0.05f;
      Buffer wd = gpu->alloc(DType::F32, {s.out, s.in}), w0 = gpu->alloc(DType::F32, {s.out, s.in});
      gpu->upload(wd, w.data());
      // pieces at awkward flat offsets, as two or three ranks' shards would cut W
      const std::vector<int64_t> cuts = {0, std::min<int64_t>(n - 2, n / 3 + 1),
                                         std::max<int64_t>(n / 3 + 2, 2 * n / 3 - 5), n};
      Buffer amax = gpu->alloc(DType::I32, {1});
      for (size_t k = 0; k + 1 < cuts.size(); ++k)
        gathered->weight_piece_amax(wd.tensor().reshape({n}).slice(cuts[k], cuts[k + 1] - cuts[k]), amax);
      int32_t bits = 0;
      gpu->download(&bits, amax);
      float ref_amax = 0;
      for (float v : w) ref_amax = std::max(ref_amax, std::fabs(v));
      uint32_t ref_bits;
      std::memcpy(&ref_bits, &ref_amax, 4);
      ASSERT_EQ(uint32_t(bits), ref_bits) << what << ": the max of the pieces' amaxes is max |W|";
      const DType code_type = DType::E4M3;  // weights are E4M3 under both format policies
      Buffer codes = gpu->alloc(code_type, {n});
      for (size_t k = 0; k + 1 < cuts.size(); ++k)
        gathered->encode_weight_piece(wd.tensor().reshape({n}).slice(cuts[k], cuts[k + 1] - cuts[k]), amax,
                                      codes.tensor().slice(cuts[k], cuts[k + 1] - cuts[k]));
      std::vector<uint8_t> got(static_cast<size_t>(n));
      gpu->download(got.data(), codes);
      // the host reference: Quantizer's tensor-current codes of the whole W
      Quantizer ref(spec.quant, Role::Weight);
      QTensor qt;
      ref.quantize(w.data(), s.out, s.in, qt);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[size_t(i)], qt.codes[size_t(i)]) << what << " code " << i;
      // the CPU linear's twin of encode_weight_piece (one piece: all of W)
      Buffer wc = cpu->alloc(DType::F32, {n}), ac = cpu->alloc(DType::I32, {1}),
             cc = cpu->alloc(code_type, {n});
      cpu->upload(wc, w.data());
      cpu_lin->weight_piece_amax(wc, ac);
      cpu_lin->encode_weight_piece(wc, ac, cc);
      EXPECT_EQ(std::vector<uint8_t>(cc.tensor().fp8(), cc.tensor().fp8() + n), got) << what;

      gathered->install_weight_codes(codes, amax);
      const int32_t zero = 0;
      gpu->upload(amax, &zero);  // reused by the caller: the installed linear keeps its own copy
      Buffer x = gpu->alloc(DType::BF16, {s.m, s.in}), dy = gpu->alloc(DType::BF16, {s.m, s.out});
      const auto hx = test::gaussian(size_t(s.m * s.in), 11u),
                 hdy = test::gaussian(size_t(s.m * s.out), 12u, 1e-2f);
      std::vector<uint16_t> bx(hx.size()), bdy(hdy.size());
      for (size_t i = 0; i < hx.size(); ++i) bx[i] = bf16_from_float(hx[i]);
      for (size_t i = 0; i < hdy.size(); ++i) bdy[i] = bf16_from_float(hdy[i]);
      gpu->upload(x, bx.data());
      gpu->upload(dy, bdy.data());
      Buffer ya = gpu->alloc(DType::BF16, {s.m, s.out}), yb = gpu->alloc(DType::BF16, {s.m, s.out});
      Buffer dxa = gpu->alloc(DType::BF16, {s.m, s.in}), dxb = gpu->alloc(DType::BF16, {s.m, s.in});
      Buffer dwa = gpu->alloc(DType::F32, {s.out, s.in}), dwb = gpu->alloc(DType::F32, {s.out, s.in});
      const SavedLinear sa = plain->forward(x, wd, ya);
      const SavedLinear sb = gathered->forward(x, w0, yb);  // w0 = 0: must not be read
      plain->backward(sa, dy, dxa, dwa);
      gathered->backward(sb, dy, dxb, dwb);
      EXPECT_EQ(host(*gpu, ya), host(*gpu, yb)) << what << " y";
      EXPECT_EQ(host(*gpu, dxa), host(*gpu, dxb)) << what << " dx (reads the installed W-transpose)";
      EXPECT_EQ(host(*gpu, dwa), host(*gpu, dwb)) << what << " dw";
      EXPECT_EQ(plain->stats_w().amax, gathered->stats_w().amax) << what;
      EXPECT_EQ(plain->stats_w().scale_max, gathered->stats_w().scale_max) << what;
      EXPECT_TRUE(std::isnan(gathered->stats_w().underflow_frac)) << what << ": not counted";
      // update_scales() drops the installed codes: the next forward quantizes its (zero) w
      gathered->update_scales();
      gathered->forward(x, w0, yb);
      EXPECT_NE(host(*gpu, ya), host(*gpu, yb)) << what << " (test premise: the codes were used)";
    }
}

}  // namespace
}  // namespace octet
