// src/bench/cuda/bench_timer.h — CUDA-event timing for the benchmarks: warm-up calls, then one event pair
// around each repetition on the stream, and the median of the repetitions (octet/bench.h: method).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "cuda/runtime/check.h"

namespace octet::cuda {

// Copies of each operand so that one rotation reads more than the L2 cache (bench.h: method).
inline int rotation_copies(double bytes_per_call, size_t l2_bytes) {
  const double want = 3.0 * double(std::max<size_t>(l2_bytes, 1)) / std::max(bytes_per_call, 1.0);
  return std::clamp(int(want) + 1, 1, 16);
}

class EventTimer {
 public:
  explicit EventTimer(cudaStream_t stream) : stream_(stream) {}
  ~EventTimer() {
    for (auto e : events_) cudaEventDestroy(e);
  }
  /// Calls fn(i) warmup times untimed, then reps times timed; returns the median in milliseconds.
  template <typename Fn>
  double median_ms(int warmup, int reps, Fn&& fn) {
    for (int i = 0; i < warmup; ++i) fn(i);
    while (int(events_.size()) < 2 * reps) {
      cudaEvent_t e;
      OCTET_CUDA_CHECK(cudaEventCreate(&e));
      events_.push_back(e);
    }
    for (int i = 0; i < reps; ++i) {
      OCTET_CUDA_CHECK(cudaEventRecord(events_[size_t(2 * i)], stream_));
      fn(warmup + i);
      OCTET_CUDA_CHECK(cudaEventRecord(events_[size_t(2 * i + 1)], stream_));
    }
    OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::vector<float> ms(static_cast<size_t>(reps));
    for (int i = 0; i < reps; ++i)
      OCTET_CUDA_CHECK(
          cudaEventElapsedTime(&ms[size_t(i)], events_[size_t(2 * i)], events_[size_t(2 * i + 1)]));
    std::nth_element(ms.begin(), ms.begin() + reps / 2, ms.end());
    return double(ms[size_t(reps / 2)]);
  }

 private:
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
};

}  // namespace octet::cuda
