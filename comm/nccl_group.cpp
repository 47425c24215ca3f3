#include "comm/nccl_group.h"

#include "comm/launch_env.h"
#include "comm/rank_layout.h"
#include "runtime/error.h"

#if WICK_HAS_NCCL && WICK_HAS_CUDA
#define WICK_NCCL_GROUP 1
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/nccl_check.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/cuda/cuda_check.h"
#endif

namespace wick::comm {

#if !WICK_NCCL_GROUP

struct NcclGroup::State {};

namespace {
[[noreturn]] void nccl_missing() {
  WICK_FAIL(Config, "the nccl process group is not available: wick was built without ",
#if !WICK_HAS_CUDA
            "CUDA"
#else
            "NCCL (install NCCL, libnccl-dev or the CUDA toolkit's libnccl, and rebuild)"
#endif
            , "; use distributed.backend: mpi (or auto) with the CPU");
}
}  // namespace

NcclGroup::NcclGroup(std::shared_ptr<MpiGroup> bootstrap, double timeout_s)
    : ProcessGroup(timeout_s), bootstrap_(std::move(bootstrap)) {
  nccl_missing();
}
NcclGroup::NcclGroup(Device, double timeout_s) : ProcessGroup(timeout_s) { nccl_missing(); }
void NcclGroup::start() {}
NcclGroup::~NcclGroup() = default;
std::shared_ptr<Work> NcclGroup::do_all_reduce(const Tensor&, ReduceOp) { return nullptr; }
std::shared_ptr<Work> NcclGroup::do_reduce_scatter(const Tensor&, const Tensor&, ReduceOp) { return nullptr; }
std::shared_ptr<Work> NcclGroup::do_reduce_scatter_v(const Tensor&, const Tensor&, const std::vector<int64_t>&,
                                                     ReduceOp) {
  return nullptr;
}
std::shared_ptr<Work> NcclGroup::do_all_gather(const Tensor&, const Tensor&) { return nullptr; }
std::shared_ptr<Work> NcclGroup::do_broadcast(const Tensor&, int) { return nullptr; }
std::shared_ptr<Work> NcclGroup::do_barrier() { return nullptr; }

#else

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::BF16: return ncclBfloat16;
    case DType::F16: return ncclFloat16;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    default: WICK_FAIL(Usage, "nccl: unsupported dtype ", dtype_name(t));
  }
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::Max ? ncclMax : ncclSum; }

// One enqueued collective: its completion event and age, watched by the watchdog.
struct Pending {
  cudaEvent_t done = nullptr;
  Clock::time_point start = Clock::now();
  std::string what;
  ~Pending() {
    if (done != nullptr) cudaEventDestroy(done);  // CUDA releases it once the event has completed
  }
};

}  // namespace

struct NcclGroup::State {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int device = 0;
  int rank = 0, size = 1;
  double timeout_s = 0;
  std::mutex mutex;                                // comm, pending, failure
  std::vector<std::shared_ptr<Pending>> pending;   // enqueued, not yet seen complete
  std::string failure;                             // non-empty once aborted
  Tensor barrier_buffer;                           // one int32 on the device
  std::thread watchdog;
  std::condition_variable stop_signal;
  bool stop = false;

  // Why a collective did not finish in time, for messages.
  std::string stall_cause() const {
    return size > 1 ? "a peer rank is lost or hung (NCCL cannot tell which)"
                    : "the GPU work queued before it did not finish (a group of one rank waits for no peer)";
  }

  // With `mutex` held.
  void abort_locked(const std::string& message) {
    if (!failure.empty()) return;
    failure = message;
    mark_comm_failed();
    if (comm != nullptr) ncclCommAbort(comm);
    comm = nullptr;
  }

