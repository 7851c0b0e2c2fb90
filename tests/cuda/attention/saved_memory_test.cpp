// saved_memory_test.cpp — the CUDA attentions' saved state in caller memory (octet/backend.h
// Attention::saved_bytes, forward_to, saved_from; what the PyTorch ops keep as a tensor): a forward
// into caller memory (filled with NaN codes first, so a region the forward leaves unwritten shows)
// whose state another attention object of the same shape and config reads back gives bitwise the
// O, LSE, dQ, dK, dV (and to FP64 rounding the row residual) of the ordinary forward and backward; for each
// CUDA form (the flash FP8 kernels at head_dim 64 and 128 with per-tensor and per-(head, block) scales, the
// unfused FP8 and BF16 attentions, cuDNN's BF16 SDPA). Memory that is too small or misaligned is an
// octet::Error naming it.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <utility>

#include "cuda/attention/attention_gpu_run.h"
#include "cuda/cuda_test_util.h"
#include "octet/attention.h"
#include "octet/backend.h"
#include "octet/error.h"

namespace octet {
namespace {

TEST(CudaAttentionSavedMemory, ForwardToThenSavedFromEqualsOwnState) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  const GpuForm forms[] = {
      {"flash fp8 matched d128", AttnPrecision::FP8, AttnForm::Flash, DeltaMode::Matched, QkvScaling::Tensor,
       128},
      {"flash fp8 stale d64", AttnPrecision::FP8, AttnForm::Flash, DeltaMode::Stale, QkvScaling::Tensor, 64},
      {"flash fp8 matched d64 head-block", AttnPrecision::FP8, AttnForm::Flash, DeltaMode::Matched,
       QkvScaling::HeadBlock, 64},
      {"unfused fp8 matched d32", AttnPrecision::FP8, AttnForm::Whole, DeltaMode::Matched, QkvScaling::Tensor,
       32},
      {"unfused bf16 matched d64", AttnPrecision::BF16, AttnForm::Whole, DeltaMode::Matched,
       QkvScaling::Tensor, 64},
      {"cudnn bf16 stale d128", AttnPrecision::BF16, AttnForm::Flash, DeltaMode::Stale, QkvScaling::Tensor,
       128},
  };
  for (const GpuForm& f : forms) {
    AttentionShape s;
    s.batch = 2, s.n_heads = 4, s.n_kv_heads = 2, s.seq_q = 200, s.seq_k = 200, s.head_dim = f.head_dim;
    s.causal = true;
    const AttentionConfig cfg = f.config();
    const auto in = make_attention_inputs(s, AttnInputDist::Normal, 11);
    auto own = gpu->make_attention(s, cfg), placer = gpu->make_attention(s, cfg),
         reader = gpu->make_attention(s, cfg);
    const int64_t bytes = placer->saved_bytes();
    ASSERT_GT(bytes, 0) << f.name;
    EXPECT_EQ(bytes, reader->saved_bytes()) << f.name;
    AttnIo a(*gpu, s, DType::BF16), b(*gpu, s, DType::BF16);
    a.set(*gpu, in), b.set(*gpu, in);
    {
      const SavedAttention st = own->forward(a.q, a.k, a.v, a.o, a.lse);
      own->backward(st, a.d_o, a.dq, a.dk, a.dv, a.residual);
    }
    ASSERT_EQ(bytes % 4, 0) << f.name;
    Buffer memory = gpu->alloc(DType::I32, {bytes / 4});
    gpu->fill(memory, -1);  // every byte 0xFF (an E4M3 NaN, an F32 NaN): what is not written shows
    (void)placer->forward_to(b.q, b.k, b.v, b.o, b.lse, memory);
    const SavedAttention st = reader->saved_from(b.o, b.lse, memory);
    EXPECT_TRUE(st.q.empty()) << f.name;
    reader->backward(st, b.d_o, b.dq, b.dk, b.dv, b.residual);
    for (auto [name, x, y] : {std::tuple{"o", &a.o, &b.o},
                              {"lse", &a.lse, &b.lse},
                              {"dq", &a.dq, &b.dq},
                              {"dk", &a.dk, &b.dk},
                              {"dv", &a.dv, &b.dv}}) {
      const std::string what = std::string(f.name) + " " + name;
      const auto va = gpu->download_f32(*x), vb = gpu->download_f32(*y);
      bool nonzero = false;
      for (size_t i = 0; i < va.size(); ++i) {
        nonzero |= va[i] != 0.0f;
        ASSERT_TRUE(va[i] == va[i]) << what << ": NaN at " << i;
        ASSERT_TRUE(test::same_float(va[i], vb[i]))
            << what << " at " << i << ": " << va[i] << " vs " << vb[i];
      }
      EXPECT_TRUE(nonzero) << what << ": all zero (vacuous)";
    }
    double ra[2], rb[2];
    gpu->download(ra, a.residual);
    gpu->download(rb, b.residual);
    // The row residual's FP64 sums are atomics (their order varies run to run): FP64 rounding.
    EXPECT_NEAR(ra[0], rb[0], 1e-12 * std::abs(ra[0])) << f.name;
    EXPECT_NEAR(ra[1], rb[1], 1e-12 * std::abs(ra[1])) << f.name;

    // Too small, misaligned: refused before anything is written.
    const Tensor whole = memory.tensor();
    const Tensor short_by_4 = whole.slice(0, bytes / 4 - 1);
    EXPECT_THROW((void)placer->forward_to(b.q, b.k, b.v, b.o, b.lse, short_by_4), Error) << f.name;
    EXPECT_THROW((void)reader->saved_from(b.o, b.lse, short_by_4), Error) << f.name;
    EXPECT_THROW((void)reader->saved_from(b.o, b.lse, Tensor()), Error) << f.name;
    Buffer bigger = gpu->alloc(DType::I32, {bytes / 4 + 4});
    EXPECT_THROW((void)reader->saved_from(b.o, b.lse, bigger.tensor().slice(4, bytes / 4)), Error) << f.name;
  }
}

}  // namespace
}  // namespace octet
