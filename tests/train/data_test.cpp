// Corpus reading (file, directory, glob; missing/empty inputs; invalid UTF-8), tokenizers (bytes;
// SentencePiece BPE trained once and cached) and the dataset split and order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "octet/error.h"
#include "octet/train.h"
#include "train_test_util.h"

using namespace octet;

namespace {

TEST(Corpus, FileDirectoryAndGlobInSortedOrder) {
  test::TempDir dir("corpus");
  test::write_file(dir / "d/b.txt", "bbb");
  test::write_file(dir / "d/a.txt", "aaa");
  test::write_file(dir / "d/sub/c.rst", "ccc");
  EXPECT_EQ(read_corpus(dir / "d/a.txt").text, "aaa");
  const Corpus all = read_corpus(dir / "d");
  EXPECT_EQ(all.text, "aaa\nbbb\nccc");
  EXPECT_EQ(all.files.size(), 3u);
  EXPECT_EQ(read_corpus(dir / "d/*.txt").text, "aaa\nbbb");
  EXPECT_EQ(read_corpus(dir / "d", 5).text, "aaa\nb");
}

TEST(Corpus, BadInputsAreErrors) {
  test::TempDir dir("corpus-bad");
  EXPECT_THROW(read_corpus(dir / "missing.txt"), Error);
  EXPECT_THROW(read_corpus(dir / "*.nothing"), Error);
  EXPECT_THROW(read_corpus(""), Error);
  test::write_file(dir / "empty.txt", "");
  EXPECT_THROW(read_corpus(dir / "empty.txt"), Error);
  std::filesystem::create_directories(dir / "emptydir");
  EXPECT_THROW(read_corpus(dir / "emptydir"), Error);
  if (::geteuid() != 0) {  // root reads anything
    test::write_file(dir / "secret.txt", "x");
    std::filesystem::permissions(dir / "secret.txt", std::filesystem::perms::none);
    EXPECT_THROW(read_corpus(dir / "secret.txt"), Error);
  }
}

TEST(Corpus, InvalidUtf8IsCountedNotFatal) {
  EXPECT_EQ(count_invalid_utf8("plain ascii"), 0);
  EXPECT_EQ(count_invalid_utf8("caf\xC3\xA9"), 0);       // é
  EXPECT_EQ(count_invalid_utf8("\xF0\x9F\x98\x80"), 0);  // U+1F600
  EXPECT_EQ(count_invalid_utf8("a\xFF"
                               "b"),
            1);                                      // never valid
  EXPECT_EQ(count_invalid_utf8("\xC0\xAF"), 2);      // overlong '/'
  EXPECT_EQ(count_invalid_utf8("\xED\xA0\x80"), 3);  // surrogate U+D800
  EXPECT_EQ(count_invalid_utf8("\xE2\x82"), 2);      // truncated sequence
  test::TempDir dir("utf8");
  test::write_file(dir / "bad.txt", "ok \xFF\xFE text");
  const Corpus c = read_corpus(dir / "bad.txt");
  EXPECT_EQ(c.invalid_utf8, 2);
  const auto ids = make_byte_tokenizer()->encode(c.text);
  ASSERT_EQ(ids.size(), c.text.size());
  EXPECT_EQ(ids[3], 0xFF);
}

TEST(Tokenizer, BpeTrainsOnceCachesAndEncodesAnything) {
  test::TempDir dir("bpe");
  const std::string text = test::synthetic_text(600);
  auto tok = make_bpe_tokenizer(text, 320, dir / "cache");
  EXPECT_EQ(tok->vocab_size(), 320);
  size_t models = 0;
  for (auto& e : std::filesystem::directory_iterator(dir / "cache"))
    models += e.path().extension() == ".model";
  EXPECT_EQ(models, 1u);
  const auto ids = tok->encode("the kernel reads the page\nthe user");
  EXPECT_LT(ids.size(), 30u) << "BPE must merge frequent words";
  for (int32_t id : ids) EXPECT_TRUE(id >= 0 && id < 320);
  const auto bad = tok->encode("bytes \xFF\xFE and \xE2\x82");  // invalid UTF-8: no crash
  EXPECT_FALSE(bad.empty());
  auto again = make_bpe_tokenizer(text, 320, dir / "cache");  // loads the cached model
  EXPECT_EQ(again->encode("the kernel reads the page\nthe user"), ids);
}

TEST(Tokenizer, BpeTrainingAgainOnTheSameTextGivesTheSameModel) {
  // What a run without its own tokenizer.model relies on (docs/use.md). Twice the lines of
  // SentencePiece's input_sentence_size (400000), so that it samples them, from a seeded generator.
  auto word = [](int n) {  // letters (SentencePiece splits digits): 26³ words
    return std::string{char('a' + n % 26), char('a' + n / 26 % 26), char('a' + n / 676 % 26)};
  };
  std::string text;
  for (int i = 0; i < 800000; ++i) text += "the " + word(i % 991) + " of " + word((i * 31) % 983) + "\n";
  test::TempDir dir("bpe-again");
  const auto a = make_bpe_tokenizer(text, 1200, dir / "a");
  const auto b = make_bpe_tokenizer(text, 1200, dir / "b");
  ASSERT_NE(a->sentencepiece_model(), b->sentencepiece_model());
  EXPECT_EQ(read_file_bytes(a->sentencepiece_model(), "model"),
            read_file_bytes(b->sentencepiece_model(), "model"));
}

TEST(Dataset, SplitIsDisjointDeterministicAndCovering) {
  std::vector<int32_t> tokens(16 * 200 + 1);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(i % 7);
  Dataset a(tokens, 7, 16, 0.1, 42), b(tokens, 7, 16, 0.1, 42);
  EXPECT_EQ(a.n_train_windows() + a.n_val_windows(), 200);
  EXPECT_NEAR(double(a.n_val_windows()) / 200.0, 0.1, 0.03);
  std::vector<int32_t> ids, tg, ids2, tg2;
  // One epoch visits every training window exactly once; same seed ⇒ same order.
  std::set<int32_t> firsts;
  for (int64_t i = 0; i < a.n_train_windows(); ++i) {
    a.next_train_batch(1, ids, tg);
    b.next_train_batch(1, ids2, tg2);
    EXPECT_EQ(ids, ids2);
    for (size_t t = 0; t + 1 < ids.size(); ++t) EXPECT_EQ(tg[t], ids[t + 1]);  // shifted targets
  }
  EXPECT_EQ(a.position(), a.n_train_windows());
  Dataset c(tokens, 7, 16, 0.1, 43);
  std::vector<int32_t> first_a, first_c;
  Dataset a2(tokens, 7, 16, 0.1, 42);
  a2.next_train_batch(8, first_a, tg);
  c.next_train_batch(8, first_c, tg);
  EXPECT_NE(first_a, first_c) << "another seed gives another order";
  // Validation batches are fixed.
  a.val_batch(0, 4, ids, tg);
  b.val_batch(0, 4, ids2, tg2);
  EXPECT_EQ(ids, ids2);
  EXPECT_THROW(Dataset(std::vector<int32_t>(10, 1), 7, 16, 0.1, 1), Error);   // too small
  EXPECT_THROW(Dataset(std::vector<int32_t>(100, 9), 7, 16, 0.1, 1), Error);  // id >= vocab
}

TEST(Dataset, UnigramEntropyOfKnownStreams) {
  std::vector<int32_t> two(4001);
  for (size_t i = 0; i < two.size(); ++i) two[i] = int32_t(i % 2);
  // 2001 zeros and 2000 ones: entropy within 1e-6 of ln 2.
  EXPECT_NEAR(Dataset(two, 2, 16, 0.1, 1).unigram_entropy(), std::log(2.0), 1e-6);
  std::vector<int32_t> four(4000);
  for (size_t i = 0; i < four.size(); ++i) four[i] = int32_t(i % 4);
  EXPECT_NEAR(Dataset(four, 4, 16, 0.1, 1).unigram_entropy(), std::log(4.0), 1e-12);
}

}  // namespace
