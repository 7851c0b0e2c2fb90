// glue_test.cpp — the attention's operand glue (src/cuda/attention/glue/glue.cu) against a host
// reference built from octet/fp8.h (scale_from_amax, fp8_encode with saturation, fp8_decode,
// bf16_round, bf16_from_float): the tensor amax (with and without dV's row factor), the packed row
// copies and group transposes of every PackKind, scale_inv, and the un-padding scaled copy into F32
// and BF16 — bitwise, for F32 and BF16 inputs, odd T (T_p padding), GQA rep > 1, D not a multiple
// of the 64-wide tile, aligned (vector) and misaligned (scalar) sources, and NaN / inf / all-zero
// tensors. Output buffers start as a sentinel, so an element the kernels do not write fails too.
// Then the stale delta pre-pass reading BF16 O / dO equals it reading their F32 widening, and the
// whole CUDA attention (unfused and fused, stale and matched) with BF16 activations equals the
// one with F32 activations holding the same values, its gradients rounded once to BF16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cuda/attention/attention_gpu_run.h"
#include "cuda/attention/glue/glue.h"
#include "cuda/attention/flash/flash.h"
#include "cuda/cuda_test_util.h"
#include "octet/attention.h"
#include "octet/backend.h"
#include "octet/fp8.h"