  std::string async_error_locked() {
    if (comm == nullptr) return "";
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm, &async);
    if (r != ncclSuccess) return detail::concat("ncclCommGetAsyncError: ", ncclGetErrorString(r));
    if (async == ncclSuccess || async == ncclInProgress) return "";
    return detail::concat("asynchronous NCCL error: ", ncclGetErrorString(async), " (", ncclGetLastError(comm), ")");
  }

  // Waits (with `mutex` held) until a non-blocking NCCL call has finished, or aborts.
  void settle_locked(ncclResult_t result, const std::string& what, Clock::time_point start) {
    while (result == ncclInProgress) {
      if (timeout_s > 0 && seconds_since(start) > timeout_s) {
        abort_locked(detail::concat(what, " did not finish enqueueing on rank ", rank, " within ",
                                    format_seconds(seconds_since(start)), " (distributed.timeout_s = ", timeout_s,
                                    "); ", stall_cause()));
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      ncclCommGetAsyncError(comm, &result);
    }
    if (failure.empty() && result != ncclSuccess)
      abort_locked(detail::concat(what, " failed on rank ", rank, ": ", ncclGetErrorString(result), " (",
                                  ncclGetLastError(comm), ")"));
    if (!failure.empty()) WICK_FAIL(Training, "nccl ", failure);
  }

  void watch() {
    cudaSetDevice(device);
    std::unique_lock<std::mutex> lock(mutex);
    while (!stop) {
      stop_signal.wait_for(lock, std::chrono::milliseconds(100));
      if (stop || !failure.empty()) continue;
      std::string error = async_error_locked();
      if (!error.empty()) {
        abort_locked(detail::concat(error, " on rank ", rank, " of ", size));
        continue;
      }
      for (auto it = pending.begin(); it != pending.end();) {
        cudaError_t q = cudaEventQuery((*it)->done);
        if (q == cudaSuccess) {
          it = pending.erase(it);
          continue;
        }
        double age = seconds_since((*it)->start);
        if (q != cudaErrorNotReady) {
          abort_locked(detail::concat((*it)->what, " failed on rank ", rank, ": ", cudaGetErrorString(q)));
          break;
        }
        if (timeout_s > 0 && age > timeout_s) {
          abort_locked(detail::concat((*it)->what, " did not complete on rank ", rank, " of ", size, " within ",
                                      format_seconds(age), " (distributed.timeout_s = ", timeout_s,
                                      "); ", stall_cause(), "; the watchdog aborted the communicator"));
          break;
        }
        ++it;
      }
    }
  }
};

namespace {

class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<NcclGroup::State> state, std::shared_ptr<Pending> pending, std::vector<Tensor> keep)
      : state_(std::move(state)), pending_(std::move(pending)), keep_(std::move(keep)) {}

  bool is_completed() override {
    if (done_) return true;
    return cudaEventQuery(pending_->done) == cudaSuccess;
  }

  void wait(double timeout_s) override {
    if (done_) return;
    double limit = timeout_s < 0 ? state_->timeout_s : timeout_s;
    CUDA_CHECK(cudaSetDevice(state_->device));
    for (int spin = 0;; ++spin) {
      cudaError_t q = cudaEventQuery(pending_->done);
      if (q == cudaSuccess) break;
      std::lock_guard<std::mutex> lock(state_->mutex);
      if (q != cudaErrorNotReady)
        state_->abort_locked(detail::concat(pending_->what, " failed on rank ", state_->rank, ": ",
                                            cudaGetErrorString(q)));
      double age = seconds_since(pending_->start);
      if (state_->failure.empty() && limit > 0 && age > limit)
        state_->abort_locked(detail::concat(pending_->what, " did not complete on rank ", state_->rank, " of ",
                                            state_->size, " within ", format_seconds(age),
                                            " (timeout ", limit, " s); ", state_->stall_cause()));
      if (!state_->failure.empty()) WICK_FAIL(Training, "nccl ", state_->failure);
      if (spin > 64) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    {
      // An aborted communicator's kernels exit early and still complete the event: the buffer is
      // then only partly reduced, so a collective that finished after an abort fails too.
      std::lock_guard<std::mutex> lock(state_->mutex);
      if (!state_->failure.empty()) WICK_FAIL(Training, "nccl ", state_->failure);
    }
    // Later work on the caller's stream sees the results.
    auto consumer = static_cast<cudaStream_t>(current_stream(Device::cuda(state_->device)).handle);
    CUDA_CHECK(cudaStreamWaitEvent(consumer, pending_->done, 0));
    keep_.clear();
    done_ = true;
  }

 private:
  std::shared_ptr<NcclGroup::State> state_;
  std::shared_ptr<Pending> pending_;
  std::vector<Tensor> keep_;
  bool done_ = false;
};

// Orders the group stream after the caller's stream, enqueues `call` (which returns the NCCL
// result) and records the completion event.
template <typename Call>
std::shared_ptr<Work> enqueue(const std::shared_ptr<NcclGroup::State>& state, std::string what,
                              std::vector<Tensor> keep, Call call) {
  NcclGroup::State& s = *state;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.failure.empty()) WICK_FAIL(Training, "nccl ", what, ": the process group failed earlier: ", s.failure);
  CUDA_CHECK(cudaSetDevice(s.device));
  auto producer = static_cast<cudaStream_t>(current_stream(Device::cuda(s.device)).handle);
  cudaEvent_t ready = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(ready, producer));
  cudaError_t waited = cudaStreamWaitEvent(s.stream, ready, 0);
  cudaEventDestroy(ready);
  WICK_CHECK_KIND(Runtime, waited == cudaSuccess, "nccl group: cudaStreamWaitEvent: ", cudaGetErrorString(waited));
  auto pending = std::make_shared<Pending>();
  pending->what = what;
  CUDA_CHECK(cudaEventCreateWithFlags(&pending->done, cudaEventDisableTiming));
  s.settle_locked(call(s.comm, s.stream), what, pending->start);
  CUDA_CHECK(cudaEventRecord(pending->done, s.stream));
  s.pending.push_back(pending);
  return std::make_shared<NcclWork>(state, std::move(pending), std::move(keep));
}

