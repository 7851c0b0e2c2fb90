// src/train/compare_stats.cpp — the statistics of `octet compare --seeds N`: each arm's validation
// loss over its seeds (mean ± std) and Welch's t-test of its gap to bf16 (docs/training.md
// §"Several seeds"). Student's t distribution comes from Boost.Math.
#include <boost/math/distributions/students_t.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "octet/error.h"
#include "octet/train.h"
#include "train/report_format.h"

namespace octet {
namespace {

struct Sample {
  double n = 0, mean = 0, var = 0;  // var: sample variance (n − 1)
};

Sample describe(const std::vector<double>& x) {
  Sample s;
  s.n = double(x.size());
  for (double v : x) s.mean += v;
  s.mean /= s.n;
  for (double v : x) s.var += (v - s.mean) * (v - s.mean);
  s.var = s.n > 1 ? s.var / (s.n - 1) : 0.0;
  return s;
}

std::vector<double> finite(const std::vector<double>& x) {
  std::vector<double> out;
  for (double v : x)
    if (std::isfinite(v)) out.push_back(v);
  return out;
}

}  // namespace

WelchTest welch_test(const std::vector<double>& a, const std::vector<double>& b, double alpha) {
  OCTET_CHECK(a.size() >= 2 && b.size() >= 2, "Welch's t-test needs at least 2 values per sample, got " +
                                                  std::to_string(a.size()) + " and " +
                                                  std::to_string(b.size()));
  OCTET_CHECK(alpha > 0 && alpha < 1, "Welch's t-test: alpha must be in (0, 1)");
  OCTET_CHECK(finite(a).size() == a.size() && finite(b).size() == b.size(),
              "Welch's t-test: every value must be finite");
  const Sample sa = describe(a), sb = describe(b);
  const double va = sa.var / sa.n, vb = sb.var / sb.n, se2 = va + vb;
  WelchTest w;
  if (se2 == 0) {  // no spread in either sample: the means differ or they do not
    w.dof = sa.n + sb.n - 2;
    w.t =
        sa.mean == sb.mean ? 0.0 : std::copysign(std::numeric_limits<double>::infinity(), sa.mean - sb.mean);
    w.p = sa.mean == sb.mean ? 1.0 : 0.0;
  } else {
    w.t = (sa.mean - sb.mean) / std::sqrt(se2);
    w.dof = se2 * se2 / (va * va / (sa.n - 1) + vb * vb / (sb.n - 1));
    const boost::math::students_t dist(w.dof);
    w.p = 2.0 * boost::math::cdf(boost::math::complement(dist, std::fabs(w.t)));
  }
  w.outside_noise = w.p < alpha;
  return w;
}

std::vector<CompareArmStats> compare_arm_stats(const std::vector<CompareRow>& runs) {
  std::vector<CompareArmStats> arms;
  for (const CompareRow& r : runs) {
    CompareArmStats* a = nullptr;
    for (CompareArmStats& x : arms)
      if (x.arm == r.arm) a = &x;
    if (!a) {
      arms.push_back(CompareArmStats{});
      a = &arms.back();
      a->arm = r.arm;
      a->matched_delta = r.matched_delta;
    }
    a->seeds.push_back(r.seed);
    a->val_losses.push_back(r.val_loss);
    a->kurtosis_max = std::max(a->kurtosis_max, r.kurtosis_max);
    // NaN (not measured in some run: cuDNN's SDPA, layer diagnostics off) stays NaN, as in compare
    a->row_residual_max = report::max_or_nan(a->row_residual_max, r.row_residual_max);
    a->row_residual_mean = report::max_or_nan(a->row_residual_mean, r.row_residual_mean);
    a->tokens_per_s += r.tokens_per_s;
  }
  const CompareArmStats* bf16 = nullptr;
  for (CompareArmStats& a : arms) {
    a.tokens_per_s /= double(a.seeds.size());
    const Sample s = describe(finite(a.val_losses));
    a.val_mean = s.n > 0 ? s.mean : NAN;
    a.val_std = s.n > 1 ? std::sqrt(s.var) : 0.0;
    if (a.arm == "bf16") bf16 = &a;
  }
  for (CompareArmStats& a : arms) {
    a.gap_pct = bf16 ? 100.0 * (a.val_mean - bf16->val_mean) / bf16->val_mean : NAN;
    const std::vector<double> x = finite(a.val_losses);
    if (!bf16 || &a == bf16 || x.size() < 2 || finite(bf16->val_losses).size() < 2) continue;
    a.tested = true;
    a.vs_bf16 = welch_test(x, finite(bf16->val_losses));
  }
  return arms;
}

std::string format_compare_seeds_table(const std::vector<CompareArmStats>& arms) {
  std::string s =
      "| arm | seeds | val loss (mean ± std) | gap to bf16 | Welch t (dof) | p | vs bf16 at 95% | max "
      "kurtosis "
      "| max attn row residual | mean attn row residual | tokens/s |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n";
  char buf[400];
  bool has_bf16 = false;
  for (const CompareArmStats& b : arms) has_bf16 = has_bf16 || b.arm == "bf16";
  for (const CompareArmStats& a : arms) {
    using report::sci;  // NaN: not measured
    const std::string rmax = a.matched_delta ? sci(a.row_residual_max) : "n/a";
    char test[64] = "—", p[32] = "—";
    const char* verdict = a.arm == "bf16" ? "(baseline)"
                          : !has_bf16     ? "untested (no bf16 arm)"
                                          : "untested (< 2 finished runs)";
    if (a.tested) {
      std::snprintf(test, sizeof test, "%+.2f (%.1f)", a.vs_bf16.t, a.vs_bf16.dof);
      std::snprintf(p, sizeof p, "%.3g", a.vs_bf16.p);
      verdict = a.vs_bf16.outside_noise ? "outside noise" : "inside noise";
    }
    std::snprintf(buf, sizeof buf,
                  "| %s | %zu | %.4f ± %.4f | %+.2f%% | %s | %s | %s | %.2f | %s | %s | %.0f |\n",
                  a.arm.c_str(), a.seeds.size(), a.val_mean, a.val_std, a.gap_pct, test, p, verdict,
                  a.kurtosis_max, rmax.c_str(), sci(a.row_residual_mean).c_str(), a.tokens_per_s);
    s += buf;
  }
  return s;
}

}  // namespace octet
