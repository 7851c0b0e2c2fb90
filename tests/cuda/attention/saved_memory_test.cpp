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
#include <vector>

#include "cuda/attention/attention_gpu_run.h"
#include "cuda/cuda_test_util.h"
#include "octet/attention.h"
#include "octet/backend.h"
#include "octet/error.h"

namespace octet {
namespace {

const GpuForm kForms[] = {
    {"flash fp8 matched d128", AttnPrecision::FP8, AttnForm::Flash, DeltaMode::Matched, QkvScaling::Tensor,
     128},
    {"flash fp8 stale d64", AttnPrecision::FP8, AttnForm::Flash, DeltaMode::Stale, QkvScaling::Tensor, 64},
    {"flash fp8 matched d64 head-block", AttnPrecision::FP8, AttnForm::Flash, DeltaMode::Matched,
     QkvScaling::HeadBlock, 64},
    {"unfused fp8 matched d32", AttnPrecision::FP8, AttnForm::Whole, DeltaMode::Matched, QkvScaling::Tensor,
     32},
    {"unfused bf16 matched d64", AttnPrecision::BF16, AttnForm::Whole, DeltaMode::Matched, QkvScaling::Tensor,
     64},
    {"cudnn bf16 stale d128", AttnPrecision::BF16, AttnForm::Flash, DeltaMode::Stale, QkvScaling::Tensor,
     128},
};

TEST(CudaAttentionSavedMemory, ForwardToThenSavedFromEqualsOwnState) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  for (const GpuForm& f : kForms) {
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

int64_t round_up_256(int64_t n) { return (n + 255) / 256 * 256; }

// The bytes of each form's saved state counted from the buffers it holds (attention_base.h
// AttnState, cudnn_attention.cpp CudnnState), each rounded up to 256 bytes.
int64_t expected_saved_bytes(const GpuForm& f, const AttentionShape& s) {
  const int64_t B = s.batch, H = s.n_heads, G = s.n_kv_heads, D = s.head_dim, Tq = s.seq_q, Tk = s.seq_k;
  const bool cudnn = f.precision == AttnPrecision::BF16 && f.form == AttnForm::Flash;
  if (cudnn)  // BF16 Q, K, V as given; the F32 LSE
    return round_up_256(2 * B * H * Tq * D) + 2 * round_up_256(2 * B * G * Tk * D) +
           round_up_256(4 * B * H * Tq);
  const int64_t Tq_p = (Tq + 15) / 16 * 16, Tk_p = (Tk + 15) / 16 * 16;
  const int64_t elem = f.precision == AttnPrecision::FP8 ? 1 : 2;
  const int64_t trans = f.form == AttnForm::Flash ? 1 : 2;  // the flash kernels read FP8 transposes
  const bool blocks = f.scaling == QkvScaling::HeadBlock;
  const int64_t q_scales = blocks ? B * H * ((Tq + 127) / 128) : 1,
                k_scales = blocks ? B * G * ((Tk + 127) / 128) : 1;
  return round_up_256(elem * B * H * Tq_p * D) + 2 * round_up_256(elem * B * G * Tk_p * D) +
         round_up_256(trans * B * H * Tq_p * D) + round_up_256(trans * B * G * Tk_p * D) +
         round_up_256(4 * q_scales) + 2 * round_up_256(4 * k_scales) + round_up_256(2 * 4 * B * H * Tq);
}

TEST(CudaAttentionSavedMemory, SizeTermsGiveTheSavedBytesAtEveryShape) {
  // saved_size_terms() (backend.h, saved_size.h) taken at one shape give saved_bytes() of a layer
  // of any other batch and sequence lengths, that is the buffers counted one by one, and a
  // placement at that shape (saved_from, which checks itself against the terms) succeeds.
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  for (const GpuForm& f : kForms) {
    AttentionShape at;
    at.batch = 2, at.n_heads = 4, at.n_kv_heads = 2, at.seq_q = 200, at.seq_k = 200, at.head_dim = f.head_dim;
    const AttentionConfig cfg = f.config();
    const std::vector<AttnSizeTerm> terms = gpu->make_attention(at, cfg)->saved_size_terms();
    ASSERT_FALSE(terms.empty()) << f.name;
    for (const int64_t batch : {1, 3})
      for (const int64_t seq_q : {1, 17, 128, 129, 300})
        for (const int64_t seq_k : {5, 16, 200}) {
          AttentionShape s = at;
          s.batch = batch, s.seq_q = seq_q, s.seq_k = seq_k;
          const std::string what = std::string(f.name) + " B" + std::to_string(batch) + " Tq" +
                                   std::to_string(seq_q) + " Tk" + std::to_string(seq_k);
          auto attn = gpu->make_attention(s, cfg);
          const int64_t bytes = attn->saved_bytes();
          EXPECT_EQ(bytes, expected_saved_bytes(f, s)) << what;
          EXPECT_EQ(attention_saved_size(terms, attn_sizes(s)), bytes) << what;
          AttnIo io(*gpu, s, DType::BF16);
          Buffer memory = gpu->alloc(DType::I32, {bytes / 4});
          EXPECT_NO_THROW((void)attn->saved_from(io.o, io.lse, memory.tensor())) << what;
        }
  }
}

}  // namespace
}  // namespace octet
