// pack_many_test.cpp — the forward's Q, K, V glue in one launch each (glue.h
// pack_quantized_many_launch) against the same tensors packed one call each
// (pack_quantized_launch, checked against the host in glue_test.cpp): amax bits, scale_inv, row
// copies and group transposes bitwise, for per-tensor and per-(head, block) scales, F32 and BF16,
// both layouts, GQA with Tq != Tk (the tensors' grids differ: the set's CTAs past a tensor's tiles
// must do nothing), a misaligned K (the scalar path beside vector ones in one launch), and a set of
// mixed dtypes (packed one call each). Outputs start as sentinels: an element not written fails.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/attention/glue/glue.h"
#include "cuda/cuda_test_util.h"
#include "octet/attention.h"
#include "octet/error.h"
#include "octet/fp8.h"

namespace octet {
namespace {

using cuda::PackArgs;
using cuda::PackKind;
using test::Dev;

// One tensor of the set: its input bytes (at an element offset) and its outputs.
struct Packed {
  Dev<uint8_t> in, row, trans;
  Dev<float> scale_inv;
  PackArgs a;
};

struct Tensor3 {
  int64_t heads, T, rep;
  DType dt;
  int offset;  // input element offset: 1 makes the source misaligned (scalar loads)
};

// Builds tensor i's input (values from seed) and sentinel outputs; a.amax_bits is set by the caller.
void make(Packed& p, const Tensor3& t, int64_t B, int64_t D, int64_t block, bool tokens_major,
          uint32_t seed) {
  const int64_t n = B * t.heads * t.T * D, T_p = (t.T + 15) / 16 * 16, np = B * t.heads * T_p * D;
  const std::vector<float> v = test::awkward_values(size_t(n), seed);
  const size_t eb = t.dt == DType::BF16 ? 2 : 4;
  std::vector<uint8_t> bytes((size_t(n) + size_t(t.offset)) * eb, 0);
  for (size_t i = 0; i < size_t(n); ++i) {
    uint8_t* at = bytes.data() + (i + size_t(t.offset)) * eb;
    if (t.dt == DType::BF16) {
      const uint16_t h = bf16_from_float(v[i]);
      std::memcpy(at, &h, 2);
    } else {
      std::memcpy(at, &v[i], 4);
    }
  }
  p.in.set(bytes);
  p.row.set(std::vector<uint8_t>(size_t(np), 0xA5));
  p.trans.set(std::vector<uint8_t>(size_t(np), 0xA5));
  const int64_t nscales = block ? B * t.heads * ((t.T + block - 1) / block) : 1;
  p.scale_inv.set(std::vector<float>(size_t(nscales), -1.0f));
  PackArgs& a = p.a;
  a.x = p.in.p + size_t(t.offset) * eb;
  a.x_dtype = t.dt;
  a.tokens_major = tokens_major;
  a.B = B, a.heads = t.heads, a.T = t.T, a.T_p = T_p, a.D = D, a.rep = t.rep;
  a.format = Format::E4M3;
  a.fp8 = true;
  a.scale_block = block;
  a.scale_inv = p.scale_inv.p;
  a.row_kind = PackKind::Fp8Code, a.row = p.row.p;
  a.trans_kind = PackKind::Fp8Code, a.trans = p.trans.p;
}

int64_t scales_of(const PackArgs& a) {
  return a.scale_block ? a.B * a.heads * ((a.T + a.scale_block - 1) / a.scale_block) : 1;
}

void check_set(const Tensor3 (&ts)[3], int64_t B, int64_t D, int64_t block, bool tokens_major,
               const std::string& what) {
  Packed one[3], many[3];
  int64_t total = 0;
  for (int i = 0; i < 3; ++i) {
    make(one[i], ts[i], B, D, block, tokens_major, uint32_t(17 + i));
    make(many[i], ts[i], B, D, block, tokens_major, uint32_t(17 + i));
    total += scales_of(one[i].a);
  }
  Dev<unsigned> amax_one(std::vector<unsigned>(size_t(total), 0xDEADBEEFu));
  Dev<unsigned> amax_many(std::vector<unsigned>(size_t(total), 0xDEADBEEFu));
  int64_t at = 0;
  for (int i = 0; i < 3; ++i) {
    cuda::pack_quantized_launch(one[i].a, amax_one.p + at, nullptr);
    at += scales_of(one[i].a);
  }
  const PackArgs args[3] = {many[0].a, many[1].a, many[2].a};
  cuda::pack_quantized_many_launch(args, 3, amax_many.p, nullptr);
  OCTET_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(amax_one.get(), amax_many.get()) << what << ": amax bits";
  for (int i = 0; i < 3; ++i) {
    const std::string name = what + " tensor " + std::to_string(i);
    EXPECT_EQ(one[i].scale_inv.get(), many[i].scale_inv.get()) << name << ": scale_inv";
    const std::vector<uint8_t> r1 = one[i].row.get(), r2 = many[i].row.get();
    const std::vector<uint8_t> t1 = one[i].trans.get(), t2 = many[i].trans.get();
    EXPECT_TRUE(r1 == r2) << name << ": row copy";
    EXPECT_TRUE(t1 == t2) << name << ": group transpose";
    size_t sentinels = 0;
    for (uint8_t c : r2) sentinels += c == 0xA5;
    for (uint8_t c : t2) sentinels += c == 0xA5;
    EXPECT_LT(sentinels, r2.size() / 8) << name << ": most outputs unwritten";
  }
}

TEST(AttentionGlue, QkvInOneLaunchEqualsOneCallPerTensor) {
  OCTET_REQUIRE_GPU();
  // GQA 4/2 with Tq != Tk: Q's grid is wider and K, V's taller.
  for (DType dt : {DType::F32, DType::BF16})
    for (int64_t block : {int64_t(0), kQkvScaleBlock})
      for (bool tm : {false, true}) {
        const Tensor3 gqa[3] = {{4, 129, 2, dt, 0}, {2, 300, 1, dt, 1}, {2, 300, 1, dt, 0}};
        check_set(
            gqa, 2, 64, block, tm,
            "GQA D64 " + to_string(dt) + (block ? " per block" : " per tensor") + (tm ? " bshd" : " bhsd"));
        const Tensor3 mha[3] = {{3, 200, 1, dt, 0}, {3, 200, 1, dt, 0}, {3, 200, 1, dt, 0}};
        check_set(
            mha, 1, 128, block, tm,
            "MHA D128 " + to_string(dt) + (block ? " per block" : " per tensor") + (tm ? " bshd" : " bhsd"));
      }
  // Mixed input dtypes: one call per tensor, the same results.
  const Tensor3 mixed[3] = {{2, 40, 1, DType::F32, 0}, {2, 40, 1, DType::BF16, 0}, {2, 40, 1, DType::F32, 0}};
  check_set(mixed, 1, 64, 0, false, "mixed dtypes");
}

TEST(AttentionGlue, QkvInOneLaunchRefusesBadSets) {
  OCTET_REQUIRE_GPU();
  Packed p;
  make(p, {2, 40, 1, DType::F32, 0}, 1, 64, 0, false, 3);
  Dev<unsigned> amax(4);
  PackArgs args[4] = {p.a, p.a, p.a, p.a};
  EXPECT_THROW(cuda::pack_quantized_many_launch(args, 0, amax.p, nullptr), Error);
  EXPECT_THROW(cuda::pack_quantized_many_launch(args, 4, amax.p, nullptr), Error);
  Dev<float> rf(std::vector<float>(80, 1.0f));
  args[1].row_factor = rf.p;
  EXPECT_THROW(cuda::pack_quantized_many_launch(args, 2, amax.p, nullptr), Error);
}

}  // namespace
}  // namespace octet
