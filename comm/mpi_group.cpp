#include "comm/mpi_group.h"

#include "comm/launch_env.h"
#include "runtime/error.h"

#if WICK_HAS_MPI
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/mpi_check.h"
#endif

namespace wick::comm {

#if !WICK_HAS_MPI

struct MpiGroup::State {};

MpiGroup::MpiGroup(double timeout_s, bool) : ProcessGroup(timeout_s) {
  WICK_FAIL(Config, "the mpi process group is not available: wick was built without MPI "
                    "(install libopenmpi-dev and openmpi-bin, see scripts/install_deps.sh, and rebuild)");
}
MpiGroup::~MpiGroup() = default;
void MpiGroup::broadcast_bytes(void*, size_t, int) {}
std::shared_ptr<Work> MpiGroup::do_all_reduce(const Tensor&, ReduceOp) { return nullptr; }
std::shared_ptr<Work> MpiGroup::do_reduce_scatter(const Tensor&, const Tensor&, ReduceOp) { return nullptr; }
std::shared_ptr<Work> MpiGroup::do_reduce_scatter_v(const Tensor&, const Tensor&, const std::vector<int64_t>&,
                                                    ReduceOp) {
  return nullptr;
}
std::shared_ptr<Work> MpiGroup::do_all_gather(const Tensor&, const Tensor&) { return nullptr; }
std::shared_ptr<Work> MpiGroup::do_broadcast(const Tensor&, int) { return nullptr; }
std::shared_ptr<Work> MpiGroup::do_barrier() { return nullptr; }

#else

namespace {

using Clock = std::chrono::steady_clock;
constexpr int diag_tag = 4242;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    case DType::BF16:
    case DType::F16: return MPI_UINT16_T;  // raw bits: only for moves, never for arithmetic
    default: WICK_FAIL(Usage, "mpi: unsupported dtype ", dtype_name(t));
  }
}

bool needs_staging(DType t) { return t == DType::BF16 || t == DType::F16; }

int checked_count(const char* op, int64_t n) {
  WICK_CHECK(n <= INT_MAX, "mpi ", op, ": ", n, " elements exceed MPI's int count limit (2^31 - 1); split the call");
  return static_cast<int>(n);
}

}  // namespace

struct MpiGroup::State {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm diag_comm = MPI_COMM_NULL;  // lost-rank diagnosis after a timeout
  int rank = 0, size = 1;
  std::mutex mutex;
  int64_t sequence = 0;      // collectives started, the same count on every healthy rank
  std::string failure;       // set after a timeout or an error: the group is unusable
  std::vector<Tensor> abandoned;  // buffers of timed-out requests MPI may still write

  void check_usable(const char* op) {
    if (!failure.empty()) WICK_FAIL(Training, "mpi ", op, " on rank ", rank, ": the process group failed earlier: ", failure);
  }

  // Ranks that did not answer "which collective are you in" within `window` seconds.
  std::string missing_ranks(int64_t seq, double window) {
    std::vector<int64_t> sent(static_cast<size_t>(size), seq);
    std::vector<MPI_Request> sends;
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      MPI_Request request;
      if (MPI_Isend(&sent[static_cast<size_t>(r)], 1, MPI_INT64_T, r, diag_tag, diag_comm, &request) == MPI_SUCCESS)
        sends.push_back(request);
    }
    std::vector<bool> answered(static_cast<size_t>(size), false);
    answered[static_cast<size_t>(rank)] = true;
    int n_answered = 1;
    std::string late;
    auto start = Clock::now();
    while (n_answered < size && seconds_since(start) < window) {
      int flag = 0;
      MPI_Status status;
      if (MPI_Iprobe(MPI_ANY_SOURCE, diag_tag, diag_comm, &flag, &status) != MPI_SUCCESS) break;
      if (!flag) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      int64_t their_seq = 0;
      MPI_Recv(&their_seq, 1, MPI_INT64_T, status.MPI_SOURCE, diag_tag, diag_comm, MPI_STATUS_IGNORE);
      if (!answered[static_cast<size_t>(status.MPI_SOURCE)]) {
        answered[static_cast<size_t>(status.MPI_SOURCE)] = true;
        ++n_answered;
        if (their_seq != seq) late += detail::concat(" rank ", status.MPI_SOURCE, " is in collective #", their_seq, ";");
      }
    }
    // Sends to a lost rank may never complete; they are abandoned with the group.
    std::string missing;
    for (int r = 0; r < size; ++r)
      if (!answered[static_cast<size_t>(r)]) missing += detail::concat(missing.empty() ? "" : ", ", r);
    if (missing.empty()) return "every rank answered, so a peer is slow rather than lost;" + late;
    return "ranks that did not arrive: " + missing + ";" + late;
  }
};

