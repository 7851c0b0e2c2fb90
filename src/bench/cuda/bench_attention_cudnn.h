// src/bench/cuda/bench_attention_cudnn.h — the cuDNN SDPA peer rows of `octet bench attention`
// (bench_attention.cpp): cuDNN's fused BF16 SDPA and FP8 SDPA (stale delta) forward and backward,
// called directly through the backend's SdpaEngine (src/cuda/attention/cudnn/cudnn_sdpa.h),
// measured in the same process, on the same case, inputs, timer and FLOP convention as octet's rows,
// with the same error check against the FP64 oracle.
#pragma once

#include <vector>

#include "bench/cuda/attention_rows_check.h"
#include "bench/cuda/bench_timer.h"
#include "cuda/runtime/cuda_backend.h"
#include "octet/bench.h"

namespace octet::cuda {

/// The inputs of one case on the device: q, d_o [B, H, Tq, D]; k, v [B, G, Tk, D] (F32 or BF16).
struct AttnBenchInputs {
  Tensor q, k, v, d_o;
};

/// Rows "cudnn-bf16" (cuDNN's default backward: dQ by atomics, as PyTorch calls it) and
/// "cudnn-fp8-stale" (E4M3 Q, K, V, O, dO, dQ, dK, dV: Q, K, V, dO quantized per tensor from the
/// case's inputs; the scales of P, O, dP, dQ, dK, dV set to powers of two from the amaxes cuDNN
/// reports in one calibration call, as delayed scaling does). A graph cuDNN refuses (e.g. its FP8
/// backward wants head_dim 128 on Hopper) gives NaN times and errors and a note on stderr, not an
/// error. Rows are returned, not emitted: octet's rows take their ratios from them.
std::vector<AttnBenchRow> bench_cudnn_sdpa(CudaBackend& backend, EventTimer& timer,
                                           const AttnBenchOptions& opt, const AttentionCase& c,
                                           const AttnBenchInputs& in, const AttentionRowsCheck& check);

}  // namespace octet::cuda
