// tests/train/train_test_util.h — temporary directories, a synthetic corpus and a tiny run config
// for the trainer tests.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>

#include "octet/error.h"
#include "octet/train.h"

namespace octet::test {

/// A fresh directory under the system temp dir, removed at scope exit.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("octet-train-test-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

/// The bytes of a file ("" if it cannot be read).
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

inline void write_file(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

/// Deterministic English-like text with repeated structure (learnable), `lines` lines.
inline std::string synthetic_text(int lines) {
  const char* subjects[] = {"the kernel", "a driver", "the scheduler", "this module", "the user"};
  const char* verbs[] = {"reads", "writes", "maps", "frees", "locks"};
  const char* objects[] = {"the page", "a buffer", "the device", "its queue", "the inode"};
  std::string s;
  uint32_t x = 12345;
  for (int i = 0; i < lines; ++i) {
    x = x * 1664525u + 1013904223u;
    s += subjects[(x >> 10) % 5];
    s += ' ';
    s += verbs[(x >> 14) % 5];
    s += ' ';
    s += objects[(x >> 18) % 5];
    s += " when line " + std::to_string(i % 97) + " ends.\n";
  }
  return s;
}

/// A tiny byte-level run on `corpus`: 1 layer, d=16, seq 16, batch 2, 6 steps.
inline RunConfig tiny_run(const std::string& corpus, const std::string& cache) {
  RunConfig c;
  c.model.n_layer = 1;
  c.model.d_model = 16;
  c.model.n_head = 2;
  c.model.n_kv_head = 2;
  c.model.d_ff = 32;
  c.model.vocab_size = 256;
  c.model.seq_len = 16;
  c.train.steps = 6;
  c.train.batch_size = 2;
  c.train.grad_accum = 2;
  c.train.warmup_steps = 2;
  c.train.eval_every = 3;
  c.train.eval_batches = 2;
  c.train.checkpoint_every = 3;
  c.data.path = corpus;
  c.data.tokenizer = "byte";
  c.data.cache_dir = cache;
  return c;
}

/// The message of the octet::Error that f throws ("" if it throws none).
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

/// The files of a run directory, by name, with their bytes ("<dir>" for a folder): equal before
/// and after a refused command means nothing was written.
inline std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> m;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    m[e.path().filename().string()] = e.is_regular_file() ? read_file(e.path().string()) : "<dir>";
  return m;
}

}  // namespace octet::test
