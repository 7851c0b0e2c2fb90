// src/cuda/attention/attention_base.cpp — AttentionBase (attention_base.h): the boundary checks,
// the saved state and the Q, K, V packing shared by the unfused and flash attentions (each
// backward packs dO itself: the flash one with dV's operand in one read).
#include "cuda/attention/attention_base.h"

#include <memory>
#include <string>
#include <utility>

#include "cuda/ops/ops.h"
#include "cuda/quantize/qtensor.h"
#include "cuda/runtime/check.h"
#include "octet/error.h"

namespace octet::cuda {
namespace {

void check_act(const Tensor& t, const Shape& want, const char* what) {
  check_activation(t, what);
  check_shape(t, want, what);
}

}  // namespace

AttentionBase::AttentionBase(const AttentionShape& shape, const AttentionConfig& cfg, CudaBackend& backend,
                             bool trans_fp8)
    : shape_(shape), cfg_(cfg), be_(backend), s_(backend.stream()), trans_fp8_(trans_fp8) {
  shape.validate();
  OCTET_CHECK(cfg.precision != AttnPrecision::FP64,
              "cuda attention: precision fp64 is CPU-only (use fp8 or bf16)");
  OCTET_CHECK(shape.head_dim % 16 == 0,
              "cuda attention: head_dim must be a multiple of 16 for the FP8/BF16 tensor-core "
              "GEMMs, got " +
                  std::to_string(shape.head_dim));
  OCTET_CHECK(cfg.block_q % 32 == 0 && cfg.block_k % 32 == 0 && cfg.block_q > 0 && cfg.block_k > 0,
              "cuda attention: block_q and block_k (the dS scale tiles) must be multiples of 32");
  cfg.validate();  // block sizes, p_scale: the rules of every backend (src/core)
  d_.B = shape.batch;
  d_.H = shape.n_heads;
  d_.G = shape.n_kv_heads;
  d_.rep = d_.H / d_.G;
  d_.Tq = shape.seq_q;
  d_.Tk = shape.seq_k;
  d_.Tq_p = round_up(d_.Tq, 16);
  d_.Tk_p = round_up(d_.Tk, 16);
  d_.D = shape.head_dim;
  d_.causal = shape.causal;
  d_.tokens_major = shape.layout == AttnLayout::TokensMajor;
  fp8_ = cfg.precision == AttnPrecision::FP8;
  eb_ = fp8_ ? 1 : 2;
  scales_.reserve(3 * kScaleStride, s_);  // sdo, p_inv, sdv, each 128-byte aligned
  fill_launch(Tensor(p_inv(), DType::F32, {1}), 1.0 / double(cfg.p_scale), s_);
  head_block_ = fp8_ && cfg.qkv_scaling == QkvScaling::HeadBlock;
  // One amax (and scale) per tensor, or per (b, head, 128-token block) of Q, K, V.
  amax_.reserve(size_t(head_block_ ? q_scales() + 2 * k_scales() : 3), s_);  // Q, K, V together
  terms_ = make_saved_terms();
  saved_bytes_ = attention_saved_bytes(terms_, shape_);
}

std::vector<AttnSizeTerm> AttentionBase::make_saved_terms() const {
  constexpr int64_t a = SavedPlacement::kAlign, pad = 16;  // T_p = 16·⌈T/16⌉
  constexpr int64_t q = kAttnBatch | kAttnHeads | kAttnSeqQ, k = kAttnBatch | kAttnKvHeads | kAttnSeqK;
  constexpr int64_t qd = q | kAttnHeadDim, kd = k | kAttnHeadDim;
  const int64_t elem = eb_, trans = trans_fp8_ ? 1 : 2;
  // 1/scales: one per (b, head, kQkvScaleBlock tokens), or one per tensor
  const int64_t sq = head_block_ ? q : 0, sk = head_block_ ? k : 0;
  const int64_t blk = head_block_ ? kQkvScaleBlock : 1;
  return {{pad * elem, qd, pad, a},  {pad * elem, kd, pad, a},  {pad * elem, kd, pad, a},
          {pad * trans, qd, pad, a}, {pad * trans, kd, pad, a}, {4, sq, blk, a},
          {4, sk, blk, a},           {4, sk, blk, a},           {2 * 4, q, 1, a}};
}

int64_t AttentionBase::q_scales() const { return d_.B * d_.H * ceil_div(d_.Tq, kQkvScaleBlock); }
int64_t AttentionBase::k_scales() const { return d_.B * d_.G * ceil_div(d_.Tk, kQkvScaleBlock); }

std::unique_ptr<AttnState> AttentionBase::place_state(SavedPlacement& at) const {
  const int64_t nq = this->nq(), nk = this->nk();
  const DType elem = fp8_ ? DType::E4M3 : DType::BF16;
  const DType trans = trans_fp8_ ? DType::E4M3 : DType::BF16;
  auto st = std::make_unique<AttnState>();
  st->owner = this;
  st->q_rows = at.take(elem, {nq});
  st->k_rows = at.take(elem, {nk});
  st->v_rows = at.take(elem, {nk});
  st->q_t = at.take(trans, {nq});
  st->k_t = at.take(trans, {nk});
  st->q_scale_inv = at.take(DType::F32, {head_block_ ? q_scales() : 1});
  st->k_scale_inv = at.take(DType::F32, {head_block_ ? k_scales() : 1});
  st->v_scale_inv = at.take(DType::F32, {head_block_ ? k_scales() : 1});
  st->rows = d_.B * d_.H * d_.Tq;
  st->softmax = at.take(DType::F32, {2 * st->rows});
  OCTET_CHECK(at.bytes() == saved_bytes_, "attention saved state: placed " + std::to_string(at.bytes()) +
                                              " bytes where its size terms give " +
                                              std::to_string(saved_bytes_) + " (a layout bug)");
  return st;
}

SavedAttention AttentionBase::forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                                      const Tensor& lse) {
  // Not zero-filled: the forward writes every byte of the state its backward reads (pad rows as
  // zeros, every scale, every row's statistics; saved_memory_test.cpp fills the memory with NaN
  // codes and checks the bits).
  return run_forward(q, k, v, o, lse, SavedPlacement::allocating(be_, /*zeroed=*/false));
}

