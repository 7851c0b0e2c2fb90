// src/dist/zero1.cpp — ZeRO-1 over the model's flat F32 buffers (octet/dist.h; Rajbhandari et al.,
// arXiv 1910.02054, stage 1: optimizer states partitioned, gradients reduce-scattered, updated
// parameters all-gathered) and the cross-rank max of the delayed-scaling amaxes.
// The flat buffers hold n floats; collectives need size·S (S = ceil(n / size)), so the gradients
// are copied into a zero-padded buffer before the reduce-scatter and the gathered parameters copied
// back; with n a multiple of size those copies could go (docs/distributed.md §"ZeRO-1").
#include "octet/dist.h"
#include "octet/error.h"
#include "octet/model.h"

namespace octet {

Zero1::Zero1(Model& model, Communicator& comm)
    : model_(model), comm_(comm), shard_(shard_range(int64_t(model.num_params()), comm.rank(), comm.size())) {
  const int64_t n = int64_t(model.num_params());
  chunk_ = (n + comm.size() - 1) / comm.size();
  Backend& be = model_.backend();
  padded_ = be.alloc(DType::F32, {chunk_ * comm.size()});  // the padding is never read back
  chunk_buf_ = be.alloc(DType::F32, {chunk_});
}

Tensor Zero1::reduce_gradients() {
  Backend& be = model_.backend();
  const int64_t n = int64_t(model_.num_params());
  be.copy(padded_.tensor().slice(0, n), model_.grad_data().reshape({n}));
  comm_.reduce_scatter(padded_, chunk_buf_);
  return chunk_buf_.tensor().slice(0, shard_.size());
}

void Zero1::gather_params() {
  Backend& be = model_.backend();
  const int64_t n = int64_t(model_.num_params());
  const Tensor params = model_.param_data().reshape({n});
  if (shard_.size() > 0) be.copy(chunk_buf_.tensor().slice(0, shard_.size()), params.slice(shard_.begin, shard_.size()));
  comm_.all_gather(chunk_buf_, padded_);
  be.copy(params, padded_.tensor().slice(0, n));
}

std::vector<float> Zero1::gather_to_host(const Tensor& shard_state) {
  check_dtype(shard_state, DType::F32, "gather_to_host");
  check_numel(shard_state, shard_.size(), "gather_to_host (this rank's shard)");
  Backend& be = model_.backend();
  if (shard_.size() > 0) be.copy(chunk_buf_.tensor().slice(0, shard_.size()), shard_state);
  comm_.all_gather(chunk_buf_, padded_);
  std::vector<float> full(size_t(chunk_ * comm_.size()));
  be.download(full.data(), padded_);
  full.resize(model_.num_params());
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
