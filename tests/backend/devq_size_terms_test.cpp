// The CUDA FP8 operand's buffers as saved-size terms (src/cuda/quantize/qtensor.h
// size_terms_by_cols, what the CUDA linear's saved_size_terms are made of): for every scale layout,
// row count and column count n, the codes term is code_count() bytes and the scales term
// scale_count() floats, each rounded up as SavedPlacement rounds them. Host arithmetic only: runs
// without a GPU.
#include <gtest/gtest.h>

#include <cstdint>

#include "cuda/quantize/qtensor.h"

namespace octet::cuda {
namespace {

TEST(DevQSizeTerms, EqualTheOperandsCountsAtEveryColumnCount) {
  constexpr int64_t kAlign = 256;
  auto rounded = [&](int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; };
  for (ScaleLayout layout : {ScaleLayout::Tensor, ScaleLayout::RowVector, ScaleLayout::Vec128,
                             ScaleLayout::Blk128, ScaleLayout::Vec32})
    for (int64_t rows : {1, 16, 17, 100, 128, 129, 300, 2048}) {
      const auto terms = size_terms_by_cols(rows, layout, kAlign);
      ASSERT_EQ(terms.size(), 2u);
      for (int64_t n = 1; n <= 1100; ++n) {
        DevQTensor q;
        q.layout = layout;
        q.set_shape(rows, n);
        ASSERT_EQ(terms[0].bytes(n), rounded(q.code_count()))
            << "layout " << int(layout) << " rows " << rows << " n " << n;
        ASSERT_EQ(terms[1].bytes(n), rounded(q.scale_count() * int64_t(sizeof(float))))
            << "layout " << int(layout) << " rows " << rows << " n " << n;
      }
    }
}

}  // namespace
}  // namespace octet::cuda
