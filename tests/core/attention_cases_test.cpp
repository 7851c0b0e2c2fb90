// attention_cases_test.cpp — the shared attention case lists (octet/attention_cases.h): the bench
// set holds the shapes the speed targets name, names are unique and readable, selection by name
// works and an unknown name is one error that lists the known ones.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "octet/attention_cases.h"
#include "octet/error.h"

namespace octet {
namespace {

TEST(AttentionCases, BenchSetHoldsTheTargetShapes) {
  std::set<std::string> names;
  for (const AttentionCase& c : attention_cases(AttentionCaseSet::Bench)) {
    EXPECT_NO_THROW(c.shape.validate()) << c.name;
    EXPECT_EQ(c.name, attention_case_name(c.shape));
    names.insert(c.name);
  }
  for (const char* want : {"b4-h16-d128-s1024", "b4-h16-d128-s4096-causal", "b4-h16-d128-s16384",
                           "b8-h12-d64-s1024-causal", "b1-h32g8-d128-s8192-causal"})
    EXPECT_TRUE(names.count(want)) << want;
  EXPECT_EQ(names.size(), attention_cases(AttentionCaseSet::Bench).size()) << "names must be unique";
}

TEST(AttentionCases, CheckSetCoversTheAwkwardShapes) {
  bool gqa = false, tq_lt_tk = false, tq_gt_tk = false, one_query = false, d64 = false, d128 = false;
  std::set<std::string> names;
  for (const AttentionCase& c : attention_cases(AttentionCaseSet::Check)) {
    const AttentionShape& s = c.shape;
    names.insert(c.name);
    gqa |= s.n_kv_heads != s.n_heads;
    tq_lt_tk |= s.seq_q < s.seq_k;
    tq_gt_tk |= s.seq_q > s.seq_k && s.causal;
    one_query |= s.seq_q == 1;
    d64 |= s.head_dim == 64;
    d128 |= s.head_dim == 128;
  }
  EXPECT_TRUE(gqa && tq_lt_tk && tq_gt_tk && one_query && d64 && d128);
  EXPECT_EQ(names.size(), attention_cases(AttentionCaseSet::Check).size());
}

TEST(AttentionCases, NamesSpellTheShape) {
  AttentionShape s;
  s.batch = 2, s.n_heads = 8, s.n_kv_heads = 2, s.head_dim = 64, s.seq_q = 17, s.seq_k = 300;
  s.causal = true;
  EXPECT_EQ(attention_case_name(s), "b2-h8g2-d64-s17x300-causal");
  s.n_kv_heads = 8, s.seq_k = 17, s.causal = false;
  EXPECT_EQ(attention_case_name(s), "b2-h8-d64-s17");
}

TEST(AttentionCases, SelectByNameAndRefuseUnknown) {
  const auto two = select_attention_cases(" b8-h12-d64-s1024-causal, b1-h2g1-d128-s1x129,");
  ASSERT_EQ(two.size(), 2u);  // spaces trimmed, the empty name after the last comma ignored
  EXPECT_EQ(two[0].shape.head_dim, 64);
  EXPECT_EQ(two[1].shape.seq_k, 129);  // a name of the check set
  EXPECT_EQ(select_attention_cases("check").size(), attention_cases(AttentionCaseSet::Check).size());
  EXPECT_EQ(select_attention_cases("bench").size(), attention_cases(AttentionCaseSet::Bench).size());
  try {
    select_attention_cases("b4-h16-d128-s999");
    FAIL() << "an unknown case must throw";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("unknown attention case 'b4-h16-d128-s999'"), std::string::npos) << m;
    EXPECT_NE(m.find("b4-h16-d128-s4096-causal"), std::string::npos) << m;  // the bench set
    EXPECT_NE(m.find("b2-h4g2-d64-s17-causal"), std::string::npos) << m;    // and the check set
  }
  EXPECT_THROW(select_attention_cases(" , "), Error);
  const auto mixed = select_attention_cases("check, b4-h16-d128-s1024");  // a set and a name
  EXPECT_EQ(mixed.size(), attention_cases(AttentionCaseSet::Check).size() + 1);
  EXPECT_EQ(mixed.back().name, "b4-h16-d128-s1024");
}

}  // namespace
}  // namespace octet