SavedAttention AttentionBase::forward_to(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                                         const Tensor& lse, const Tensor& memory) {
  SavedPlacement at = SavedPlacement::into(memory, saved_bytes(), "attention forward_to: memory");
  return run_forward(q, k, v, o, lse, std::move(at));
}

SavedAttention AttentionBase::saved_from(const Tensor& o, const Tensor& lse, const Tensor& memory) const {
  check_act(o, shape_.q_shape(), "attention saved_from: o");
  check_dtype(lse, DType::F32, "attention saved_from: lse");
  check_numel(lse, d_.B * d_.H * d_.Tq, "attention saved_from: lse [B, H, Tq]");
  SavedPlacement at = SavedPlacement::into(memory, saved_bytes(), "attention saved_from: memory");
  return SavedAttention{Tensor(), Tensor(), Tensor(), o, lse, place_state(at)};
}

SavedAttention AttentionBase::run_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                                          const Tensor& lse, SavedPlacement at) {
  DeviceGuard g(be_.device());
  const AttnDims& d = d_;
  const Shape qs = shape_.q_shape(), ks = shape_.kv_shape();
  check_act(q, qs, "attention forward: q");
  check_act(k, ks, "attention forward: k");
  check_act(v, ks, "attention forward: v");
  check_act(o, qs, "attention forward: o");
  check_dtype(lse, DType::F32, "attention forward: lse");
  check_numel(lse, d.B * d.H * d.Tq, "attention forward: lse [B, H, Tq]");
  std::unique_ptr<AttnState> st = place_state(at);
  const PackKind rowk = row_kind();
  const PackKind transk = trans_fp8_ ? PackKind::Fp8Code
                          : fp8_     ? PackKind::Bf16OfCode
                                     : PackKind::Bf16OfValue;
  const int64_t blk = head_block_ ? kQkvScaleBlock : 0;
  // Q, K and V in one amax launch and one pack launch (glue.h pack_quantized_many_launch)
  const PackArgs qkv[3] = {
      pack_args(q, d.H, d.Tq, d.Tq_p, d.rep, Format::E4M3, st->sq(), rowk, st->q_rows.tensor().data, transk,
                st->q_t.tensor().data, nullptr, blk),
      pack_args(k, d.G, d.Tk, d.Tk_p, 1, Format::E4M3, st->sk(), rowk, st->k_rows.tensor().data, transk,
                st->k_t.tensor().data, nullptr, blk),
      pack_args(v, d.G, d.Tk, d.Tk_p, 1, Format::E4M3, st->sv(), rowk, st->v_rows.tensor().data, rowk,
                v_t_.reserve(size_t(nk() * eb_), s_), nullptr, blk)};
  pack_quantized_many_launch(qkv, 3, amax_.get(), s_);
  forward_impl(*st, o, lse);
  return SavedAttention{q, k, v, o, lse, std::move(st)};
}

void AttentionBase::backward(const SavedAttention& saved, const Tensor& d_o, const Tensor& dq,
                             const Tensor& dk, const Tensor& dv, const Tensor& residual) {
  DeviceGuard g(be_.device());
  const auto* st = dynamic_cast<const AttnState*>(saved.state.get());
  OCTET_CHECK(st && st->owner == this,
              "attention backward: the saved state does not come from this attention's forward");
  const Shape qs = shape_.q_shape(), ks = shape_.kv_shape();
  check_act(d_o, qs, "attention backward: d_o");
  check_act(dq, qs, "attention backward: dq");
  check_act(dk, ks, "attention backward: dk");
  check_act(dv, ks, "attention backward: dv");
  if (!residual.empty()) {
    check_dtype(residual, DType::F64, "attention backward: residual");
    check_numel(residual, 2, "attention backward: residual");
  }
  backward_impl(*st, saved, d_o, dq, dk, dv, residual);
}

void AttentionBase::pack(const Tensor& x, int64_t heads, int64_t T, int64_t T_p, int64_t rep, Format f,
                         float* scale_inv, PackKind row_kind, void* row, PackKind trans_kind, void* trans,
                         const float* row_factor, int64_t scale_block) {
  pack_quantized_launch(pack_args(x, heads, T, T_p, rep, f, scale_inv, row_kind, row, trans_kind, trans,
                                  row_factor, scale_block),
                        amax_.get(), s_);
}

PackArgs AttentionBase::pack_args(const Tensor& x, int64_t heads, int64_t T, int64_t T_p, int64_t rep,
                                  Format f, float* scale_inv, PackKind row_kind, void* row,
                                  PackKind trans_kind, void* trans, const float* row_factor,
                                  int64_t scale_block) const {
  PackArgs a;
  a.x = x.data;
  a.x_dtype = x.dtype;
  a.tokens_major = d_.tokens_major;
  a.B = d_.B;
  a.heads = heads;
  a.T = T;
  a.T_p = T_p;
  a.D = d_.D;
  a.rep = rep;
  a.format = f;
  a.fp8 = fp8_;
  a.row_factor = row_factor;
  a.scale_block = scale_block;
  a.scale_inv = scale_inv;
  a.row_kind = row_kind;
  a.row = row;
  a.trans_kind = trans_kind;
  a.trans = trans;
  return a;
}

}  // namespace octet::cuda
