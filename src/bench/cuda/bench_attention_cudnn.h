// src/bench/cuda/bench_attention_cudnn.h — the cuDNN SDPA peer rows of `octet bench attention`
// (bench_attention.cpp): cuDNN's fused BF16 SDPA and FP8 SDPA (stale delta) forward and backward,
// called directly through the backend's SdpaEngine (src/cuda/cudnn_sdpa.h), measured in the same
// run, on the same shapes and with the same timer and FLOP convention as octet's rows.
#pragma once

#include <functional>

#include "bench/cuda/bench_timer.h"
#include "cuda/cuda_backend.h"
#include "octet/bench.h"

namespace octet::cuda {

/// Rows "cudnn-bf16" (cuDNN's default backward: dQ by atomics, as PyTorch calls it) and
/// "cudnn-fp8-stale" (E4M3 Q, K, V, O, dO, dQ, dK, dV, unit scales) at B x H x S x D (H = G).
/// A graph cuDNN refuses (e.g. its FP8 backward wants head_dim 128 on Hopper) gives NaN times and
/// a note on stderr, not an error.
void bench_cudnn_sdpa(CudaBackend& backend, EventTimer& timer, const AttnBenchOptions& opt,
                      int64_t seq, const std::function<void(const AttnBenchRow&)>& on_row);

}  // namespace octet::cuda
