// Names of recipes and formats round-trip, and unknown names raise one clear error.
#include <gtest/gtest.h>

#include "octet/error.h"
#include "octet/quant.h"

using namespace octet;

TEST(Names, RecipesRoundTrip) {
  for (auto r : {Recipe::TensorDelayed, Recipe::TensorCurrent, Recipe::Row, Recipe::Block,
                 Recipe::MX, Recipe::Unit})
    EXPECT_EQ(parse_recipe(to_string(r)), r);
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
