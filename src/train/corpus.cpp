// src/train/corpus.cpp — reads a text corpus from a file, a directory (recursively) or a glob, in a
// deterministic (sorted) order. Bytes are taken as they are: invalid UTF-8 is counted (RFC 3629
// decides what is valid), never a crash; the byte tokenizer trains on it unchanged and the BPE
// tokenizer replaces it by U+FFFD.
#include <glob.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "octet/error.h"
#include "octet/train.h"
#include "train/utf8.h"

namespace octet {

namespace fs = std::filesystem;

namespace {
std::vector<std::string> expand(const std::string& path, bool is_default) {
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (auto it = fs::recursive_directory_iterator(path, fs::directory_options::skip_permission_denied, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_regular_file(ec)) files.push_back(it->path().string());
    }
    OCTET_CHECK(!ec, io_error("cannot list corpus directory", path, ec.message()));
  } else if (fs::exists(path, ec)) {
    files.push_back(path);
  } else if (path.find_first_of("*?[") != std::string::npos) {
    glob_t g{};
    const int rc = glob(path.c_str(), 0, nullptr, &g);
    if (rc == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i)
        if (fs::is_regular_file(g.gl_pathv[i], ec)) files.push_back(g.gl_pathv[i]);
    globfree(&g);
    OCTET_CHECK(!files.empty(), "corpus glob matches no file: " + path);
  } else if (is_default) {
    OCTET_FAIL("default corpus not found: " + path +
               " (run ./dev demo once to fetch it, set OCTET_HOME "
               "to the directory that holds data/linux-docs, or set data.path; docs/cli.md)");
  } else {
    OCTET_FAIL("corpus not found: " + path);
  }
  std::sort(files.begin(), files.end());
  return files;
}
}  // namespace

int64_t count_invalid_utf8(const std::string& s) {
  int64_t bad = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const int len = train_detail::utf8_seq_len(p, i, s.size());
    bad += len == 0;
    i += len == 0 ? 1 : size_t(len);
  }
  return bad;
}

Corpus read_corpus(const std::string& path, int64_t max_bytes, bool is_default) {
  OCTET_CHECK(!path.empty(), "no corpus given (set data.path to a text file, directory or glob)");
  Corpus c;
  c.files = expand(path, is_default);
  OCTET_CHECK(!c.files.empty(), "corpus directory holds no file: " + path);
  for (const std::string& f : c.files) {
    if (!c.text.empty()) {
      c.separators.push_back(int64_t(c.text.size()));
      c.text += '\n';
    }
    c.text += read_file_bytes(f, "corpus file");
    if (max_bytes > 0 && int64_t(c.text.size()) >= max_bytes) {
      c.text.resize(size_t(max_bytes));
      if (!c.separators.empty() && c.separators.back() >= max_bytes) c.separators.pop_back();
      break;
    }
  }
  OCTET_CHECK(!c.text.empty(), "corpus is empty: " + path);
  c.invalid_utf8 = count_invalid_utf8(c.text);
  return c;
}

}  // namespace octet
