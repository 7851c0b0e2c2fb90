// The one vocabulary (octet/names.h, src/core/names.cpp): every name of every table round-trips,
// names are unique per table, unknown names raise one error that names the bad value and lists
// every valid one, and the named parse_* / to_string functions agree with the tables.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "octet/attention.h"
#include "octet/error.h"
#include "octet/model.h"
#include "octet/names.h"
#include "octet/quant.h"

using namespace octet;

namespace {

template <class E>
void expect_table_consistent(const std::string& what) {
  const std::vector<std::string> names = enum_names<E>();
  ASSERT_FALSE(names.empty()) << what;
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size()) << what;
  std::string choices;
  for (const std::string& n : names) {
    EXPECT_EQ(enum_name(parse_enum<E>(n)), n) << what;
    choices += (choices.empty() ? "" : " | ") + n;
  }
  EXPECT_EQ(enum_choices<E>(), choices);
  try {
    parse_enum<E>("no-such-name");
    ADD_FAILURE() << what << ": no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("unknown " + what + " 'no-such-name'"), std::string::npos) << msg;
    for (const std::string& n : names) EXPECT_NE(msg.find(n), std::string::npos) << msg;
  }
}

TEST(Names, EveryTableRoundTripsAndListsItsNamesOnError) {
  expect_table_consistent<Recipe>("recipe");
  expect_table_consistent<FormatPolicy>("format policy");
  expect_table_consistent<Format>("format");
  expect_table_consistent<Role>("role");
  expect_table_consistent<AmaxAlgo>("amax algo");
  expect_table_consistent<AttnPrecision>("attention precision");
  expect_table_consistent<DeltaMode>("delta mode");
  expect_table_consistent<AttnForm>("attention form");
  expect_table_consistent<QkvScaling>("qkv scaling");
  expect_table_consistent<AttnInputDist>("input distribution");
  expect_table_consistent<NormKind>("norm");
  expect_table_consistent<NormPlacement>("norm placement");
  expect_table_consistent<PositionKind>("position encoding");
  expect_table_consistent<MlpKind>("mlp");
  expect_table_consistent<Arm>("arm");
}

TEST(Names, EveryEnumValueHasAName) {
  for (auto r :
       {Recipe::TensorDelayed, Recipe::TensorCurrent, Recipe::Row, Recipe::Block, Recipe::MX, Recipe::Unit})
    EXPECT_EQ(parse_recipe(to_string(r)), r);
  for (auto a : {Arm::BF16, Arm::FP8Linear, Arm::FP8Stale, Arm::FP8Matched, Arm::FP32})
    EXPECT_EQ(parse_arm(to_string(a)), a);
  EXPECT_EQ(enum_names<Recipe>().size(), 6u);
  EXPECT_EQ(enum_names<Arm>().size(), 5u);
  EXPECT_EQ(enum_names<Role>().size(), 3u);
  EXPECT_EQ(to_string(DeltaMode::Matched), "matched");
  EXPECT_EQ(to_string(Format::E5M2), "e5m2");
  EXPECT_EQ(enum_name(QkvScaling::HeadBlock), "head-block");
  EXPECT_EQ(enum_name(AmaxAlgo::MostRecent), "most_recent");
}

TEST(Names, UnknownRecipeNamesTheValue) {
  try {
    parse_recipe("blockwise");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown recipe 'blockwise'"), std::string::npos);
  }
}

TEST(Names, HybridGivesE5M2GradientsOnly) {
  EXPECT_EQ(format_for(FormatPolicy::Hybrid, Role::Gradient), Format::E5M2);
  EXPECT_EQ(format_for(FormatPolicy::Hybrid, Role::Activation), Format::E4M3);
  EXPECT_EQ(format_for(FormatPolicy::E4M3, Role::Gradient), Format::E4M3);
}

// The recipe rules shared by the CPU and CUDA quantizers and the config.
TEST(Names, QuantConfigRulesNameTheField) {
  QuantConfig c;
  EXPECT_NO_THROW(c.validate());
  c.margin = -2;  // negative margins saturate on purpose (overflow tests)
  EXPECT_NO_THROW(c.validate());
  c.margin = 33;
  EXPECT_THROW(c.validate(), Error);
  c = {};
  c.amax_history_len = 0;
  try {
    c.validate("precision.");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("precision.amax_history_len must be in [1, 1048576]"),
              std::string::npos);
  }
}

}  // namespace
