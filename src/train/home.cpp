// src/train/home.cpp — octet's home: the one directory where the default corpus and the tokenizer
// cache live, so that `octet train` finds them from whatever directory it is run (docs/cli.md
// §"Where octet keeps data"). The home is, first match wins:
//   1. $OCTET_HOME;
//   2. the source repository the running binary was built in (build/octet, build/<preset>/octet):
//      the nearest ancestor of the executable's directory that holds configs/demo.toml;
//   3. $XDG_DATA_HOME/octet, or ~/.local/share/octet.
// Inside it: data/linux-docs (the default corpus, which ./dev demo extracts) and .cache/octet
// (SentencePiece models and token streams) — the layout of the repository itself.
#include <cstdlib>
#include <filesystem>
#include <string>

#include "octet/error.h"
#include "octet/train.h"

namespace octet {

namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// The repository holding the running executable, or empty (not built in a checkout, or moved).
std::string repository_of_executable() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  fs::path dir = exe.parent_path();
  for (int up = 0; up < 4 && !dir.empty(); ++up, dir = dir.parent_path()) {
    if (fs::is_regular_file(dir / "configs" / "demo.toml", ec)) return dir.string();
    if (dir == dir.root_path()) break;
  }
  return {};
}

}  // namespace

std::string octet_home() {
  if (const std::string h = env("OCTET_HOME"); !h.empty()) return h;
  if (const std::string repo = repository_of_executable(); !repo.empty()) return repo;
  if (const std::string xdg = env("XDG_DATA_HOME"); !xdg.empty()) return (fs::path(xdg) / "octet").string();
  const std::string home = env("HOME");
  OCTET_CHECK(!home.empty(),
              "cannot find octet's home: neither OCTET_HOME nor HOME is set "
              "(set OCTET_HOME to the directory holding data/ and .cache/octet)");
  return (fs::path(home) / ".local" / "share" / "octet").string();
}

std::string default_corpus_path() { return (fs::path(octet_home()) / "data" / "linux-docs").string(); }

std::string default_cache_dir() { return (fs::path(octet_home()) / ".cache" / "octet").string(); }

std::string resolve_corpus_path(const std::string& configured) {
  return configured.empty() ? default_corpus_path() : configured;
}

std::string resolve_cache_dir(const std::string& configured) {
  return configured.empty() ? default_cache_dir() : configured;
}

}  // namespace octet
