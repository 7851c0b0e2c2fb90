// pack_variants_test.cpp — the other ways the glue packs, against the staged pack one tensor at a
// time (pack_quantized_launch with PackKernel::Staged, checked against the host in glue_test.cpp):
//   * the forward's Q, K, V in one launch each (glue.h pack_quantized_many_launch);
//   * the code pack (PackKernel::Codes, glue/pack_codes.cu) for every FP8-code copy it takes;
//   * the one-pass block pack (PackKernel::Block, glue/pack_block.cu) for per-(head, block) scales,
//     and the code pack it leaves the sets it does not take to;
//   * the flash backward's dO glue (glue.h pack_d_o_launch): both amaxes in one pass, dÔ's rows and
//     (dO/l)~'s transpose in one launch, the row factor 1/l made from the forward's l.
// amax bits, scale_inv, row copies and group transposes bitwise, for per-tensor and per-(head,
// block) scales, F32 and BF16, both layouts, GQA with Tq != Tk (a set's tensors have different
// grids: CTAs past a tensor's tiles must do nothing), head_dims that are not a multiple of the
// 64-column tile, odd T, misaligned inputs (the scalar path), NaN and huge values, dV's row factor,
// and a set of mixed dtypes (packed one call each). Outputs start as sentinels: an element not
// written fails.
#include <gtest/gtest.h>

#include <cmath>
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

// The bits of each float: a NaN scale_inv (a NaN input under per-tensor scaling) equals itself.
std::vector<uint32_t> bits_of(const std::vector<float>& x) {
  std::vector<uint32_t> b(x.size());
  if (!x.empty()) std::memcpy(b.data(), x.data(), x.size() * sizeof(float));
  return b;
}

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

// The copies a pack writes and how (default: the forward's Q, K and V by the staged pack).
struct Kinds {
  PackKind row = PackKind::Fp8Code, trans = PackKind::Fp8Code;
  Format format = Format::E4M3;
  const float* row_factor = nullptr;  // [B, heads, T] (dV's operand)
  cuda::PackKernel kernel = cuda::PackKernel::Staged;
};

// Builds tensor i's input (values from seed) and sentinel outputs; a.amax_bits is set by the caller.
void make(Packed& p, const Tensor3& t, int64_t B, int64_t D, int64_t block, bool tokens_major, uint32_t seed,
          const Kinds& k = {}) {
  const int64_t n = B * t.heads * t.T * D, T_p = (t.T + 15) / 16 * 16, np = B * t.heads * T_p * D;
  std::vector<float> v = test::awkward_values(size_t(n), seed);
  if (seed % 5 == 4) v[size_t(n) / 3] = NAN;    // some tensors hold a NaN (every code NaN, pads 0)
  if (seed % 5 == 3) v[size_t(n) / 2] = 3e38f;  // or a huge value (the rest tiny or zero)
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
  a.format = k.format;
  a.fp8 = true;
  a.scale_block = block;
  a.scale_inv = p.scale_inv.p;
  a.row_factor = k.row_factor;
  a.row_kind = k.row, a.row = p.row.p;
  a.trans_kind = k.trans, a.trans = p.trans.p;
  a.kernel = k.kernel;
}

int64_t scales_of(const PackArgs& a) {
  return a.scale_block ? a.B * a.heads * ((a.T + a.scale_block - 1) / a.scale_block) : 1;
}

// How the variant packs: its kinds (and kernel), and whether the three tensors go in one launch.
struct Variant {
  Kinds kinds;
  bool one_launch = true;
  bool row_factor = false;  // each tensor with a row factor (per-tensor scales only)
};

