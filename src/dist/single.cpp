// src/dist/single.cpp — the communicator of a job of one rank (octet/dist.h): every collective is the
// identity, so code written for N ranks runs unchanged on one (reduce_scatter and all_gather copy).
#include <unistd.h>

#include "dist/checks.h"
#include "octet/dist.h"
#include "octet/error.h"

namespace octet {

namespace {

class SingleCommunicator final : public Communicator {
 public:
  explicit SingleCommunicator(Backend& be) : be_(be) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "single"; }
  void all_reduce(const Tensor& x, ReduceOp op) override { dist_detail::check_all_reduce(x, op); }
  void reduce_scatter(const Tensor& in, const Tensor& out) override {
    dist_detail::check_reduce_scatter(in, out, 1);
    if (in.data != out.data) be_.copy(out, in);
  }
  void all_gather(const Tensor& in, const Tensor& out) override {
    dist_detail::check_all_gather(in, out, 1);
    if (in.data != out.data) be_.copy(out, in);
  }
  void broadcast(const Tensor&, int root) override {
    OCTET_CHECK(root == 0, "broadcast: root " + std::to_string(root) + " outside a job of 1 rank");
  }
  void barrier() override { be_.synchronize(); }
  [[noreturn]] void abort(int code) noexcept override { ::_exit(code); }

 private:
  Backend& be_;
};

}  // namespace

std::unique_ptr<Communicator> make_single_communicator(Backend& backend) {
  return std::make_unique<SingleCommunicator>(backend);
}

}  // namespace octet