namespace {

class MpiWork : public Work {
 public:
  MpiWork(std::shared_ptr<MpiGroup::State> state, std::string what, int64_t seq, double group_timeout)
      : state_(std::move(state)), what_(std::move(what)), seq_(seq), group_timeout_(group_timeout),
        start_(Clock::now()) {}

  MPI_Request request = MPI_REQUEST_NULL;
  std::function<void()> finish;  // copies staged results back
  std::vector<Tensor> keep;      // tensors MPI reads or writes until completion
  std::vector<int> counts;       // count arrays MPI reads until completion (reduce_scatter_v)

  bool is_completed() override {
    if (done_) return true;
    return poll();
  }

  void wait(double timeout_s) override {
    if (done_) return;
    double limit = timeout_s < 0 ? group_timeout_ : timeout_s;
    for (;;) {
      if (poll()) return;
      double elapsed = seconds_since(start_);
      if (limit > 0 && elapsed > limit) fail_timeout(elapsed, limit);
      // Open MPI progresses non-blocking collectives only inside MPI calls: poll without sleeping
      // for the first second (a blocking collective would spin as well), then back off.
      if (elapsed < 1.0) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

 private:
  bool poll() {
    int flag = 0;
    int code;
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      if (!state_->failure.empty())
        WICK_FAIL(Training, "mpi ", what_, " on rank ", state_->rank, ": the process group failed earlier: ",
                  state_->failure);
      code = MPI_Test(&request, &flag, MPI_STATUS_IGNORE);
    }
    if (code != MPI_SUCCESS) {
      std::string message = detail::concat(what_, " failed on rank ", state_->rank, " of ", state_->size, " after ",
                                           format_seconds(seconds_since(start_)), ": ", mpi_error_string(code));
      abandon(message);
      WICK_FAIL(Training, "mpi ", message);
    }
    if (!flag) return false;
    done_ = true;
    if (finish) finish();
    keep.clear();
    return true;
  }

  [[noreturn]] void fail_timeout(double elapsed, double limit) {
    std::string who;
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      who = state_->missing_ranks(seq_, std::clamp(limit, 1.0, 10.0));
    }
    std::string message =
        detail::concat(what_, " (collective #", seq_, ") did not complete on rank ", state_->rank, " of ",
                       state_->size, " within ", format_seconds(elapsed), " (distributed.timeout_s = ", limit,
                       "); ", who, " a peer rank is lost or hung");
    abandon(message);
    WICK_FAIL(Training, "mpi ", message);
  }

  void abandon(const std::string& message) {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->failure.empty()) state_->failure = message;
    for (auto& t : keep) state_->abandoned.push_back(t);
    keep.clear();
    mark_comm_failed();
  }

  std::shared_ptr<MpiGroup::State> state_;
  std::string what_;
  int64_t seq_;
  double group_timeout_;
  Clock::time_point start_;
  bool done_ = false;
};

std::string describe_call(const char* op, const Tensor& t, const char* reduce) {
  return detail::concat(op, "(", reduce ? reduce : "", reduce ? ", " : "", dtype_name(t.dtype()), ", ", t.numel(),
                        " elements)");
}

// Starts one request under the group mutex; `start` receives the work and returns the MPI code.
std::shared_ptr<Work> launch(const std::shared_ptr<MpiGroup::State>& state, double timeout, const char* op,
                             std::string what, const std::function<int(MpiWork&)>& start) {
  std::lock_guard<std::mutex> lock(state->mutex);
  state->check_usable(op);
  auto work = std::make_shared<MpiWork>(state, std::move(what), state->sequence++, timeout);
  int code = start(*work);
  if (code != MPI_SUCCESS) {
    std::string message = detail::concat(op, " could not start on rank ", state->rank, ": ", mpi_error_string(code));
    state->failure = message;
    mark_comm_failed();
    WICK_FAIL(Training, "mpi ", message);
  }
  return work;
}

}  // namespace

