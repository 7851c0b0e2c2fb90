// src/cuda/ops/elementwise.cu — pointwise and layout kernels of the CUDA backend: fill, convert, axpy,
// scale, GELU (tanh form, Hendrycks & Gimpel 2016), SwiGLU (Shazeer 2020), embedding
// lookup/scatter-add, RoPE (Su et al., arXiv 2104.09864, rotate-half pairing) and the head-layout
// permutations. Twins of src/cpu/backend/{memory,activations,embedding,rope,heads}.cpp; see ops.h.
// Kernels are templated on the element types of their act tensors (typed.cuh: FP32 loads, one
// rounding on store). SwiGLU is evaluated in double, as the CPU twin does; GELU in FP32 (see its
// kernels). axpy, scale, GELU and the head layouts move 8 elements per thread with 16-byte accesses.
#include <cuda_runtime.h>

#include <algorithm>
#include <cub/device/device_radix_sort.cuh>

#include "cuda/attention/act_layout.h"
#include "cuda/runtime/check.h"
#include "cuda/ops/ops.h"
#include "cuda/ops/reduce_util.cuh"
#include "cuda/runtime/typed.cuh"

namespace octet::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b < 1) b = 1;
  if (b > 132 * 64) b = 132 * 64;  // grid-stride loops beyond this
  return unsigned(b);
}

// Launches kernel<<<grid for n, kThreads>>>(args...) on s; nothing for n == 0.
template <class... P, class... A>
void launch(void (*kernel)(P...), int64_t n, cudaStream_t s, A... args) {
  if (n <= 0) return;
  kernel<<<blocks_for(n), kThreads, 0, s>>>(args...);
  OCTET_CUDA_LAUNCH_CHECK();
}

// Threads a vectorized pointwise kernel wants for n elements: one per 8 (plus the tail), or one
// per element.
int64_t work_items(int64_t n, bool vec) { return vec ? n / 8 + n % 8 : n; }

#define OCTET_GRID_STRIDE(i, n)                                                    \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < int64_t(n); \
       i += int64_t(gridDim.x) * blockDim.x)

template <class T>
__global__ void fill_kernel(T* x, T v, int64_t n) {
  OCTET_GRID_STRIDE(i, n) x[i] = v;
}
template <class TD, class TS>
__global__ void convert_kernel(TD* dst, const TS* src, int64_t n) {
  OCTET_GRID_STRIDE(i, n) st(dst, i, ld(src, i));
}
// vec: 8 elements per thread through ld8/st8 (16-byte accesses for BF16), then the n % 8 tail one
// each; the same FP32 expression per element either way, so the same bits.
template <class TX, class TY>
__global__ void axpy_kernel(float a, const TX* x, TY* y, int64_t n, bool vec) {
  const int64_t nv = vec ? n / 8 : 0;
  OCTET_GRID_STRIDE(i, nv) {
    float vx[8], vy[8];
    ld8(x + 8 * i, vx);
    ld8(y + 8 * i, vy);
    for (int j = 0; j < 8; ++j) vy[j] = vy[j] + a * vx[j];
    st8(y + 8 * i, vy);
  }
  OCTET_GRID_STRIDE(k, n - 8 * nv) {
    const int64_t i = 8 * nv + k;
    st(y, i, ld(y, i) + a * ld(x, i));
  }
}
template <class T>
__global__ void scale_kernel(float a, T* x, int64_t n, bool vec) {
  const int64_t nv = vec ? n / 8 : 0;
  OCTET_GRID_STRIDE(i, nv) {
    float v[8];
    ld8(x + 8 * i, v);
    for (int j = 0; j < 8; ++j) v[j] = v[j] * a;
    st8(x + 8 * i, v);
  }
  OCTET_GRID_STRIDE(k, n - 8 * nv) {
    const int64_t i = 8 * nv + k;
    st(x, i, ld(x, i) * a);
  }
}

__device__ __forceinline__ uint32_t hash32(uint32_t x) {  // a 32-bit integer mix (xorshift-multiply)
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}

__global__ void fill_random_kernel(float* x, size_t n, uint32_t seed, float sigma) {
  OCTET_GRID_STRIDE(i, n) {
    float s = 0.0f;
    for (uint32_t k = 0; k < 4; ++k)
      s += float(hash32(uint32_t(i) * 4u + k + hash32(seed + uint32_t(i >> 32))) >> 8) * (1.0f / 16777216.0f);
    x[i] = sigma * (s - 2.0f) * 1.7320508f;  // Irwin–Hall(4): mean 2, variance 1/3
  }
}

