// src/dist/fp8_gather.cpp — ZeRO-1's FP8 weight all-gather (octet/dist.h Fp8WeightGather;
// docs/distributed.md §"FP8 all-gather"). The FP8 linears' weights travel as the codes their forward
// would compute from the whole FP32 tensor (tensor-current scaling: one scale per tensor from its
// amax, here the max over the ranks' shard amaxes), 1 byte per parameter; every other parameter
// travels in FP32. Transformer Engine's FP8 weight all-gather is the same idea; the ZeRO-1 layout
// is Rajbhandari et al., arXiv 1910.02054, stage 1.
//
// Layout: a rank's shard (BucketPlan::shard) is cut at the code weights' boundaries into runs; the
// code runs go, in flat order, into the rank's block of the code all-gather, the others into its
// block of the FP32 all-gather. Every rank computes every rank's runs from the plan, so the
// blocks need no header; a block is as long as the largest rank's (the rest is padding).
#include <algorithm>
#include <string>

#include "octet/dist.h"
#include "octet/error.h"
#include "octet/model.h"
#include "octet/quant.h"

namespace octet {

Fp8WeightGather::Fp8WeightGather(Model& model, Communicator& comm, const BucketPlan& plan)
    : model_(model), comm_(comm), weights_(model.code_weights()) {
  const int world = comm.size();
  OCTET_CHECK(!weights_.empty(),
              "dist.allgather_fp8: the model has no FP8 tensor-current linear weight to gather as "
              "codes (a bf16/fp32 arm gathers FP32 as before)");
  const int64_t n = int64_t(model.num_params());
  OCTET_CHECK(plan.world == world && !plan.buckets.empty() && plan.buckets.back().end == n,
              "Fp8WeightGather: the bucket plan is for " + std::to_string(plan.world) +
                  " ranks, the job has " + std::to_string(world));
  // Code weights by offset (Model::code_weights is in key order, which is not always flat order).
  std::vector<int> by_offset(weights_.size());
  for (size_t k = 0; k < weights_.size(); ++k) by_offset[k] = int(k);
  std::sort(by_offset.begin(), by_offset.end(), [&](int a, int b) {
    return weights_[size_t(a)].param->offset < weights_[size_t(b)].param->offset;
  });
  runs_.resize(size_t(world));
  for (int r = 0; r < world; ++r) {
    int64_t p32 = 0, p8 = 0;
    std::vector<Run>& runs = runs_[size_t(r)];
    for (const ShardPiece& piece : plan.shard(r).pieces) {
      int64_t at = piece.begin;
      while (at < piece.end) {
        // the first code weight that ends after `at`
        auto it = std::find_if(by_offset.begin(), by_offset.end(), [&](int k) {
          const ParamInfo& p = *weights_[size_t(k)].param;
          return int64_t(p.offset + p.numel) > at;
        });
        Run run;
        run.flat = at;
        if (it != by_offset.end() &&
            int64_t(weights_[size_t(*it)].param->offset) <= at) {  // inside weight *it
          const ParamInfo& p = *weights_[size_t(*it)].param;
          run.weight = *it;
          run.count = std::min(piece.end, int64_t(p.offset + p.numel)) - at;
          run.packed = p8;
          p8 += run.count;
        } else {  // up to the next code weight (or the piece's end)
          const int64_t next =
              it == by_offset.end() ? piece.end : int64_t(weights_[size_t(*it)].param->offset);
          run.count = std::min(piece.end, next) - at;
          run.packed = p32;
          p32 += run.count;
        }
        runs.push_back(run);
        at += run.count;
      }
    }
    a32_ = std::max(a32_, p32);
    a8_ = std::max(a8_, p8);
  }
  Backend& be = model.backend();
  const DType code_type =
      format_for(model.precision().quant.formats, Role::Weight) == Format::E4M3 ? DType::E4M3 : DType::E5M2;
  if (a32_ > 0) f32_ = be.alloc(DType::F32, {a32_ * world});
  if (a8_ > 0) codes_ = be.alloc(code_type, {a8_ * world});
  int64_t total = 0;
  for (const Model::CodeWeight& w : weights_) {
    wcodes_at_.push_back(total);
    total += int64_t(w.param->numel);
  }
  wcodes_ = be.alloc(code_type, {total});
  amax_ = be.alloc(DType::I32, {int64_t(weights_.size())});
  zeros_ = be.alloc(DType::I32, {int64_t(weights_.size())});  // alloc zero-fills
}

int64_t Fp8WeightGather::link_bytes() const { return int64_t(comm_.size() - 1) * (4 * a32_ + a8_); }

void Fp8WeightGather::gather() {
  Backend& be = model_.backend();
  const int rank = comm_.rank(), world = comm_.size();
  const Tensor params = model_.param_data().reshape({int64_t(model_.num_params())});
  const std::vector<Run>& mine = runs_[size_t(rank)];
  // 1. the other parameters in FP32: pack, all-gather in place, unpack the other ranks' runs
  if (a32_ > 0) {
    for (const Run& r : mine)
      if (r.weight < 0)
        be.copy(f32_.tensor().slice(rank * a32_ + r.packed, r.count), params.slice(r.flat, r.count));
    comm_.all_gather(f32_.tensor().slice(rank * a32_, a32_), f32_);
    for (int q = 0; q < world; ++q)
      if (q != rank)
        for (const Run& r : runs_[size_t(q)])
          if (r.weight < 0)
            be.copy(params.slice(r.flat, r.count), f32_.tensor().slice(q * a32_ + r.packed, r.count));
  }
  // 2. each code weight's amax: this rank's runs, then the max over the ranks
  be.copy(amax_, zeros_);
  for (const Run& r : mine)
    if (r.weight >= 0)
      weights_[size_t(r.weight)].linear->weight_piece_amax(params.slice(r.flat, r.count),
                                                           amax_.tensor().slice(r.weight, 1));
  comm_.all_reduce(amax_, ReduceOp::Max);
  // 3. this rank's codes under the tensor scales, all-gathered; 4. every weight's codes in W order
  for (const Run& r : mine)
    if (r.weight >= 0)
      weights_[size_t(r.weight)].linear->encode_weight_piece(
          params.slice(r.flat, r.count), amax_.tensor().slice(r.weight, 1),
          codes_.tensor().slice(rank * a8_ + r.packed, r.count));
  comm_.all_gather(codes_.tensor().slice(rank * a8_, a8_), codes_);
  for (int q = 0; q < world; ++q)
    for (const Run& r : runs_[size_t(q)])
      if (r.weight >= 0) {
        const int64_t in_w = r.flat - int64_t(weights_[size_t(r.weight)].param->offset);
        be.copy(wcodes_.tensor().slice(wcodes_at_[size_t(r.weight)] + in_w, r.count),
                codes_.tensor().slice(q * a8_ + r.packed, r.count));
      }
  install();
}

void Fp8WeightGather::reinstall() {
  if (installed_) install();
}

void Fp8WeightGather::install() {
  for (size_t k = 0; k < weights_.size(); ++k)
    weights_[k].linear->install_weight_codes(
        wcodes_.tensor().slice(wcodes_at_[k], int64_t(weights_[k].param->numel)),
        amax_.tensor().slice(int64_t(k), 1));
  installed_ = true;
}

}  // namespace octet