// Packs the three tensors with the staged pack one call each and with the variant, and compares.
void check_set(const Tensor3 (&ts)[3], int64_t B, int64_t D, int64_t block, bool tokens_major,
               const Variant& var, const std::string& what) {
  Packed one[3], many[3];
  std::vector<Dev<float>> rf;
  int64_t total = 0;
  for (int i = 0; i < 3; ++i) {
    Kinds k = var.kinds;
    if (var.row_factor) {
      std::vector<float> f = test::gaussian(size_t(B * ts[i].heads * ts[i].T), uint32_t(40 + i));
      for (size_t j = 0; j < f.size(); ++j)
        f[j] = j % 7 == 3 ? 0.0f : 1.0f / (1.0f + std::fabs(f[j]) * 30.0f);
      rf.emplace_back(f);
      k.row_factor = rf.back().p;
    }
    Kinds staged = k;
    staged.kernel = cuda::PackKernel::Staged;
    make(one[i], ts[i], B, D, block, tokens_major, uint32_t(17 + i), staged);
    make(many[i], ts[i], B, D, block, tokens_major, uint32_t(17 + i), k);
    total += scales_of(one[i].a);
  }
  Dev<unsigned> amax_one(std::vector<unsigned>(size_t(total), 0xDEADBEEFu));
  Dev<unsigned> amax_many(std::vector<unsigned>(size_t(total), 0xDEADBEEFu));
  int64_t at = 0;
  for (int i = 0; i < 3; ++i) {
    cuda::pack_quantized_launch(one[i].a, amax_one.p + at, nullptr);
    if (!var.one_launch) cuda::pack_quantized_launch(many[i].a, amax_many.p + at, nullptr);
    at += scales_of(one[i].a);
  }
  if (var.one_launch) {
    const PackArgs args[3] = {many[0].a, many[1].a, many[2].a};
    cuda::pack_quantized_many_launch(args, 3, amax_many.p, nullptr);
  }
  OCTET_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(amax_one.get(), amax_many.get()) << what << ": amax bits";
  for (int i = 0; i < 3; ++i) {
    const std::string name = what + " tensor " + std::to_string(i);
    EXPECT_EQ(bits_of(one[i].scale_inv.get()), bits_of(many[i].scale_inv.get()))
        << name << ": scale_inv bits";
    const std::vector<uint8_t> r1 = one[i].row.get(), r2 = many[i].row.get();
    const std::vector<uint8_t> t1 = one[i].trans.get(), t2 = many[i].trans.get();
    EXPECT_TRUE(r1 == r2) << name << ": row copy";
    EXPECT_TRUE(t1 == t2) << name << ": group transpose";
    size_t written = 0;  // of the copies the variant writes
    if (var.kinds.row != PackKind::None)
      for (uint8_t c : r2) written += c != 0xA5;
    if (var.kinds.trans != PackKind::None)
      for (uint8_t c : t2) written += c != 0xA5;
    EXPECT_GT(written, r2.size() / 2) << name << ": most outputs unwritten";
  }
}

std::string layout_name(int64_t block, bool tm) {
  return std::string(block ? " per block" : " per tensor") + (tm ? " bshd" : " bhsd");
}

TEST(AttentionGlue, QkvInOneLaunchEqualsOneCallPerTensor) {
  OCTET_REQUIRE_GPU();
  const Variant one_launch{};
  // GQA 4/2 with Tq != Tk: Q's grid is wider and K, V's taller.
  for (DType dt : {DType::F32, DType::BF16})
    for (int64_t block : {int64_t(0), kQkvScaleBlock})
      for (bool tm : {false, true}) {
        const Tensor3 gqa[3] = {{4, 129, 2, dt, 0}, {2, 300, 1, dt, 1}, {2, 300, 1, dt, 0}};
        check_set(gqa, 2, 64, block, tm, one_launch, "GQA D64 " + to_string(dt) + layout_name(block, tm));
        const Tensor3 mha[3] = {{3, 200, 1, dt, 0}, {3, 200, 1, dt, 0}, {3, 200, 1, dt, 0}};
        check_set(mha, 1, 128, block, tm, one_launch, "MHA D128 " + to_string(dt) + layout_name(block, tm));
      }
  // Mixed input dtypes: one call per tensor, the same results.
  const Tensor3 mixed[3] = {{2, 40, 1, DType::F32, 0}, {2, 40, 1, DType::BF16, 0}, {2, 40, 1, DType::F32, 0}};
  check_set(mixed, 1, 64, 0, false, one_launch, "mixed dtypes");
}