// GELU (tanh form) in FP32: the CPU twin evaluates 0.5·x·(1 + tanh(u)) in double; FP64 runs at
// 1/64 of the FP32 rate on an H100/H200 and made these kernels compute-bound at ~5x their memory
// time. Here 0.5·(1 + tanh(u)) = σ(2u) = 1/(1 + exp(−2u)) and 1 − tanh²(u) = 4σ(2u)(1 − σ(2u)):
// the same function, without the cancellation of 1 + tanh(u) in the left tail. exp is the
// hardware's ex2 (__expf: 2 + 1.17·|x| ulps by the CUDA guide, so up to ~100 ulps where −2u nears 88
// in the far left tail, ~1e-5 relative) and 1/(1 + e) the correctly rounded reciprocal (__frcp_rn,
// the bits of 1.0f / (1 + e) without the division's software sequence). The outputs differ from the
// twin's by at most ~1e-5 relative, far below one BF16 ulp (docs/cuda.md §"Memory-bound kernels").
constexpr float kGeluC = 0.044715f;
constexpr float kSqrt2OverPi = 0.79788456080286535588f;

// σ(2u) and 1 − σ(2u) for u = √(2/π)·(v + c·v³), with e = exp(−2u): σ = 1/(1 + e), and
// 1 − σ = e·σ where σ > 1/2 (no cancellation in the right tail either).
__device__ __forceinline__ float2 gelu_sigma(float v) {
  const float u = kSqrt2OverPi * (v + kGeluC * v * v * v);
  const float e = __expf(-2.0f * u);  // +inf for u < ~-44: s = 0, 1 − s = 1
  const float s = __frcp_rn(1.0f + e);
  return make_float2(s, u > 0.0f ? e * s : 1.0f - s);
}
__device__ __forceinline__ float gelu_f(float v) { return v * gelu_sigma(v).x; }
__device__ __forceinline__ float gelu_grad_f(float v, float dy) {
  const float2 s = gelu_sigma(v);
  const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluC * v * v);
  return dy * (s.x + 2.0f * v * s.x * s.y * du);
}

// Vectorized pointwise loops: with `vec` (every pointer 16-byte aligned) the first n/8·8 elements
// go 8 at a time (ld8/st8), the rest one at a time.
// amax (may be null): max of |y| as stored, reduced into *amax (reduce_util.cuh block_amax_out).
template <class TX, class TY>
__global__ void gelu_forward_kernel(const TX* x, TY* y, int64_t n, bool vec, unsigned* amax) {
  __shared__ unsigned scratch[32];
  const int64_t nv = vec ? n / 8 : 0;
  unsigned m = 0;
  OCTET_GRID_STRIDE(i, nv) {
    float v[8];
    ld8(x + 8 * i, v);
    for (int j = 0; j < 8; ++j) {
      v[j] = gelu_f(v[j]);
      m = max(m, stored_abs_bits(y, v[j]));
    }
    st8(y + 8 * i, v);
  }
  OCTET_GRID_STRIDE(k, n - 8 * nv) {
    const int64_t i = 8 * nv + k;
    const float v = gelu_f(ld(x, i));
    m = max(m, stored_abs_bits(y, v));
    st(y, i, v);
  }
  block_amax_out(m, scratch, amax);
}
template <class TX, class TD, class TG>
__global__ void gelu_backward_kernel(const TX* x, const TD* dy, TG* dx, int64_t n, bool vec, unsigned* amax) {
  __shared__ unsigned scratch[32];
  const int64_t nv = vec ? n / 8 : 0;
  unsigned m = 0;
  OCTET_GRID_STRIDE(i, nv) {
    float v[8], g[8];
    ld8(x + 8 * i, v);
    ld8(dy + 8 * i, g);
    for (int j = 0; j < 8; ++j) {
      v[j] = gelu_grad_f(v[j], g[j]);
      m = max(m, stored_abs_bits(dx, v[j]));
    }
    st8(dx + 8 * i, v);
  }
  OCTET_GRID_STRIDE(k, n - 8 * nv) {
    const int64_t i = 8 * nv + k;
    const float v = gelu_grad_f(ld(x, i), ld(dy, i));
    m = max(m, stored_abs_bits(dx, v));
    st(dx, i, v);
  }
  block_amax_out(m, scratch, amax);
}

