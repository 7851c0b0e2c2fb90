// quantize_tensor_test.cpp — the tensor-scaled cast kernel (src/cuda/quantize/quantize.cu,
// quantize_tensor_kernel: ScaleSource::Pointer and ::TensorAmax with Tensor-layout copies, the
// tensor-current, tensor-delayed and unit recipes) against (1) the general 128x128 tile kernel
// (QuantizeArgs::tile_kernel), byte for byte over the whole padded code buffers, the scale_inv and
// every QuantCounters field, and (2) a host reference of the element rule from octet/fp8.h
// (fp8_encode of x·s, s = scale_from_amax, underflow = a non-zero value coded ±0, saturation =
// fp8_overflows). Shapes: tiny, not multiples of 16 or of the 64x128 tile, vector and element
// loads (cols % 8, a source one element off 16-byte alignment), and one shape of many waves; BF16
// and F32 sources; row-wise only, column-wise only and both; zeros, FP8 subnormals, values that
// saturate, ±inf and NaN (both signs), non-saturating casts and E5M2.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/quantize/quantize.h"
#include "cuda/cuda_test_util.h"
#include "octet/fp8.h"

namespace octet {
namespace {

using test::Dev;

// Everything one quantize_launch writes, read back.
struct Result {
  std::vector<uint8_t> row_codes, col_codes;
  float row_inv = 0.0f, col_inv = 0.0f;
  cuda::QuantCounters counters{};
};

struct Launch {
  cuda::ScaleSource source = cuda::ScaleSource::TensorAmax;
  Format format = Format::E4M3;
  bool saturate = true;
  int margin = 0;
  bool pow2 = false;
  float scale = 0.0f;       // Pointer: s
  bool given_amax = false;  // TensorAmax: the amax given (its host value), no pre-pass
  bool prepass = false;     // Pointer: amax pre-pass ...
  int skip = 0;             // ... skipped on the device if skip > 0
  bool has_row = true, has_col = true;
};

// Output copies filled with a sentinel first: a byte the kernel does not write shows.
Result run(const void* x, bool bf16, int64_t rows, int64_t cols, const Launch& l, bool tile_kernel,
           unsigned amax_bits_host) {
  cuda::DevQTensor row, col;
  row.format = col.format = l.format;
  row.set_shape(rows, cols);
  col.set_shape(cols, rows);
  Dev<uint8_t> rc(std::vector<uint8_t>(size_t(row.code_count()), 0xAB));
  Dev<uint8_t> cc(std::vector<uint8_t>(size_t(col.code_count()), 0xAB));
  Dev<float> rs(std::vector<float>{-7.0f}), cs(std::vector<float>{-7.0f});
  row.codes = rc.ptr(), row.scale_inv = rs.ptr();
  col.codes = cc.ptr(), col.scale_inv = cs.ptr();
  Dev<cuda::QuantCounters> counters(size_t(1));
  Dev<float> scale(std::vector<float>{l.scale});
  Dev<int> skip(std::vector<int>{l.skip});
  Dev<unsigned> given(std::vector<unsigned>{amax_bits_host});
  cuda::QuantizeArgs a;
  a.x = x;
  a.x_bf16 = bf16;
  a.rows = rows;
  a.cols = cols;
  a.source = l.source;
  a.margin = l.margin;
  a.pow2 = l.pow2;
  a.saturate = l.saturate;
  if (l.source == cuda::ScaleSource::Pointer) {
    a.scale_ptr = scale.ptr();
    a.amax_prepass = l.prepass;
    a.skip_prepass_if = l.prepass ? skip.ptr() : nullptr;
  } else if (l.given_amax) {
    a.amax_given = given.ptr();
  }
  a.rowwise = l.has_row ? &row : nullptr;
  a.colwise = l.has_col ? &col : nullptr;
  a.accum.counters = counters.ptr();
  a.tile_kernel = tile_kernel;
  cuda::quantize_launch(a, nullptr);
  OCTET_CUDA_CHECK(cudaDeviceSynchronize());
  Result r;
  if (l.has_row) r.row_codes = rc.get(), r.row_inv = rs.get()[0];
  if (l.has_col) r.col_codes = cc.get(), r.col_inv = cs.get()[0];
  r.counters = counters.get()[0];
  return r;
}

// The values of the awkward generator with specials sprinkled in: ±inf, NaN of both signs (only
// when `specials`), values 1e6 times larger (saturate under a fixed scale) and FP32 values whose
// BF16 rounding matters.
std::vector<float> inputs(int64_t n, uint32_t seed, bool specials) {
  std::vector<float> x = test::awkward_values(size_t(n), seed);
  for (int64_t i = 0; i < n; i += 97) x[size_t(i)] *= 1e6f;
  if (specials && n > 10) {
    x[size_t(n / 3)] = INFINITY;
    x[size_t(n / 2)] = -INFINITY;
    x[size_t(n / 5)] = NAN;
    x[size_t(n - 1)] = -NAN;
  }
  return x;
}

unsigned amax_bits_of(const std::vector<float>& x) {
  unsigned m = 0;
  for (float v : x) m = std::max(m, test::bits(v) & 0x7FFFFFFFu);
  return m;
}

float from_bits(unsigned b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// The host reference of the element rule; NaN codes are compared without their sign (the sign of
// a NaN product is the GPU's business; tile and tensor kernels are compared with it, bitwise).
void expect_host_rule(const Result& r, const std::vector<float>& x, int64_t rows, int64_t cols,
                      const Launch& l, float s, const std::string& what) {
  int64_t under = 0, sat = 0, bad = 0;
  const int64_t ld = (cols + 15) / 16 * 16, ldt = (rows + 15) / 16 * 16;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      const float v = x[size_t(i * cols + j)], y = v * s;
      const uint8_t want = fp8_encode(y, l.format, l.saturate);
      under += v != 0.0f && (want & 0x7F) == 0;
      sat += fp8_overflows(y, l.format);
      const uint8_t mask = y != y ? 0x7F : 0xFF;
      if (l.has_row && (r.row_codes[size_t(i * ld + j)] & mask) != (want & mask)) ++bad;
      if (l.has_col && (r.col_codes[size_t(j * ldt + i)] & mask) != (want & mask)) ++bad;
    }
  EXPECT_EQ(bad, 0) << what << ": codes that differ from fp8_encode(x·s)";
  // Padding (rows/columns up to the multiples of 16) holds code 0, never the sentinel.
  int64_t pad = 0;
  for (int64_t i = 0; i < ldt; ++i)
    for (int64_t j = 0; j < ld; ++j)
      if (i >= rows || j >= cols) {
        if (l.has_row) pad += r.row_codes[size_t(i * ld + j)] != 0;
        if (l.has_col) pad += r.col_codes[size_t(j * ldt + i)] != 0;
      }
  EXPECT_EQ(pad, 0) << what << ": non-zero padding codes";
  EXPECT_EQ(r.counters.counts[0], l.has_row ? uint64_t(under) : 0u) << what;
  EXPECT_EQ(r.counters.counts[1], l.has_row ? uint64_t(sat) : 0u) << what;
  EXPECT_EQ(r.counters.counts[2], l.has_col ? uint64_t(under) : 0u) << what;
  EXPECT_EQ(r.counters.counts[3], l.has_col ? uint64_t(sat) : 0u) << what;
  if (s == s) {
    const float inv = 1.0f / s;
    if (l.has_row) {
      EXPECT_EQ(test::bits(r.row_inv), test::bits(inv)) << what;
    }
    if (l.has_col) {
      EXPECT_EQ(test::bits(r.col_inv), test::bits(inv)) << what;
    }
    EXPECT_EQ(r.counters.scale_max, test::bits(1.0f / inv)) << what;
    EXPECT_EQ(r.counters.scale_min(), test::bits(1.0f / inv)) << what;
  }
}

void expect_same(const Result& a, const Result& b, const std::string& what) {
  EXPECT_EQ(a.row_codes, b.row_codes) << what << ": row-wise codes (padding included)";
  EXPECT_EQ(a.col_codes, b.col_codes) << what << ": column-wise codes (padding included)";
  EXPECT_EQ(test::bits(a.row_inv), test::bits(b.row_inv)) << what;
  EXPECT_EQ(test::bits(a.col_inv), test::bits(b.col_inv)) << what;
  EXPECT_EQ(std::memcmp(&a.counters, &b.counters, sizeof(a.counters)), 0)
      << what << ": counters (counts " << a.counters.counts[0] << "/" << b.counters.counts[0] << " "
      << a.counters.counts[1] << "/" << b.counters.counts[1] << " " << a.counters.counts[2] << "/"
      << b.counters.counts[2] << " " << a.counters.counts[3] << "/" << b.counters.counts[3] << ", amax "
      << a.counters.amax_bits << "/" << b.counters.amax_bits << ", scale range " << a.counters.scale_min_flip
      << "/" << b.counters.scale_min_flip << " " << a.counters.scale_max << "/" << b.counters.scale_max
      << ")";
}

// One case on both kernels and the host rule. offset 1: the source starts one element past a
// 16-byte boundary (element loads).
void check(int64_t rows, int64_t cols, bool bf16, int offset, const Launch& l, bool specials,
           const std::string& name) {
  const std::string what = name + " " + std::to_string(rows) + "x" + std::to_string(cols) +
                           (bf16 ? " bf16" : " f32") + (offset ? " offset" : "") + (l.has_row ? " row" : "") +
                           (l.has_col ? " col" : "");
  std::vector<float> x = inputs(rows * cols + offset, uint32_t(rows * 7 + cols), specials);
  const test::DevSource dev(x, bf16, size_t(offset));
  const void* src = dev.ptr();
  x.erase(x.begin(), x.begin() + offset);
  const unsigned amax = amax_bits_of(x);
  const Result fast = run(src, bf16, rows, cols, l, false, amax);
  const Result tile = run(src, bf16, rows, cols, l, true, amax);
  expect_same(fast, tile, what);
  // TensorAmax: the pre-pass's or the given amax; Pointer: reduced by the cast (and the pre-pass).
  EXPECT_EQ(fast.counters.amax_bits, amax) << what << ": amax";
  const float s =
      l.source == cuda::ScaleSource::Pointer
          ? l.scale
          : scale_from_amax(amax > 0x7F800000u ? NAN : from_bits(amax), l.format, l.margin, l.pow2);
  expect_host_rule(fast, x, rows, cols, l, s, what);
}

const std::vector<std::pair<int64_t, int64_t>> kShapes = {
    {1, 1},    {3, 5},    {17, 33},   {63, 129},   {65, 127},  {64, 128}, {100, 200},
    {37, 264}, {45, 132}, {129, 257}, {257, 1000}, {16, 4096}, {2049, 24}};

TEST(CudaQuantizeTensor, TensorCurrentEqualsTileKernelAndHostRule) {
  OCTET_REQUIRE_GPU();
  for (auto [rows, cols] : kShapes)
    for (const bool bf16 : {true, false})
      for (const int offset : {0, 1})
        for (const int copies : {3, 1, 2}) {
          Launch l;
          l.has_row = copies & 1;
          l.has_col = copies & 2;
          l.given_amax = offset == 1;
          check(rows, cols, bf16, offset, l, false, "tensor-current");
          if (HasFatalFailure() || HasFailure()) return;
        }
}

// Fixed scales (tensor-delayed, unit): values saturate (counted), ±inf saturate, NaN stays NaN;
// the cast reduces the amax itself (NaN wins). Non-saturating casts, E5M2, margins and pow2 scales.
TEST(CudaQuantizeTensor, PointerScaleSpecialsAndCountersEqualTileKernel) {
  OCTET_REQUIRE_GPU();
  int64_t saturated = 0, underflowed = 0;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{129, 257}, {63, 129}, {200, 264}})
    for (const bool bf16 : {true, false})
      for (const Format f : {Format::E4M3, Format::E5M2})
        for (const bool sat : {true, false})
          for (const int pre : {0, 1, 2}) {  // no pre-pass; pre-pass run; pre-pass skipped
            Launch l;
            l.source = cuda::ScaleSource::Pointer;
            l.format = f;
            l.saturate = sat;
            l.scale = f == Format::E4M3 ? 3.0f : 0.37f;
            l.prepass = pre > 0;
            l.skip = pre == 2;
            check(rows, cols, bf16, 0, l, true,
                  std::string("pointer ") + (sat ? "sat " : "nosat ") +
                      (f == Format::E4M3 ? "e4m3" : "e5m2") + " pre " + std::to_string(pre));
            if (HasFailure()) return;
          }
  // Test premise: the inputs do saturate and underflow (checked on one launch).
  {
    const int64_t rows = 129, cols = 257;
    std::vector<float> x = inputs(rows * cols, 5u, true);
    Dev<float> dx(x);
    Launch l;
    l.source = cuda::ScaleSource::Pointer;
    l.scale = 3.0f;
    const Result r = run(dx.ptr(), false, rows, cols, l, false, 0);
    saturated = int64_t(r.counters.counts[1]);
    underflowed = int64_t(r.counters.counts[0]);
    EXPECT_GT(r.counters.amax_bits, 0x7F800000u) << "a NaN makes the reduced amax NaN";
  }
  EXPECT_GT(saturated, 2);
  EXPECT_GT(underflowed, 0);
}

