// octet/bench.h — the benchmarks behind `octet bench` (docs/design.md §"Layers of the code"): the
// code lives in src/bench (library octet_bench), outside the production libraries; link it.
//
// Method, for every benchmark: warm-up first (cuBLASLt plans, allocations, delayed-scaling
// histories), then timed repetitions; the GPU kernels are timed with CUDA events around each
// repetition on the stream and operands rotated among enough copies to exceed the L2 cache, whole
// training steps with the host wall clock between two Backend::synchronize() calls (the step
// includes the host->device copy of its token ids, as the trainer's does); the median is reported.
// Inputs are random, never zeros.
//
// Training FLOPs (PaLM, Chowdhery et al. 2022, appendix B; as nanoGPT and llm.c count them): per
// token 6·N_matmul + 6·L·2·T·d, where N_matmul counts the weights that enter matrix products (qkv,
// proj, fc1, fc2 of every layer and the LM head, V·d; not norms, biases or position embeddings) and
// the second term is attention's QKᵀ and PV counted over the full T×T square although the mask is
// causal (PaLM's convention). MFU = achieved FLOP/s over a stated dense peak of an H100/H200 SXM
// (NVIDIA H100/H200 datasheets, without sparsity): mfu_bf16 against 989 TFLOP/s (BF16), mfu_fp8
// against 1979 (FP8), for every arm — an FP8 arm's mfu_fp8 says how close it comes to what FP8
// GEMMs could reach, its mfu_bf16 compares with the BF16 arm. "mfu" is mfu_bf16 (the field's meaning
// before mfu_fp8 existed).
//
// The GPU benchmarks (namespace octet::cuda) exist only in a CUDA build (OCTET_WITH_CUDA).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "octet/attention_cases.h"

#include "octet/model.h"
#include "octet/train.h"

