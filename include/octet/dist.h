// octet/dist.h — data-parallel training across processes: the communicator the trainer talks to
// (NCCL on GPUs, MPI for CPU ranks, one rank without either), the launch environment (torchrun /
// mpirun variables), ZeRO-1's sharding of the optimizer (Rajbhandari et al., "ZeRO", arXiv
// 1910.02054, stage 1) and the cross-rank max of delayed scaling's amaxes (TransformerEngine's
// amax reduction before amax_and_scale_update). Design and launch: docs/distributed.md.
//
// Tensors are views in the memory of the communicator's backend (tensor.h). A collective is issued
// by every rank in the same order with the same shapes (a mismatch is undefined in MPI and NCCL and
// is not detected here). On the NCCL communicator every collective is enqueued on the backend's
// stream and returns without a host synchronization; the MPI and single-rank ones complete before
// they return.
// Errors: a failed collective throws octet::Error naming the call and the rank ("nccl all_reduce on
// rank 1 of 2: ..."); invalid arguments throw octet::Error naming the argument. After such an error
// the other ranks may be blocked in a collective: call abort() (the CLI does) to end every rank.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "octet/backend.h"
#include "octet/optim.h"

namespace octet {

class Model;

enum class ReduceOp { Sum, Max };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;  ///< 0 .. size()-1
  virtual int size() const = 0;
  virtual std::string name() const = 0;  ///< "single", "mpi" or "nccl"
  /// The transport library and its version ("NCCL 2.27.3", MPI_Get_library_version's first line);
  /// "" for the single-rank communicator.
  virtual std::string library_version() const { return ""; }
  /// x = the elementwise reduction of x over the ranks, in place. F32 and F64: Sum or Max
  /// (Sum propagates NaN/inf); I32: Max only (the amax bit patterns, reduce_pending_amaxes).
  virtual void all_reduce(const Tensor& x, ReduceOp op) = 0;
  /// in F32 [size()·n] → out F32 [n]: out = Σ over ranks of their in[rank()·n, (rank()+1)·n).
  virtual void reduce_scatter(const Tensor& in, const Tensor& out) = 0;
  /// in [n] → out [size()·n] of the same dtype, F32 or FP8 codes (E4M3/E5M2, moved as bytes):
  /// out[r·n, (r+1)·n) = rank r's in. In place when `in` is out's slice [rank()·n, (rank()+1)·n)
  /// (no copy of this rank's part).
  virtual void all_gather(const Tensor& in, const Tensor& out) = 0;
  /// reduce_scatter started without waiting for it: ordered after everything enqueued on the
  /// backend's stream before the call, complete only after the next wait_async(); until then
  /// neither `in` nor `out` may be touched. NCCL: on the communicator's second stream, which first
  /// waits for a CUDA event recorded on the backend's stream, so the caller's next kernels (the rest
  /// of the backward) run beside it. MPI: MPI_Ireduce_scatter_block, progressed by progress() and
  /// wait_async(). Default (one rank): reduce_scatter at once. Every other collective waits for the
  /// pending ones first (wait_async), so the ranks' collectives keep one order.
  virtual void reduce_scatter_async(const Tensor& in, const Tensor& out) { reduce_scatter(in, out); }
  /// Everything enqueued on the backend's stream after this call sees the pending async
  /// collectives complete. NCCL: the backend's stream waits for an event of the second stream (no
  /// host wait); MPI: MPI_Waitall.
  virtual void wait_async() {}
  /// Lets pending async collectives advance without waiting for them (MPI: MPI_Testall; Open MPI
  /// progresses a non-blocking collective only inside MPI calls). Cheap; a no-op elsewhere.
  virtual void progress() {}
  /// x (any dtype) = root's x on every rank.
  virtual void broadcast(const Tensor& x, int root) = 0;
  /// Returns when every rank has called it (NCCL: enqueued, and the host waits for the stream).
  virtual void barrier() = 0;
  /// Ends every rank of the job with exit status `code` after an error on this rank (MPI_Abort;
  /// NCCL: ncclCommAbort, then exit). Never returns.
  [[noreturn]] virtual void abort(int code) noexcept = 0;
};

/// Where this process sits in a job, from the launcher's environment: RANK, WORLD_SIZE,
/// LOCAL_RANK, MASTER_ADDR, MASTER_PORT (torchrun; `octet --nproc` on CUDA sets the same), else
/// OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK (mpirun). Neither: one rank.
struct DistEnv {
  int rank = 0, world = 1, local_rank = 0;
  std::string master_addr;  ///< NCCL rendezvous host ("" unless set)
  int master_port = 0;      ///< NCCL rendezvous TCP port (0 unless set)
  bool mpi = false;         ///< launched by Open MPI's mpirun (OMPI_COMM_WORLD_* set)
};
/// Reads the variables above; throws octet::Error naming a variable that is not an integer or is
/// out of range (rank outside [0, world), world < 1, port outside [1, 65535]).
DistEnv dist_env_from_environment();

