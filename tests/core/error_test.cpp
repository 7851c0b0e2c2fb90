// tests/core/error_test.cpp — octet::Error keeps the source location beside the message (the CLI
// prints it only with --verbose, docs/cli.md §"Errors"), and io_error names an I/O error's cause.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "octet/error.h"

namespace {

TEST(Error, MessageWithoutLocationLocationApart) {
  try {
    OCTET_CHECK(1 + 1 == 3, "arithmetic is broken");
    FAIL() << "no throw";
  } catch (const octet::Error& e) {
    EXPECT_STREQ(e.what(), "arithmetic is broken");
    const std::string loc = e.location();
    EXPECT_EQ(loc.rfind("error_test.cpp:", 0), 0u) << loc;  // the file name, no directories
    EXPECT_GT(std::stoi(loc.substr(loc.find(':') + 1)), 0);
  }
}

TEST(IoError, NamesTheCauseFromErrno) {
  errno = 0;
  std::FILE* f = std::fopen("/nonexistent-dir-of-octet/x.toml", "w");
  ASSERT_EQ(f, nullptr);
  const int err = errno;
  EXPECT_EQ(octet::io_error("cannot write", "/nonexistent-dir-of-octet/x.toml"),
            "cannot write /nonexistent-dir-of-octet/x.toml: " + std::string(std::strerror(err)));
}

TEST(IoError, AnExplicitCauseWins) {
  errno = EACCES;
  EXPECT_EQ(octet::io_error("cannot rename a.tmp to", "a", "Not a directory"),
            "cannot rename a.tmp to a: Not a directory");
}

}  // namespace
