// layout_test.cpp — the CUDA attentions in the tokens-major layout (octet/attention.h AttnLayout:
// q, k, v, o and the gradients [B, T, heads, D], read and written where they lie): bitwise the
// heads-major results (tests/attention/layout_check.h), for every CUDA form — the flash FP8 kernels
// at head_dim 64 and 128 (stale and matched, per-tensor and per-(head, block) scales, the dQ
// projection), the unfused FP8 and BF16 attentions, cuDNN's BF16 SDPA — with GQA, Tq != Tk, causal,
// lengths that are not multiples of a tile, and F32 or BF16 tensors. At most two key blocks of 128
// per row (one with the dQ projection), so that the fused backward's FP32 atomics into dQ and the
// row sums (order-dependent from three addends on) give the same bits in both runs. A heads-major
// tensor handed to a tokens-major attention is an octet::Error naming it.
#include <gtest/gtest.h>

#include <string>

#include "attention/layout_check.h"
#include "cuda/attention/attention_gpu_run.h"
#include "cuda/cuda_test_util.h"
#include "octet/attention.h"
#include "octet/backend.h"
#include "octet/error.h"

namespace octet {
namespace {

TEST(CudaAttentionLayout, TokensMajorEqualsHeadsMajorInEveryForm) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  const GpuForm forms[] = {
      {"flash fp8 matched d128", AttnPrecision::FP8, AttnForm::Flash, DeltaMode::Matched, QkvScaling::Tensor,
       128},
      {"flash fp8 stale d128", AttnPrecision::FP8, AttnForm::Flash, DeltaMode::Stale, QkvScaling::Tensor,
       128},
      {"flash fp8 matched d64 head-block", AttnPrecision::FP8, AttnForm::Flash, DeltaMode::Matched,
       QkvScaling::HeadBlock, 64},
      {"flash fp8 matched d64 dq-projection", AttnPrecision::FP8, AttnForm::Flash, DeltaMode::Matched,
       QkvScaling::Tensor, 64, true},
      {"unfused fp8 stale d32", AttnPrecision::FP8, AttnForm::Whole, DeltaMode::Stale, QkvScaling::Tensor,
       32},
      {"unfused bf16 matched d64", AttnPrecision::BF16, AttnForm::Whole, DeltaMode::Matched,
       QkvScaling::Tensor, 64},
      {"cudnn bf16 stale d128", AttnPrecision::BF16, AttnForm::Flash, DeltaMode::Stale, QkvScaling::Tensor,
       128},
  };
  for (const GpuForm& f : forms)
    for (bool causal : {false, true})
      for (DType act : {DType::BF16, DType::F32}) {
        AttentionShape s;
        s.batch = 2, s.n_heads = 4, s.n_kv_heads = 2, s.seq_q = 150, s.head_dim = f.head_dim;
        s.seq_k = f.dq_projection ? 120 : 250;  // one key block with the projection's row sums
        s.causal = causal;
        test::expect_layouts_agree(
            *gpu, s, f.config(), act,
            std::string(f.name) + (causal ? " causal" : "") + (act == DType::BF16 ? " bf16" : " f32"));
      }
}

TEST(CudaAttentionLayout, AHeadsMajorTensorIsRefusedByATokensMajorAttention) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  AttentionShape s;
  s.batch = 1, s.n_heads = 4, s.n_kv_heads = 4, s.seq_q = 64, s.seq_k = 64, s.head_dim = 64;
  s.layout = AttnLayout::TokensMajor;
  AttentionConfig c;
  c.form = AttnForm::Flash;
  auto attn = gpu->make_attention(s, c);
  Buffer q = gpu->alloc(DType::BF16, {1, 4, 64, 64}), o = gpu->alloc(DType::BF16, s.q_shape());
  Buffer lse = gpu->alloc(DType::F32, {1, 4, 64});
  try {
    (void)attn->forward(q, o, o, o, lse);  // q heads-major [1, 4, 64, 64]; [1, 64, 4, 64] expected
    FAIL() << "a heads-major q was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace octet
