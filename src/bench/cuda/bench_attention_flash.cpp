// src/bench/cuda/bench_attention_flash.cpp — the kernel-only flash rows (bench_attention_flash.h).
#include "bench/cuda/bench_attention_flash.h"

#include <cstdint>

#include "cuda/attention/flash/flash.h"
#include "cuda/attention/glue/glue.h"
#include "cuda/quantize/qtensor.h"
#include "cuda/runtime/check.h"

namespace octet::cuda {
namespace {

// x (the case's F32/BF16 input) packed to FP8 codes: rows and/or the group transpose, its 1/scale.
void pack_codes(const Tensor& x, int64_t B, int64_t heads, int64_t T, int64_t D, int64_t rep, Format f,
                unsigned* amax, float* scale_inv, void* row, void* trans, const float* row_factor,
                cudaStream_t s) {
  PackArgs a;
  a.x = x.data, a.x_dtype = x.dtype, a.row_factor = row_factor;
  a.B = B, a.heads = heads, a.T = T, a.T_p = round_up(T, 16), a.D = D, a.rep = rep;
  a.format = f, a.fp8 = true;
  a.scale_inv = scale_inv;
  a.row_kind = row ? PackKind::Fp8Code : PackKind::None, a.row = row;
  a.trans_kind = trans ? PackKind::Fp8Code : PackKind::None, a.trans = trans;
  pack_quantized_launch(a, amax, s);
}

}  // namespace

void set_forward_kernel(AttnBenchRow& row) {
  const flash::ForwardKernel fk = flash::select_forward_kernel();
  row.fwd_kernel = flash::forward_kernel_name(fk);
  row.head_group = flash::flash_head_group();
  if (fk != flash::ForwardKernel::Wgmma) return;
  row.fwd_exp2_poly = flash::forward_exp2_poly();
  row.fwd_persistent = flash::forward_persistent() ? 1 : 0;
  row.fwd_pingpong = flash::forward_pingpong() ? 1 : 0;
}

void set_backward_kernel(AttnBenchRow& row, const flash::BackwardParams& p) {
  const flash::BackwardKernel bk = flash::select_backward_kernel(p);
  row.bwd_kernel = flash::backward_kernel_name(bk);
  row.bwd_head_group = flash::resolved_key_head_group(p, bk);
  if (bk != flash::BackwardKernel::Wgmma) return;
  row.bwd_dq_tma = p.block_q == 64 && p.block_k == 64 ? 1 : flash::resolved_dq_tma(p);  // 64 x 64: always TMA
  row.bwd_sdp_overlap = flash::resolved_sdp_overlap(p);
}

std::vector<AttnBenchRow> bench_flash_kernels(CudaBackend& be, EventTimer& timer, const AttnBenchOptions& opt,
                                              const AttentionCase& c, const AttnBenchInputs& in,
                                              const AttentionRowsCheck& check) {
  const AttentionShape& s = c.shape;
  const char* names[2] = {"octet-fp8-flash-kernels", "octet-fp8-flash-stale-kernels"};  // matched, stale
  const bool want[2] = {attention_bench_row_wanted(opt.rows, names[0]),
                        attention_bench_row_wanted(opt.rows, names[1])};
  if (!flash_attention_size_supported(s.head_dim) || !(want[0] || want[1])) return {};
  const cudaStream_t st = be.stream();
  const int64_t B = s.batch, H = s.n_heads, G = s.n_kv_heads, D = s.head_dim, rep = H / G;
  const int64_t Tq_p = round_up(s.seq_q, 16), Tk_p = round_up(s.seq_k, 16);
  const int64_t nq = B * H * Tq_p * D, nk = B * G * Tk_p * D, rows = B * H * s.seq_q;
  Buffer q = be.alloc(DType::E4M3, {nq}), q_t = be.alloc(DType::E4M3, {nq});
  Buffer k = be.alloc(DType::E4M3, {nk}), k_t = be.alloc(DType::E4M3, {nk});
  Buffer v = be.alloc(DType::E4M3, {nk}), v_t = be.alloc(DType::E4M3, {nk});
  Buffer d_o = be.alloc(DType::E5M2, {nq}), dvo_t = be.alloc(DType::E5M2, {nq});
  Buffer scales = be.alloc(DType::F32, {32 * 6}), amax = be.alloc(DType::F32, {1});
  Buffer o = be.alloc(DType::F32, {B, H, s.seq_q, D}), lse = be.alloc(DType::F32, {rows});
  Buffer stats = be.alloc(DType::F32, {4 * rows});  // m, l, delta, row factor
  Buffer dq_acc = be.alloc(DType::F32, {nq}), dk_acc = be.alloc(DType::F32, {nk});
  Buffer dv_acc = be.alloc(DType::F32, {nk}), dq = be.alloc(DType::F32, {B, H, s.seq_q, D});
  float* sc = scales.tensor().f32();
  auto* am = reinterpret_cast<unsigned*>(amax.tensor().data);
  auto ptr = [](const Buffer& b) { return static_cast<uint8_t*>(b.tensor().data); };
  pack_codes(in.q, B, H, s.seq_q, D, rep, Format::E4M3, am, sc, ptr(q), ptr(q_t), nullptr, st);
  pack_codes(in.k, B, G, s.seq_k, D, 1, Format::E4M3, am, sc + 32, ptr(k), ptr(k_t), nullptr, st);
  pack_codes(in.v, B, G, s.seq_k, D, 1, Format::E4M3, am, sc + 64, ptr(v), ptr(v_t), nullptr, st);
  pack_codes(in.d_o, B, H, s.seq_q, D, rep, Format::E5M2, am, sc + 96, ptr(d_o), nullptr, nullptr, st);
  float* f = stats.tensor().f32();
  flash::BackwardParams p;
  p.q = ptr(q), p.k = ptr(k), p.v_t = ptr(v_t);
  p.q_scale_inv = sc, p.k_scale_inv = sc + 32, p.v_scale_inv = sc + 64;
  p.o = o.tensor().f32(), p.lse = lse.tensor().f32(), p.row_max = f, p.row_sum = f + rows;
  p.B = B, p.H = H, p.G = G, p.Tq = s.seq_q, p.Tk = s.seq_k, p.Tq_p = Tq_p, p.Tk_p = Tk_p, p.D = D;
  p.causal = s.causal, p.tau = s.tau();
  p.block_q = p.block_k = opt.tile;
  const flash::ForwardParams fp = p;
  p.q_t = ptr(q_t), p.k_t = ptr(k_t), p.v = ptr(v), p.d_o = ptr(d_o), p.do_scale_inv = sc + 96;
  p.dv_o_t = ptr(dvo_t), p.dvo_scale_inv = sc + 128;
  p.delta = f + 2 * rows, p.row_factor = f + 3 * rows;
  p.dq_acc = dq_acc.tensor().f32(), p.dk_acc = dk_acc.tensor().f32(), p.dv_acc = dv_acc.tensor().f32();
  p.do_format = p.ds_format = Format::E5M2;
  flash::run_forward(fp, st);
  std::vector<AttnBenchRow> out;
  for (bool matched : {true, false}) {
    if (!want[matched ? 0 : 1]) continue;
    p.matched = matched;
    p.o_bf16 = nullptr, p.d_o_f32 = nullptr, p.d_o_bf16 = nullptr;
    if (!matched) {  // the stale delta reads O (the forward's FP32) and dO as given
      if (in.d_o.dtype == DType::BF16)
        p.d_o_bf16 = in.d_o.bf16();
      else
        p.d_o_f32 = in.d_o.f32();
    }
    flash::run_delta(p, st);  // the row factor for (dO/l)~, packed once (not timed)
    pack_codes(in.d_o, B, H, s.seq_q, D, rep, Format::E5M2, am, sc + 128, nullptr, ptr(dvo_t), p.row_factor,
               st);
    const double fwd_ms = timer.median_ms(opt.warmup, opt.reps, [&](int) { flash::run_forward(fp, st); });
    const double bwd_ms = timer.median_ms(opt.warmup, opt.reps, [&](int) {
      flash::run_delta(p, st);
      flash::run_backward_main(p, st);
    });
    unpad_scale_launch(p.dq_acc, dq.tensor().data, DType::F32, B * H, s.seq_q, Tq_p, D, 1.0f, p.k_scale_inv,
                       nullptr, st);
    const RowsError e = check.error(o.tensor(), dq.tensor(), st);
    AttnBenchRow row = attn_bench_row(c, opt, names[matched ? 0 : 1], fwd_ms, bwd_ms);
    row.input_dtype = "fp8";
    row.tile = opt.tile;
    row.err_o = e.o, row.err_dq = e.dq;
    AttentionConfig cfg;  // the twin: the CPU flash form with these kernels' settings
    cfg.form = AttnForm::Flash;
    cfg.delta = matched ? DeltaMode::Matched : DeltaMode::Stale;
    cfg.block_q = cfg.block_k = opt.tile;
    const RowsError b = AttentionRowsCheck::bound(check.twin_error(cfg));
    row.err_bound_o = b.o, row.err_bound_dq = b.dq;
    set_forward_kernel(row);
    set_backward_kernel(row, p);
    out.push_back(row);
  }
  return out;
}

}  // namespace octet::cuda
