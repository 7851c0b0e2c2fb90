// src/dist/zero1.cpp — ZeRO-1 over the model's flat F32 buffers (octet/dist.h; Rajbhandari et al.,
// arXiv 1910.02054, stage 1: optimizer states partitioned, gradients reduce-scattered, updated
// parameters all-gathered) with the gradients reduced in buckets while the backward runs, and the
// cross-rank max of the delayed-scaling amaxes.
// A bucket of a multiple of world floats is reduce-scattered straight from grad_data() and
// all-gathered in place into param_data(); only the top bucket, when its size is not such a multiple,
// goes through a zero-padded staging copy (docs/distributed.md §"Gradient buckets").
#include <algorithm>

#include "octet/dist.h"
#include "octet/error.h"
#include "octet/model.h"

namespace octet {

Zero1::Zero1(Model& model, Communicator& comm, double bucket_mb)
    : model_(model),
      comm_(comm),
      plan_(plan_buckets(int64_t(model.num_params()), comm.size(), bucket_elems_from_mb(bucket_mb))),
      unstarted_(plan_.buckets.size()) {
  Backend& be = model_.backend();
  grads_ = be.alloc(DType::F32, {plan_.state_size});  // zeroed: padding slots stay 0
  const Bucket& top = plan_.buckets.back();
  if (top.padded(comm_.size())) staging_ = be.alloc(DType::F32, {top.chunk * comm_.size()});
}

void Zero1::start(size_t k) {
  const Bucket& b = plan_.buckets[k];
  const int64_t n = int64_t(model_.num_params());
  const Tensor grads = model_.grad_data().reshape({n});
  const Tensor out = grads_.tensor().slice(b.state, b.chunk);
  if (b.padded(comm_.size())) {  // the padding of staging_ is never written: it stays 0
    model_.backend().copy(staging_.tensor().slice(0, b.end - b.begin), grads.slice(b.begin, b.end - b.begin));
    comm_.reduce_scatter_async(staging_, out);
  } else {
    comm_.reduce_scatter_async(grads.slice(b.begin, b.end - b.begin), out);
  }
}

void Zero1::grads_final_from(int64_t frontier) {
  while (unstarted_ > 0 && plan_.buckets[unstarted_ - 1].begin >= frontier) start(--unstarted_);
  comm_.progress();
}

Tensor Zero1::reduce_gradients() {
  grads_final_from(0);
  comm_.wait_async();
  unstarted_ = plan_.buckets.size();  // the next step starts them again
  return grads_;
}

void Zero1::gather_params() {
  Backend& be = model_.backend();
  const int world = comm_.size(), rank = comm_.rank();
  const Tensor params = model_.param_data().reshape({int64_t(model_.num_params())});
  for (const Bucket& b : plan_.buckets) {
    if (!b.padded(world)) {
      const Tensor all = params.slice(b.begin, b.end - b.begin);
      comm_.all_gather(all.slice(rank * b.chunk, b.chunk), all);
      continue;
    }
    const Tensor mine = staging_.tensor().slice(rank * b.chunk, b.chunk);
    const int64_t own = std::max<int64_t>(0, std::min(b.chunk, b.end - b.begin - rank * b.chunk));
    if (own > 0) be.copy(mine.slice(0, own), params.slice(b.begin + rank * b.chunk, own));
    comm_.all_gather(mine, staging_);
    be.copy(params.slice(b.begin, b.end - b.begin), staging_.tensor().slice(0, b.end - b.begin));
  }
}

std::vector<float> Zero1::gather_to_host(const Tensor& shard_state) {
  check_dtype(shard_state, DType::F32, "gather_to_host");
  check_numel(shard_state, plan_.state_size, "gather_to_host (this rank's state vector)");
  Backend& be = model_.backend();
  const int world = comm_.size();
  Buffer all = be.alloc(DType::F32, {plan_.state_size * world});
  comm_.all_gather(shard_state.reshape({plan_.state_size}), all);
  std::vector<float> ranks(size_t(plan_.state_size * world));
  be.download(ranks.data(), all);
  std::vector<float> full(model_.num_params());
  for (const Bucket& b : plan_.buckets)
    for (int r = 0; r < world; ++r) {
      const int64_t lo = std::min(b.end, b.begin + r * b.chunk), hi = std::min(b.end, lo + b.chunk);
      std::copy_n(ranks.begin() + r * plan_.state_size + b.state, hi - lo, full.begin() + lo);
    }
  return full;
}

void all_reduce_host_sum(Communicator& comm, Backend& backend, double* values, int64_t n) {
  Buffer b = backend.alloc(DType::F64, {n});
  backend.upload(b, values);
  comm.all_reduce(b, ReduceOp::Sum);
  backend.download(values, b);
}

void reduce_pending_amaxes(Model& model, Communicator& comm) {
  const int64_t slots = model.amax_slots();
  if (slots == 0) return;
  Buffer amax = model.backend().alloc(DType::I32, {slots});  // stream-ordered on CUDA: no wait
  model.pending_amaxes(amax);
  comm.all_reduce(amax, ReduceOp::Max);
  model.set_pending_amaxes(amax);
}

}  // namespace octet