std::string describe_call(const char* op, const Tensor& t, const char* reduce) {
  return detail::concat(op, "(", reduce ? reduce : "", reduce ? ", " : "", dtype_name(t.dtype()), ", ", t.numel(),
                        " elements)");
}

}  // namespace

NcclGroup::NcclGroup(std::shared_ptr<MpiGroup> bootstrap, double timeout_s)
    : ProcessGroup(timeout_s), bootstrap_(std::move(bootstrap)), state_(std::make_shared<State>()) {
  WICK_CHECK(bootstrap_ != nullptr, "NcclGroup: needs an MPI group for the bootstrap");
  rank_ = bootstrap_->rank();
  size_ = bootstrap_->size();
  local_rank_ = bootstrap_->local_rank();
  local_size_ = bootstrap_->local_size();
  node_ = bootstrap_->node();
  n_nodes_ = bootstrap_->n_nodes();
  int n_devices = cuda::device_count();
  WICK_CHECK_KIND(Runtime, n_devices > 0, "nccl process group on rank ", rank_, ": no CUDA device is visible");
  // NCCL refuses two ranks of one communicator on one GPU ("Duplicate GPU detected"): say why first.
  WICK_CHECK_KIND(Config, local_size_ <= n_devices, "nccl process group: ", local_size_, " ranks on node ", node_,
                  " (rank ", rank_, " is its local rank ", local_rank_, ") but ", n_devices,
                  " CUDA device(s) visible there: NCCL needs one GPU per rank; start at most ", n_devices,
                  " ranks per node (mpirun --npernode, srun --ntasks-per-node) or use distributed.backend: mpi");
  device_ = Device::cuda(gpu_for_local_rank(local_rank_, n_devices));
  start();
}

NcclGroup::NcclGroup(Device device, double timeout_s) : ProcessGroup(timeout_s), state_(std::make_shared<State>()) {
  WICK_CHECK_KIND(Config, device.is_cuda(), "nccl process group: needs a CUDA device, got ", device.str());
  int n_devices = cuda::device_count();
  WICK_CHECK_KIND(Runtime, n_devices > 0, "nccl process group of one rank on ", device.str(),
                  ": no CUDA device is visible");
  WICK_CHECK_KIND(Config, device.index >= 0 && device.index < n_devices, "nccl process group: ", device.str(),
                  " does not exist (", n_devices, " CUDA device(s) visible)");
  device_ = device;
  start();
}

void NcclGroup::start() {
  State& s = *state_;
  s.device = device_.index;
  s.rank = rank_;
  s.size = size_;
  s.timeout_s = timeout_s();
  CUDA_CHECK(cudaSetDevice(s.device));

  ncclUniqueId id{};
  if (s.rank == 0) {
    NCCL_CHECK(ncclGetUniqueId(&id));
  }
  if (bootstrap_ != nullptr) bootstrap_->broadcast_bytes(&id, sizeof(id), 0);  // one rank: no bootstrap

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  auto start = Clock::now();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    ncclResult_t r = ncclCommInitRankConfig(&s.comm, s.size, id, s.rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      // The communicator may be unusable but must still be released.
      std::string message = detail::concat("ncclCommInitRankConfig on rank ", s.rank, " of ", s.size, ": ",
                                           ncclGetErrorString(r));
      s.abort_locked(message);
      WICK_FAIL(Training, "nccl ", message);
    }
    s.settle_locked(r, "ncclCommInitRankConfig", start);
  }
  CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  s.barrier_buffer = Tensor::empty({1}, DType::I32, device_);
  s.watchdog = std::thread([state = state_] { state->watch(); });
}

