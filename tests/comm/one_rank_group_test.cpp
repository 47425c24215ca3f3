// Communicators of one rank: the NCCL group on one GPU (comm/nccl_group.h), what a single-GPU
// machine can check of the NCCL path, and on the CPU a loopback group (the single group under
// another name) that takes the code paths any communicator takes, so they run on every machine.
// NCCL: every collective and dtype on CUDA tensors produced by kernels still in flight on the
// caller's stream (the group's stream must wait for them, the caller must see the results after
// wait()); the watchdog aborting a collective held back past the timeout. Both groups: gradient
// buckets launching during backward with finish() == the gradient; ZeRO-1 sharded into one range
// stepping bitwise like the unsharded optimizer (clipping on, AdamW, AdamW8bit, SGD); its checkpoint
// holding the one shard, which restores sharded and unsharded optimizers. The NCCL tests skip
// without a CUDA device (GTEST_SKIP), except the one that checks the error an explicit nccl backend
// gives on a machine without a GPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/launch_env.h"
#include "comm/nccl_group.h"
#include "comm/single_group.h"
#include "engine/autograd/backward.h"
#include "engine/autograd/ops_loss.h"
#include "engine/checkpoint/optimizer_shards.h"
#include "engine/distributed/gradient_buckets.h"
#include "engine/distributed/zero.h"
#include "engine/init.h"
#include "engine/optim/optimizer.h"
#include "engine/train/train_checkpoint.h"
#include "models/nn/linear.h"
#include "runtime/cuda/host_function.h"
#include "runtime/error.h"
#include "runtime/ops/copy.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/random.h"
#include "runtime/tensor.h"
#include "tests/comm/test_group.h"

using namespace wick;
using ::testing::HasSubstr;

namespace {

const Device gpu = Device::cuda(0);
const std::vector<DType> all_dtypes = {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I32, DType::I64};

#define SKIP_WITHOUT_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: the NCCL group of one rank is not run here"

// Small integers (exact in every dtype), i % 13 + offset, made on the CPU and copied over.
Tensor pattern(int64_t n, DType dtype, double offset, Device device) {
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = static_cast<double>(i % 13) + offset;
  return Tensor::from_vector(values, {n}).to(dtype).to(device);
}

// The input of a collective as a kernel writes it on the caller's stream just before the call:
// 2 * pattern, so a collective that does not wait for the stream reads the unfinished tensor.
Tensor produced(int64_t n, DType dtype, double offset) { return mul(pattern(n, dtype, offset, gpu), 2.0); }

void expect_pattern(const Tensor& t, double offset, double scale, const std::string& what) {
  std::vector<double> got = t.to(Device::cpu()).to_vector<double>();
  int64_t n_bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double want = scale * (static_cast<double>(i % 13) + offset);
    if (got[i] != want) {
      if (n_bad == 0) ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", expected " << want;
      ++n_bad;
    }
  }
  EXPECT_EQ(n_bad, 0) << what << ": " << n_bad << " of " << got.size() << " elements wrong";
}

Tensor sentinel(int64_t n, DType dtype) { return pattern(n, dtype, 100.0, gpu); }

std::string label(const char* op, DType t, int64_t n) {
  return std::string(op) + " " + dtype_name(t) + " n=" + std::to_string(n) + " (nccl, one rank)";
}

// Holds the caller's stream for `seconds` on a CUDA host thread.
void hold_stream(const double* seconds) {
  cuda::launch_host_function(gpu.index, current_stream(gpu).handle,
                             [](void* arg) {
                               std::this_thread::sleep_for(std::chrono::duration<double>(*static_cast<double*>(arg)));
                             },
                             const_cast<double*>(seconds));
}

}  // namespace

