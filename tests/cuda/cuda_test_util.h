// cuda_test_util.h — helpers of the GPU tests (tests/cuda, label "gpu"): device buffers filled from
// host vectors, seeded inputs that hit zero, subnormal-after-scaling, normal and NaN values, and a
// skip when no GPU is present (the binary is compiled in CI but only run on a GPU machine).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "cuda/runtime/check.h"
#include "octet/backend.h"
#include "octet/fp8.h"
#include "octet/tensor.h"

namespace octet::test {

/// Uploads host FP32 values into t: as they are for F32, each rounded once (bf16_from_float) for
/// BF16.
inline void upload_values(Backend& be, const Tensor& t, const std::vector<float>& x) {
  if (t.dtype == DType::BF16) {
    std::vector<uint16_t> b(x.size());
    for (size_t i = 0; i < x.size(); ++i) b[i] = bf16_from_float(x[i]);
    be.upload(t, b.data());
  } else {
    be.upload(t, x.data());
  }
}

inline bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define OCTET_REQUIRE_GPU() \
  if (!::octet::test::have_gpu()) GTEST_SKIP() << "no CUDA device"

/// Whether the current device is sm_90 (Hopper: the wgmma kernels); false without a GPU.
inline bool device_is_sm90() {
  int dev = 0, major = 0, minor = 0;
  return have_gpu() && cudaGetDevice(&dev) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
         cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess &&
         major == 9 && minor == 0;
}

#define OCTET_REQUIRE_SM90() \
  if (!::octet::test::device_is_sm90()) GTEST_SKIP() << "no sm_90 device (the wgmma kernels need Hopper)"

/// Sets the environment variable `name` to `value` (null: unsets it) for the scope and restores
/// its previous state after (the kernel choices OCTET_FLASH_FORWARD / OCTET_FLASH_BACKWARD).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    value ? setenv(name, value, 1) : unsetenv(name);
  }
  ~ScopedEnv() { had_ ? setenv(name_.c_str(), old_.c_str(), 1) : unsetenv(name_.c_str()); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

/// A device copy of a host vector (plain cudaMalloc; every transfer and the release synchronize the
/// device, so it may be used from any stream in a test).
template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  Dev() = default;
  explicit Dev(const std::vector<T>& h) { set(h); }
  explicit Dev(size_t count) { resize(count); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  Dev(Dev&& o) noexcept : p(o.p), n(o.n) { o.p = nullptr, o.n = 0; }
  ~Dev() {
    if (p) {
      (void)cudaDeviceSynchronize();
      (void)cudaFree(p);
    }
  }
  void resize(size_t count) {
    if (count > n || !p) {
      if (p) {
        OCTET_CUDA_CHECK(cudaDeviceSynchronize());
        OCTET_CUDA_CHECK(cudaFree(p));
      }
      OCTET_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p), (count ? count : 1) * sizeof(T)));
      OCTET_CUDA_CHECK(cudaMemset(p, 0, (count ? count : 1) * sizeof(T)));
    }
    n = count;
  }
  void set(const std::vector<T>& h) {
    resize(h.size());
    OCTET_CUDA_CHECK(cudaDeviceSynchronize());
    OCTET_CUDA_CHECK(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    // From pageable memory cudaMemcpy may return before the DMA lands, and the backends' streams
    // do not wait for the legacy stream: without this, a kernel could read the old contents
    // (seen on a busy H200: zero BF16 GEMM inputs, a zero amax).
    OCTET_CUDA_CHECK(cudaDeviceSynchronize());
  }
  std::vector<T> get() const {
    std::vector<T> h(n);
    OCTET_CUDA_CHECK(cudaDeviceSynchronize());
    OCTET_CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  T* ptr() { return p; }
};

/// x on the device as F32, or as BF16 bit patterns (then x is rounded to BF16 in place, so the host
/// holds the values the device holds); ptr() is the element `offset` elements in (offset 1: a source
/// off 16-byte alignment).
struct DevSource {
  Dev<float> f32;
  Dev<uint16_t> bf16;
  const void* at = nullptr;
  DevSource(std::vector<float>& x, bool as_bf16, size_t offset = 0) {
    if (as_bf16) {
      std::vector<uint16_t> b(x.size());
      for (size_t i = 0; i < x.size(); ++i) b[i] = bf16_from_float(x[i]), x[i] = bf16_to_float(b[i]);
      bf16.set(b);
      at = bf16.ptr() + offset;
    } else {
      f32.set(x);
      at = f32.ptr() + offset;
    }
  }
  const void* ptr() const { return at; }
};

/// n values with a spread of magnitudes (log-uniform over 2^-20..2^8), random signs, ~5% exact
/// zeros: after scaling some become FP8 subnormals or underflow to 0.
inline std::vector<float> awkward_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> e(-20.0f, 8.0f);
  std::uniform_int_distribution<int> coin(0, 99);
  std::vector<float> v(n);
  for (auto& x : v) {
    const int c = coin(rng);
    x = c < 5 ? 0.0f : std::exp2(e(rng)) * (c % 2 ? -1.0f : 1.0f);
  }
  return v;
}

inline std::vector<float> gaussian(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

/// A language-model batch of n tokens: ids uniform over [0, vocab) (mt19937 seeded with `seed`),
/// targets[i] = ids[(i + 1) % n] (next-token, cyclic).
inline void next_token_batch(int64_t n, int32_t vocab, uint32_t seed, std::vector<int32_t>& ids,
                             std::vector<int32_t>& targets) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
  ids.resize(size_t(n));
  targets.resize(size_t(n));
  for (auto& t : ids) t = tok(rng);
  for (int64_t i = 0; i < n; ++i) targets[size_t(i)] = ids[size_t((i + 1) % n)];
}

inline uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

/// Bitwise equality of floats, with every NaN equal to every NaN.
inline bool same_float(float a, float b) { return (a != a && b != b) || bits(a) == bits(b); }

}  // namespace octet::test