MpiGroup::MpiGroup(double timeout_s, bool node_only) : ProcessGroup(timeout_s), state_(std::make_shared<State>()) {
  WICK_CHECK_KIND(Runtime, mpi_initialized(), "MpiGroup: MPI is not initialized (call comm::init_mpi first)");
  State& s = *state_;
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &s.comm));
  MPI_CHECK(MPI_Comm_set_errhandler(s.comm, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_dup(s.comm, &s.diag_comm));
  MPI_CHECK(MPI_Comm_set_errhandler(s.diag_comm, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(s.comm, &s.rank));
  MPI_CHECK(MPI_Comm_size(s.comm, &s.size));
  MPI_Comm local = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(s.comm, MPI_COMM_TYPE_SHARED, s.rank, MPI_INFO_NULL, &local));
  MPI_CHECK(MPI_Comm_rank(local, &local_rank_));
  MPI_CHECK(MPI_Comm_size(local, &local_size_));
  // The node's first rank (local rank 0: the split's key is the world rank) names the node; the
  // nodes are numbered in the order of their first ranks.
  int first_rank = s.rank;
  MPI_CHECK(MPI_Bcast(&first_rank, 1, MPI_INT, 0, local));
  MPI_Comm_free(&local);
  std::vector<int> first_ranks(static_cast<size_t>(s.size));
  MPI_CHECK(MPI_Allgather(&first_rank, 1, MPI_INT, first_ranks.data(), 1, MPI_INT, s.comm));
  std::sort(first_ranks.begin(), first_ranks.end());
  first_ranks.erase(std::unique(first_ranks.begin(), first_ranks.end()), first_ranks.end());
  n_nodes_ = static_cast<int>(first_ranks.size());
  node_ = static_cast<int>(std::lower_bound(first_ranks.begin(), first_ranks.end(), first_rank) - first_ranks.begin());
  if (node_only) {  // the node's ranks in world order replace the world
    MPI_Comm node_comm = MPI_COMM_NULL;
    MPI_CHECK(MPI_Comm_split(s.comm, node_, s.rank, &node_comm));
    MPI_Comm_free(&s.diag_comm);
    MPI_Comm_free(&s.comm);
    s.comm = node_comm;
    MPI_CHECK(MPI_Comm_set_errhandler(s.comm, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_dup(s.comm, &s.diag_comm));
    MPI_CHECK(MPI_Comm_set_errhandler(s.diag_comm, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(s.comm, &s.rank));
    MPI_CHECK(MPI_Comm_size(s.comm, &s.size));
  }
  rank_ = s.rank;
  size_ = s.size;
}

MpiGroup::~MpiGroup() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || !state_->failure.empty()) return;  // a broken communicator may hang in free
  MPI_Comm_free(&state_->diag_comm);
  MPI_Comm_free(&state_->comm);
}

void MpiGroup::broadcast_bytes(void* data, size_t n_bytes, int root) {
  int count = checked_count("broadcast_bytes", static_cast<int64_t>(n_bytes));
  auto work = launch(state_, timeout_s(), "broadcast_bytes", detail::concat("broadcast_bytes(", n_bytes, " bytes)"),
                     [&](MpiWork& w) { return MPI_Ibcast(data, count, MPI_BYTE, root, state_->comm, &w.request); });
  work->wait();
}

std::shared_ptr<Work> MpiGroup::do_all_reduce(const Tensor& tensor, ReduceOp op) {
  int count = checked_count("all_reduce", tensor.numel());
  MPI_Op mpi_op = op == ReduceOp::Max ? MPI_MAX : MPI_SUM;
  return launch(state_, timeout_s(), "all_reduce", describe_call("all_reduce", tensor, reduce_op_name(op)),
                [&](MpiWork& w) {
                  Tensor buffer = tensor;
                  if (needs_staging(tensor.dtype())) {
                    buffer = tensor.to(DType::F32);
                    w.finish = [tensor, buffer] { tensor.copy_from(buffer); };
                  }
                  w.keep = {tensor, buffer};
                  return MPI_Iallreduce(MPI_IN_PLACE, buffer.data(), count, mpi_type(buffer.dtype()), mpi_op,
                                        state_->comm, &w.request);
                });
}