namespace octet {

class Communicator;  // octet/dist.h

/// `octet bench comm`: the collectives of data parallel (docs/distributed.md) on the ranks of a job.
struct CommBenchOptions {
  std::vector<std::string> ops{"all_reduce", "reduce_scatter", "all_gather"};
  int64_t min_bytes = int64_t(1) << 20, max_bytes = int64_t(1) << 30;  ///< sizes doubling from min to max
  int warmup = 2, reps = 5;
};

/// One size of one collective. bytes is the larger buffer, as nccl-tests counts it (all_reduce: the
/// buffer; reduce_scatter: the input of all ranks' parts; all_gather: the gathered output), rounded
/// down to a multiple of 4·ranks. Bus bandwidth (nccl-tests' PERFORMANCE.md): algbw = bytes / time;
/// busbw = algbw·2(n−1)/n for all_reduce, algbw·(n−1)/n for reduce_scatter and all_gather — the
/// bytes each rank's link carries per second in a ring, comparable with the link's rate; 0 on 1 rank.
struct CommBenchRow {
  std::string op;
  int ranks = 1;
  int64_t bytes = 0;
  int iters = 0, reps = 0;              ///< collectives per timed batch; batches (the median reported)
  double ms = 0;                        ///< one collective: the median batch / iters, the slowest rank's
  double algbw_gbs = 0, busbw_gbs = 0;  ///< GB/s (10^9 bytes)
};

/// Times each op of `opt` at every size on `comm` (a collective: every rank calls it; buffers of
/// max_bytes on `backend`, zeros): warm-up calls, then `reps` batches of iters = clamp(256 MiB / bytes,
/// 1, 20) calls between Backend::synchronize() calls (host clock); the slowest rank's median is
/// reported on every rank. Throws octet::Error for an unknown op, sizes below 4·ranks bytes or
/// min > max, reps < 1 or warmup < 0.
void bench_comm(Communicator& comm, Backend& backend, const CommBenchOptions& opt,
                const std::function<void(const CommBenchRow&)>& on_row);

/// Named architectures (Radford et al. 2019, GPT-2, table 2; Brown et al. 2020, GPT-3, table 2.1):
///   "gpt2-small" 12 layers, d 768,  12 heads of 64,  d_ff 3072 (GPT-2 small, 124M with vocab 50304)
///   "350m"       24 layers, d 1024, 16 heads of 64,  d_ff 4096 (GPT-2 medium)
///   "760m"       36 layers, d 1280, 20 heads of 64,  d_ff 5120 (GPT-2 large)
///   "1.3b"       24 layers, d 2048, 16 heads of 128, d_ff 8192 (GPT-3 XL's depth and width; the
///                paper's 24 heads of 128 do not multiply to d 2048, so 16 heads of 128 here)
///   "tiny"       2 layers,  d 64,   2 heads of 32,   d_ff 256 (for tests)
/// Every head_dim but tiny's is 64 or 128, the sizes the fused attention kernels take. All are
/// GPT-2's block: LayerNorm pre-norm, learned positions, GELU MLP, tied embeddings, no linear biases.
/// vocab_size and seq_len are set by the caller. Throws octet::Error for an unknown name.
ModelConfig bench_model_config(const std::string& name, int64_t vocab_size, int64_t seq_len);

/// Matrix-product weights N_matmul of the formula above.
int64_t matmul_params(const ModelConfig& c);
/// Training FLOPs per token by the formula above.
double train_flops_per_token(const ModelConfig& c);

struct TrainBenchOptions {
  std::string device = "cuda";
  std::vector<std::string> models{"gpt2-small", "350m"};
  std::vector<std::string> arms{"bf16", "fp8-linear", "fp8-stale", "fp8-matched"};
  int64_t vocab_size = 50304;  ///< GPT-2's 50257 rounded up to a multiple of 64 (as llm.c does)
  int64_t seq_len = 1024;
  int64_t batch = 8;  ///< sequences per micro-batch, unless one of the next two
  /// Tokens per optimizer step (> 0): batch = tokens_per_step / (seq_len · grad_accum) (a multiple
  /// of it), for every model.
  int64_t tokens_per_step = 0;
  /// Micro-batches per optimizer step (gradient accumulation, as the trainer's train.grad_accum):
  /// one step = grad_accum forward + backward passes, then one optimizer update.
  int64_t grad_accum = 1;
  /// Batch of a named model (e.g. {"1.3b", 4}): overrides batch and tokens_per_step for that model.
  std::map<std::string, int64_t> model_batch;
  int warmup = 3, steps = 10;
  double peak_tflops = 989.0;             ///< dense BF16, H100/H200 SXM datasheet (mfu, mfu_bf16)
  double peak_tflops_fp8 = 1979.0;        ///< dense FP8, H100/H200 SXM datasheet (mfu_fp8)
  std::string recipe = "tensor-current";  ///< FP8 linears' recipe (configs/demo.toml's)
  /// Attention form: "auto" (default_attn_form: the fused FP8 kernels for the FP8-attention arms
  /// on cuda), "whole" (the unfused CUDA attention) or "flash".
  std::string attn_form = "auto";
  /// FP8 attention's block_q = block_k (PrecisionConfig::attn_tile): 128 or 64.
  int64_t attn_tile = 128;
  /// Optimizer hyperparameters (octet/optim.h via adamw_config): a run's [train] defaults, with
  /// the PyTorch peer's constant learning rate 3e-4 (bench/peers/gpt2_torch.py; a run's default
  /// 3e-3 diverges at 1.3B without its warmup); train.activation_checkpointing: the models'
  /// ModelMemory. Activations: the backend's preferred dtype.
  TrainConfig train = [] {
    TrainConfig t;
    t.lr = 3e-4f;
    return t;
  }();
  uint64_t seed = 1234;
  /// Time every backend op by class (profiling_backend.h: a synchronization after each op, so the
  /// step times of a profiled run are a little longer than an unprofiled one's).
  bool profile = false;
};

/// One op class of a profiled run: calls and milliseconds per timed step.
struct TrainBenchOp {
  std::string op;
  double calls_per_step = 0, ms_per_step = 0;
};

struct TrainBenchRow {
  std::string model, arm;
  std::string attn_form;  ///< the attention form the arm ran ("whole" | "flash": the flash kernels)
  ModelConfig config;
  int64_t batch = 0, n_params = 0, n_matmul_params = 0;
  double flops_per_token = 0;
  int warmup = 0, steps = 0;
  /// ms per timed step: the steps run back to back between two synchronizations, so both are the
  /// interval / steps (the median field is kept for the JSON readers)
  double step_ms_median = 0, step_ms_mean = 0;
  int64_t grad_accum = 1;   ///< micro-batches per step
  double tokens_per_s = 0;  ///< batch·seq_len·grad_accum / step time
  double tflops = 0;        ///< flops_per_token · tokens_per_s / 1e12
  double mfu = 0;           ///< tflops / peak_tflops (= mfu_bf16, kept for older readers)
  double mfu_bf16 = 0;      ///< tflops / peak_tflops (dense BF16)
  double mfu_fp8 = 0;       ///< tflops / peak_tflops_fp8 (dense FP8)
  /// GiB (2^30 bytes), CUDA only (std::nullopt on the CPU). peak_mem_gib: the most the backend had
  /// allocated at once during the row (model, optimizer, activations, scratch; the memory pool's
  /// high-water mark, reset before the model is built). device_mem_gib: the device's used memory
  /// (cudaMemGetInfo total − free: also the CUDA context, library handles and the pool's cached
  /// memory) after the last step.
  std::optional<double> peak_mem_gib, device_mem_gib;
  double loss_first = 0, loss_last = 0;  ///< nats/token, first warm-up step and last timed step
};

/// The micro-batch (sequences per forward + backward pass) of `model` under `opt`:
/// opt.model_batch[model] if present, else opt.tokens_per_step / (opt.seq_len · opt.grad_accum) if
/// tokens_per_step > 0, else opt.batch. Throws octet::Error if the result is < 1 or tokens_per_step
/// is not a multiple of seq_len · grad_accum.
int64_t bench_batch(const TrainBenchOptions& opt, const std::string& model);

/// Runs every (model, arm) pair; on_row is called after each (with opt.profile, on_profile too, with
/// the op classes sorted by time, largest first). Throws octet::Error for bad options before any
/// work, e.g. warmup or steps < 1, an unknown model or arm, a model or arm named twice, a batch
/// that does not split, a batch given for a model not run, a peak TFLOP/s <= 0.
void bench_train(
    const TrainBenchOptions& opt, const std::function<void(const TrainBenchRow&)>& on_row,
    const std::function<void(const TrainBenchRow&, const std::vector<TrainBenchOp>&)>& on_profile = {});

/// The rows `octet bench attention` can time, by their "impl" name, in the order a case prints
/// them: the cuDNN peers, octet's flash kernels from FP8 codes, then octet's Attention from BF16/F32
/// (flash FP8 matched, stale, with per-(head, block) scales; cuDNN behind octet's interface; the
/// unfused form). docs/benchmarks.md describes each.
const std::vector<std::string>& attention_bench_row_names();

/// A comma-separated list of those names (`octet bench attention --rows`) as a list; "" gives the
/// empty list, which means every row. Throws octet::Error naming the problem for an empty item, a
/// name given twice, or an unknown name (the error lists the known ones).
std::vector<std::string> parse_attention_bench_rows(const std::string& csv);

/// True when `rows` (parse_attention_bench_rows' result) is empty or holds `name`.
bool attention_bench_row_wanted(const std::vector<std::string>& rows, const std::string& name);

}  // namespace octet

