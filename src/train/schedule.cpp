// src/train/schedule.cpp — the learning-rate schedule (linear warmup, then cosine decay to a floor:
// SGDR's cosine, Loshchilov & Hutter arXiv 1608.03983, without restarts, as GPT-3 and nanoGPT use
// it) and the JSONL metrics log.
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include "octet/error.h"
#include "octet/train.h"

namespace octet {

float learning_rate(const TrainConfig& t, int64_t step) {
  if (step < t.warmup_steps) return t.lr * float(step + 1) / float(t.warmup_steps);
  // The decay runs over steps warmup .. steps-1: its first step has lr, its last one the floor. One
  // decay step is both; it is the last step, so it takes the floor. No decay step: lr stays.
  const int64_t decay_steps = t.steps - t.warmup_steps;
  if (decay_steps <= 0) return t.lr;
  const double floor = double(t.lr) * double(t.min_lr_ratio);
  if (decay_steps == 1) return float(floor);
  const double progress = std::min(1.0, double(step - t.warmup_steps) / double(decay_steps - 1));
  return float(floor + 0.5 * (double(t.lr) - floor) * (1.0 + std::cos(M_PI * progress)));
}

MetricsLog::MetricsLog(const std::string& path, bool append) : path_(path) {
  std::ofstream out(path, append ? std::ios::app : std::ios::trunc);
  OCTET_CHECK(out.good(), "cannot write " + path + ": " + std::strerror(errno));
}

void MetricsLog::write(const std::string& json_line) {
  std::ofstream out(path_, std::ios::app);
  out << json_line << '\n';
  out.flush();
  OCTET_CHECK(out.good(), "cannot append to " + path_);
}

}  // namespace octet
