// octet/bench.h — the benchmarks behind `octet bench` (docs/design.md §"Layers of the code": benchmark code lives in
// src/bench, the library octet_bench, outside the production libraries):
//   bench_train / bench_model_config   whole training steps per precision arm on any backend
//                                      (src/bench/bench_train.h; tokens/s, TFLOP/s, MFU)
//   octet::cuda::bench_gemm / bench_quantize / bench_attention / bench_env
//                                      the GPU benchmarks, only in a CUDA build (OCTET_WITH_CUDA;
//                                      src/bench/cuda/bench.h; CUDA events, median of repetitions)
// The declarations live next to their implementations; this header is what the CLI and other
// callers include. Link octet_bench.
#pragma once

#include "bench/bench_train.h"
#ifdef OCTET_WITH_CUDA
#include "bench/cuda/bench.h"
#endif