__device__ __forceinline__ double sigmoid(double g) { return 1.0 / (1.0 + exp(-g)); }

template <class TH, class TY>
__global__ void swiglu_forward_kernel(const TH* h, TY* y, int64_t rows, int64_t f) {
  OCTET_GRID_STRIDE(i, rows * f) {
    const int64_t r = i / f, c = i % f;
    const double g = ld(h, r * 2 * f + c);
    st(y, i, float(g * sigmoid(g) * double(ld(h, r * 2 * f + f + c))));
  }
}
template <class TH, class TD, class TG>
__global__ void swiglu_backward_kernel(const TH* h, const TD* dy, TG* dh, int64_t rows, int64_t f) {
  OCTET_GRID_STRIDE(i, rows * f) {
    const int64_t r = i / f, c = i % f;
    const double g = ld(h, r * 2 * f + c), u = ld(h, r * 2 * f + f + c), d = ld(dy, i);
    const double s = sigmoid(g);
    st(dh, r * 2 * f + c, float(d * u * s * (1.0 + g * (1.0 - s))));
    st(dh, r * 2 * f + f + c, float(d * g * s));
  }
}

template <class T>
__global__ void embedding_forward_kernel(const int32_t* ids, const float* table, T* out, int64_t n,
                                         int64_t dim) {
  OCTET_GRID_STRIDE(i, n * dim) st(out, i, table[int64_t(ids[i / dim]) * dim + i % dim]);
}
__global__ void iota_kernel(uint32_t* p, int64_t n) { OCTET_GRID_STRIDE(i, n) p[i] = uint32_t(i); }
// The embedding gradient in a fixed order: with the ids sorted stably beside their positions, the
// first sorted row of each id adds, column by column, every dout row of that id in position order
// to the table row — the CPU twin's order of FP32 additions, so both backends give the same bits,
// run after run (no atomics).
template <class T>
__global__ void embedding_backward_kernel(const uint32_t* sorted_ids, const uint32_t* pos, const T* dout,
                                          float* dtable, int64_t n, int64_t dim) {
  OCTET_GRID_STRIDE(idx, n * dim) {
    const int64_t i = idx / dim;
    const uint32_t id = sorted_ids[i];
    if (i > 0 && sorted_ids[i - 1] == id) continue;  // not the first row of its id
    const int64_t c = idx % dim;
    float* const out = dtable + int64_t(id) * dim + c;
    float acc = *out;
    for (int64_t r = i; r < n && sorted_ids[r] == id; ++r)
      acc = __fadd_rn(acc, ld(dout, int64_t(pos[r]) * dim + c));
    *out = acc;
  }
}
// Key bits the sort needs for ids < vocab.
int id_bits(int64_t vocab) {
  int b = 1;
  while (b < 32 && (int64_t(1) << b) < vocab) ++b;
  return b;
}
constexpr size_t align256(size_t b) { return (b + 255) / 256 * 256; }

// One thread per rotation pair (row, i), row the row's place in memory; the angle in double as the
// CPU twin's table.
template <class T>
__global__ void rope_kernel(T* x, int64_t rows, int64_t heads, int64_t seq, int64_t head_dim, double theta,
                            double sign, bool tokens_major) {
  const int64_t half = head_dim / 2;
  OCTET_GRID_STRIDE(idx, rows * half) {
    const int64_t i = idx % half, row = idx / half, t = tokens_major ? row / heads % seq : row % seq;
    const double inv_freq = pow(theta, -2.0 * double(i) / double(head_dim));
    double sn, cs;
    sincos(double(t) * inv_freq * sign, &sn, &cs);
    T* v = x + row * head_dim;
    const double x1 = ld(v, i), x2 = ld(v, i + half);
    st(v, i, float(x1 * cs - x2 * sn));
    st(v, i + half, float(x1 * sn + x2 * cs));
  }
}

