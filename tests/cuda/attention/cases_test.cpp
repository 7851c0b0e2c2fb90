// cases_test.cpp — every octet attention row of `octet bench attention` (bench.h
// attention_bench_impls) on every case of the check set (octet/attention_cases.h), through the
// benchmark's own correctness path (bench.h check_attention_case): O and dQ of sampled rows against
// the FP64 oracle within FlashAttention-3's rule, 2 × the CPU twin's error in the same precision on
// the same rows + 1e-3 (src/bench/cuda/attention_rows_check.h). The benchmark prints the same
// numbers for its bench set, so a kernel change is checked here on the shapes it is timed on.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "cuda/cuda_test_util.h"
#include "octet/attention_cases.h"
#include "octet/bench.h"

namespace octet {
namespace {

class AttentionCases : public ::testing::TestWithParam<std::string> {};

TEST_P(AttentionCases, WithinTheFp64OracleRule) {
  OCTET_REQUIRE_GPU();
  for (const AttentionCase& c : attention_cases(AttentionCaseSet::Check)) {
    const bool flash_fp8 = GetParam().rfind("octet-fp8-flash", 0) == 0;
    if (flash_fp8 && !flash_attention_size_supported(c.shape.head_dim)) continue;
    const cuda::AttnBenchRow r = cuda::check_attention_case(c, GetParam());
    std::printf("[cases] %-27s %-26s err O %.2e (bound %.2e) dQ %.2e (bound %.2e)\n", GetParam().c_str(),
                c.name.c_str(), r.err_o, r.err_bound_o, r.err_dq, r.err_bound_dq);
    ASSERT_TRUE(std::isfinite(r.err_o) && std::isfinite(r.err_dq)) << c.name;
    EXPECT_LE(r.err_o, r.err_bound_o) << c.name << ": O";
    EXPECT_LE(r.err_dq, r.err_bound_dq) << c.name << ": dQ";
  }
}

INSTANTIATE_TEST_SUITE_P(Rows, AttentionCases, ::testing::ValuesIn(cuda::attention_bench_impls()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace octet