TEST(NcclOneRank, ExplicitBackendWithoutLauncherIsAnNcclGroupAndNoMpi) {
  if (comm::detect_launch_env().launched) GTEST_SKIP() << "started by a launcher: make_process_group uses MPI there";
  if (cuda_device_count() == 0) {
    // A machine without a GPU: asking for NCCL fails with a message that says why.
    try {
      comm::make_process_group("nccl", gpu, 10);
      FAIL() << "make_process_group(\"nccl\") succeeded without a CUDA device";
    } catch (const WickError& e) {
      EXPECT_THAT(e.what(), ::testing::AnyOf(HasSubstr("no CUDA device is visible"), HasSubstr("built without")));
    }
    EXPECT_FALSE(comm::mpi_initialized()) << "an explicit nccl backend initialized MPI without a launcher";
    return;
  }
  auto group = comm::make_process_group("nccl", gpu, 10);
  EXPECT_EQ(group->backend(), "nccl");
  EXPECT_EQ(group->size(), 1);
  EXPECT_EQ(group->rank(), 0);
  EXPECT_EQ(group->local_size(), 1);
  EXPECT_EQ(group->device(), gpu);
  EXPECT_FALSE(comm::mpi_initialized()) << "the one-rank NCCL group initialized MPI";
  // auto on CUDA without a launcher stays the single group.
  EXPECT_EQ(comm::make_process_group("auto", gpu, 10)->backend(), "single");
}

TEST(NcclOneRank, CollectivesOnEveryDtypeWaitForTheProducingStream) {
  SKIP_WITHOUT_GPU();
  comm::NcclGroup group(gpu, /*timeout_s=*/60);
  ASSERT_EQ(group.size(), 1);
  for (DType t : all_dtypes)
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000003}}) {
      Tensor x = produced(n, t, 1.0);
      group.all_reduce(x, comm::ReduceOp::Sum);
      expect_pattern(x, 1.0, 2.0, label("all_reduce sum", t, n));
      Tensor m = produced(n, t, 2.0);
      group.all_reduce(m, comm::ReduceOp::Max);
      expect_pattern(m, 2.0, 2.0, label("all_reduce max", t, n));

      Tensor out = sentinel(n, t);
      group.reduce_scatter(produced(n, t, 3.0), out);
      expect_pattern(out, 3.0, 2.0, label("reduce_scatter", t, n));

      Tensor separate = sentinel(n, t);
      group.reduce_scatter_v(produced(n, t, 4.0), separate, {n});
      expect_pattern(separate, 4.0, 2.0, label("reduce_scatter_v into another tensor", t, n));
      Tensor in_place = produced(n, t, 5.0);
      group.reduce_scatter_v(in_place, in_place, {n});
      expect_pattern(in_place, 5.0, 2.0, label("reduce_scatter_v in place", t, n));

      Tensor gathered = sentinel(n, t);
      group.all_gather(produced(n, t, 6.0), gathered);
      expect_pattern(gathered, 6.0, 2.0, label("all_gather", t, n));

      Tensor b = produced(n, t, 7.0);
      group.broadcast(b, 0);
      expect_pattern(b, 7.0, 2.0, label("broadcast", t, n));
    }
  group.barrier();
  // Zero counts give an empty segment and complete at once.
  Tensor empty = Tensor::empty({0}, DType::F32, gpu);
  group.reduce_scatter_v(empty, empty, {0});
}

TEST(NcclOneRank, AsyncCollectivesInFlightTogether) {
  SKIP_WITHOUT_GPU();
  comm::NcclGroup group(gpu, 60);
  const int64_t n = 1 << 20;
  std::vector<Tensor> inputs, outputs;
  std::vector<std::shared_ptr<comm::Work>> works;
  for (int i = 0; i < 8; ++i) {
    inputs.push_back(produced(n, DType::F32, i));
    outputs.push_back(sentinel(n, DType::F32));
    works.push_back(group.all_gather_async(inputs.back(), outputs.back()));
  }
  for (auto& work : works) work->wait();
  for (int i = 0; i < 8; ++i) expect_pattern(outputs[static_cast<size_t>(i)], i, 2.0, "async all_gather " + std::to_string(i));
  for (auto& work : works) EXPECT_TRUE(work->is_completed());
}