/// A communicator and the backend it runs on (the NCCL one enqueues on the backend's stream).
/// (Declared comm first: the backend, whose stream the communicator may own, goes first.)
struct DistSession {
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<Backend> backend;
};
/// device "cpu": the CPU backend with MPI ranks (env.world > 1: the job must come from mpirun)
/// or one rank. device "cuda": the CUDA backend on GPU env.local_rank with NCCL (the unique id
/// travels from rank 0 through tcp_rendezvous at MASTER_ADDR:MASTER_PORT), or one rank. Throws
/// octet::Error naming what is missing (a variable, MPI for a torchrun-launched CPU job, a build
/// without CUDA).
DistSession open_dist_session(const DistEnv& env, const std::string& device);

/// One rank without a transport: every collective is the identity (all_gather/reduce_scatter
/// copy), as a job of size 1.
std::unique_ptr<Communicator> make_single_communicator(Backend& backend);
/// MPI_COMM_WORLD (duplicated) on CPU-backend tensors; initializes MPI once per process
/// (MPI_THREAD_FUNNELED) and finalizes it at exit. Errors return (MPI_ERRORS_RETURN) and throw.
std::unique_ptr<Communicator> make_mpi_communicator(Backend& backend);

/// The TCP rendezvous (no shared file): rank 0 listens on env.master_port and sends `payload` to
/// each of the world − 1 ranks that connect to MASTER_ADDR:MASTER_PORT; other ranks connect (retrying until
/// `timeout_s`) and return what rank 0 sent (rank 0 returns its payload). The connections stay open while the
/// returned Rendezvous lives, as a liveness link: watch() reports the first rank whose link closed
/// (a crashed process) so a watchdog can end the job instead of hanging in a collective.
class Rendezvous {
 public:
  virtual ~Rendezvous() = default;
  virtual const std::string& payload() const = 0;
  /// Blocks up to timeout_ms; returns "" while every link is up, else a message naming the lost
  /// peer ("rank 1 disconnected").
  virtual std::string watch(int timeout_ms) = 0;
  /// The orderly end (every rank calls it once, after its last collective and after its watcher
  /// stopped): each rank says goodbye to rank 0, which answers once all did, so that no rank takes
  /// another's normal exit for a crash. Waits up to the constructor's timeout.
  virtual void finish() = 0;
};
std::unique_ptr<Rendezvous> tcp_rendezvous(const DistEnv& env, const std::string& payload,
                                           double timeout_s = 120);

/// values[0..n) = their sum over the ranks (host doubles, through an F64 [n] tensor of `backend`;
/// a collective). Synchronizes.
void all_reduce_host_sum(Communicator& comm, Backend& backend, double* values, int64_t n);

/// `octet ... --nproc N` on one host (docs/distributed.md §Launch): runs this program with `args`
/// (argv without --nproc) as N ranks and returns the job's exit status. device cpu: one child
/// `mpirun --oversubscribe -np N` (as root with Open MPI's OMPI_ALLOW_RUN_AS_ROOT{,_CONFIRM}=1);
/// device cuda: N children with RANK = LOCAL_RANK = i, WORLD_SIZE = N, MASTER_ADDR (default
/// 127.0.0.1) and MASTER_PORT (default: a free port). When a child fails (non-zero exit or a
/// signal) the others get SIGTERM, and SIGKILL after `grace_s`; the first failure's status (128 +
/// signal for a signal) is returned. A SIGTERM, SIGINT or SIGHUP to the launcher while it waits is
/// passed on the same way (SIGTERM, then SIGKILL after `grace_s`) and makes the status 128 + that
/// signal. Every child's environment holds OCTET_LAUNCHER_PID (end_with_launcher). Throws
/// octet::Error if a child cannot be started.
int launch_local(int nproc, const std::string& device, const std::vector<std::string>& args,
                 double grace_s = 10);

/// The variable launch_local sets in every child's environment: "<process id>:<start time>", the
/// launcher's id and its start time in clock ticks after boot (/proc/<pid>/stat's 22nd field).
inline constexpr const char* kLauncherPidVariable = "OCTET_LAUNCHER_PID";

