// The BPE tokenizer's piece names typed as text (train.h Tokenizer): "<nl>", "<unk>", a byte
// piece's name "<0x0A>" and the like in the user's text are text — encoded into ordinary pieces,
// never into the newline piece or <unk>, and decoded back as typed — whether or not the training
// corpus held them.
#include <gtest/gtest.h>

#include <algorithm>

#include "octet/train.h"
#include "train/train_test_util.h"

namespace octet {
namespace {

const std::vector<std::string>& literal_texts() {
  static const std::vector<std::string> t = {
      "<nl>",      "<unk>",        "a<nl>b",       "the <nl> kernel <unk> page", "<nl>\n<nl>",
      "\n<unk>\n", "<0x0A><0x41>", "<s></s><pad>", "  <nl>  indented",           "<nl",
      "nl>",       "<<nl>>"};
  return t;
}

void expect_literals_round_trip(const Tokenizer& tok) {
  const std::vector<int32_t> newline = tok.encode("\n");
  ASSERT_EQ(newline.size(), 1u);
  for (const std::string& s : literal_texts()) {
    SCOPED_TRACE("'" + s + "'");
    const std::vector<int32_t> ids = tok.encode(s);
    EXPECT_EQ(tok.decode(ids), s);
    const auto newlines = std::count(ids.begin(), ids.end(), newline[0]);
    EXPECT_EQ(newlines, std::count(s.begin(), s.end(), '\n')) << "the newline piece stands for newlines only";
    EXPECT_EQ(std::count(ids.begin(), ids.end(), 0), 0) << "id 0 is <unk>: never produced";
  }
}

TEST(TokenizerLiterals, PieceNamesInTheTextAreText) {
  test::TempDir dir("tok-literals");
  expect_literals_round_trip(*make_bpe_tokenizer(test::synthetic_text(600), 320, dir / "cache"));
}

TEST(TokenizerLiterals, PieceNamesInTheTrainingCorpusToo) {
  test::TempDir dir("tok-literals-corpus");
  std::string corpus = test::synthetic_text(600);
  for (int i = 0; i < 50; ++i)
    corpus += "a literal <nl> and <unk> in the corpus, line " + std::to_string(i) + "\n";
  expect_literals_round_trip(*make_bpe_tokenizer(corpus, 320, dir / "cache"));
}

}  // namespace
}  // namespace octet