#ifdef OCTET_WITH_CUDA
namespace octet::cuda {

struct BenchEnv {
  std::string gpu;          ///< cudaDeviceProp::name
  int runtime_version = 0;  ///< cudaRuntimeGetVersion
  int driver_version = 0;
  size_t cublaslt_version = 0;
  int64_t cudnn_version = 0;  ///< cudnnGetVersion() of the loaded cuDNN (e.g. 91900)
  int sm_count = 0;
  size_t l2_bytes = 0;
};
BenchEnv bench_env();

struct GemmBenchRow {
  int d_model = 0;
  std::string layer, pass,
      mode;  ///< layer: qkv|out|up|down; pass: fwd|dgrad|wgrad; mode: bf16|fp8-tensor|fp8-block
  int64_t M = 0, N = 0, K = 0;
  double ms = 0, tflops = 0;
  int reps = 0;
  bool fallback = false;  ///< the FP8 GEMM ran through the dequantize fallback
};

struct GemmBenchOptions {
  std::vector<int> d_models{768, 1024, 2048, 4096};
  int64_t tokens = 16384;  ///< tokens per step (M of the forward)
  int mlp_ratio = 4;
  int warmup = 10, reps = 50;
  std::vector<std::string> modes{"bf16", "fp8-tensor", "fp8-block"};
};

/// Runs the sweep; on_row is called after each measurement.
void bench_gemm(const GemmBenchOptions& opt, const std::function<void(const GemmBenchRow&)>& on_row);

struct QuantBenchRow {
  std::string recipe, role;
  std::string dtype = "f32";    ///< source dtype
  std::string kernel = "auto";  ///< auto (the quantizer's choice) | tensor | tile (quantize.h)
  int64_t rows = 0, cols = 0;
  double ms = 0, gbps = 0;  ///< gbps: (source bytes read + 2 x 1 B written) per element / time
  int reps = 0;
};

/// The quantize kernels (quantize.h) producing both copies of an FP32 [rows, cols] tensor, per
/// recipe; bandwidth counts the fewest bytes (one FP32 read, two FP8 writes), so pre-passes show.
/// Then the BF16 activations [8192, 768], [8192, 3072] (GPT-2 small) and [8192, 2048], [8192, 8192]
/// (1.3B) with the tensor scales (tensor-current, tensor-current with a given amax, tensor-delayed)
/// on the tensor-scaled and on the tile kernel.
void bench_quantize(int64_t rows, int64_t cols, int warmup, int reps,
                    const std::function<void(const QuantBenchRow&)>& on_row);

struct OpsBenchRow {
  std::string
      op;  ///< quantize.act | quantize.weight | amax.* | layout.* | gelu.* | layernorm.* | cross_entropy
  std::string model;  ///< 124M | 350M (GPT-2 shapes, 8 x 1024 tokens) | any
  int64_t rows = 0, cols = 0;
  double bytes = 0;         ///< the fewest bytes the op moves (inputs read once, outputs written once)
  double ms = 0, gbps = 0;  ///< median time; bytes / time
  int reps = 0;
};

/// The memory-bound kernels of a training step (src/bench/cuda/bench_ops.cpp), each timed alone
/// on the 124M, 350M and 1.3B shapes with BF16 activations; on_row is called after each measurement.
void bench_ops(int warmup, int reps, const std::function<void(const OpsBenchRow&)>& on_row);

struct AttnBenchRow {
  /// octet's rows: octet-fp8-flash (matched) | octet-fp8-flash-stale | octet-fp8-flash-head-block
  /// (the flash FP8 kernels through octet's Attention) | octet-fp8-flash-kernels |
  /// octet-fp8-flash-stale-kernels (the kernels alone on FP8 codes) | octet-bf16-cudnn (cuDNN's SDPA behind
  /// octet's Attention, as the bf16 arms run it) | unfused-bf16 | unfused-fp8-stale | unfused-fp8-matched
  /// (the unfused form); the peers: cudnn-bf16 | cudnn-fp8-stale (cuDNN called directly)
  std::string impl;
  std::string case_name;  ///< octet/attention_cases.h attention_case_name
  int64_t batch = 0, heads = 0, kv_heads = 0, seq = 0, seq_k = 0, head_dim = 0;
  bool causal = true;
  double fwd_ms = 0, bwd_ms = 0, fwd_tflops = 0, bwd_tflops = 0;
  int reps = 0;
  /// Relative L2 errors of O and dQ against the FP64 oracle on sampled rows
  /// (bench/cuda/attention_rows_check.h); NaN where not measured.
  double err_o = 0, err_dq = 0;
  /// FlashAttention-3's bound for octet's rows, per output: 2 × the CPU twin's error (same
  /// precision, same rows) + 1e-3; NaN for the peers.
  double err_bound_o = 0, err_bound_dq = 0;
  /// The peers' time over this row's (> 1: this row is faster), forward and backward; NaN where
  /// the peer did not run.
  double fwd_vs_cudnn_bf16 = 0, bwd_vs_cudnn_bf16 = 0, fwd_vs_cudnn_fp8 = 0, bwd_vs_cudnn_fp8 = 0;
  /// The flash FP8 forward's kernel flavor for octet's flash rows: "wgmma" | "mma_sync"
  /// (src/cuda/attention/flash/flash.h; OCTET_FLASH_FORWARD forces one); empty for the other rows.
  std::string fwd_kernel;
  /// The wgmma forward's exponentials on the FMA units, n-tiles of every 8 (flash.h
  /// forward_exp2_poly; OCTET_FLASH_EXP2_POLY sets it): 0..3 for its rows, −1 for the others.
  int fwd_exp2_poly = -1;
  /// The wgmma forward's grid for the same rows: 1 persistent, 0 one CTA per work item (flash.h
  /// forward_persistent; OCTET_FLASH_PERSISTENT sets it); −1 for the other rows.
  int fwd_persistent = -1;
  /// The wgmma forward's GEMM order for the same rows: 1 the consumers' ping-pong, 0 none (flash.h
  /// forward_pingpong; OCTET_FLASH_PINGPONG sets it); −1 for the other rows.
  int fwd_pingpong = -1;
  /// The query-block-major flash kernels' work order (the forwards, the delta pre-pass) for the
  /// flash rows: heads taken head_group at a time, 0 all in one group (flash.h flash_head_group;
  /// OCTET_FLASH_HEAD_GROUP sets it); −1 for the other rows.
  int head_group = -1;
  /// The flash FP8 backward's kernel flavor for the same rows: "wgmma" | "mma_sync"
  /// (flash.h select_backward_kernel; OCTET_FLASH_BACKWARD forces one).
  std::string bwd_kernel;
  /// The key-block-major backward's work order for the same rows: KV heads taken bwd_head_group at
  /// a time, 0 all in one group (flash.h resolved_key_head_group; OCTET_FLASH_BWD_HEAD_GROUP sets
  /// it, else chosen from the case and the SM count); −1 for the other rows.
  int bwd_head_group = -1;
  /// The wgmma backward's dQ path for the same rows: 1 TMA bulk reduces from shared memory, 0 FP32
  /// atomics (flash.h backward_dq_tma; OCTET_FLASH_BWD_DQ_TMA sets it); −1 for the other rows.
  int bwd_dq_tma = -1;
  /// The wgmma backward's product order for the same rows: 1 Sᵀ and dPᵀ issued together (head_dim
  /// 64 only), 0 one after the other (flash.h backward_sdp_overlap; OCTET_FLASH_BWD_SDP_OVERLAP sets
  /// it); −1 for the other rows.
  int bwd_sdp_overlap = -1;
  /// For octet's flash rows as a user calls them with the wgmma backward: 1 dK and dV written into
  /// the caller's tensors by the kernel's epilogue, 0 through FP32 accumulators and an unpad pass
  /// (flash.h backward_dkv_direct; OCTET_FLASH_BWD_DKV_DIRECT sets it); −1 for the other rows.
  int bwd_dkv_direct = -1;
  /// The pack kernel of the operand glue for octet's rows from BF16 or F32 inputs: "staged" |
  /// "codes" (src/cuda/attention/glue/glue.h PackKernel; OCTET_ATTN_PACK picks it); empty otherwise.
  std::string pack_kernel;
  /// block_q = block_k of octet's FP8 flash rows (AttnBenchOptions::tile); 0 for the other rows.
  int64_t tile = 0;
  /// The dtype of q, k, v, o, dO, dQ, dK, dV for octet's rows as a user calls them ("bf16" |
  /// "f32": the operand glue included), or "fp8" for the flash kernels alone on codes packed
  /// beforehand (what cuDNN's FP8 rows time); empty for the cuDNN peers' rows.
  std::string input_dtype;
};

struct AttnBenchOptions {
  /// The shapes (octet/attention_cases.h): the bench set by default.
  std::vector<AttentionCase> cases = attention_cases(AttentionCaseSet::Bench);
  int warmup = 3, reps = 20;
  /// The activations' dtype for octet's rows: BF16 as the trainer passes them (the operand glue
  /// reads them without a widening copy), or F32.
  DType input_dtype = DType::BF16;
  /// Only these rows (attention_bench_row_names; parse_attention_bench_rows), empty: every row. A
  /// row left out is not run, and the ratios to a peer left out are null.
  std::vector<std::string> rows;
  /// block_q = block_k of octet's FP8 flash rows (AttentionConfig): the dS scale tile and the
  /// forward's key tile, 128 or 64 (64 runs the warp-specialized wgmma backward on sm_90).
  int64_t tile = 128;
};

/// A row of case c with its times filled and the FLOP convention applied (TFLOP/s from ms):
/// forward 4·B·H·Tq·Tk·D (halved if causal), backward 2.5x that (FlashAttention's convention).
AttnBenchRow attn_bench_row(const AttentionCase& c, const AttnBenchOptions& opt, const char* impl,
                            double fwd_ms, double bwd_ms);

/// Per case: the cuDNN peers first, then octet's rows (flash FP8 kernels, cuDNN behind octet's
/// Attention, the unfused form), forward and backward through the Attention interface, each with
/// its error against the FP64 oracle and its time as a ratio to the peers of the same case.
/// on_row is called after each row.
void bench_attention(const AttnBenchOptions& opt, const std::function<void(const AttnBenchRow&)>& on_row);

/// The correctness half alone for one of octet's rows (no timing): run impl on case c from
/// deterministic inputs and return the row with err_o, err_dq, err_bound_o, err_bound_dq (the GPU
/// test).
/// Throws octet::Error for an unknown impl.
AttnBenchRow check_attention_case(const AttentionCase& c, const std::string& impl,
                                  DType input_dtype = DType::BF16);

/// The names of octet's rows, in the order bench_attention runs them.
std::vector<std::string> attention_bench_impls();

}  // namespace octet::cuda
#endif  // OCTET_WITH_CUDA
