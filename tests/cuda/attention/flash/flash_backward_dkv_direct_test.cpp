// flash_backward_dkv_direct_test.cpp — the wgmma backward's dK/dV epilogue into the caller's tensors
// (OCTET_FLASH_BWD_DKV_DIRECT=1: BackwardParams::dk_out, dv_out, set by run_backward) against the
// FP32 accumulators and unpad_scale_launch (0): dK and dV the same bits — the same products, each
// formed as the unpad pass forms it and rounded once — and dQ within FP32 atomic order. Every case:
// head_dim 64 (and 128, where run_backward keeps the accumulators: the case shows the switch
// leaves it there), matched and stale, per-tensor and per-(head, block) scales, BF16 and F32
// tensors, heads-major and tokens-major, 128 x 128 and 64 x 64 dS scale tiles (the two wgmma main
// kernels), GQA 4/2, Tk = 200 (a last key block of 72 keys: the rows
// Tk..Tk_p must not be written), causal or not, both product orders. The test asserts that the
// direct path is the one taken (resolved_dkv_direct) with the kernel and dQ path pinned. dK and dV
// are poisoned (NaN bits) before each run: a row the epilogue missed stays NaN; a row past Tk
// written lands on the guard after the tensor (the last head) or on the next head's first rows,
// where the bitwise comparison sees it unless that head's own store happens to come later.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/attention/flash/flash.h"
#include "cuda/cuda_test_util.h"
#include "octet/attention.h"
#include "octet/backend.h"
#include "octet/error.h"