// The code pack gives the staged pack's bits for every copy it takes: the forward's Q, K, V (codes
// in both copies), dO's rows (E5M2, no transpose), and dV's operand (dO_i / l_i)~ (a row factor,
// the transpose only), one tensor per call and three in one launch.
TEST(AttentionGlue, CodePackEqualsStagedPack) {
  OCTET_REQUIRE_GPU();
  struct Case {
    Kinds kinds;
    bool row_factor;
    const char* name;
  };
  const auto codes = cuda::PackKernel::Codes;
  const Case cases[] = {
      {{PackKind::Fp8Code, PackKind::Fp8Code, Format::E4M3, nullptr, codes}, false, "Q/K/V codes"},
      {{PackKind::Fp8Code, PackKind::None, Format::E5M2, nullptr, codes}, false, "dO rows E5M2"},
      {{PackKind::None, PackKind::Fp8Code, Format::E5M2, nullptr, codes}, true, "(dO/l)~ E5M2"},
      {{PackKind::None, PackKind::Fp8Code, Format::E4M3, nullptr, codes}, true, "(dO/l)~ E4M3"}};
  for (const Case& c : cases)
    for (DType dt : {DType::F32, DType::BF16})
      for (int64_t block : {int64_t(0), kQkvScaleBlock})
        for (bool tm : {false, true})
          for (bool one_launch : {false, true}) {
            // per-block scales and a packed set take no row factor
            if ((block || one_launch) && c.row_factor) continue;
            const Variant var{c.kinds, one_launch, c.row_factor};
            const std::string what = std::string(c.name) + " " + to_string(dt) + layout_name(block, tm) +
                                     (one_launch ? " one launch" : " per tensor");
            const Tensor3 gqa[3] = {{4, 129, 2, dt, 0}, {2, 300, 1, dt, 1}, {2, 300, 1, dt, 0}};
            check_set(gqa, 2, 64, block, tm, var, "GQA D64 " + what);
            const Tensor3 mha[3] = {{3, 200, 1, dt, 0}, {3, 200, 1, dt, 0}, {3, 200, 1, dt, 0}};
            check_set(mha, 1, 128, block, tm, var, "MHA D128 " + what);
            // head_dims that are not a multiple of the 64-column tile, odd T, GQA 8/1
            const Tensor3 odd[3] = {{8, 17, 8, dt, 1}, {1, 33, 1, dt, 0}, {1, 33, 1, dt, 0}};
            check_set(odd, 2, 48, block, tm, var, "D48 " + what);
            check_set(odd, 1, 80, block, tm, var, "D80 " + what);
          }
}

