// `octet bench attention --rows` (octet/bench.h): the row names and the filter over them, on the
// host. An empty list means every row; a list keeps its order and wants exactly its names; an empty
// item, a name given twice or an unknown name is one octet::Error that names it (and, unknown, lists
// the known names).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "octet/bench.h"
#include "octet/error.h"

using namespace octet;

namespace {

std::string error_of(const std::string& csv) {
  try {
    (void)parse_attention_bench_rows(csv);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(AttentionBenchRows, EmptyMeansEveryRow) {
  const std::vector<std::string> rows = parse_attention_bench_rows("");
  EXPECT_TRUE(rows.empty());
  for (const std::string& name : attention_bench_row_names())
    EXPECT_TRUE(attention_bench_row_wanted(rows, name));
}

TEST(AttentionBenchRows, AListWantsExactlyItsNames) {
  const std::vector<std::string> rows = parse_attention_bench_rows("octet-fp8-flash-kernels,cudnn-fp8-stale");
  ASSERT_EQ(rows, (std::vector<std::string>{"octet-fp8-flash-kernels", "cudnn-fp8-stale"}));
  int wanted = 0;
  for (const std::string& name : attention_bench_row_names())
    wanted += attention_bench_row_wanted(rows, name);
  EXPECT_EQ(wanted, 2);
  EXPECT_FALSE(attention_bench_row_wanted(rows, "octet-fp8-flash-stale-kernels"));  // a prefix is not a match
  EXPECT_FALSE(attention_bench_row_wanted(rows, "cudnn-bf16"));
}

TEST(AttentionBenchRows, EveryKnownNameParsesAloneAndNamesAreDistinct) {
  const std::vector<std::string>& names = attention_bench_row_names();
  EXPECT_GE(names.size(), 11u);
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(parse_attention_bench_rows(names[i]), std::vector<std::string>{names[i]});
    for (size_t j = i + 1; j < names.size(); ++j) EXPECT_NE(names[i], names[j]);
  }
}

TEST(AttentionBenchRows, BadListsAreOneErrorNamingTheProblem) {
  const std::string unknown = error_of("octet-fp8-flash,octet-fp8-flsh");
  EXPECT_NE(unknown.find("unknown row 'octet-fp8-flsh'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("known: cudnn-bf16, "), std::string::npos) << unknown;
  for (const char* csv : {",cudnn-bf16", "cudnn-bf16,", "cudnn-bf16,,cudnn-fp8-stale", ","}) {
    const std::string e = error_of(csv);
    EXPECT_NE(e.find("empty item"), std::string::npos) << csv << ": " << e;
  }
  const std::string peer = error_of("cudnn-bf16,torch-sdpa-cudnn-bf16");  // the peer script's rows
  EXPECT_NE(peer.find("--peer"), std::string::npos) << peer;
  const std::string twice = error_of("cudnn-bf16,octet-fp8-flash,cudnn-bf16");
  EXPECT_NE(twice.find("'cudnn-bf16' twice"), std::string::npos) << twice;
}

}  // namespace