// Tensor-current with margins, pow2 scales, E5M2, a NaN or inf in the tensor (scale NaN: every
// code NaN, scale_inv NaN), a zero tensor (scale 1, codes 0).
TEST(CudaQuantizeTensor, TensorAmaxRulesEqualTileKernel) {
  OCTET_REQUIRE_GPU();
  for (const bool specials : {false, true})
    for (const Format f : {Format::E4M3, Format::E5M2})
      for (const int margin : {0, -2, 3})
        for (const bool pow2 : {false, true}) {
          Launch l;
          l.format = f;
          l.margin = margin;
          l.pow2 = pow2;
          l.saturate = margin >= 0;
          check(131, 250, true, 0, l, specials,
                std::string("tensor-current ") + (specials ? "specials " : "") +
                    (f == Format::E4M3 ? "e4m3" : "e5m2") + " margin " + std::to_string(margin) +
                    (pow2 ? " pow2" : ""));
          if (HasFailure()) return;
        }
  // zero tensor
  const int64_t rows = 70, cols = 130;
  Dev<float> z(std::vector<float>(size_t(rows * cols), 0.0f));
  Launch l;
  const Result fast = run(z.ptr(), false, rows, cols, l, false, 0);
  expect_same(fast, run(z.ptr(), false, rows, cols, l, true, 0), "zero tensor");
  EXPECT_EQ(fast.row_inv, 1.0f);
  for (uint8_t c : fast.row_codes) ASSERT_EQ(c, 0);
  for (uint8_t c : fast.col_codes) ASSERT_EQ(c, 0);
}

// Many waves: [8200, 1544] (129 x 13 tiles of 64x128, several per SM slot), BF16 and F32, both
// copies, against the tile kernel and the host rule.
TEST(CudaQuantizeTensor, ManyWavesEqualTileKernel) {
  OCTET_REQUIRE_GPU();
  for (const bool bf16 : {true, false}) {
    Launch l;
    check(8200, 1544, bf16, 0, l, false, "many waves");
    l.source = cuda::ScaleSource::Pointer;
    l.scale = 2.0f;
    check(8200, 1544, bf16, 0, l, true, "many waves pointer");
  }
}

}  // namespace
}  // namespace octet