NcclGroup::~NcclGroup() {
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.stop = true;
  }
  s.stop_signal.notify_all();
  if (s.watchdog.joinable()) s.watchdog.join();
  std::lock_guard<std::mutex> lock(s.mutex);
  cudaSetDevice(s.device);
  if (s.comm != nullptr) {
    // Flush outstanding collectives (non-blocking: poll), then destroy; abort if a peer never comes.
    auto start = Clock::now();
    ncclResult_t r = ncclCommFinalize(s.comm);
    while (r == ncclInProgress && (s.timeout_s <= 0 || seconds_since(start) < s.timeout_s)) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      ncclCommGetAsyncError(s.comm, &r);
    }
    if (r == ncclSuccess) ncclCommDestroy(s.comm);
    else ncclCommAbort(s.comm);
    s.comm = nullptr;
  }
  s.pending.clear();
  if (s.stream != nullptr) cudaStreamDestroy(s.stream);
  s.stream = nullptr;
}

std::shared_ptr<Work> NcclGroup::do_all_reduce(const Tensor& tensor, ReduceOp op) {
  void* data = tensor.data();
  size_t count = static_cast<size_t>(tensor.numel());
  ncclDataType_t type = nccl_type(tensor.dtype());
  return enqueue(state_, describe_call("all_reduce", tensor, reduce_op_name(op)), {tensor},
                 [&](ncclComm_t comm, cudaStream_t stream) {
                   return ncclAllReduce(data, data, count, type, nccl_op(op), comm, stream);
                 });
}

std::shared_ptr<Work> NcclGroup::do_reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) {
  size_t count = static_cast<size_t>(output.numel());
  ncclDataType_t type = nccl_type(input.dtype());
  return enqueue(state_, describe_call("reduce_scatter", input, reduce_op_name(op)), {input, output},
                 [&](ncclComm_t comm, cudaStream_t stream) {
                   return ncclReduceScatter(input.data(), output.data(), count, type, nccl_op(op), comm, stream);
                 });
}

std::shared_ptr<Work> NcclGroup::do_reduce_scatter_v(const Tensor& input, const Tensor& output,
                                                     const std::vector<int64_t>& counts, ReduceOp op) {
  ncclDataType_t type = nccl_type(input.dtype());
  const int64_t element_bytes = dtype_size(input.dtype());
  char* base = static_cast<char*>(input.data());
  void* own = output.data();
  const int me = rank_;
  return enqueue(state_, describe_call("reduce_scatter_v", input, reduce_op_name(op)), {input, output},
                 [&](ncclComm_t comm, cudaStream_t stream) {
                   // Segment r reduced onto rank r (recvbuff is read on the root only: in place when
                   // output is the segment itself). Every rank skips the same empty segments.
                   ncclResult_t result = ncclGroupStart();
                   if (result != ncclSuccess) return result;
                   int64_t offset = 0;
                   for (int r = 0; r < static_cast<int>(counts.size()); ++r) {
                     const int64_t n = counts[static_cast<size_t>(r)];
                     if (n > 0 && (result == ncclSuccess || result == ncclInProgress)) {
                       void* segment = base + offset * element_bytes;
                       result = ncclReduce(segment, r == me ? own : segment, static_cast<size_t>(n), type,
                                           nccl_op(op), r, comm, stream);
                     }
                     offset += n;
                   }
                   ncclResult_t ended = ncclGroupEnd();
                   return result == ncclSuccess || result == ncclInProgress ? ended : result;
                 });
}

std::shared_ptr<Work> NcclGroup::do_all_gather(const Tensor& input, const Tensor& output) {
  size_t count = static_cast<size_t>(input.numel());
  ncclDataType_t type = nccl_type(input.dtype());
  return enqueue(state_, describe_call("all_gather", input, nullptr), {input, output},
                 [&](ncclComm_t comm, cudaStream_t stream) {
                   return ncclAllGather(input.data(), output.data(), count, type, comm, stream);
                 });
}

std::shared_ptr<Work> NcclGroup::do_broadcast(const Tensor& tensor, int root) {
  void* data = tensor.data();
  size_t count = static_cast<size_t>(tensor.numel());
  ncclDataType_t type = nccl_type(tensor.dtype());
  return enqueue(state_, detail::concat("broadcast(root ", root, ", ", dtype_name(tensor.dtype()), ", ",
                                        tensor.numel(), " elements)"),
                 {tensor}, [&](ncclComm_t comm, cudaStream_t stream) {
                   return ncclBroadcast(data, data, count, type, root, comm, stream);
                 });
}

std::shared_ptr<Work> NcclGroup::do_barrier() {
  // NCCL has no barrier: a one-element all-reduce on the group stream, waited for by the host.
  Tensor buffer = state_->barrier_buffer;
  void* data = buffer.data();
  return enqueue(state_, "barrier", {buffer}, [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllReduce(data, data, 1, ncclInt32, ncclSum, comm, stream);
  });
}

#endif

}  // namespace wick::comm