namespace octet {
namespace {

using cuda::PackKind;
using test::Dev;
using test::same_float;

constexpr uint8_t kSentinel = 0xA5;

// A host tensor as the device sees it: F32 values, or BF16 bits whose widening is `val`.
struct Input {
  std::vector<float> val;     // the values the kernels read (BF16: widened exactly)
  std::vector<uint16_t> b16;  // BF16 bits (BF16 inputs only)
  DType dtype;
};

Input make_input(std::vector<float> v, DType dt) {
  Input in{std::move(v), {}, dt};
  if (dt == DType::BF16) {
    in.b16.resize(in.val.size());
    for (size_t i = 0; i < in.val.size(); ++i) {
      in.b16[i] = bf16_from_float(in.val[i]);
      in.val[i] = bf16_to_float(in.b16[i]);
    }
  }
  return in;
}

// Device bytes of an input at an element offset `off` (off 1: not 16-byte aligned: scalar path).
struct DevInput {
  Dev<uint8_t> buf;
  const void* ptr;
  DevInput(const Input& in, int off) {
    const size_t eb = in.dtype == DType::BF16 ? 2 : 4;
    std::vector<uint8_t> bytes((in.val.size() + size_t(off)) * eb, 0);
    std::memcpy(bytes.data() + size_t(off) * eb,
                in.dtype == DType::BF16 ? static_cast<const void*>(in.b16.data())
                                        : static_cast<const void*>(in.val.data()),
                in.val.size() * eb);
    buf.set(bytes);
    ptr = buf.p + size_t(off) * eb;
  }
};

unsigned abs_bits(float v) { return test::bits(v) & 0x7FFFFFFFu; }
float from_amax_bits(unsigned b) {
  float f;
  std::memcpy(&f, &b, 4);
  return b > 0x7F800000u ? NAN : f;
}

// Host amax bits of x_i (· rf[i / D]).
unsigned ref_amax(const std::vector<float>& x, const std::vector<float>* rf, int64_t D) {
  unsigned m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, abs_bits(rf ? x[i] * (*rf)[i / size_t(D)] : x[i]));
  return m;
}

struct Geo {
  int64_t B, heads, T, D, rep;
  int64_t T_p() const { return (T + 15) / 16 * 16; }
  int64_t n() const { return B * heads * T * D; }
  std::string name() const {
    return "B" + std::to_string(B) + "h" + std::to_string(heads) + "T" + std::to_string(T) + "D" +
           std::to_string(D) + "rep" + std::to_string(rep);
  }
};

// The element (1 or 2 bytes, as uint16) a PackKind holds for value v at scale s; pads are 0.
uint16_t ref_elem(float v, bool valid, PackKind k, float s, Format f) {
  if (!valid) return 0;
  switch (k) {
    case PackKind::Fp8Code:
      return fp8_encode(v * s, f, true);
    case PackKind::Bf16OfCode: {
      const float d = fp8_decode(fp8_encode(v * s, f, true), f);
      return uint16_t(test::bits(bf16_round(d)) >> 16);
    }
    default:
      return uint16_t(test::bits(bf16_round(v)) >> 16);
  }
}

int kind_bytes(PackKind k) { return k == PackKind::Fp8Code ? 1 : 2; }

// Reads element i of a packed buffer (1 or 2 bytes per element).
uint16_t elem_at(const std::vector<uint8_t>& buf, int64_t i, int bytes) {
  if (bytes == 1) return buf[size_t(i)];
  return uint16_t(buf[size_t(2 * i)] | (buf[size_t(2 * i + 1)] << 8));
}

struct PackCase {
  Geo g;
  DType dt;
  PackKind row_kind, trans_kind;
  bool fp8;
  Format format;
  bool row_factor;
  int offset;         // input element offset (1: misaligned, the scalar path)
  int64_t block = 0;  // PackArgs::scale_block: 0 per tensor, else per (b, head, block of tokens)
};

// Runs amax + pack on the device and checks amax bits, scale_inv, both copies against the host.
void check_pack(const PackCase& c, const std::vector<float>& values, const std::string& what) {
  const Geo& g = c.g;
  const Input in = make_input(values, c.dt);
  const DevInput x(in, c.offset);
  std::vector<float> rf;
  if (c.row_factor) {
    rf = test::gaussian(size_t(g.B * g.heads * g.T), 99);
    for (size_t i = 0; i < rf.size(); ++i)
      rf[i] = i % 7 == 3 ? 0.0f : 1.0f / (1.0f + std::fabs(rf[i]) * 30.0f);
  }
  Dev<float> rf_d(rf.empty() ? std::vector<float>{0.0f} : rf);
  // One amax and scale per tensor, or per (b, head, token block) (written in full: sentinels).
  const int64_t nb = c.block ? (g.T + c.block - 1) / c.block : 1;
  const size_t nscales = size_t(c.block ? g.B * g.heads * nb : 1);
  Dev<unsigned> amax(std::vector<unsigned>(nscales, 0xDEADBEEFu));
  Dev<float> scale_inv(std::vector<float>(nscales, -1.0f));
  const int64_t nrow = g.B * g.heads * g.T_p() * g.D;
  const int rb = c.row_kind == PackKind::None ? 1 : kind_bytes(c.row_kind);
  const int tb = c.trans_kind == PackKind::None ? 1 : kind_bytes(c.trans_kind);
  Dev<uint8_t> row(std::vector<uint8_t>(size_t(nrow * rb), kSentinel));
  Dev<uint8_t> trans(std::vector<uint8_t>(size_t(nrow * tb), kSentinel));

  cuda::PackArgs a;
  a.x = x.ptr;
  a.x_dtype = c.dt;
  a.row_factor = c.row_factor ? rf_d.p : nullptr;
  a.B = g.B, a.heads = g.heads, a.T = g.T, a.T_p = g.T_p(), a.D = g.D, a.rep = g.rep;
  a.format = c.format;
  a.fp8 = c.fp8;
  a.scale_block = c.block;
  a.amax_bits = amax.p;
  a.scale_inv = scale_inv.p;
  a.row_kind = c.row_kind, a.row = row.p;
  a.trans_kind = c.trans_kind, a.trans = trans.p;
  if (c.fp8 && c.block)
    cuda::pack_block_amax_launch(x.ptr, c.dt, g.B * g.heads, g.T, g.D, c.block, amax.p, nullptr);
  else if (c.fp8)
    cuda::pack_amax_launch(x.ptr, c.dt, g.n(), amax.p, nullptr, a.row_factor, g.D);
  cuda::pack_launch(a, nullptr);
  OCTET_CUDA_CHECK(cudaDeviceSynchronize());

  // Host reference: the scale of every tensor or block.
  std::vector<float> scales(nscales, 1.0f);
  for (size_t k = 0; k < nscales && c.fp8; ++k) {
    unsigned am;
    if (c.block) {  // block k: head k / nb, tokens (k % nb)·block ..
      const int64_t t0 = int64_t(k) % nb * c.block, t1 = std::min(g.T, t0 + c.block);
      const auto first = in.val.begin() + (int64_t(k) / nb * g.T + t0) * g.D;
      am = ref_amax(std::vector<float>(first, first + (t1 - t0) * g.D), nullptr, g.D);
    } else {
      am = ref_amax(in.val, c.row_factor ? &rf : nullptr, g.D);
    }
    ASSERT_EQ(amax.get()[k], am) << what << ": amax bits of scale " << k;
    scales[k] = scale_from_amax(from_amax_bits(am), c.format);
    ASSERT_TRUE(same_float(scale_inv.get()[k], 1.0f / scales[k]))
        << what << ": scale_inv " << k << " " << scale_inv.get()[k];
  }
  const std::vector<uint8_t> hr = row.get(), ht = trans.get();
  const int64_t T_p = g.T_p(), G = g.heads / g.rep, width = g.rep * T_p;
  int64_t bad_row = 0, bad_trans = 0, nonzero = 0;
  std::string first;
  for (int64_t b = 0; b < g.B; ++b)
    for (int64_t h = 0; h < g.heads; ++h)
      for (int64_t t = 0; t < T_p; ++t)
        for (int64_t d = 0; d < g.D; ++d) {
          const int64_t bh = b * g.heads + h;
          const bool valid = t < g.T;
          const float s = scales[size_t(c.block ? bh * nb + t / c.block : 0)];
          float v = valid ? in.val[size_t((bh * g.T + t) * g.D + d)] : 0.0f;
          if (valid && c.row_factor) v *= rf[size_t(bh * g.T + t)];
          if (c.row_kind != PackKind::None) {
            const uint16_t want = ref_elem(v, valid, c.row_kind, s, c.format);
            const uint16_t got = elem_at(hr, (bh * T_p + t) * g.D + d, rb);
            nonzero += got != 0;
            if (got != want && bad_row++ == 0)
              first = "row (b" + std::to_string(b) + " h" + std::to_string(h) + " t" + std::to_string(t) +
                      " d" + std::to_string(d) + ") got " + std::to_string(got) + " want " +
                      std::to_string(want);
          }
          if (c.trans_kind != PackKind::None) {
            const uint16_t want = ref_elem(v, valid, c.trans_kind, s, c.format);
            const int64_t at = ((b * G + h / g.rep) * g.D + d) * width + (h % g.rep) * T_p + t;
            const uint16_t got = elem_at(ht, at, tb);
            nonzero += got != 0;
            if (got != want && bad_trans++ == 0)
              first = "trans (b" + std::to_string(b) + " h" + std::to_string(h) + " t" + std::to_string(t) +
                      " d" + std::to_string(d) + ") got " + std::to_string(got) + " want " +
                      std::to_string(want);
          }
        }
  EXPECT_EQ(bad_row, 0) << what << ": " << first;
  EXPECT_EQ(bad_trans, 0) << what << ": " << first;
  EXPECT_GT(nonzero, 0) << what << ": all outputs zero (vacuous)";
}

const Geo kGeos[] = {{2, 4, 17, 64, 2},  {1, 3, 129, 128, 3}, {1, 2, 1, 16, 1},
                     {2, 2, 100, 80, 1}, {1, 8, 33, 64, 8},   {1, 2, 64, 48, 2}};

TEST(AttentionGlue, PackMatchesHostEveryKindDtypeAndShape) {
  OCTET_REQUIRE_GPU();
  struct Kinds {
    PackKind row, trans;
    bool fp8;
    Format f;
    bool rf;
    const char* name;
  };
  const Kinds kinds[] = {
      {PackKind::Fp8Code, PackKind::Fp8Code, true, Format::E4M3, false, "fused Q/K (codes, codes)"},
      {PackKind::Fp8Code, PackKind::Bf16OfCode, true, Format::E4M3, false, "unfused Q/K"},
      {PackKind::Fp8Code, PackKind::None, true, Format::E5M2, false, "dO rows E5M2"},
      {PackKind::None, PackKind::Fp8Code, true, Format::E5M2, true, "(dO/l)~ E5M2"},
      {PackKind::None, PackKind::Fp8Code, true, Format::E4M3, true, "(dO/l)~ E4M3"},
      {PackKind::Bf16OfValue, PackKind::Bf16OfValue, false, Format::E4M3, false, "bf16 attention"},
      {PackKind::Bf16OfValue, PackKind::Bf16OfValue, false, Format::E4M3, true, "bf16 (dO/l)"}};
  for (const Geo& g : kGeos)
    for (DType dt : {DType::F32, DType::BF16})
      for (const Kinds& k : kinds)
        for (int off : {0, 1}) {
          if (off == 1 && g.T != 17 && g.T != 100) continue;  // the scalar path on two shapes
          const PackCase c{g, dt, k.row, k.trans, k.fp8, k.f, k.rf, off};
          check_pack(c, test::awkward_values(size_t(g.n()), uint32_t(g.T * 31 + g.D)),
                     g.name() + " " + to_string(dt) + " " + k.name + (off ? " misaligned" : ""));
        }
}

// QkvScaling::HeadBlock's packing: one scale per (b, head, 128-token block), blocks of very
// different magnitudes (× 2^-12 .. 2^6), partial last blocks, T_p pads, GQA group transposes.
TEST(AttentionGlue, PackPerBlockScalesMatchHost) {
  OCTET_REQUIRE_GPU();
  const Geo geos[] = {{1, 2, 1, 64, 1}, {2, 3, 129, 128, 3}, {1, 4, 300, 64, 2}, {1, 2, 256, 48, 1}};
  for (const Geo& g : geos)
    for (DType dt : {DType::F32, DType::BF16})
      for (int off : {0, 1}) {
        std::vector<float> v = test::gaussian(size_t(g.n()), uint32_t(g.T + 5));
        for (size_t i = 0; i < v.size(); ++i)  // block k of each head: × 2^(6 − 6·(k % 4))
          v[i] = std::ldexp(v[i], 6 - 6 * int(int64_t(i) / g.D % g.T / kQkvScaleBlock % 4));
        const PackCase c{g,     dt,  PackKind::Fp8Code, PackKind::Fp8Code, true, Format::E4M3,
                         false, off, kQkvScaleBlock};
        check_pack(c, v, g.name() + " " + to_string(dt) + " per block" + (off ? " misaligned" : ""));
      }
}

// Degenerate tensors, one rule each (fp8.h scale_from_amax): all zero -> s = 1, codes 0; a NaN or
// an inf -> amax NaN / inf -> s NaN -> every valid code NaN, pads still 0; a huge value saturates.
TEST(AttentionGlue, PackDegenerateTensors) {
  OCTET_REQUIRE_GPU();
  const Geo g{1, 4, 19, 64, 2};
  const size_t n = size_t(g.n());
  std::vector<std::pair<std::string, std::vector<float>>> inputs;
  inputs.push_back({"zeros", std::vector<float>(n, 0.0f)});
  auto with = [&](float x, const char* name) {
    std::vector<float> v = test::gaussian(n, 5);
    v[n / 3] = x;
    inputs.push_back({name, v});
  };
  with(NAN, "nan");
  with(INFINITY, "+inf");
  with(-INFINITY, "-inf");
  with(3e38f, "huge");  // a finite amax: the others become FP8 subnormals or zero
  for (const auto& [name, v] : inputs)
    for (DType dt : {DType::F32, DType::BF16})
      for (Format f : {Format::E4M3, Format::E5M2}) {
        PackCase c{g, dt, PackKind::Fp8Code, PackKind::Fp8Code, true, f, false, 0};
        if (name == "zeros") {  // every code 0: check_pack's non-vacuity test does not apply
          const Input in = make_input(v, dt);
          const DevInput x(in, 0);
          Dev<unsigned> amax(1);
          Dev<float> si(1);
          Dev<uint8_t> row(std::vector<uint8_t>(size_t(g.B * g.heads * g.T_p() * g.D), kSentinel));
          Dev<uint8_t> tr(std::vector<uint8_t>(row.n, kSentinel));
          cuda::PackArgs a;
          a.x = x.ptr, a.x_dtype = dt, a.B = g.B, a.heads = g.heads, a.T = g.T, a.T_p = g.T_p();
          a.D = g.D, a.rep = g.rep, a.format = f, a.amax_bits = amax.p, a.scale_inv = si.p;
          a.row_kind = a.trans_kind = PackKind::Fp8Code, a.row = row.p, a.trans = tr.p;
          cuda::pack_amax_launch(x.ptr, dt, g.n(), amax.p, nullptr);
          cuda::pack_launch(a, nullptr);
          EXPECT_EQ(amax.get()[0], 0u);
          EXPECT_EQ(si.get()[0], 1.0f);
          for (uint8_t b : row.get()) ASSERT_EQ(b, 0) << "zeros: row";
          for (uint8_t b : tr.get()) ASSERT_EQ(b, 0) << "zeros: trans";
          continue;
        }
        check_pack(c, v, name + " " + to_string(dt) + " " + to_string(f));
      }
}

TEST(AttentionGlue, AmaxMatchesHost) {
  OCTET_REQUIRE_GPU();
  for (int64_t n : {int64_t(16), int64_t(64 * 37), int64_t(1) << 20})
    for (DType dt : {DType::F32, DType::BF16})
      for (int off : {0, 1})
        for (bool use_rf : {false, true}) {
          const int64_t D = 16;
          std::vector<float> v = test::awkward_values(size_t(n), uint32_t(n + off));
          if (n > 64) v[size_t(n / 2)] = -300.0f;  // a negative largest magnitude
          const Input in = make_input(v, dt);
          const DevInput x(in, off);
          std::vector<float> rf(size_t(n / D));
          for (size_t i = 0; i < rf.size(); ++i) rf[i] = 0.25f + float(i % 5) * 0.5f;
          Dev<float> rf_d(rf);
          Dev<unsigned> amax(std::vector<unsigned>{0xFFFFFFFFu});
          cuda::pack_amax_launch(x.ptr, dt, n, amax.p, nullptr, use_rf ? rf_d.p : nullptr, D);
          const std::string what = "n " + std::to_string(n) + " " + to_string(dt) +
                                   (off ? " misaligned" : "") + (use_rf ? " row factor" : "");
          EXPECT_EQ(amax.get()[0], ref_amax(in.val, use_rf ? &rf : nullptr, D)) << what;
        }
  // NaN is the largest (a NaN anywhere makes the amax NaN).
  std::vector<float> v(4096, 1.0f);
  v[4000] = NAN;
  const Input in = make_input(v, DType::F32);
  const DevInput x(in, 0);
  Dev<float> rf(std::vector<float>(4096 / 64, 2.0f));
  Dev<unsigned> amax(1);
  cuda::pack_amax_launch(x.ptr, DType::F32, 4096, amax.p, nullptr, rf.p, 64);
  EXPECT_GT(amax.get()[0], 0x7F800000u);
  EXPECT_THROW(cuda::pack_amax_launch(x.ptr, DType::E4M3, 4096, amax.p, nullptr), Error);
  EXPECT_THROW(cuda::pack_amax_launch(x.ptr, DType::F32, 4096, amax.p, nullptr, rf.p, 12), Error);
}

TEST(AttentionGlue, PackRejectsBadArguments) {
  OCTET_REQUIRE_GPU();
  Dev<float> x(std::vector<float>(64 * 64, 1.0f));
  Dev<unsigned> amax(1);
  Dev<float> si(1);
  Dev<uint8_t> out(64 * 64 + 16);
  cuda::PackArgs a;
  a.x = x.p, a.B = 1, a.heads = 1, a.T = 64, a.T_p = 64, a.D = 64, a.amax_bits = amax.p;
  a.scale_inv = si.p, a.row_kind = PackKind::Fp8Code, a.row = out.p;
  EXPECT_NO_THROW(cuda::pack_launch(a, nullptr));
  cuda::PackArgs b = a;
  b.D = 24;  // not a multiple of 16
  EXPECT_THROW(cuda::pack_launch(b, nullptr), Error);
  b = a, b.T_p = 80;
  EXPECT_THROW(cuda::pack_launch(b, nullptr), Error);
  b = a, b.row = out.p + 1;  // misaligned output
  EXPECT_THROW(cuda::pack_launch(b, nullptr), Error);
  b = a, b.heads = 3, b.rep = 2;
  EXPECT_THROW(cuda::pack_launch(b, nullptr), Error);
  b = a, b.scale_block = 100;  // not a multiple of the 64-token pack tile
  EXPECT_THROW(cuda::pack_launch(b, nullptr), Error);
  b = a, b.scale_block = 128, b.row_factor = x.p;  // block amaxes are of the unscaled values
  EXPECT_THROW(cuda::pack_launch(b, nullptr), Error);
  EXPECT_THROW(cuda::pack_block_amax_launch(x.p, DType::F32, 1, 64, 12, 128, amax.p, nullptr), Error);
  EXPECT_THROW(cuda::pack_block_amax_launch(x.p, DType::E4M3, 1, 64, 64, 128, amax.p, nullptr), Error);
  // A sequence beyond the grid's 65535 tiles of 64 tokens: refused before any launch, naming the
  // limit (the buffers are too small for it, so a launch would fault).
  b = a, b.T = b.T_p = int64_t(65536) * 64;
  try {
    cuda::pack_launch(b, nullptr);
    ADD_FAILURE() << "a 4,194,304-token pack was not refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("4194240 tokens"), std::string::npos) << e.what();
  }
  OCTET_CUDA_CHECK(cudaDeviceSynchronize());
}

// dst = src (padded rows dropped) · alpha · sa · sb, F32 or BF16 (bf16_from_float of the FP32
// product), vector and scalar paths; every dst element written (sentinel).
TEST(AttentionGlue, UnpadScaleMatchesHost) {
  OCTET_REQUIRE_GPU();
  struct U {
    int64_t bh, T, D;
  };
  for (const U u : {U{3, 17, 64}, U{2, 1, 16}, U{4, 129, 128}, U{1, 64, 8}})
    for (DType dt : {DType::F32, DType::BF16})
      for (int off : {0, 1})
        for (int scales = 0; scales < 3; ++scales) {
          const int64_t T_p = (u.T + 15) / 16 * 16;
          std::vector<float> src = test::awkward_values(size_t(u.bh * T_p * u.D), uint32_t(u.T));
          src[3] = NAN;
          src[7] = -INFINITY;
          Dev<float> src_d(src);
          Dev<float> sc(std::vector<float>{0.375f, 3.0f});
          const int64_t n = u.bh * u.T * u.D, eb = dt == DType::BF16 ? 2 : 4;
          Dev<uint8_t> dst(std::vector<uint8_t>(size_t((n + 1) * eb), kSentinel));
          const float alpha = 1.5f;
          const float* sa = scales >= 1 ? sc.p : nullptr;
          const float* sb = scales >= 2 ? sc.p + 1 : nullptr;
          cuda::unpad_scale_launch(src_d.p, dst.p + off * eb, dt, u.bh, u.T, T_p, u.D, alpha, sa, sb,
                                   nullptr);
          const std::vector<uint8_t> h = dst.get();
          const float f = alpha * (sa ? 0.375f : 1.0f) * (sb ? 3.0f : 1.0f);
          int64_t bad = 0;
          for (int64_t r = 0; r < u.bh * u.T; ++r)
            for (int64_t d = 0; d < u.D; ++d) {
              const float want = src[size_t(((r / u.T) * T_p + r % u.T) * u.D + d)] * f;
              const size_t at = size_t((off + r * u.D + d) * eb);
              if (dt == DType::BF16) {
                const uint16_t got = uint16_t(h[at] | (h[at + 1] << 8));
                const uint16_t w = bf16_from_float(want);  // NaN: any NaN (payloads differ)
                bad += want != want ? (got & 0x7FFFu) <= 0x7F80u : got != w;
              } else {
                float got;
                std::memcpy(&got, &h[at], 4);
                bad += !same_float(got, want);
              }
            }
          EXPECT_EQ(bad, 0) << "bh " << u.bh << " T " << u.T << " D " << u.D << " " << to_string(dt)
                            << (off ? " misaligned" : "") << " scales " << scales;
        }
}

// The fused backward's stale pre-pass: D_i = dO_i·O_i read from BF16 tensors equals it read from
// their exact FP32 widening (every combination), and the FP64 dot to FP32 rounding of a D-term sum.
TEST(AttentionGlue, StaleDeltaReadsBf16AsItsWidening) {
  OCTET_REQUIRE_GPU();
  const int64_t B = 2, H = 3, Tq = 37, D = 64, rows = B * H * Tq;
  const Input o = make_input(test::gaussian(size_t(rows * D), 1), DType::BF16);
  const Input dO = make_input(test::gaussian(size_t(rows * D), 2, 1e-3f), DType::BF16);
  Dev<float> o32(o.val), do32(dO.val);
  Dev<uint16_t> o16(o.b16), do16(dO.b16);
  std::vector<float> l(size_t(rows), 2.5f);
  l[5] = 0.0f;  // a row without keys
  Dev<float> row_sum(l);
  std::vector<std::vector<float>> deltas;
  for (int combo = 0; combo < 4; ++combo) {
    Dev<float> delta{size_t(rows)}, rf{size_t(rows)};
    cuda::flash::BackwardParams p;
    p.B = B, p.H = H, p.G = H, p.Tq = Tq, p.Tk = Tq, p.Tq_p = 48, p.Tk_p = 48, p.D = D;
    p.matched = false;
    p.row_sum = row_sum.p, p.delta = delta.p, p.row_factor = rf.p;
    if (combo & 1)
      p.o_bf16 = o16.p;
    else
      p.o = o32.p;
    if (combo & 2)
      p.d_o_bf16 = do16.p;
    else
      p.d_o_f32 = do32.p;
    cuda::flash::run_delta(p, nullptr);
    deltas.push_back(delta.get());
    const std::vector<float> hrf = rf.get();
    EXPECT_EQ(hrf[5], 0.0f);
    EXPECT_EQ(hrf[0], 1.0f / 2.5f);
  }
  for (int combo = 1; combo < 4; ++combo)
    for (int64_t r = 0; r < rows; ++r)
      ASSERT_TRUE(same_float(deltas[size_t(combo)][size_t(r)], deltas[0][size_t(r)]))
          << "combo " << combo << " row " << r;
  for (int64_t r = 0; r < rows; ++r) {
    double dot = 0.0, mag = 0.0;
    for (int64_t c = 0; c < D; ++c) {
      dot += double(dO.val[size_t(r * D + c)]) * double(o.val[size_t(r * D + c)]);
      mag += std::fabs(double(dO.val[size_t(r * D + c)]) * double(o.val[size_t(r * D + c)]));
    }
    ASSERT_NEAR(deltas[0][size_t(r)], dot, 2e-6 * mag + 1e-30) << "row " << r;
  }
  cuda::flash::BackwardParams bad;
  bad.B = B, bad.H = H, bad.G = H, bad.Tq = Tq, bad.Tk = Tq, bad.D = D, bad.matched = false;
  Dev<float> scratch{size_t(rows)};
  bad.row_sum = row_sum.p, bad.delta = scratch.p, bad.row_factor = scratch.p;
  bad.o = o32.p, bad.o_bf16 = o16.p, bad.d_o_f32 = do32.p;  // two forms of O: refused
  EXPECT_THROW(cuda::flash::run_delta(bad, nullptr), Error);
}

// The whole CUDA attention with BF16 activations equals it with F32 activations that hold the same
// (BF16-representable) values: O bitwise, dQ/dK/dV = bf16_from_float of the F32 run's — the glue
// reads BF16 directly and rounds the gradients once, as the FP32-widening path did.
TEST(AttentionGlue, Bf16ActivationsEqualTheirF32Widening) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  AttentionShape s;
  s.batch = 2, s.n_heads = 4, s.n_kv_heads = 2, s.seq_q = s.seq_k = 77, s.head_dim = 64;
  s.causal = true;
  AttentionInputs in = make_attention_inputs(s, AttnInputDist::Normal, 21);
  for (auto* v : {&in.q, &in.k, &in.v, &in.d_o})
    for (float& x : *v) x = bf16_round(x);
  for (AttnForm form : {AttnForm::Whole, AttnForm::Flash})
    for (DeltaMode delta : {DeltaMode::Stale, DeltaMode::Matched}) {
      AttentionConfig cfg;
      cfg.precision = AttnPrecision::FP8;
      cfg.delta = delta;
      cfg.form = form;
      auto attn = gpu->make_attention(s, cfg);
      AttnIo f(*gpu, s, DType::F32), b(*gpu, s, DType::BF16);
      f.set(*gpu, in), b.set(*gpu, in);
      for (AttnIo* io : {&f, &b}) {
        const SavedAttention saved = attn->forward(io->q, io->k, io->v, io->o, io->lse);
        attn->backward(saved, io->d_o, io->dq, io->dk, io->dv, Tensor());
      }
      const std::string what = std::string(form == AttnForm::Flash ? "flash " : "whole ") +
                               (delta == DeltaMode::Stale ? "stale" : "matched");
      for (auto [x, y] :
           {std::pair{&f.o, &b.o}, {&f.lse, &b.lse}, {&f.dq, &b.dq}, {&f.dk, &b.dk}, {&f.dv, &b.dv}}) {
        const auto vf = gpu->download_f32(*x), vb = gpu->download_f32(*y);
        bool nonzero = false;
        for (size_t i = 0; i < vf.size(); ++i) {
          nonzero |= vf[i] != 0.0f;
          const float want = x == &f.lse ? vf[i] : bf16_to_float(bf16_from_float(vf[i]));
          ASSERT_TRUE(same_float(vb[i], want)) << what << " at " << i << ": " << vb[i] << " vs " << want;
        }
        EXPECT_TRUE(nonzero) << what << ": an output is all zero (vacuous)";
      }
    }
}

}  // namespace
}  // namespace octet
