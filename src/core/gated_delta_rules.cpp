// src/core/gated_delta_rules.cpp — the shape rules of the Gated DeltaNet mixer (octet/recurrent.h,
// backend.h GatedDeltaArgs), written once for the CPU reference, the CPU backend and the CUDA backend:
// sizes >= 1, q/k/v/gates consistent with one (B, H, T, Dk, Dv), chunk >= 1.
#include <string>

#include "octet/backend.h"
#include "octet/error.h"
#include "octet/recurrent.h"

namespace octet {

void GatedDeltaShape::validate() const {
  auto positive = [](int64_t v, const char* name) {
    OCTET_CHECK(v >= 1,
                std::string("gated delta: ") + name + " must be >= 1 (got " + std::to_string(v) + ")");
  };
  positive(batch, "batch");
  positive(heads, "heads");
  positive(seq, "seq");
  positive(dk, "dk");
  positive(dv, "dv");
}

GatedDeltaShape GatedDeltaArgs::shape(const char* op) const {
  OCTET_CHECK(q.shape.rank == 4, std::string(op) + ": expected q [B, H, T, Dk], got " + q.str());
  OCTET_CHECK(
      v.shape.rank == 4 && v.shape[0] == q.shape[0] && v.shape[1] == q.shape[1] && v.shape[2] == q.shape[2],
      std::string(op) + ": expected v [B, H, T, Dv] matching q " + q.str() + ", got " + v.str());
  GatedDeltaShape s;
  s.batch = q.shape[0];
  s.heads = q.shape[1];
  s.seq = q.shape[2];
  s.dk = q.shape[3];
  s.dv = v.shape[3];
  s.validate();
  check_shape(k, q.shape, (std::string(op) + " k").c_str());
  OCTET_CHECK(gates.numel() == s.batch * s.seq * 2 * s.heads && gates.cols() == 2 * s.heads,
              std::string(op) + ": expected gates [" + std::to_string(s.batch) + ", " +
                  std::to_string(s.seq) + ", " + std::to_string(2 * s.heads) + "], got " + gates.str());
  OCTET_CHECK(chunk >= 1, std::string(op) + ": chunk must be >= 1 (got " + std::to_string(chunk) + ")");
  return s;
}

}  // namespace octet
