// tests/dist/dist_run.h — the training runs of the data-parallel tests: a tiny run's config
// (train_test_util.h tiny_run) over a synthetic corpus that rank 0 writes into a directory every
// rank of the job names alike (job.h SharedDir).
#pragma once

#include "job.h"
#include "octet/train.h"
#include "train/train_test_util.h"

namespace octet::test {

/// The config every rank uses (a resume compares it with the run's config.toml, data.path
/// included), with the given arm; the corpus and the tokenizer cache live in `shared`.
inline RunConfig shared_tiny_run(const SharedDir& shared, Arm arm) {
  if (comm().rank() == 0) write_file(shared / "corpus.txt", synthetic_text(400));
  comm().barrier();
  RunConfig cfg = tiny_run(shared / "corpus.txt", shared / "cache");
  cfg.precision.arm = arm;
  return cfg;
}

}  // namespace octet::test