// The one-pass block pack gives the amax launch's and the staged pack's bits with 64- and 128-token
// blocks: the forward's Q, K, V (one tensor per call and three in one launch), dO's rows (E5M2, no
// transpose), the transposes alone; T not a multiple of the block or of 16, head_dims 16 to 128,
// GQA 8/1, misaligned inputs, NaN and huge values. quantized_pack_kernel says it ran; the sets it
// does not take (per-tensor scales, head_dim 192, a BF16 copy) go to the code or staged pack with
// the same bits.
TEST(AttentionGlue, BlockPackEqualsStagedPack) {
  OCTET_REQUIRE_GPU();
  const auto block_pack = cuda::PackKernel::Block;
  const Kinds kinds[] = {{PackKind::Fp8Code, PackKind::Fp8Code, Format::E4M3, nullptr, block_pack},
                         {PackKind::Fp8Code, PackKind::None, Format::E5M2, nullptr, block_pack},
                         {PackKind::None, PackKind::Fp8Code, Format::E4M3, nullptr, block_pack}};
  for (const Kinds& k : kinds)
    for (DType dt : {DType::F32, DType::BF16})
      for (int64_t block : {int64_t(64), kQkvScaleBlock})
        for (bool tm : {false, true})
          for (bool one_launch : {false, true}) {
            const Variant var{k, one_launch, false};
            const std::string what = to_string(dt) + " block " + std::to_string(block) +
                                     (tm ? " bshd" : " bhsd") + (one_launch ? " one launch" : " per tensor") +
                                     (k.row == PackKind::None ? " transposes" : "") +
                                     (k.trans == PackKind::None ? " rows" : "");
            const Tensor3 gqa[3] = {{4, 129, 2, dt, 0}, {2, 300, 1, dt, 1}, {2, 300, 1, dt, 0}};
            check_set(gqa, 2, 64, block, tm, var, "GQA D64 " + what);
            const Tensor3 mha[3] = {{3, 200, 1, dt, 0}, {3, 200, 1, dt, 0}, {3, 200, 1, dt, 0}};
            check_set(mha, 1, 128, block, tm, var, "MHA D128 " + what);
            const Tensor3 odd[3] = {{8, 17, 8, dt, 1}, {1, 33, 1, dt, 0}, {1, 257, 1, dt, 0}};
            for (int64_t D : {16, 48, 80, 112}) {
              const std::string name = std::to_string(D) + " " + what;
              check_set(odd, 2, D, block, tm, var, "head_dim " + name);
            }
            // not taken: the code pack, the same bits
            check_set(mha, 1, 192, block, tm, var, "D192 (code pack) " + what);
            check_set(mha, 1, 64, 0, tm, var, "per tensor (code pack) " + what);
          }

  // Which kernel runs.
  Packed p;
  make(p, {2, 100, 1, DType::BF16, 0}, 1, 128, kQkvScaleBlock, false, 3, kinds[0]);
  EXPECT_EQ(cuda::quantized_pack_kernel(&p.a, 1), block_pack);
  PackArgs three[3] = {p.a, p.a, p.a};
  EXPECT_EQ(cuda::quantized_pack_kernel(three, 3), block_pack);
  PackArgs other = p.a;
  other.scale_block = 0;
  EXPECT_EQ(cuda::quantized_pack_kernel(&other, 1), cuda::PackKernel::Codes) << "per-tensor scales";
  other = p.a;
  other.D = 192;
  EXPECT_EQ(cuda::quantized_pack_kernel(&other, 1), cuda::PackKernel::Codes) << "head_dim 192";
  other = p.a;
  other.scale_block = 256;
  EXPECT_EQ(cuda::quantized_pack_kernel(&other, 1), cuda::PackKernel::Codes) << "256-token blocks";
  other = p.a;
  other.row_kind = PackKind::Bf16OfCode;
  EXPECT_EQ(cuda::quantized_pack_kernel(&other, 1), cuda::PackKernel::Staged) << "a BF16 copy";
  other = p.a;
  other.kernel = cuda::PackKernel::Codes;
  EXPECT_EQ(cuda::quantized_pack_kernel(&other, 1), cuda::PackKernel::Codes) << "the code pack chosen";
  EXPECT_THROW(cuda::quantized_pack_kernel(three, 0), Error);
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

// dO's glue (pack_d_o_launch: the code pack's paired launch, and the staged pack's two-tensor one
// when that pack is chosen) against its two packs one call each by the staged pack: dÔ's rows and
// (dO/l)~'s group transpose with the row factor f = 1/l (0 where l is not > 0: 0 or NaN) made on
// the host. The two amaxes, scale_invs, both copies and f itself bitwise; F32 and BF16, both
// layouts, GQA, odd T, head_dim 64 and 128, a misaligned input, NaN and huge values, l below 1
// and rows without keys.
TEST(AttentionGlue, DoGlueEqualsItsTwoPacks) {
  OCTET_REQUIRE_GPU();
  struct Geometry {
    Tensor3 t;
    int64_t B, D;
  };
  for (DType dt : {DType::F32, DType::BF16})
    for (bool tm : {false, true})
      for (Format f : {Format::E5M2, Format::E4M3})
        for (cuda::PackKernel kernel : {cuda::PackKernel::Auto, cuda::PackKernel::Staged}) {
          const Geometry gs[] = {
              {{4, 129, 2, dt, 0}, 2, 64}, {{3, 200, 3, dt, 0}, 1, 128}, {{2, 17, 1, dt, 1}, 1, 64}};
          for (uint32_t seed : {17u, 18u, 19u})  // seed % 5: 2 plain, 3 a huge value, 4 a NaN
            for (const Geometry& g : gs) {
              const std::string what = to_string(dt) + (tm ? " bshd " : " bhsd ") + to_string(f) + " T" +
                                       std::to_string(g.t.T) + " D" + std::to_string(g.D) + " seed " +
                                       std::to_string(seed) + " " + cuda::pack_kernel_name(kernel);
              const size_t rows = size_t(g.B * g.t.heads * g.t.T);
              std::vector<float> l = test::gaussian(rows, seed + 50), rf(rows);
              for (size_t j = 0; j < rows; ++j) {
                const float a = std::fabs(l[j]);
                l[j] = j % 5 == 2 ? 0.0f : j % 11 == 7 ? NAN : j % 3 == 1 ? 0.1f + a : 1.0f + a * 7.0f;
                rf[j] = l[j] > 0.0f ? 1.0f / l[j] : 0.0f;
              }
              Dev<float> l_d(l), rf_host(rf), rf_out(std::vector<float>(rows, -1.0f));
              const Kinds staged_rows{PackKind::Fp8Code, PackKind::None, f};
              const Kinds staged_trans{PackKind::None, PackKind::Fp8Code, f, rf_host.p};
              Packed one_rows, one_trans, rows_p, trans_p;
              make(one_rows, g.t, g.B, g.D, 0, tm, seed, staged_rows);
              make(one_trans, g.t, g.B, g.D, 0, tm, seed, staged_trans);
              make(rows_p, g.t, g.B, g.D, 0, tm, seed,
                   {PackKind::Fp8Code, PackKind::None, f, nullptr, kernel});
              make(trans_p, g.t, g.B, g.D, 0, tm, seed,
                   {PackKind::None, PackKind::Fp8Code, f, rf_out.p, kernel});
              trans_p.a.x = rows_p.a.x;  // one tensor
              Dev<unsigned> amax_one(std::vector<unsigned>(2, 0xDEADBEEFu));
              Dev<unsigned> amax(std::vector<unsigned>(2, 0xDEADBEEFu));
              cuda::pack_quantized_launch(one_rows.a, amax_one.p, nullptr);
              cuda::pack_quantized_launch(one_trans.a, amax_one.p + 1, nullptr);
              cuda::pack_d_o_launch(rows_p.a, trans_p.a, l_d.p, rf_out.p, amax.p, nullptr);
              OCTET_CUDA_CHECK(cudaDeviceSynchronize());
              EXPECT_EQ(amax_one.get(), amax.get()) << what << ": amax bits";
              EXPECT_EQ(bits_of(rf_out.get()), bits_of(rf)) << what << ": row factor bits";
              EXPECT_EQ(bits_of(one_rows.scale_inv.get()), bits_of(rows_p.scale_inv.get()))
                  << what << ": dÔ scale_inv";
              EXPECT_EQ(bits_of(one_trans.scale_inv.get()), bits_of(trans_p.scale_inv.get()))
                  << what << ": (dO/l)~ scale_inv";
              const std::vector<uint8_t> r = rows_p.row.get(), t = trans_p.trans.get();
              EXPECT_TRUE(one_rows.row.get() == r) << what << ": dÔ rows";
              EXPECT_TRUE(one_trans.trans.get() == t) << what << ": (dO/l)~ transpose";
              size_t written = 0;
              for (uint8_t c : r) written += c != 0xA5;
              for (uint8_t c : t) written += c != 0xA5;
              EXPECT_GT(written, r.size()) << what << ": most outputs unwritten";
            }
        }
}

TEST(AttentionGlue, DoGlueRefusesBadArgs) {
  OCTET_REQUIRE_GPU();
  Packed rows_p, trans_p, other;
  Dev<float> l(std::vector<float>(80, 1.0f)), rf(std::vector<float>(80, 0.0f));
  make(rows_p, {2, 40, 1, DType::F32, 0}, 1, 64, 0, false, 3, {PackKind::Fp8Code, PackKind::None});
  make(trans_p, {2, 40, 1, DType::F32, 0}, 1, 64, 0, false, 3, {PackKind::None, PackKind::Fp8Code, {}, rf.p});
  make(other, {2, 40, 1, DType::F32, 0}, 1, 64, 0, false, 3);
  trans_p.a.x = rows_p.a.x;
  Dev<unsigned> amax(2);
  const auto refused = [&](const PackArgs& r, const PackArgs& t, const float* row_sum, float* row_factor,
                           unsigned* bits, const char* why) {
    EXPECT_THROW(cuda::pack_d_o_launch(r, t, row_sum, row_factor, bits, nullptr), Error) << why;
  };
  PackArgs t = trans_p.a;
  t.x = other.a.x;
  refused(rows_p.a, t, l.p, rf.p, amax.p, "another tensor");
  t = trans_p.a;
  t.T = 39;
  refused(rows_p.a, t, l.p, rf.p, amax.p, "another length");
  t = trans_p.a;
  t.row_factor = nullptr;
  refused(rows_p.a, t, l.p, rf.p, amax.p, "trans without the row factor it writes");
  PackArgs r = rows_p.a;
  r.row_factor = rf.p;
  refused(r, trans_p.a, l.p, rf.p, amax.p, "a row factor on dÔ's rows");
  r = rows_p.a;
  r.scale_block = 64;
  refused(r, trans_p.a, l.p, rf.p, amax.p, "per-block scales");
  refused(rows_p.a, trans_p.a, nullptr, rf.p, amax.p, "no row_sum");
  refused(rows_p.a, trans_p.a, l.p, rf.p, nullptr, "no amax");
  PackArgs in_place = trans_p.a;
  in_place.row_factor = l.p;
  refused(rows_p.a, in_place, l.p, l.p, amax.p, "row_factor written over row_sum");
  EXPECT_NO_THROW(cuda::pack_d_o_launch(rows_p.a, trans_p.a, l.p, rf.p, amax.p, nullptr));
  OCTET_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace octet