namespace octet {
namespace {

// The device tensors of one call in shape s's layout, dK and dV with a guard of 64 elements after
// them (poisoned like them: an epilogue store past the tensor's end shows there).
struct Io {
  Buffer q, k, v, o, lse, d_o, dq, dk, dv;
  Io(Backend& be, const AttentionShape& s, DType act) {
    const Shape qs = s.q_shape(), ks = s.kv_shape();
    const int64_t nk = ks.numel();
    q = be.alloc(act, qs), k = be.alloc(act, ks), v = be.alloc(act, ks), o = be.alloc(act, qs);
    lse = be.alloc(DType::F32, {s.batch, s.n_heads, s.seq_q});
    d_o = be.alloc(act, qs), dq = be.alloc(act, qs);
    dk = be.alloc(act, {nk + 64}), dv = be.alloc(act, {nk + 64});
  }
};

// The bytes of a tensor.
std::vector<uint8_t> bytes_of(Backend& be, const Tensor& t) {
  std::vector<uint8_t> out(size_t(t.numel()) * dtype_size(t.dtype));
  be.download(out.data(), t);
  return out;
}

struct Result {
  std::vector<uint8_t> dk, dv;
  std::vector<float> dq;
};

// One forward + backward with OCTET_FLASH_BWD_DKV_DIRECT = direct; dK, dV (and their guards)
// poisoned before.
Result run(Backend& be, const AttentionShape& s, const AttentionConfig& c, DType act,
           const AttentionInputs& in, const char* direct) {
  test::ScopedEnv env("OCTET_FLASH_BWD_DKV_DIRECT", direct);
  Io io(be, s, act);
  // The inputs are random values: moved into the layout only as a permutation of the same
  // values would be, so both runs (and both layouts) see the same data.
  test::upload_values(be, io.q.tensor(), in.q);
  test::upload_values(be, io.k.tensor(), in.k);
  test::upload_values(be, io.v.tensor(), in.v);
  test::upload_values(be, io.d_o.tensor(), in.d_o);
  for (const Buffer* t : {&io.dk, &io.dv}) {
    std::vector<uint8_t> nan(size_t(t->tensor().numel()) * dtype_size(act), 0xFF);
    be.upload(t->tensor(), nan.data());
  }
  const Shape ks = s.kv_shape();
  const Tensor dk(io.dk.tensor().data, act, ks), dv(io.dv.tensor().data, act, ks);  // the guard after
  auto attn = be.make_attention(s, c);
  {
    const SavedAttention saved =
        attn->forward(io.q.tensor(), io.k.tensor(), io.v.tensor(), io.o.tensor(), io.lse.tensor());
    attn->backward(saved, io.d_o.tensor(), io.dq.tensor(), dk, dv, Tensor());
  }
  be.synchronize();
  return {bytes_of(be, io.dk.tensor()), bytes_of(be, io.dv.tensor()), be.download_f32(io.dq.tensor())};
}

TEST(FlashBackwardWgmmaEnv, DirectDkDvEqualsTheUnpadPass) {
  OCTET_REQUIRE_SM90();
  auto gpu = make_cuda_backend();
  // The kernel and dQ path the direct epilogue needs, whatever the environment says.
  test::ScopedEnv kernel("OCTET_FLASH_BACKWARD", nullptr), dq_tma("OCTET_FLASH_BWD_DQ_TMA", nullptr);
  for (int64_t tile : {128, 64})  // the dS scale tile: the two wgmma main kernels
    for (int64_t D : {64, 128})
      for (const char* overlap : {"0", "1"})  // both product orders' direct kernels at head_dim 64
        for (DeltaMode delta : {DeltaMode::Matched, DeltaMode::Stale})
          for (QkvScaling scaling : {QkvScaling::Tensor, QkvScaling::HeadBlock})
            for (DType act : {DType::BF16, DType::F32})
              for (AttnLayout layout : {AttnLayout::HeadsMajor, AttnLayout::TokensMajor})
                for (bool causal : {false, true}) {
                  test::ScopedEnv order("OCTET_FLASH_BWD_SDP_OVERLAP", overlap);
                  AttentionShape s;
                  s.batch = 2, s.n_heads = 4, s.n_kv_heads = 2, s.seq_q = 150, s.seq_k = 200, s.head_dim = D;
                  s.causal = causal, s.layout = layout;
                  AttentionConfig c;
                  c.precision = AttnPrecision::FP8, c.form = AttnForm::Flash, c.delta = delta;
                  c.qkv_scaling = scaling;
                  c.block_q = c.block_k = tile;
                  std::string at = "tile " + std::to_string(tile) + " D";
                  at += std::to_string(D);
                  at += " ";
                  at += to_string(delta);
                  at += scaling == QkvScaling::HeadBlock ? " head-block " : " ";
                  at += to_string(act);
                  at += layout == AttnLayout::TokensMajor ? " bshd" : " bhsd";
                  if (causal) at += " causal";
                  at += " overlap ";
                  at += overlap;
                  {  // the direct path is what the "1" run takes at head_dim 64, and only there
                    test::ScopedEnv env("OCTET_FLASH_BWD_DKV_DIRECT", "1");
                    cuda::flash::BackwardParams bp;
                    bp.B = s.batch, bp.H = s.n_heads, bp.G = s.n_kv_heads, bp.Tq = s.seq_q, bp.Tk = s.seq_k;
                    bp.D = D, bp.block_q = c.block_q, bp.block_k = c.block_k;
                    ASSERT_EQ(cuda::flash::resolved_dkv_direct(bp), D == 64) << at;
                  }
                  const AttentionInputs in =
                      make_attention_inputs(s, AttnInputDist::Normal, 11 + uint64_t(D));
                  const Result base = run(*gpu, s, c, act, in, "0");
                  const Result direct = run(*gpu, s, c, act, in, "1");
                  const size_t esz = dtype_size(act), n = base.dk.size() / esz - 64;
                  // every dK, dV element written (no NaN left), the guard untouched, bits equal
                  for (const std::vector<uint8_t>* t : {&base.dk, &base.dv, &direct.dk, &direct.dv}) {
                    size_t nan = 0;
                    for (size_t i = 0; i < n; ++i) {
                      float x;
                      if (esz == 2) {
                        uint32_t b = uint32_t((*t)[2 * i] | (*t)[2 * i + 1] << 8) << 16;
                        std::memcpy(&x, &b, 4);
                      } else {
                        std::memcpy(&x, t->data() + 4 * i, 4);
                      }
                      nan += std::isnan(x) ? 1 : 0;
                    }
                    EXPECT_EQ(nan, 0u) << at << ": an element not written";
                    for (size_t i = n * esz; i < t->size(); ++i)
                      ASSERT_EQ((*t)[i], 0xFF) << at << ": a store past the tensor's end";
                  }
                  EXPECT_TRUE(base.dk == direct.dk) << at << ": dK's bits moved";
                  EXPECT_TRUE(base.dv == direct.dv) << at << ": dV's bits moved";
                  double num = 0, den = 0;
                  for (size_t i = 0; i < base.dq.size(); ++i) {
                    num += double(direct.dq[i] - base.dq[i]) * (direct.dq[i] - base.dq[i]);
                    den += double(base.dq[i]) * base.dq[i];
                  }
                  // FP32 atomic order only; in BF16 it flips a rounding (2^-8 relative) in a few
                  // elements: measured 1.1e-5 with 64 x 64 tiles (two dQ parts per key block, H100).
                  const double dq_tol = act == DType::BF16 && tile == 64 ? 1e-4 : 1e-5;
                  EXPECT_LE(std::sqrt(num / den), dq_tol) << at << ": dQ";
                  if (HasFailure()) return;
                }
}

TEST(FlashBackwardWgmmaEnv, DkvDirectSwitch) {
  OCTET_REQUIRE_GPU();
  {
    test::ScopedEnv env("OCTET_FLASH_BWD_DKV_DIRECT", nullptr);
    EXPECT_TRUE(cuda::flash::backward_dkv_direct()) << "the default";
  }
  {
    test::ScopedEnv env("OCTET_FLASH_BWD_DKV_DIRECT", "0");
    EXPECT_FALSE(cuda::flash::backward_dkv_direct());
  }
  test::ScopedEnv env("OCTET_FLASH_BWD_DKV_DIRECT", "yes");
  try {
    cuda::flash::backward_dkv_direct();
    ADD_FAILURE() << "OCTET_FLASH_BWD_DKV_DIRECT=yes accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("OCTET_FLASH_BWD_DKV_DIRECT"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace octet
