// src/train/report_format.h — how the training reports (the trainer's log and run summary, the
// compare tables) carry a diagnostic that may be missing. NaN means "not measured" (layer
// diagnostics off under activation checkpointing; an attention that does not measure the row
// residual, Attention::measures_row_residual): written "n/a", and kept NaN through a max over
// evaluations, runs or seeds, never replaced by 0 or by the other values' max.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace octet::report {

/// v in the printf format f (one double conversion), or "n/a" for NaN.
inline std::string fmt(double v, const char* f) {
  if (std::isnan(v)) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

/// v as %.3e, or "n/a" for NaN.
inline std::string sci(double v) { return fmt(v, "%.3e"); }

/// max(acc, x), NaN if either is NaN (a value not measured anywhere makes the max unknown).
inline double max_or_nan(double acc, double x) {
  return std::isnan(acc) || std::isnan(x) ? NAN : std::max(acc, x);
}

}  // namespace octet::report
