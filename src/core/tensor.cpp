// src/core/tensor.cpp — the typed tensor view of include/octet/tensor.h: dtype names and sizes,
// shape arithmetic, checked accessors and the boundary checks every Backend operation uses.
#include "octet/tensor.h"

#include <string>

#include "octet/error.h"

namespace octet {

namespace {
struct DTypeName {
  DType t;
  const char* name;
  size_t size;
};
constexpr DTypeName kDTypes[] = {{DType::F64, "f64", 8}, {DType::F32, "f32", 4},   {DType::BF16, "bf16", 2},
                                 {DType::I32, "i32", 4}, {DType::E4M3, "e4m3", 1}, {DType::E5M2, "e5m2", 1}};
const DTypeName& entry(DType t) {
  for (const DTypeName& e : kDTypes)
    if (e.t == t) return e;
  OCTET_FAIL("unknown dtype code " + std::to_string(int(t)));
}
}  // namespace

size_t dtype_size(DType t) { return entry(t).size; }
std::string to_string(DType t) { return entry(t).name; }
DType parse_dtype(const std::string& s) {
  std::string known;
  for (const DTypeName& e : kDTypes) {
    if (s == e.name) return e.t;
    known += std::string(known.empty() ? "" : ", ") + e.name;
  }
  OCTET_FAIL("unknown dtype '" + s + "' (known: " + known + ")");
}

Shape::Shape(std::initializer_list<int64_t> d) {
  OCTET_CHECK(d.size() <= 4, "a tensor has at most 4 dimensions, got " + std::to_string(d.size()));
  for (int64_t v : d) {
    OCTET_CHECK(v >= 0, "negative tensor extent " + std::to_string(v));
    dims[size_t(rank++)] = v;
  }
}

int64_t Shape::numel() const {
  OCTET_CHECK(rank >= 0 && rank <= 4, "a tensor has 0 to 4 dimensions, got rank " + std::to_string(rank));
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) {
    const int64_t d = dims[size_t(i)];
    OCTET_CHECK(d >= 0, "negative tensor extent " + std::to_string(d));
    // At most 2^60 elements: their bytes (<= 8 each) fit a signed 64-bit size.
    OCTET_CHECK(!__builtin_mul_overflow(n, d, &n) && n <= (int64_t(1) << 60),
                "tensor of shape " + str() + " has too many elements (more than 2^60)");
  }
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (rank != o.rank) return false;
  for (int i = 0; i < rank; ++i)
    if (dims[size_t(i)] != o.dims[size_t(i)]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank && i < 4; ++i) s += (i ? ", " : "") + std::to_string(dims[size_t(i)]);
  return s + "]";
}

std::string Tensor::str() const { return to_string(dtype) + shape.str(); }

namespace {
template <class T>
T* typed(const Tensor& t, DType want) {
  OCTET_CHECK(t.dtype == want, "tensor " + t.str() + ": expected dtype " + to_string(want));
  return static_cast<T*>(t.data);
}
}  // namespace

float* Tensor::f32() const { return typed<float>(*this, DType::F32); }
double* Tensor::f64() const { return typed<double>(*this, DType::F64); }
uint16_t* Tensor::bf16() const { return typed<uint16_t>(*this, DType::BF16); }
int32_t* Tensor::i32() const { return typed<int32_t>(*this, DType::I32); }
uint8_t* Tensor::fp8() const {
  OCTET_CHECK(dtype == DType::E4M3 || dtype == DType::E5M2,
              "tensor " + str() + ": expected FP8 codes (e4m3 or e5m2)");
  return static_cast<uint8_t*>(data);
}

Tensor Tensor::reshape(Shape s) const {
  OCTET_CHECK(s.numel() == numel(), "cannot reshape " + str() + " to " + s.str() + ": element counts differ");
  return Tensor(data, dtype, s);
}

Tensor Tensor::slice(int64_t begin, int64_t count) const {
  OCTET_CHECK(shape.rank >= 1, "cannot slice the scalar tensor " + str());
  OCTET_CHECK(begin >= 0 && count >= 0 && begin + count <= shape[0],
              "slice [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                  ") is outside the leading dimension of " + str());
  Shape s = shape;
  s.dims[0] = count;
  const size_t row_bytes = shape[0] ? bytes() / size_t(shape[0]) : 0;
  return Tensor(static_cast<char*>(data) + size_t(begin) * row_bytes, dtype, s);
}

void check_dtype(const Tensor& t, DType want, const char* what) {
  OCTET_CHECK(!t.empty(), std::string(what) + ": missing tensor (expected " + to_string(want) + ")");
  OCTET_CHECK(t.dtype == want,
              std::string(what) + ": expected dtype " + to_string(want) + ", got " + t.str());
}

void check_activation(const Tensor& t, const char* what) {
  OCTET_CHECK(!t.empty(), std::string(what) + ": missing tensor (expected f32 or bf16)");
  OCTET_CHECK(is_activation_dtype(t.dtype),
              std::string(what) + ": expected dtype f32 or bf16, got " + t.str());
}

void check_shape(const Tensor& t, const Shape& want, const char* what) {
  OCTET_CHECK(t.shape == want, std::string(what) + ": expected shape " + want.str() + ", got " + t.str());
}

void check_amax_out(const Tensor& t, const char* what) {
  if (t.empty()) return;
  check_dtype(t, DType::I32, what);
  check_numel(t, 1, what);
}

void check_numel(const Tensor& t, int64_t want, const char* what) {
  OCTET_CHECK(t.numel() == want,
              std::string(what) + ": expected " + std::to_string(want) + " elements, got " + t.str());
}

}  // namespace octet
