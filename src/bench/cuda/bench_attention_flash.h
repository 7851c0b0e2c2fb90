// src/bench/cuda/bench_attention_flash.h — the kernel-only rows of `octet bench attention`
// (bench_attention.cpp): the flash FP8 kernels (src/cuda/attention/flash/flash.h) timed on FP8
// codes packed once beforehand, as cuDNN's FP8 rows are timed ("input_dtype": "fp8"), beside the
// rows that time octet's Attention as a user calls it from BF16 (glue included).
#pragma once

#include <vector>

#include "bench/cuda/attention_rows_check.h"
#include "bench/cuda/bench_attention_cudnn.h"
#include "bench/cuda/bench_timer.h"
#include "cuda/attention/flash/flash.h"
#include "cuda/runtime/cuda_backend.h"
#include "octet/bench.h"

namespace octet::cuda {

/// The flash forward's kernel and, for the wgmma kernel, its options as the environment chooses
/// them (fwd_kernel, fwd_exp2_poly, fwd_persistent, fwd_pingpong), and the flash kernels' work
/// order (head_group), into `row`.
void set_forward_kernel(AttnBenchRow& row);

/// The flash backward's kernel for p's sizes and its work order as the environment chooses them
/// (bwd_kernel; bwd_head_group: flash.h resolved_key_head_group; for the wgmma kernel bwd_dq_tma
/// and bwd_sdp_overlap: flash.h resolved_dq_tma / resolved_sdp_overlap), into `row`. p needs B, H, G, Tq, Tk,
/// D, block_q and block_k.
void set_backward_kernel(AttnBenchRow& row, const flash::BackwardParams& p);

/// Rows "octet-fp8-flash-kernels" (matched) and "octet-fp8-flash-stale-kernels", input_dtype "fp8":
/// forward = flash::run_forward; backward = flash::run_delta + flash::run_backward_main (the matched
/// pre-pass or the stale dO·O rows, and the main kernel), into FP32 accumulators. Per-tensor scales,
/// octet's default tiles (128 x 128), dO and dS in E5M2. Errors against the FP64 oracle as the other
/// rows (O from the forward's FP32 output, dQ scaled out of its accumulator), with the bound of the
/// CPU flash form's error. Empty for a head_dim the flash kernels do not take.
std::vector<AttnBenchRow> bench_flash_kernels(CudaBackend& backend, EventTimer& timer,
                                              const AttnBenchOptions& opt, const AttentionCase& c,
                                              const AttnBenchInputs& in, const AttentionRowsCheck& check);

}  // namespace octet::cuda
