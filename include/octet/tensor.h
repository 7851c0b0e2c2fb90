// octet/tensor.h — the typed, non-owning tensor view that every Backend operation takes, and the
// owning Buffer a backend allocates. (docs/design.md §"Typed tensors")
//
// A Tensor is (pointer, dtype, shape): row-major and contiguous, rank 0..4, in the memory of the
// backend that computes on it (host for "cpu", device for "cuda"). It owns nothing; whoever made it
// keeps the memory alive. Activations and gradients between ops are BF16 or F32; master weights,
// their gradients, optimizer moments and statistics (norm rstd/mean, LSE) are F32; token ids I32;
// loss and reduction accumulators F64; FP8 codes E4M3/E5M2 (one byte each, OCP OFP8 v1.0).
// BF16 values are stored as their 16 high bits of the FP32 pattern (round-to-nearest-even from
// FP32: fp8.h bf16_round), the layout __nv_bfloat16 and torch.bfloat16 use.
//
// Errors: the accessors throw octet::Error naming the expected and actual dtype or shape.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace octet {

enum class DType : uint8_t { F64, F32, BF16, I32, E4M3, E5M2 };

/// Bytes per element: F64 8, F32 4, BF16 2, I32 4, E4M3/E5M2 1.
size_t dtype_size(DType t);
/// "f64" | "f32" | "bf16" | "i32" | "e4m3" | "e5m2".
std::string to_string(DType t);
/// The inverse of to_string; throws octet::Error naming the unknown name and the known ones.
DType parse_dtype(const std::string& s);
/// True for the dtypes activations and gradients may have between ops (F32, BF16).
inline bool is_activation_dtype(DType t) { return t == DType::F32 || t == DType::BF16; }

/// A shape of rank 0..4 (rank 0: a scalar of one element).
struct Shape {
  std::array<int64_t, 4> dims{};
  int rank = 0;
  Shape() = default;
  /// Throws octet::Error for more than 4 dims or a negative extent.
  Shape(std::initializer_list<int64_t> d);
  /// The element count; throws octet::Error for a rank outside 0..4, a negative extent or more
  /// than 2^60 elements (so that a byte count never overflows).
  int64_t numel() const;
  int64_t operator[](int i) const { return dims[size_t(i)]; }
  int64_t back() const { return rank ? dims[size_t(rank - 1)] : 1; }
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string str() const;  ///< "[2, 3, 4]"
};

/// Non-owning view: (data, dtype, shape). An empty Tensor (data == nullptr) means "absent" where a
/// function documents an optional argument.
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::F32;
  Shape shape;

  Tensor() = default;
  Tensor(void* p, DType t, Shape s) : data(p), dtype(t), shape(s) {}

  bool empty() const { return data == nullptr; }
  int64_t numel() const { return shape.numel(); }
  size_t bytes() const { return size_t(numel()) * dtype_size(dtype); }
  /// Rows of the 2-D view [numel / back, back] that row-wise ops (norms, loss, linears) use.
  int64_t rows() const { return shape.back() ? numel() / shape.back() : 0; }
  int64_t cols() const { return shape.back(); }

  /// Typed pointers; throw octet::Error if the dtype differs.
  float* f32() const;
  double* f64() const;
  uint16_t* bf16() const;  ///< BF16 bit patterns
  int32_t* i32() const;
  uint8_t* fp8() const;  ///< E4M3 or E5M2 codes

  /// The same memory with another shape of equal numel (throws otherwise).
  Tensor reshape(Shape s) const;
  /// Rows [begin, begin + count) of the leading dimension (throws if out of range).
  Tensor slice(int64_t begin, int64_t count) const;
  std::string str() const;  ///< "bf16[8, 1024, 768]"
};

/// Checks, for a boundary: throws octet::Error "<what>: expected <…>, got <…>".
void check_dtype(const Tensor& t, DType want, const char* what);
void check_activation(const Tensor& t, const char* what);  ///< F32 or BF16, non-empty
void check_shape(const Tensor& t, const Shape& want, const char* what);
void check_numel(const Tensor& t, int64_t want, const char* what);
/// An optional amax output (backend.h: the norms' and GELU's amax, Linear::forward x_amax): empty,
/// or I32 with one element.
void check_amax_out(const Tensor& t, const char* what);

class Backend;

/// An owning handle to backend memory (Backend::alloc). Move-only; returns the memory to the
/// backend on destruction (the CUDA backend reuses it in stream order: no synchronization).
class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend* owner, Tensor t) : owner_(owner), t_(t) {}
  ~Buffer();
  Buffer(Buffer&& o) noexcept : owner_(o.owner_), t_(o.t_) { o.owner_ = nullptr, o.t_ = {}; }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  const Tensor& tensor() const { return t_; }
  operator const Tensor&() const { return t_; }  // NOLINT: a Buffer is usable as its view
  bool empty() const { return t_.empty(); }

 private:
  Backend* owner_ = nullptr;
  Tensor t_;
};

}  // namespace octet
