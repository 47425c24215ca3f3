// save_training_checkpoint (engine/train/train_checkpoint.h) on the group wick_comm_tests runs in:
// with a ZeRO-1 optimizer every rank hashes its shard while writing it, the digests are gathered to
// rank 0 (all_gather_digests: every rank's, in rank order), and the manifest rank 0 commits lists each file with the SHA-256 of its bytes on disk;
// choose_resume_checkpoint gives rank 0 the verified files and the others the same directory, and
// every rank reloads its range of the state bitwise.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

#include "engine/autograd/backward.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/checkpoint_files.h"
#include "engine/checkpoint/optimizer_shards.h"
#include "engine/checkpoint/sha256.h"
#include "engine/distributed/zero.h"
#include "engine/init.h"
#include "engine/optim/optimizer.h"
#include "engine/train/train_checkpoint.h"
#include "models/nn/linear.h"
#include "runtime/ops/random.h"
#include "tests/comm/test_group.h"

using namespace wick;
namespace fs = std::filesystem;

namespace {

std::vector<uint8_t> bytes_of(const Tensor& t) {
  Tensor c = t.to(Device::cpu()).contiguous();
  const auto* p = static_cast<const uint8_t*>(c.data());
  return std::vector<uint8_t>(p, p + c.nbytes());
}

// One layer with 8-bit state (9600 weights) and a 32-bit bias, an optimizer sharded over the group
// that took two steps with the same gradients on every rank.
struct ShardedRun {
  std::shared_ptr<nn::Linear> layer;
  std::unique_ptr<Optimizer> optimizer;
  ShardedRun() {
    set_init_seed(41);
    layer = std::make_shared<nn::Linear>(240, 40);
    optimizer = make_optimizer("adamw8bit", layer->trainable_parameters());
    shard_optimizer(*optimizer, *g_group);
    for (uint64_t s = 0; s < 2; ++s) {
      autograd::GradientStore grads;
      for (const auto& [name, p] : layer->trainable_parameters())
        grads.add(p, randn(p.shape(), derive_stream(41, s, name.size(), RngPurpose::Test)), true);
      optimizer->step(grads, 1e-2f);
    }
  }
};

}  // namespace

TEST(CheckpointSave, DigestsAreAllGatheredInRankOrder) {
  const int world = g_group->size(), rank = g_group->rank();
  auto digest_of = [](int r) {
    std::string text = "rank " + std::to_string(r);
    return FileDigest{(uint64_t{1} << 40) + static_cast<uint64_t>(r), sha256_hex(text.data(), text.size())};
  };
  std::vector<FileDigest> all = all_gather_digests(*g_group, digest_of(rank));
  ASSERT_EQ(all.size(), static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) EXPECT_EQ(all[static_cast<size_t>(r)], digest_of(r)) << "rank " << r;
  EXPECT_THROW(all_gather_digests(*g_group, {1, "not hex"}), WickError);
}

TEST(CheckpointSave, ShardDigestsHashedWhileWritingReachRankZerosManifest) {
  const int world = g_group->size(), rank = g_group->rank();
  ShardedRun run;
  Tensor pid = Tensor::scalar(static_cast<double>(getpid()), DType::I64).reshape({1});
  g_group->broadcast(pid, 0);
  const fs::path run_dir =
      fs::temp_directory_path() / ("wick_checkpoint_save_test_" + std::to_string(pid.to_vector<int64_t>()[0]));
  if (rank == 0) fs::remove_all(run_dir);
  g_group->barrier();

  NamedTensors weights = run.layer->trainable_parameters();
  TrainingState state;
  state.step = 2;
  CheckpointSave save{.run_dir = run_dir, .step = 2, .trainable = &weights, .optimizer = run.optimizer.get(),
                      .state = state, .config_hash = "h", .shard_optimizer = true};
  const fs::path dir = save_training_checkpoint(*g_group, save);
  EXPECT_EQ(dir, run_dir / "checkpoints" / "step_00000002");

  if (rank == 0) {
    CheckpointReport report = verify_checkpoint(dir);
    ASSERT_TRUE(report.valid()) << report.describe();
    std::vector<std::string> names;
    for (const ManifestFile& file : report.manifest->files) {
      names.push_back(file.name);
      uint64_t bytes = 0;
      EXPECT_EQ(file.sha256, sha256_file((dir / file.name).string(), &bytes)) << file.name;
      EXPECT_EQ(file.bytes, bytes) << file.name;
    }
    std::vector<std::string> expected = {"model.safetensors"};
    if (world == 1) expected.push_back("optimizer.safetensors");
    for (int r = 0; world > 1 && r < world; ++r) expected.push_back(optimizer_shard_file_name(r, world));
    expected.push_back("training_state.json");
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(names, expected);
  }

  std::shared_ptr<const CheckpointFiles> files = choose_resume_checkpoint(*g_group, run_dir, "auto");
  ASSERT_TRUE(files);
  EXPECT_EQ(files->dir().filename(), "step_00000002");
  EXPECT_EQ(files->verified(), rank == 0);
  ShardedRun fresh;  // the same layer; its optimizer is overwritten from the checkpoint
  load_trainable_weights(*fresh.layer, *files);
  std::vector<OptimizerShard> shards = reshard_optimizer_state(*files, world);
  load_optimizer_shard_into(*fresh.optimizer, shards.at(static_cast<size_t>(rank)));
  EXPECT_EQ(fresh.optimizer->steps_taken(), 2);
  OptimizerShard mine = local_optimizer_shard(*run.optimizer, rank, world);
  OptimizerShard back = local_optimizer_shard(*fresh.optimizer, rank, world);
  ASSERT_EQ(mine.tensors.size(), back.tensors.size());
  for (size_t i = 0; i < mine.tensors.size(); ++i)
    EXPECT_EQ(bytes_of(mine.tensors[i].second), bytes_of(back.tensors[i].second)) << mine.tensors[i].first;
  g_group->barrier();
  if (rank == 0) fs::remove_all(run_dir);
}