TEST(NcclOneRank, WatchdogAbortsACollectiveHeldPastTheTimeout) {
  SKIP_WITHOUT_GPU();
  if (g_group->size() > 1) GTEST_SKIP() << "run without mpirun: an aborted communicator marks the process failed";
  static const double held_s = 3.0;
  {
    comm::NcclGroup group(gpu, /*timeout_s=*/0.3);
    Tensor x = pattern(1000, DType::F32, 0.0, gpu);  // before the hold: a copy from pageable memory may block
    synchronize(gpu);
    hold_stream(&held_s);  // the collective waits for the caller's stream, held for 3 s
    auto work = group.all_reduce_async(x);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the watchdog polls every 100 ms
    EXPECT_FALSE(work->is_completed());
    try {
      work->wait();
      FAIL() << "wait() returned for a collective held past the timeout";
    } catch (const WickError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Training);
      EXPECT_THAT(e.what(), HasSubstr("all_reduce(sum, f32, 1000 elements) did not complete on rank 0 of 1"));
      EXPECT_THAT(e.what(), HasSubstr("the watchdog aborted the communicator"));
      EXPECT_THAT(e.what(), HasSubstr("distributed.timeout_s = 0.3"));
    }
    // The group stays failed: later calls say so instead of hanging.
    try {
      group.barrier();
      FAIL() << "a collective on an aborted group succeeded";
    } catch (const WickError& e) {
      EXPECT_THAT(e.what(), HasSubstr("the process group failed earlier"));
    }
    synchronize(gpu);  // the host function returns; the group is destroyed with its stream idle
  }
  // wait() with its own, shorter limit on a group without a timeout: wait() itself aborts.
  {
    comm::NcclGroup group(gpu, /*timeout_s=*/0);
    Tensor x = pattern(10, DType::F32, 0.0, gpu);
    synchronize(gpu);
    hold_stream(&held_s);
    auto work = group.broadcast_async(x, 0);
    auto start = std::chrono::steady_clock::now();
    try {
      work->wait(0.2);
      FAIL() << "wait(0.2) returned for a collective held for 3 s";
    } catch (const WickError& e) {
      EXPECT_THAT(e.what(), HasSubstr("broadcast(root 0, f32, 10 elements) did not complete"));
      EXPECT_THAT(e.what(), HasSubstr("(timeout 0.2 s)"));
    }
    // ncclCommAbort may itself wait for the held stream (NCCL frees device memory), so only "no hang".
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), held_s + 3.0);
    synchronize(gpu);
  }
}