/// In a rank that launch_local started (OCTET_LAUNCHER_PID set): starts, once per process, a
/// thread that checks /proc every 200 ms and, once the launcher has ended (no such process, a
/// zombie its parent has not reaped, or another process that has since taken its id), prints one
/// line and sends this process SIGTERM, so a SIGKILL to `octet ... --nproc N` does not leave its
/// ranks training on with the run directory locked. Does nothing without the variable; throws
/// octet::Error when it is not "<process id>:<start time>". open_dist_session calls it for jobs
/// of more than one rank.
void end_with_launcher();

/// A TCP port of this host that was free a moment ago (the default MASTER_PORT of launch_local).
int free_tcp_port();

/// Runs `body` as this rank's part of a job. An exception that leaves it (an error of this rank
/// that the others cannot see, so they would wait in their next collective) prints one line
/// "octet: failed: rank r of N: <message>" on stderr and ends every rank through comm.abort() with
/// exit status 2 for an octet::Error, 1 otherwise. A run that every rank stops alike (train.h
/// TrainingStopped) should be caught inside `body`.
void run_rank(Communicator& comm, const std::function<void()>& body);

/// Runs `checks`: what every rank of a job checks alike before its first collective (the config
/// and the data). One rank, or a job not started by mpirun: an exception leaves as usual. A rank
/// of an mpirun job: the ranks agree on the outcome over MPI_COMM_WORLD (MPI is initialized here);
/// if any rank's checks threw, the lowest such rank prints one line ("octet: error: <message>" for
/// an octet::Error, exit status 2; "octet: failed: <message>" for another exception, 1) and every
/// rank exits with that status through MPI_Finalize — one line for the job and no MPI_Abort.
void run_job_checks(const DistEnv& env, const std::function<void()>& checks);

// ---------------------------------------------------------------------------------------------
// ZeRO-1 over the model's flat F32 parameter and gradient buffers (Model::param_data/grad_data),
// with gradient buckets reduced while the backward runs (docs/distributed.md §"Gradient buckets")

/// One gradient bucket: the flat parameters [begin, end), reduce-scattered as one collective. It is
/// split evenly over the ranks: rank r owns [begin + r·chunk, min(end, begin + (r+1)·chunk)),
/// chunk = ceil((end − begin) / world) (the last ranks' parts may be short or empty), and keeps the
/// summed gradients and optimizer state of that part at [state, state + chunk) of its state vectors.
struct Bucket {
  int64_t begin = 0, end = 0, chunk = 0, state = 0;
  bool padded(int world) const { return chunk * world != end - begin; }
};

/// The buckets of n parameters on `world` ranks: bucket k = [k·E, min(n, (k+1)·E)) with E the bucket
/// size rounded up to a multiple of world (so every bucket but the top one splits without padding),
/// state offsets k·E / world, state_size = Σ chunk. Rank r's ZeRO-1 shard is the union of its parts
/// of every bucket (shard(r)). bucket_elems 0: one bucket [0, n) — chunk ceil(n / world), rank r's
/// shard the contiguous [r·chunk, (r+1)·chunk) (the layout without buckets).
struct BucketPlan {
  int world = 1;
  std::vector<Bucket> buckets;  ///< in increasing begin (the backward finishes them top down)
  int64_t state_size = 0;
  ShardLayout shard(int rank) const;
};
/// Throws octet::Error for n < 0, world < 1 or bucket_elems < 0.
BucketPlan plan_buckets(int64_t n, int world, int64_t bucket_elems);
/// dist.bucket_mb (MiB of F32 gradients; 0: one bucket) as the element count plan_buckets takes.
int64_t bucket_elems_from_mb(double bucket_mb);

class Zero1 {
 public:
  /// Plans the buckets of the model's parameters (bucket_mb: MiB of F32 gradients per bucket, 0: one
  /// bucket after the whole backward) and allocates this rank's state vector of summed gradients
  /// and, if the top bucket needs padding, its zero-padded staging copy, on the model's backend.
  Zero1(Model& model, Communicator& comm, double bucket_mb);
  const BucketPlan& plan() const { return plan_; }
  /// This rank's shard (optimizer state layout) for Optimizer.
  ShardLayout shard() const { return plan_.shard(comm_.rank()); }
  /// The backward's seam (Model::set_grad_ready_hook): the gradients at flat offsets >= frontier
  /// are final. Starts the reduce-scatter (Communicator::reduce_scatter_async) of every bucket that
  /// lies wholly there and was not started yet, top down. The gradients must not change afterwards
  /// until reduce_gradients() returned.
  void grads_final_from(int64_t frontier);
  /// Starts the buckets not started yet (all gradients are final now), waits for every bucket
  /// (wait_async) and returns this rank's summed gradients, F32 [plan().state_size] in its state
  /// layout (padding slots zero; valid until the next call).
  Tensor reduce_gradients();
  /// Every rank's updated parts of param_data() into every rank's param_data(): one all_gather per
  /// bucket, in place (the padded bucket through its staging copy).
  void gather_params();
  /// A per-shard F32 state in the state layout (e.g. AdamW's m, [plan().state_size]) gathered to
  /// the full [n] host vector, params() order, on every rank (one all_gather). Synchronizes.
  std::vector<float> gather_to_host(const Tensor& shard_state);

