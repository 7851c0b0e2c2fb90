// gated_delta_impl.h — the argument checks shared by the naive and chunked Gated DeltaNet
// (octet/recurrent.h): one rule, used by gated_delta_naive.cpp and gated_delta_chunked.cpp.
#pragma once

#include <string>

#include "octet/error.h"
#include "octet/recurrent.h"

namespace octet::cpu {

template <typename T>
void check_gated_delta(const GatedDeltaShape& s, const GatedDeltaInputs<T>& in, const char* out_name,
                       const void* out) {
  s.validate();
  OCTET_CHECK(in.q && in.k && in.v && in.g && in.beta,
              "gated delta: null input pointer (q, k, v, g and beta are required)");
  OCTET_CHECK(out != nullptr, std::string("gated delta: null ") + out_name);
}

template <typename T>
void check_gated_delta_grads(const GatedDeltaGrads<T>& g) {
  OCTET_CHECK(g.dq && g.dk && g.dv && g.dg && g.dbeta,
              "gated delta backward: null gradient pointer (dq, dk, dv, dg and dbeta are required)");
}

}  // namespace octet::cpu