namespace {

// The single group under another name: what shard_optimizer, GradientBuckets and the checkpoint code
// do with any communicator of one rank, on the CPU.
class LoopbackGroup : public comm::SingleGroup {
 public:
  std::string backend() const override { return "loopback"; }
};

// Three layers: 172,832 parameters (a flat buffer above 65,536 elements, so the clipping norm
// gathers 256-element row sums), large enough for 8-bit state and for several 64 KB buckets.
struct Net {
  std::shared_ptr<nn::Linear> fc1, fc2, fc3;
  Tensor forward(const Tensor& x) const { return fc3->forward(fc2->forward(fc1->forward(x))); }
  NamedParameters parameters() const {
    NamedParameters out;
    for (auto& [name, t] : fc1->named_parameters()) out.emplace_back("fc1." + name, t);
    for (auto& [name, t] : fc2->named_parameters()) out.emplace_back("fc2." + name, t);
    for (auto& [name, t] : fc3->named_parameters()) out.emplace_back("fc3." + name, t);
    return out;
  }
};

Net make_net(Device device) {
  set_init_seed(13);
  nn::LinearOptions options{.device = device};
  return {std::make_shared<nn::Linear>(64, 512, options), std::make_shared<nn::Linear>(512, 256, options),
          std::make_shared<nn::Linear>(256, 32, options)};
}

Tensor loss_of(const Net& net, int step, Device device) {
  Tensor x = randn({16, 64}, derive_stream(21, static_cast<uint64_t>(step), 0, RngPurpose::Test), DType::F32, device);
  Tensor y = randn({16, 32}, derive_stream(22, static_cast<uint64_t>(step), 0, RngPurpose::Test), DType::F32, device);
  return autograd::mse_loss(net.forward(x), y);
}

std::vector<float> host(const Tensor& t) { return t.to(Device::cpu()).to_vector<float>(); }

void expect_same_parameters(const Net& a, const Net& b, const std::string& what) {
  NamedParameters pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_EQ(host(pa[i].second), host(pb[i].second)) << what << ": " << pa[i].first;
}

// Buckets of 64 KB over the group: three, each launched inside backward; finish() leaves the
// gradient itself in the flat buffer (the sum over one rank, not divided).
void expect_buckets_finish_with_the_gradient(comm::ProcessGroup& group) {
  const Device device = group.device();
  Net net = make_net(device);
  auto optimizer = make_optimizer("adamw", net.parameters(), {.weight_decay = 0.0f});
  GradientBuckets buckets(*optimizer, group, /*bucket_bytes=*/64 << 10);  // fc1.weight 128 KB, fc2.weight 512 KB
  ASSERT_EQ(buckets.n_buckets(), 3);
  EXPECT_FALSE(buckets.reduce_scatters());
  for (int step = 0; step < 2; ++step) {
    autograd::GradientStore store;
    buckets.arm(true);
    autograd::backward(loss_of(net, step, device), store);
    BucketReport report = buckets.finish(store);
    EXPECT_EQ(report.n_missing, 0);
    EXPECT_EQ(report.n_launched_during_backward, 3) << "buckets did not start during backward on " << group.describe();
    for (const ParameterSlot& slot : optimizer->parameters()) {
      Tensor grad = store.get(slot.parameter);
      ASSERT_TRUE(grad.defined()) << slot.name;
      EXPECT_EQ(host(slot.grad), host(grad)) << slot.name << " on " << group.describe()
                                             << ": the flat gradient after finish() is not the gradient";
    }
  }
}

// ZeRO-1 over the group (one range: all of it) with buckets reduce-scattering, three steps with
// clipping on, against an unsharded optimizer stepping on the same gradients: bitwise equal
// parameters and norms. Then its checkpoint: the one shard file (no optimizer.safetensors) merges
// into exactly the unsharded state, and restores a sharded and an unsharded optimizer that take the
// next step like the original.
void expect_sharded_like_unsharded(comm::ProcessGroup& group, const char* name) {
  const Device device = group.device();
  const std::string what = std::string(name) + " on " + group.describe();
  Net sharded_net = make_net(device), plain_net = make_net(device);
  OptimizerConfig config{.weight_decay = 0.01f, .momentum = 0.9f, .max_grad_norm = 0.05f};  // clipping on
  auto sharded = make_optimizer(name, sharded_net.parameters(), config);
  auto plain = make_optimizer(name, plain_net.parameters(), config);
  shard_optimizer(*sharded, group);
  ASSERT_TRUE(sharded->sharded()) << what << ": a communicator of one rank must shard (into one range)";
  EXPECT_EQ(sharded->owned_range(), std::make_pair(int64_t{0}, sharded->flat_numel()));
  auto buckets = std::make_unique<GradientBuckets>(*sharded, group, 64 << 10);
  EXPECT_TRUE(buckets->reduce_scatters()) << what;
  // One step of `optimizer` on `net`'s loss at `step`: through the buckets when given (step_reduced),
  // else from the gradient store.
  auto step_one = [&](Net& net, Optimizer& optimizer, GradientBuckets* through, int step) {
    autograd::GradientStore store;
    if (through) through->arm(true);
    autograd::backward(loss_of(net, step, device), store);
    return through ? optimizer.step_reduced(1e-2f, through->finish(store).n_missing) : optimizer.step(store, 1e-2f);
  };
  auto expect_same_step = [&](const StepReport& got, const Net& got_net, const StepReport& want, const Net& want_net,
                              const std::string& label) {
    EXPECT_TRUE(want.clipped) << label << ": clipping was meant to be on";
    EXPECT_EQ(got.clipped, want.clipped) << label;
    EXPECT_EQ(got.grad_norm, want.grad_norm) << label;
    expect_same_parameters(got_net, want_net, label);
  };
  for (int step = 0; step < 3; ++step) {
    StepReport got = step_one(sharded_net, *sharded, buckets.get(), step);
    StepReport want = step_one(plain_net, *plain, nullptr, step);
    expect_same_step(got, sharded_net, want, plain_net, what + " step " + std::to_string(step));
  }

  const std::filesystem::path run_dir =
      std::filesystem::temp_directory_path() / ("wick_one_rank_test_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(run_dir);
  NamedParameters trainable = sharded_net.parameters();
  CheckpointSave request;
  request.run_dir = run_dir;
  request.step = 3;
  request.trainable = &trainable;
  request.optimizer = sharded.get();
  request.state.step = 3;
  request.state.seed = 1;
  request.config_hash = "one_rank_group_test";
  std::filesystem::path dir = save_training_checkpoint(group, request);
  EXPECT_TRUE(std::filesystem::exists(dir / optimizer_shard_file_name(0, 1))) << what << ": no shard file in " << dir;
  EXPECT_FALSE(std::filesystem::exists(dir / "optimizer.safetensors")) << what << ": a second, one-file copy";
  NamedTensors merged = load_optimizer_state(dir.string());
  std::map<std::string, Tensor> by_name(merged.begin(), merged.end());
  for (const auto& [state_name, tensor] : plain->state_tensors()) {
    ASSERT_EQ(by_name.count(state_name), 1u) << what << ": " << state_name;
    EXPECT_EQ(tensor.to(Device::cpu()).reshape({tensor.numel()}).to_vector<double>(),
              by_name.at(state_name).reshape({tensor.numel()}).to_vector<double>())
        << what << ": " << state_name;
  }
  // Restored sharded (the same group) and unsharded (the single group's resume), each stepping on.
  Net restored_sharded_net = make_net(device), restored_plain_net = make_net(device);
  NamedParameters src = plain_net.parameters(), rs = restored_sharded_net.parameters(),
                  rp = restored_plain_net.parameters();
  for (size_t i = 0; i < src.size(); ++i) {
    copy_into(rs[i].second, src[i].second);
    copy_into(rp[i].second, src[i].second);
  }
  auto restored_sharded = make_optimizer(name, restored_sharded_net.parameters(), config);
  shard_optimizer(*restored_sharded, group);
  load_optimizer_shard_into(*restored_sharded, reshard_optimizer_state(dir.string(), 1).at(0));
  auto restored_plain = make_optimizer(name, restored_plain_net.parameters(), config);
  restored_plain->load_state(merged);
  EXPECT_EQ(restored_sharded->steps_taken(), 3);
  EXPECT_EQ(restored_plain->steps_taken(), 3);
  GradientBuckets restored_buckets(*restored_sharded, group, 64 << 10);
  StepReport want = step_one(plain_net, *plain, nullptr, 3);
  StepReport got_sharded = step_one(restored_sharded_net, *restored_sharded, &restored_buckets, 3);
  expect_same_step(got_sharded, restored_sharded_net, want, plain_net, what + ": restored sharded, step 3");
  StepReport got_plain = step_one(restored_plain_net, *restored_plain, nullptr, 3);
  expect_same_step(got_plain, restored_plain_net, want, plain_net, what + ": restored unsharded, step 3");
  std::filesystem::remove_all(run_dir);
}

}  // namespace

TEST(LoopbackOneRank, GradientBucketsLaunchInBackwardAndFinishWithTheGradient) {
  LoopbackGroup group;
  expect_buckets_finish_with_the_gradient(group);
}

TEST(LoopbackOneRank, ShardedIntoOneRangeLikeUnshardedWithCheckpoint) {
  LoopbackGroup group;
  for (const char* name : {"adamw", "adamw8bit", "sgd"}) expect_sharded_like_unsharded(group, name);
}

TEST(NcclOneRank, GradientBucketsOnCudaParametersLaunchInBackwardAndFinishWithTheGradient) {
  SKIP_WITHOUT_GPU();
  comm::NcclGroup group(gpu, 60);
  expect_buckets_finish_with_the_gradient(group);
}

TEST(NcclOneRank, ShardedIntoOneRangeLikeUnshardedWithCheckpoint) {
  SKIP_WITHOUT_GPU();
  comm::NcclGroup group(gpu, 60);
  for (const char* name : {"adamw", "adamw8bit", "sgd"}) expect_sharded_like_unsharded(group, name);
}