 private:
  void start(size_t k);
  Model& model_;
  Communicator& comm_;
  BucketPlan plan_;
  size_t unstarted_;  // buckets [0, unstarted_) are not started in this step
  Buffer grads_, staging_;
};

/// ZeRO-1's FP8 weight all-gather (dist.allgather_fp8; docs/distributed.md §"FP8 all-gather"), in
/// place of Zero1::gather_params after the optimizer step. For every weight that takes gathered
/// codes (Model::code_weights: FP8 linears, tensor-current), each rank takes the amax of its shard's
/// pieces, the amaxes are max-all-reduced (one I32 [weights] all-reduce), each rank encodes its
/// pieces with the tensor scale of that amax (the weight cache's own rule, so the codes are bitwise
/// those of quantizing the whole FP32 W), the codes (1 byte per parameter) are all-gathered and
/// installed as every linear's weight cache (Linear::install_weight_codes). Every other parameter
/// is all-gathered in FP32. Each rank sends one packed block per all-gather: its shard's pieces of
/// the code weights (and, in the other, of the rest) in flat order, padded to the largest rank's.
/// Afterwards the FP32 masters of the other ranks' code-weight pieces are STALE on this rank: only
/// the installed caches hold the current weights. Whoever reads param_data() as a whole (a
/// checkpoint, the export, the sampler) first calls Zero1::gather_params (the full FP32 all-gather).
class Fp8WeightGather {
 public:
  /// Throws octet::Error if the model has no code weights (a BF16/FP32 arm: the caller keeps
  /// Zero1::gather_params) or `plan` was made for another world size or parameter count.
  Fp8WeightGather(Model& model, Communicator& comm, const BucketPlan& plan);
  /// After the optimizer step (this rank's shard of param_data() updated): the FP32 all-gather of
  /// the other parameters, the amax all-reduce, the code all-gather, the install. Collectives;
  /// enqueued without a host synchronization on NCCL.
  void gather();
  /// Installs the last gathered codes again (no communication): after Model::update_quant_scales(),
  /// which drops the weight caches, when the weights did not change since gather() (an
  /// evaluation, a skipped step). A no-op before the first gather().
  void reinstall();
  /// Elements of one rank's block in the FP32 and in the code all-gather (the largest rank's).
  int64_t f32_block() const { return a32_; }
  int64_t code_block() const { return a8_; }
  /// Bytes one gather() moves through each rank's link in a ring all-gather, (N−1)/N · N blocks:
  /// (N−1)·(4·f32_block() + code_block()) (+ the amax all-reduce, 4 bytes per weight), against
  /// Zero1::gather_params' (N−1)·4·state_size.
  int64_t link_bytes() const;

  /// A run of flat parameters [flat, flat + count) that one rank sends at [packed, packed + count)
  /// of its block; weight: index in Model::code_weights() (code run) or −1 (FP32 run).
  struct Run {
    int64_t flat = 0, count = 0, packed = 0;
    int weight = -1;
  };
  const std::vector<Run>& runs(int rank) const { return runs_[size_t(rank)]; }

 private:
  void install();
  Model& model_;
  Communicator& comm_;
  std::vector<Model::CodeWeight> weights_;
  std::vector<std::vector<Run>> runs_;  // per rank, flat order
  int64_t a32_ = 0, a8_ = 0;
  Buffer f32_, codes_, wcodes_, amax_, zeros_;  // blocks; every weight's codes; I32 amaxes and zeros
  std::vector<int64_t> wcodes_at_;              // weight k's codes start at wcodes_[wcodes_at_[k]]
  bool installed_ = false;
};

/// Delayed scaling across ranks: every FP8 linear's amaxes recorded since the last update
/// (Model::pending_amaxes) max-reduced over the ranks and written back, so that the following
/// Model::update_quant_scales() computes the same scales on every rank (rank amaxes 1 and 8 → both
/// use E4M3 scale 448/8 = 56). A collective; enqueued without a host synchronization on NCCL.
/// A no-op for a model without delayed-scaling state.
void reduce_pending_amaxes(Model& model, Communicator& comm);

}  // namespace octet
