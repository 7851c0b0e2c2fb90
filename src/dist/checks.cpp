// src/dist/checks.cpp — the communicators' argument checks (src/dist/checks.h).
#include "dist/checks.h"

#include <string>

#include "octet/error.h"

namespace octet::dist_detail {

void check_all_reduce(const Tensor& x, ReduceOp op) {
  OCTET_CHECK(!x.empty(), "all_reduce: empty tensor");
  const bool ok =
      x.dtype == DType::F32 || x.dtype == DType::F64 || (x.dtype == DType::I32 && op == ReduceOp::Max);
  OCTET_CHECK(ok, "all_reduce: expected f32 or f64 (sum, max) or i32 (max), got " + x.str());
}

void check_reduce_scatter(const Tensor& in, const Tensor& out, int world) {
  check_dtype(in, DType::F32, "reduce_scatter input");
  check_dtype(out, DType::F32, "reduce_scatter output");
  check_numel(in, out.numel() * world, "reduce_scatter input (world x output)");
}

void check_all_gather(const Tensor& in, const Tensor& out, int world) {
  const bool ok = in.dtype == DType::F32 || in.dtype == DType::E4M3 || in.dtype == DType::E5M2;
  OCTET_CHECK(ok, "all_gather input: expected f32, e4m3 or e5m2, got " + in.str());
  check_dtype(out, in.dtype, "all_gather output");
  check_numel(out, in.numel() * world, "all_gather output (world x input)");
}

std::string where(const char* transport, const char* call, int rank, int world) {
  return std::string(transport) + " " + call + " on rank " + std::to_string(rank) + " of " +
         std::to_string(world);
}

}  // namespace octet::dist_detail
