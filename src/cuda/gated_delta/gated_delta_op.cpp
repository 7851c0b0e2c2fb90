// src/cuda/gated_delta/gated_delta_op.cpp — CudaBackend::gated_delta_forward/backward: the recurrent mixer of
// the hybrid model (Gated DeltaNet, arXiv 2412.06464; include/octet/recurrent.h) on the GPU, with the
// contract of the CPU backend's op (src/cpu/backend/gated_delta.cpp; backend.h GatedDeltaArgs):
// act tensors F32 or BF16 each, FP32 math inside, gates from the raw projections. The boundary
// checks (one octet::Error naming the argument), the FP32 workspaces (the chunk-entering states and
// the per-column-block partial gradients, stream-ordered Buffers freed after the kernels that read
// them) and the launches of gated_delta.h.
#include <string>

#include "cuda/runtime/cuda_backend.h"
#include "cuda/gated_delta/gated_delta.h"
#include "octet/error.h"

namespace octet::cuda {
namespace {

GdnIn in_of(const Tensor& t, const std::string& what) {
  check_activation(t, what.c_str());
  return {t.data, t.dtype == DType::BF16};
}
GdnOut out_of(const Tensor& t, const std::string& what) {
  check_activation(t, what.c_str());
  return {t.data, t.dtype == DType::BF16};
}

// The sizes and inputs of one call, after the shared shape rule (GatedDeltaArgs::shape) and the
// limits of the kernels.
GdnParams params_of(const char* op, const GatedDeltaArgs& in) {
  const GatedDeltaShape s = in.shape(op);
  const std::string o(op);
  OCTET_CHECK(s.dk == 32 || s.dk == 64 || s.dk == 128,
              o + ": d_k must be 32, 64 or 128 on cuda (got " + std::to_string(s.dk) + ")");
  OCTET_CHECK(s.dv % kGdnColumns == 0 && s.dv / kGdnColumns <= 65535,
              o + ": d_v must be a multiple of " + std::to_string(kGdnColumns) + " on cuda (got " +
                  std::to_string(s.dv) + ")");
  OCTET_CHECK(s.batch * s.heads <= 65535,
              o + ": batch·heads must be <= 65535 on cuda (got " + std::to_string(s.batch * s.heads) + ")");
  GdnParams p;
  p.batch = s.batch, p.heads = s.heads, p.seq = s.seq, p.kdim = s.dk, p.vdim = s.dv;
  p.chunk = int(in.chunk < kGdnMaxChunk ? in.chunk : kGdnMaxChunk);
  p.scale = in.scale;
  p.q = in_of(in.q, o + " q");
  p.k = in_of(in.k, o + " k");
  p.v = in_of(in.v, o + " v");
  p.gates = in_of(in.gates, o + " gates");
  return p;
}

}  // namespace

void CudaBackend::gated_delta_forward(const GatedDeltaArgs& in, const Tensor& o) {
  DeviceGuard guard(device_);
  GdnParams p = params_of("gated_delta_forward", in);
  check_shape(o, in.v.shape, "gated_delta_forward o");
  p.o = out_of(o, "gated_delta_forward o");
  gated_delta_forward_launch(p, stream_);
}

void CudaBackend::gated_delta_backward(const GatedDeltaArgs& in, const Tensor& d_o, const Tensor& dq,
                                       const Tensor& dk, const Tensor& dv, const Tensor& dgates) {
  DeviceGuard guard(device_);
  GdnParams p = params_of("gated_delta_backward", in);
  check_shape(d_o, in.v.shape, "gated_delta_backward d_o");
  check_shape(dq, in.q.shape, "gated_delta_backward dq");
  check_shape(dk, in.q.shape, "gated_delta_backward dk");
  check_shape(dv, in.v.shape, "gated_delta_backward dv");
  check_shape(dgates, in.gates.shape, "gated_delta_backward dgates");
  p.d_o = in_of(d_o, "gated_delta_backward d_o");
  p.dq = out_of(dq, "gated_delta_backward dq");
  p.dk = out_of(dk, "gated_delta_backward dk");
  p.dv = out_of(dv, "gated_delta_backward dv");
  p.dgates = out_of(dgates, "gated_delta_backward dgates");
  // Workspaces, every element written by the kernels before it is read.
  const int64_t bh = p.batch * p.heads, nvb = p.col_blocks();
  Buffer states = alloc_uninitialized(DType::F32, {bh, nvb, p.n_chunks(), p.kdim * kGdnColumns});
  Buffer dq_part = alloc_uninitialized(DType::F32, {nvb, bh, p.seq, p.kdim});
  Buffer dk_part = alloc_uninitialized(DType::F32, {nvb, bh, p.seq, p.kdim});
  Buffer dg_part = alloc_uninitialized(DType::F32, {nvb, bh, p.seq});
  Buffer db_part = alloc_uninitialized(DType::F32, {nvb, bh, p.seq});
  p.states = states.tensor().f32();
  gated_delta_forward_launch(p, stream_);  // p.o is null: the states only
  p.dq_part = dq_part.tensor().f32();
  p.dk_part = dk_part.tensor().f32();
  p.dg_part = dg_part.tensor().f32();
  p.db_part = db_part.tensor().f32();
  gated_delta_backward_launch(p, stream_);
}

}  // namespace octet::cuda