std::shared_ptr<Work> MpiGroup::do_reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) {
  int count = checked_count("reduce_scatter", output.numel());
  checked_count("reduce_scatter", input.numel());
  MPI_Op mpi_op = op == ReduceOp::Max ? MPI_MAX : MPI_SUM;
  return launch(state_, timeout_s(), "reduce_scatter", describe_call("reduce_scatter", input, reduce_op_name(op)),
                [&](MpiWork& w) {
                  Tensor send = input, receive = output;
                  if (needs_staging(input.dtype())) {
                    send = input.to(DType::F32);
                    receive = Tensor::empty(output.shape(), DType::F32);
                    w.finish = [output, receive] { output.copy_from(receive); };
                  }
                  w.keep = {input, output, send, receive};
                  return MPI_Ireduce_scatter_block(send.data(), receive.data(), count, mpi_type(send.dtype()), mpi_op,
                                                   state_->comm, &w.request);
                });
}

std::shared_ptr<Work> MpiGroup::do_reduce_scatter_v(const Tensor& input, const Tensor& output,
                                                    const std::vector<int64_t>& counts, ReduceOp op) {
  checked_count("reduce_scatter_v", input.numel());
  std::vector<int> receive_counts;
  int64_t offset = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    receive_counts.push_back(checked_count("reduce_scatter_v", counts[r]));
    if (static_cast<int>(r) < rank_) offset += counts[r];
  }
  const bool in_place = output.numel() > 0 && is_segment_of(output, input, offset);
  MPI_Op mpi_op = op == ReduceOp::Max ? MPI_MAX : MPI_SUM;
  return launch(state_, timeout_s(), "reduce_scatter_v",
                describe_call("reduce_scatter_v", input, reduce_op_name(op)), [&](MpiWork& w) {
                  Tensor send = input, receive = output;
                  if (needs_staging(input.dtype())) send = input.to(DType::F32);
                  if (needs_staging(input.dtype()) || in_place) {
                    receive = Tensor::empty(output.shape(), send.dtype());
                    w.finish = [output, receive] { output.copy_from(receive); };
                  }
                  w.keep = {input, output, send, receive};
                  w.counts = std::move(receive_counts);
                  return MPI_Ireduce_scatter(send.data(), receive.data(), w.counts.data(), mpi_type(send.dtype()),
                                             mpi_op, state_->comm, &w.request);
                });
}

std::shared_ptr<Work> MpiGroup::do_all_gather(const Tensor& input, const Tensor& output) {
  int count = checked_count("all_gather", input.numel());
  checked_count("all_gather", output.numel());
  return launch(state_, timeout_s(), "all_gather", describe_call("all_gather", input, nullptr), [&](MpiWork& w) {
    w.keep = {input, output};
    MPI_Datatype type = mpi_type(input.dtype());
    return MPI_Iallgather(input.data(), count, type, output.data(), count, type, state_->comm, &w.request);
  });
}

std::shared_ptr<Work> MpiGroup::do_broadcast(const Tensor& tensor, int root) {
  int count = checked_count("broadcast", tensor.numel());
  return launch(state_, timeout_s(), "broadcast",
                detail::concat("broadcast(root ", root, ", ", dtype_name(tensor.dtype()), ", ", tensor.numel(),
                               " elements)"),
                [&](MpiWork& w) {
                  w.keep = {tensor};
                  return MPI_Ibcast(tensor.data(), count, mpi_type(tensor.dtype()), root, state_->comm, &w.request);
                });
}

std::shared_ptr<Work> MpiGroup::do_barrier() {
  return launch(state_, timeout_s(), "barrier", "barrier",
                [&](MpiWork& w) { return MPI_Ibarrier(state_->comm, &w.request); });
}

#endif

}  // namespace wick::comm