// tokens [B, T, width*D] <-> heads [B, n, T, D] (heads_tokens_major: [B, T, n, D]) for heads
// [first, first + n) of the token tensor. Each (b, h, t) row of D elements is contiguous on both
// sides: a thread moves `kVec` consecutive elements (8 with ld8/st8 when D % 8 == 0 and the pointers
// are aligned, else 1), so a warp reads and writes whole rows (coalesced) and the index arithmetic
// is paid once per vector.
template <int kVec, class TS, class TD>
__global__ void move_heads_kernel(const TS* src, TD* dst, int64_t batch, int64_t seq, int64_t width,
                                  int64_t first, int64_t n, int64_t head_dim, bool to_heads,
                                  bool heads_tokens_major) {
  const int64_t dv = head_dim / kVec;
  OCTET_GRID_STRIDE(idx, batch * n * seq * dv) {
    const int64_t d = (idx % dv) * kVec;
    const int64_t row = idx / dv;  // (b, h, t) in the heads layout
    const int64_t t = row % seq, bh = row / seq;
    const int64_t h = bh % n, b = bh / n;
    const int64_t head = act_row_offset_bh(heads_tokens_major, b, h, t, n, seq, head_dim) + d;
    const int64_t tok = ((b * seq + t) * width + first + h) * head_dim + d;
    const int64_t from = to_heads ? tok : head, to = to_heads ? head : tok;
    if constexpr (kVec == 8) {
      float v[8];
      ld8(src + from, v);
      st8(dst + to, v);
    } else {
      st(dst, to, ld(src, from));
    }
  }
}

// The tokens-major split and merge (qkv_layout_launch): q, k and v [B·T, n·D] are column blocks of
// qkv [B·T, width·D], so each is a strided 2-D copy of rows. One launch moves all three: blockIdx.z
// picks the part, blockIdx.y walks the rows, a thread moves 8 consecutive elements (16-byte accesses)
// — no per-element index division (the generic kernel above spends ~4 64-bit divisions per vector
// and ran at ~2.3 TB/s on an H200).
struct QkvRows {
  void* part[3];      // q, k, v
  int64_t cols8[3];   // n·D / 8 of each part
  int64_t offset[3];  // first column of each part in qkv, in elements
  int64_t rows, qkv_ld;
};
template <class TQ, class TP>
__global__ void qkv_rows_kernel(TQ* qkv, QkvRows a, bool to_parts) {
  // the part's fields by selects, not a.part[z]: indexing the parameter arrays with a run-time z
  // copies the struct to local memory in every thread (that form ran at half the bandwidth)
  const int z = blockIdx.z;
  TP* part = static_cast<TP*>(z == 0 ? a.part[0] : z == 1 ? a.part[1] : a.part[2]);
  const int64_t cols8 = z == 0 ? a.cols8[0] : z == 1 ? a.cols8[1] : a.cols8[2];
  const int64_t offset = z == 0 ? a.offset[0] : z == 1 ? a.offset[1] : a.offset[2];
  for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y)
    for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < cols8;
         c += int64_t(gridDim.x) * blockDim.x) {
      const int64_t at_qkv = r * a.qkv_ld + offset + 8 * c, at_part = (r * cols8 + c) * 8;
      float v[8];
      if (to_parts) {
        ld8(qkv + at_qkv, v);
        st8(part + at_part, v);
      } else {
        ld8(part + at_part, v);
        st8(qkv + at_qkv, v);
      }
    }
}

// src -> dst for heads [first, first + n) of a token tensor of `width` heads (see the kernel).
void move_heads(const Tensor& src, const Tensor& dst, int64_t batch, int64_t seq, int64_t width,
                int64_t first, int64_t n, int64_t head_dim, bool to_heads, cudaStream_t s,
                bool heads_tokens_major = false) {
  const bool vec = head_dim % 8 == 0 && vec_ok({src.data, dst.data});
  dispatch_act(
      [&](auto ts, auto td) {
        using TS = std::remove_pointer_t<decltype(ts)>;
        using TD = std::remove_pointer_t<decltype(td)>;
        const int64_t rows = batch * n * seq;
        if (vec)
          launch(move_heads_kernel<8, TS, TD>, rows * head_dim / 8, s, typed(src, ts), typed(dst, td), batch,
                 seq, width, first, n, head_dim, to_heads, heads_tokens_major);
        else
          launch(move_heads_kernel<1, TS, TD>, rows * head_dim, s, typed(src, ts), typed(dst, td), batch, seq,
                 width, first, n, head_dim, to_heads, heads_tokens_major);
      },
      src.dtype, dst.dtype);
}

}  // namespace

// In the launchers below, `a`, `b`, `c` are type tags from dispatch_act (typed.cuh).
#define OCTET_T(tag) std::remove_pointer_t<decltype(tag)>

