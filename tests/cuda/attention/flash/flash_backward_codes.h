// flash_backward_codes.h — random FP8 operand codes (scales 1) in the layouts the flash attention
// backward reads (src/cuda/attention/flash/flash.h BackwardParams: rows, per-head transposes, group
// transposes), a flash forward over them for (m, l), and the BackwardParams naming every buffer:
// the setup of the tests that call the kernels directly (flash_backward_test.cpp,
// flash_backward_sm90_test.cpp), and their two small helpers (rel_l2, fused_config).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "cuda/attention/flash/flash.h"
#include "cuda/cuda_test_util.h"
#include "octet/attention.h"
#include "octet/fp8.h"

namespace octet::test {

/// ‖x − ref‖₂ / ‖ref‖₂ in FP64 (‖x − ref‖₂ when ref is 0).
inline double rel_l2(const std::vector<float>& x, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = double(x[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

/// Gradient tolerance (relative L2) of the flash backward against the CPU flash twin, by flavor.
/// mma.sync: 1e-2 (flash_backward_test.cpp's reasoning: FP32 summation order flips a dŜ or P̃ code
/// only where a value sits on a rounding boundary). wgmma: 3e-2 — its S, dP and products are summed
/// on the FP8 wgmma accumulator (13-14 bits, truncating; DeepSeek-V3 §3.3.2), which moves S and dP by
/// ~1e-4..1e-3 relative and so flips codes near boundaries far more often than FP32 rounding (each
/// flip moves one term by up to 1/4 of itself in E5M2); measured on an H200: 1.4e-2 at
/// 127x127 causal with the FP64-oracle error equal to the twin's (1.05e-1 both). The FA3 rule against
/// the FP64 oracle stays the accuracy check for both flavors; dV (no delta, no dS) keeps 1e-2.
/// Since the wgmma forward computes S on the FP8 accumulator too (its m and l, which the backward's
/// P reads, move by ~2e-3), measured 3.5e-2 at D128: kGradTolTwinWgmma = 5e-2.
inline constexpr double kGradTolTwin = 1e-2, kGradTolTwinWgmma = 5e-2;

/// The dQ/dK tolerance for the flavor select_backward_kernel picks for head_dim D and tiles
/// (bq x bk) under the current OCTET_FLASH_BACKWARD and default.
inline double grad_tol_vs_twin(int64_t D, int64_t bq, int64_t bk) {
  cuda::flash::BackwardParams p;
  p.D = D, p.block_q = bq, p.block_k = bk, p.Tq = p.Tk = 1000;
  return cuda::flash::select_backward_kernel(p) == cuda::flash::BackwardKernel::Wgmma ? kGradTolTwinWgmma
                                                                                      : kGradTolTwin;
}

/// O against the twin: 1e-3 after the mma.sync forward (FP32 orders only), 1e-2 after the wgmma
/// forward (S and each tile's P̃V̂ on the FP8 accumulator: P̃ codes flip where S moved; measured on
/// an H200 up to 5.4e-3, flash_forward_test.cpp).
inline double o_tol_vs_twin(cuda::flash::ForwardKernel forward = cuda::flash::ForwardKernel::Auto) {
  return cuda::flash::select_forward_kernel(forward) == cuda::flash::ForwardKernel::Wgmma ? 1e-2 : 1e-3;
}

/// dQ, dK of the mma.sync backward against the twin: kGradTolTwin, or kGradTolTwinWgmma after the
/// wgmma forward (its m and l move the backward's P; measured 1.8e-2).
inline double mma_sync_grad_tol_vs_twin(
    cuda::flash::ForwardKernel forward = cuda::flash::ForwardKernel::Auto) {
  return cuda::flash::select_forward_kernel(forward) == cuda::flash::ForwardKernel::Wgmma ? kGradTolTwinWgmma
                                                                                          : kGradTolTwin;
}

/// dV against the twin: 1e-2 (no delta, no dS in it: only P̃ code flips), 2e-2 after the wgmma
/// forward, whose S on the FP8 accumulator moves m and l — and with them the backward's P and the
/// (dO/l)~ codes — by ~2e-3 relative (measured on an H200: up to 1.25e-2).
inline double dv_tol_vs_twin(cuda::flash::ForwardKernel forward = cuda::flash::ForwardKernel::Auto) {
  return cuda::flash::select_forward_kernel(forward) == cuda::flash::ForwardKernel::Wgmma ? 2e-2 : 1e-2;
}

/// Whether the stale delta of this backward reads an O summed on the FP8 wgmma accumulator: the
/// forward select_forward_kernel(`forward`) picks is the wgmma one (its P̃V̂ moves O within
/// flash_forward_test.cpp's kOTolWgmma of the twin's FP32 sum). Then every dS_ij of the kernel and
/// of the twin differ by P_ij·dO_i·ΔO_i, so dQ/dK against the twin are no equality check: measured
/// on an H200 1.26e-2 and 2.6e-2 against 1e-2 with the mma.sync backward. For that
/// pair the FP64-oracle rule is the check; dV (no delta in it) and the matched delta keep the
/// twin's tolerance.
inline bool stale_reads_wgmma_o(DeltaMode delta,
                                cuda::flash::ForwardKernel forward = cuda::flash::ForwardKernel::Auto) {
  return delta == DeltaMode::Stale &&
         cuda::flash::select_forward_kernel(forward) == cuda::flash::ForwardKernel::Wgmma;
}

/// The flash FP8 attention's config (form 'flash') with the given delta rule and dS scale tile.
inline AttentionConfig fused_config(DeltaMode delta, int64_t block_q = 128, int64_t block_k = 128) {
  AttentionConfig c;
  c.precision = AttnPrecision::FP8;
  c.form = AttnForm::Flash;
  c.delta = delta;
  c.block_q = block_q;
  c.block_k = block_k;
  return c;
}

struct BackwardDims {
  int64_t B, H, G, Tq, Tk, D, bq, bk;
  bool causal;
};

/// Device buffers of one problem and its BackwardParams (delta not yet computed: call
/// run_delta, then run_backward_main). do_format/ds_format as given; codes N(0, 1) rounded.
struct BackwardCodes {
  BackwardDims c;
  int64_t Tq_p, Tk_p, rep;
  Dev<uint8_t> q, k, v, vt, kt, qt, d_o, dvt;
  Dev<float> scales, o, lse, m, l, delta, rf, dq, dk, dv;
  Dev<double> res_sums, residual;
  cuda::flash::BackwardParams p;

  BackwardCodes(const BackwardDims& dims, Format do_format, uint32_t seed) : c(dims) {
    Tq_p = (c.Tq + 15) / 16 * 16, Tk_p = (c.Tk + 15) / 16 * 16, rep = c.H / c.G;
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    // Row codes [B, heads, T_p, D] (pads 0) and their transposes: per head [D, T_p] (K̂ᵀ, V̂ᵀ), or
    // the group transpose [B, G, D, rep·T_p] (Q̂ᵀ, (dO/l)~ᵀ).
    auto codes = [&](int64_t heads, int64_t T, int64_t T_p, Format f) {
      std::vector<uint8_t> x(size_t(c.B * heads * T_p * c.D), 0);
      for (int64_t bh = 0; bh < c.B * heads; ++bh)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t d = 0; d < c.D; ++d)
            x[size_t((bh * T_p + t) * c.D + d)] = fp8_encode(nd(rng), f, true);
      return x;
    };
    auto transpose = [&](const std::vector<uint8_t>& x, int64_t heads, int64_t T_p, int64_t r) {
      std::vector<uint8_t> y(x.size());
      for (int64_t bh = 0; bh < c.B * heads; ++bh)
        for (int64_t t = 0; t < T_p; ++t)
          for (int64_t d = 0; d < c.D; ++d) {
            const int64_t grp = bh / r, l = bh % r;
            y[size_t((grp * c.D + d) * r * T_p + l * T_p + t)] = x[size_t((bh * T_p + t) * c.D + d)];
          }
      return y;
    };
    const auto hq = codes(c.H, c.Tq, Tq_p, Format::E4M3), hk = codes(c.G, c.Tk, Tk_p, Format::E4M3),
               hv = codes(c.G, c.Tk, Tk_p, Format::E4M3), hdo = codes(c.H, c.Tq, Tq_p, do_format),
               hdv = codes(c.H, c.Tq, Tq_p, do_format);
    q.set(hq), k.set(hk), v.set(hv), vt.set(transpose(hv, c.G, Tk_p, 1));
    kt.set(transpose(hk, c.G, Tk_p, 1)), qt.set(transpose(hq, c.H, Tq_p, rep)), d_o.set(hdo);
    dvt.set(transpose(hdv, c.H, Tq_p, rep));
    const size_t rows = size_t(c.B * c.H * c.Tq), nq = size_t(c.B * c.H * Tq_p * c.D),
                 nk = size_t(c.B * c.G * Tk_p * c.D);
    scales.set(std::vector<float>(8, 1.0f));
    o.resize(size_t(c.B * c.H * c.Tq * c.D)), lse.resize(rows), m.resize(rows), l.resize(rows);
    delta.resize(rows), rf.resize(rows), dq.resize(nq), dk.resize(nk), dv.resize(nk);
    res_sums.resize(2 * rows), residual.resize(rows);
    cuda::flash::ForwardParams f;
    f.q = q.p, f.k = k.p, f.v_t = vt.p;
    f.q_scale_inv = f.k_scale_inv = f.v_scale_inv = scales.p;
    f.o = o.p, f.lse = lse.p, f.row_max = m.p, f.row_sum = l.p;
    f.B = c.B, f.H = c.H, f.G = c.G, f.Tq = c.Tq, f.Tk = c.Tk, f.Tq_p = Tq_p, f.Tk_p = Tk_p, f.D = c.D;
    f.causal = c.causal;
    f.tau = 1.0f / std::sqrt(float(c.D));
    f.block_k = c.bk;
    cuda::flash::run_forward(f, nullptr);
    p.q = q.p, p.q_t = qt.p, p.k = k.p, p.k_t = kt.p, p.v = v.p, p.d_o = d_o.p, p.dv_o_t = dvt.p;
    p.q_scale_inv = p.k_scale_inv = p.v_scale_inv = p.do_scale_inv = p.dvo_scale_inv = scales.p;
    p.row_max = m.p, p.row_sum = l.p, p.delta = delta.p, p.row_factor = rf.p;
    p.dq_acc = dq.p, p.dk_acc = dk.p, p.dv_acc = dv.p;
    p.B = c.B, p.H = c.H, p.G = c.G, p.Tq = c.Tq, p.Tk = c.Tk, p.Tq_p = Tq_p, p.Tk_p = Tk_p, p.D = c.D;
    p.causal = c.causal;
    p.tau = f.tau;
    p.block_q = c.bq, p.block_k = c.bk;
    p.do_format = do_format;
  }
};

}  // namespace octet::test