void fill_launch(const Tensor& x, double value, cudaStream_t s) {
  const int64_t n = x.numel();
  switch (x.dtype) {
    case DType::F64:
      launch(fill_kernel<double>, n, s, x.f64(), value, n);
      return;
    case DType::F32:
      launch(fill_kernel<float>, n, s, x.f32(), float(value), n);
      return;
    case DType::BF16:
      launch(fill_kernel<Bf16>, n, s, static_cast<Bf16*>(x.data), Bf16{bf16_from_float(float(value))}, n);
      return;
    case DType::I32:
      launch(fill_kernel<int32_t>, n, s, x.i32(), int32_t(value), n);
      return;
    default:
      OCTET_FAIL("fill: unsupported dtype " + x.str());
  }
}
void convert_launch(const Tensor& dst, const Tensor& src, cudaStream_t s) {
  if (dst.dtype == src.dtype) {
    if (dst.data != src.data && src.numel() > 0)
      OCTET_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.bytes(), cudaMemcpyDeviceToDevice, s));
    return;
  }
  dispatch_act(
      [&](auto a, auto b) {
        launch(convert_kernel<OCTET_T(a), OCTET_T(b)>, src.numel(), s, typed(dst, a), typed(src, b),
               src.numel());
      },
      dst.dtype, src.dtype);
}
void fill_random_launch(float* x, size_t n, uint32_t seed, float sigma, cudaStream_t s) {
  launch(fill_random_kernel, int64_t(n), s, x, n, seed, sigma);
}
void axpy_launch(float alpha, const Tensor& x, const Tensor& y, cudaStream_t s) {
  const bool vec = vec_ok({x.data, y.data});
  dispatch_act(
      [&](auto a, auto b) {
        launch(axpy_kernel<OCTET_T(a), OCTET_T(b)>, work_items(x.numel(), vec), s, alpha, typed(x, a),
               typed(y, b), x.numel(), vec);
      },
      x.dtype, y.dtype);
}
void scale_launch(float alpha, const Tensor& x, cudaStream_t s) {
  const bool vec = vec_ok({x.data});
  dispatch_act(
      [&](auto a) {
        launch(scale_kernel<OCTET_T(a)>, work_items(x.numel(), vec), s, alpha, typed(x, a), x.numel(), vec);
      },
      x.dtype);
}
void gelu_forward_launch(const Tensor& x, const Tensor& y, cudaStream_t s, unsigned* amax) {
  const bool vec = vec_ok({x.data, y.data});
  dispatch_act(
      [&](auto a, auto b) {
        launch(gelu_forward_kernel<OCTET_T(a), OCTET_T(b)>, work_items(x.numel(), vec), s, typed(x, a),
               typed(y, b), x.numel(), vec, amax);
      },
      x.dtype, y.dtype);
}
void gelu_backward_launch(const Tensor& x, const Tensor& dy, const Tensor& dx, cudaStream_t s,
                          unsigned* amax) {
  const bool vec = vec_ok({x.data, dy.data, dx.data});
  dispatch_act(
      [&](auto a, auto b, auto c) {
        launch(gelu_backward_kernel<OCTET_T(a), OCTET_T(b), OCTET_T(c)>, work_items(x.numel(), vec), s,
               typed(x, a), typed(dy, b), typed(dx, c), x.numel(), vec, amax);
      },
      x.dtype, dy.dtype, dx.dtype);
}
void swiglu_forward_launch(const Tensor& h, const Tensor& y, int64_t rows, int64_t f, cudaStream_t s) {
  dispatch_act(
      [&](auto a, auto b) {
        launch(swiglu_forward_kernel<OCTET_T(a), OCTET_T(b)>, rows * f, s, typed(h, a), typed(y, b), rows, f);
      },
      h.dtype, y.dtype);
}
void swiglu_backward_launch(const Tensor& h, const Tensor& dy, const Tensor& dh, int64_t rows, int64_t f,
                            cudaStream_t s) {
  dispatch_act(
      [&](auto a, auto b, auto c) {
        launch(swiglu_backward_kernel<OCTET_T(a), OCTET_T(b), OCTET_T(c)>, rows * f, s, typed(h, a),
               typed(dy, b), typed(dh, c), rows, f);
      },
      h.dtype, dy.dtype, dh.dtype);
}
void embedding_forward_launch(const int32_t* ids, const float* table, const Tensor& out, int64_t n,
                              int64_t dim, cudaStream_t s) {
  dispatch_act(
      [&](auto a) {
        launch(embedding_forward_kernel<OCTET_T(a)>, n * dim, s, ids, table, typed(out, a), n, dim);
      },
      out.dtype);
}
size_t embedding_backward_workspace(int64_t n, int64_t vocab) {
  size_t temp = 0;
  OCTET_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, temp, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr), n, 0, id_bits(vocab)));
  return 3 * align256(size_t(n) * 4) + temp;
}
void embedding_backward_launch(const int32_t* ids, const Tensor& dout, float* dtable, int64_t n, int64_t dim,
                               int64_t vocab, void* workspace, size_t workspace_bytes, cudaStream_t s) {
  if (n <= 0) return;
  const size_t a = align256(size_t(n) * 4);
  OCTET_CHECK(workspace_bytes >= 3 * a, "embedding_backward: workspace too small");
  char* const w = static_cast<char*>(workspace);
  auto* const keys = reinterpret_cast<uint32_t*>(w);
  auto* const pos_in = reinterpret_cast<uint32_t*>(w + a);
  auto* const pos = reinterpret_cast<uint32_t*>(w + 2 * a);
  size_t temp_bytes = workspace_bytes - 3 * a;
  launch(iota_kernel, n, s, pos_in, n);
  // ids >= 0 sort as uint32; the radix sort is stable: each id's positions stay in ascending order
  OCTET_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(w + 3 * a, temp_bytes,
                                                   reinterpret_cast<const uint32_t*>(ids), keys, pos_in, pos,
                                                   n, 0, id_bits(vocab), s));
  dispatch_act(
      [&](auto t) {
        launch(embedding_backward_kernel<OCTET_T(t)>, n * dim, s, keys, pos, typed(dout, t), dtable, n, dim);
      },
      dout.dtype);
}
void rope_launch(const Tensor& x, int64_t rows, int64_t heads, int64_t seq, int64_t head_dim, float theta,
                 bool inverse, bool tokens_major, cudaStream_t s) {
  dispatch_act(
      [&](auto a) {
        launch(rope_kernel<OCTET_T(a)>, rows * (head_dim / 2), s, typed(x, a), rows, heads, seq, head_dim,
               double(theta), inverse ? -1.0 : 1.0, tokens_major);
      },
      x.dtype);
}
void qkv_layout_launch(const Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v, int64_t batch,
                       int64_t seq, int64_t heads, int64_t kv_heads, int64_t head_dim, bool to_heads,
                       bool tokens_major, cudaStream_t s) {
  const int64_t w = heads + 2 * kv_heads;
  const Tensor* parts[3] = {&q, &k, &v};
  const int64_t first[3] = {0, heads, heads + kv_heads}, count[3] = {heads, kv_heads, kv_heads};
  const bool same_part_dtype = q.dtype == k.dtype && q.dtype == v.dtype;
  if (tokens_major && head_dim % 8 == 0 && same_part_dtype && vec_ok({qkv.data, q.data, k.data, v.data})) {
    QkvRows a{{q.data, k.data, v.data}, {}, {}, batch * seq, w * head_dim};
    for (int i = 0; i < 3; ++i) a.cols8[i] = count[i] * head_dim / 8, a.offset[i] = first[i] * head_dim;
    const int threads = int(std::min<int64_t>(256, (a.cols8[0] + 31) / 32 * 32));
    const dim3 grid(unsigned((a.cols8[0] + threads - 1) / threads),
                    unsigned(std::min<int64_t>(a.rows, 65535)), 3);
    if (a.rows == 0) return;
    dispatch_act(
        [&](auto tq, auto tp) {
          qkv_rows_kernel<OCTET_T(tq), OCTET_T(tp)><<<grid, threads, 0, s>>>(typed(qkv, tq), a, to_heads);
          OCTET_CUDA_CHECK(cudaGetLastError());
        },
        qkv.dtype, q.dtype);
    return;
  }
  for (int i = 0; i < 3; ++i) {
    if (to_heads)
      move_heads(qkv, *parts[i], batch, seq, w, first[i], count[i], head_dim, true, s, tokens_major);
    else
      move_heads(*parts[i], qkv, batch, seq, w, first[i], count[i], head_dim, false, s, tokens_major);
  }
}
void heads_tokens_launch(const Tensor& x, const Tensor& y, int64_t batch, int64_t heads, int64_t seq,
                         int64_t head_dim, bool to_tokens, cudaStream_t s) {
  move_heads(x, y, batch, seq, heads, 0, heads, head_dim, !to_tokens, s);
}

}  // namespace octet::cuda
