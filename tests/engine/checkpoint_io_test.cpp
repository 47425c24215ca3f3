// Checkpoints (engine/checkpoint/): the write/verify/read round trip with a real optimizer state,
// detection of truncated and bit-flipped files, crash leftovers never chosen nor causing the loss of
// an older valid checkpoint, keep_last pruning, `latest`, and 8-bit optimizer state split into
// block-aligned shards and merged back bitwise.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/autograd/backward.h"
#include "engine/autograd/node.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/latest_pointer.h"
#include "engine/checkpoint/optimizer_shards.h"
#include "engine/checkpoint/sha256.h"
#include "engine/checkpoint/training_state.h"
#include "engine/optim/optimizer.h"
#include "runtime/safetensors.h"

namespace wick {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::vector<float> random_values(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> out(static_cast<size_t>(n));
  for (float& v : out) v = normal(rng);
  return out;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  Tensor c = t.to(Device::cpu()).contiguous();
  const auto* p = static_cast<const uint8_t*>(c.data());
  return std::vector<uint8_t>(p, p + c.nbytes());
}

// A fresh directory per test.
fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::path(::testing::TempDir()) / ("wick_checkpoint_io_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Parameters covering both state kinds: two 8-bit ones whose last block is partial (one bf16 with
// an f32 master), and 32-bit ones under 4096 elements.
struct Model {
  Tensor big32, big16, small, bias;
  NamedParameters named() const { return {{"blocks.0.big32", big32}, {"blocks.0.big16", big16}, {"small", small}, {"bias", bias}}; }
};

Tensor trainable(const std::vector<float>& values, const Shape& shape, DType dtype, const std::string& name) {
  Tensor t = Tensor::from_vector<float>(values, shape).to(dtype);
  autograd::set_requires_grad(t, true, name);
  return t;
}

Model make_model(uint32_t seed = 1) {
  return {trainable(random_values(5000, seed), {50, 100}, DType::F32, "big32"),
          trainable(random_values(70 * 90, seed + 1), {70, 90}, DType::BF16, "big16"),
          trainable(random_values(231, seed + 2), {7, 33}, DType::F32, "small"),
          trainable(random_values(7, seed + 3), {7}, DType::F32, "bias")};
}

void train(Optimizer& optimizer, const Model& model, int n_steps) {
  for (int s = 0; s < n_steps; ++s) {
    autograd::GradientStore store;
    for (const auto& [name, p] : model.named()) {
      std::vector<float> values = p.to_vector<float>();
      std::vector<float> noise = random_values(p.numel(), 100 + s * 7 + static_cast<uint32_t>(name.size()), 0.3f);
      for (size_t i = 0; i < values.size(); ++i) values[i] = values[i] - 0.5f + noise[i];
      store.add(p, Tensor::from_vector<float>(values, p.shape()), true);
    }
    optimizer.step(store, 1e-2f);
  }
}

TrainingState training_state(int64_t step) {
  TrainingState state;
  state.step = step;
  state.epoch = 3;
  state.sample_cursor = 1234;
  state.seed = 0xFFFFFFFFFFFFFFF1ull;  // above 2^63: must survive JSON
  state.rng = {{0x8000000000000001ull, 0x123456789ABCDEFull}, 777};
  state.global_batch = 64;
  state.skipped_steps = 2;
  state.nonfinite_in_a_row = 1;
  state.loss_scale = TrainingState::LossScale{65536.0, 17, 3};
  return state;
}

// Writes step_<step> for the model and optimizer under run_dir.
fs::path write_checkpoint(const fs::path& run_dir, int64_t step, const Model& model, const Optimizer& optimizer) {
  CheckpointWriter writer(run_dir, step);
  writer.write_model(model.named(), {{"note", "test"}});
  writer.write_optimizer(optimizer);
  writer.write_training_state(training_state(step));
  return writer.commit(1, "cfg-hash-abc");
}

// Changes one byte in the middle of the file (same size).
void flip_byte(const fs::path& path) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(static_cast<std::streamoff>(fs::file_size(path) / 2));
  char c = 0;
  file.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  file.seekp(static_cast<std::streamoff>(fs::file_size(path) / 2));
  file.write(&c, 1);
}

bool contains_substring(const std::vector<std::string>& lines, const std::string& text) {
  for (const std::string& line : lines)
    if (line.find(text) != std::string::npos) return true;
  return false;
}

void expect_same_state(const NamedTensors& a, const NamedTensors& b) {
  ASSERT_EQ(a.size(), b.size());
  std::map<std::string, Tensor> by_name(b.begin(), b.end());
  for (const auto& [name, tensor] : a) {
    ASSERT_TRUE(by_name.count(name)) << name;
    EXPECT_EQ(tensor.shape(), by_name[name].shape()) << name;
    EXPECT_EQ(tensor.dtype(), by_name[name].dtype()) << name;
    EXPECT_EQ(bytes_of(tensor), bytes_of(by_name[name])) << name;
  }
}

TEST(CheckpointIo, Sha256MatchesKnownVectors) {
  EXPECT_EQ(sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  fs::path file = fresh_dir("sha") / "abc.txt";
  std::ofstream(file) << "abc";
  uint64_t bytes = 0;
  EXPECT_EQ(sha256_file(file.string(), &bytes), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(bytes, 3u);
}

TEST(CheckpointIo, DirectoryNames) {
  EXPECT_EQ(checkpoint_dir_name(100), "step_00000100");
  EXPECT_EQ(checkpoint_dir_name(123456789), "step_123456789");
  EXPECT_EQ(parse_checkpoint_dir_name("step_00000100"), 100);
  EXPECT_EQ(parse_checkpoint_dir_name("step_123456789"), 123456789);
  EXPECT_FALSE(parse_checkpoint_dir_name("step_100"));
  EXPECT_FALSE(parse_checkpoint_dir_name("step_00000100.tmp-12"));
  EXPECT_FALSE(parse_checkpoint_dir_name("latest"));
}

TEST(CheckpointIo, TrainingStateRoundTrip) {
  fs::path path = fresh_dir("state") / "training_state.json";
  TrainingState state = training_state(42);
  save_training_state(path.string(), state);
  EXPECT_TRUE(load_training_state(path.string()) == state);
  std::ofstream(path) << "{\"format\": \"wick.training_state\", \"format_version\": 1, \"step\": 1}";
  try {
    load_training_state(path.string());
    FAIL() << "no error";
  } catch (const WickError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Data);
    EXPECT_THAT(e.what(), HasSubstr("\"epoch\""));
    EXPECT_THAT(e.what(), HasSubstr(path.string()));
  }
}

// Checkpoints written before the counters were typed (format_version 1) kept them as strings.
TEST(CheckpointIo, TrainingStateVersion1CountersAreRead) {
  fs::path path = fresh_dir("state_v1") / "training_state.json";
  std::ofstream(path) << R"({"format": "wick.training_state", "format_version": 1, "step": 9, "epoch": 0,
    "sample_cursor": 64, "seed": 42, "rng": {"key": 1, "stream": 2, "offset": 3},
    "extra": {"global_batch": "32", "skipped_steps": "1", "nonfinite_in_a_row": "0", "loss_scale": "32768",
              "loss_scale_tracker": "5", "loss_scale_skipped": "2"}})";
  TrainingState state = load_training_state(path.string());
  EXPECT_EQ(state.step, 9);
  EXPECT_EQ(state.global_batch, 32);
  EXPECT_EQ(state.skipped_steps, 1);
  EXPECT_EQ(state.nonfinite_in_a_row, 0);
  ASSERT_TRUE(state.loss_scale.has_value());
  EXPECT_EQ(state.loss_scale->scale, 32768.0);
  EXPECT_EQ(state.loss_scale->growth_tracker, 5);
  EXPECT_EQ(state.loss_scale->n_skipped, 2);
  std::ofstream(path) << R"({"format": "wick.training_state", "format_version": 1, "step": 9, "epoch": 0,
    "sample_cursor": 64, "seed": 42, "rng": {"key": 1, "stream": 2, "offset": 3}, "extra": {"global_batch": "x"}})";
  EXPECT_THROW(load_training_state(path.string()), WickError);
}

TEST(CheckpointIo, WriteVerifyReadRoundTripIsBitwise) {
  fs::path run = fresh_dir("roundtrip");
  Model model = make_model();
  auto optimizer = make_optimizer("adamw8bit", model.named());
  train(*optimizer, model, 3);
  fs::path dir = write_checkpoint(run, 3, model, *optimizer);

  EXPECT_EQ(dir, run / "checkpoints" / "step_00000003");
  EXPECT_FALSE(fs::exists(run / "checkpoints" / ("step_00000003.tmp-" + std::to_string(::getpid()))));
  // `latest`: a one-line text file naming the directory (no symlink: copy tools keep it).
  ASSERT_TRUE(fs::is_regular_file(fs::symlink_status(run / "checkpoints" / "latest")));
  EXPECT_EQ(read_text(run / "checkpoints" / "latest"), "step_00000003\n");
  EXPECT_EQ(read_latest(run / "checkpoints").checkpoint, run / "checkpoints" / "step_00000003");
  EXPECT_EQ(resolve_checkpoint_path(run / "checkpoints" / "latest"), dir);

  CheckpointReport report = verify_checkpoint(dir);
  ASSERT_TRUE(report.valid()) << report.describe();
  const CheckpointManifest& m = *report.manifest;
  EXPECT_EQ(m.format, "wick.checkpoint");
  EXPECT_EQ(m.step, 3);
  EXPECT_EQ(m.world_size, 1);
  EXPECT_EQ(m.config_hash, "cfg-hash-abc");
  EXPECT_FALSE(m.created.empty());
  std::vector<std::string> names;
  for (const ManifestFile& f : m.files) {
    names.push_back(f.name);
    EXPECT_EQ(f.bytes, fs::file_size(dir / f.name)) << f.name;
    EXPECT_EQ(f.sha256, sha256_file((dir / f.name).string())) << f.name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"model.safetensors", "optimizer.safetensors", "training_state.json"}));

  // Read back into fresh tensors and a fresh optimizer: bitwise the same.
  SafetensorsFile model_file = SafetensorsFile::open((dir / "model.safetensors").string());
  Model resumed{model_file.get("blocks.0.big32").clone(), model_file.get("blocks.0.big16").clone(),
                model_file.get("small").clone(), model_file.get("bias").clone()};
  for (const auto& [name, p] : resumed.named()) {
    autograd::set_requires_grad(p, true, name);
    for (const auto& [original_name, original] : model.named())
      if (original_name == name) {
        EXPECT_EQ(bytes_of(p), bytes_of(original)) << name;
      }
  }
  auto optimizer_b = make_optimizer("adamw8bit", resumed.named());
  OptimizerLayout layout;
  optimizer_b->load_state(load_optimizer_state(dir.string(), &layout));
  EXPECT_TRUE(layout == optimizer_layout(*optimizer));
  expect_same_state(optimizer->state_tensors(), optimizer_b->state_tensors());
  EXPECT_TRUE(load_training_state((dir / "training_state.json").string()) == training_state(3));

  // And the two continue identically.
  train(*optimizer, model, 2);
  train(*optimizer_b, resumed, 2);
  EXPECT_EQ(bytes_of(model.big16), bytes_of(resumed.big16));
  EXPECT_EQ(bytes_of(model.big32), bytes_of(resumed.big32));
}

TEST(CheckpointIo, TruncatedAndFlippedFilesAreSkippedByAutoResumeWithWarnings) {
  fs::path run = fresh_dir("corrupt");
  Model model = make_model();
  auto optimizer = make_optimizer("adamw8bit", model.named());
  for (int64_t step = 1; step <= 3; ++step) {
    train(*optimizer, model, 1);
    write_checkpoint(run, step, model, *optimizer);
  }
  fs::path step2 = run / "checkpoints" / "step_00000002", step3 = run / "checkpoints" / "step_00000003";
  fs::resize_file(step3 / "optimizer.safetensors", fs::file_size(step3 / "optimizer.safetensors") - 100);
  flip_byte(step2 / "model.safetensors");

  CheckpointReport r3 = verify_checkpoint(step3), r2 = verify_checkpoint(step2);
  EXPECT_EQ(r3.state, CheckpointState::Corrupt);
  EXPECT_THAT(r3.describe(), HasSubstr("optimizer.safetensors"));
  EXPECT_THAT(r3.describe(), HasSubstr("bytes"));
  EXPECT_EQ(r2.state, CheckpointState::Corrupt);
  EXPECT_THAT(r2.describe(), HasSubstr("model.safetensors: SHA-256"));
  // A size-only check cannot see the flipped byte; the full check can.
  EXPECT_TRUE(verify_checkpoint(step2, false).valid());

  ResumeChoice choice = find_resume_checkpoint(run, "auto");
  ASSERT_TRUE(choice.checkpoint);
  EXPECT_EQ(*choice.checkpoint, run / "checkpoints" / "step_00000001");
  EXPECT_EQ(choice.step, 1);
  ASSERT_EQ(choice.warnings.size(), 2u);
  EXPECT_THAT(choice.warnings[0], HasSubstr("step_00000003"));
  EXPECT_THAT(choice.warnings[0], HasSubstr("corrupt"));
  EXPECT_THAT(choice.warnings[1], HasSubstr("step_00000002"));

  // Naming a broken checkpoint is an error (Data), naming the directory and the file.
  try {
    find_resume_checkpoint(run, step2.string());
    FAIL() << "no error";
  } catch (const WickError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Data);
    EXPECT_THAT(e.what(), HasSubstr("step_00000002"));
    EXPECT_THAT(e.what(), HasSubstr("model.safetensors"));
  }
  EXPECT_EQ(*find_resume_checkpoint(run, (run / "checkpoints" / "step_00000001").string()).checkpoint,
            fs::canonical(run / "checkpoints" / "step_00000001"));
  EXPECT_FALSE(find_resume_checkpoint(run, "none").checkpoint);
  EXPECT_THROW(find_resume_checkpoint(run, (run / "nope").string()), WickError);
  // A missing or broken manifest is reported too.
  fs::path copy = run / "checkpoints" / "step_00000009";
  fs::copy(run / "checkpoints" / "step_00000001", copy, fs::copy_options::recursive);
  EXPECT_THAT(verify_checkpoint(copy).describe(), HasSubstr("the manifest says step 1"));
  std::ofstream(copy / "manifest.json") << "{not json";
  EXPECT_THAT(verify_checkpoint(copy).describe(), HasSubstr("not a valid manifest"));
}

TEST(CheckpointIo, CrashLeftoversAreNeverChosenNorCostAnOlderValidCheckpoint) {
  fs::path run = fresh_dir("crash");
  Model model = make_model();
  auto optimizer = make_optimizer("adamw", model.named());
  train(*optimizer, model, 1);
  write_checkpoint(run, 1, model, *optimizer);
  fs::path checkpoints = run / "checkpoints";

  // A writer killed after its rename but with the manifest lost (simulated), and writers killed
  // mid-write: a staging directory of a dead process and one of a live process (this one).
  fs::path no_manifest = checkpoints / "step_00000002";
  fs::copy(checkpoints / "step_00000001", no_manifest, fs::copy_options::recursive);
  fs::remove(no_manifest / "manifest.json");
  fs::path dead_staging = checkpoints / "step_00000003.tmp-999999999";
  fs::create_directories(dead_staging);
  std::ofstream(dead_staging / "model.safetensors") << "partial";
  fs::path live_staging = checkpoints / ("step_00000004.tmp-" + std::to_string(::getpid()));
  fs::create_directories(live_staging);

  EXPECT_EQ(verify_checkpoint(no_manifest).state, CheckpointState::Incomplete);
  ResumeChoice choice = find_resume_checkpoint(run, "auto");
  ASSERT_TRUE(choice.checkpoint);
  EXPECT_EQ(choice.step, 1);
  ASSERT_EQ(choice.warnings.size(), 1u);
  EXPECT_THAT(choice.warnings[0], HasSubstr("step_00000002"));
  EXPECT_THAT(choice.warnings[0], HasSubstr("incomplete"));

  PruneReport pruned = prune_checkpoints(run, 1);
  EXPECT_TRUE(fs::exists(checkpoints / "step_00000001" / "manifest.json"));  // the only valid one stays
  EXPECT_TRUE(fs::exists(no_manifest));                                      // left for inspection
  EXPECT_FALSE(fs::exists(dead_staging));                                    // dead writer's leftovers go
  EXPECT_TRUE(fs::exists(live_staging));                                     // a live writer's stay
  EXPECT_TRUE(contains_substring(pruned.warnings, "step_00000002"));
  ASSERT_EQ(pruned.removed.size(), 1u);
  EXPECT_EQ(pruned.removed[0], dead_staging);

  // An abandoned writer (exception before commit) removes its staging directory.
  {
    CheckpointWriter writer(run, 5);
    writer.write_training_state(training_state(5));
    EXPECT_TRUE(fs::exists(writer.staging_dir() / "training_state.json"));
  }
  EXPECT_FALSE(fs::exists(checkpoints / ("step_00000005.tmp-" + std::to_string(::getpid()))));
  EXPECT_FALSE(fs::exists(checkpoints / "step_00000005"));
  fs::remove_all(live_staging);
}

TEST(CheckpointIo, PruningKeepsTheNewestValidOnesAndLatestPointsAtTheNewest) {
  fs::path run = fresh_dir("prune");
  Model model = make_model();
  auto optimizer = make_optimizer("sgd", model.named(), {.momentum = 0.9f});
  fs::path checkpoints = run / "checkpoints";
  for (int64_t step = 1; step <= 5; ++step) {
    train(*optimizer, model, 1);
    write_checkpoint(run, step * 10, model, *optimizer);
    EXPECT_EQ(read_latest(checkpoints).checkpoint, checkpoints / checkpoint_dir_name(step * 10));
  }
  PruneReport pruned = prune_checkpoints(run, 2);
  EXPECT_EQ(pruned.removed.size(), 3u);
  for (int64_t step : {10, 20, 30}) EXPECT_FALSE(fs::exists(checkpoints / checkpoint_dir_name(step))) << step;
  for (int64_t step : {40, 50}) EXPECT_TRUE(verify_checkpoint(checkpoints / checkpoint_dir_name(step)).valid()) << step;
  EXPECT_EQ(resolve_checkpoint_path(checkpoints / "latest"), checkpoints / "step_00000050");

  // The newest is broken: keep_last 1 keeps the newest *valid* one and leaves the broken one.
  train(*optimizer, model, 1);
  write_checkpoint(run, 60, model, *optimizer);
  flip_byte(checkpoints / "step_00000060" / "optimizer.safetensors");
  pruned = prune_checkpoints(run, 1);
  EXPECT_TRUE(fs::exists(checkpoints / "step_00000060"));
  EXPECT_TRUE(verify_checkpoint(checkpoints / "step_00000050").valid());
  EXPECT_FALSE(fs::exists(checkpoints / "step_00000040"));
  EXPECT_TRUE(contains_substring(pruned.warnings, "step_00000060"));
  EXPECT_EQ(find_resume_checkpoint(run, "auto").step, 50);

  // keep_last <= 0 keeps everything; re-writing an existing step replaces it.
  EXPECT_TRUE(prune_checkpoints(run, 0).removed.empty());
  write_checkpoint(run, 60, model, *optimizer);
  EXPECT_TRUE(verify_checkpoint(checkpoints / "step_00000060").valid());
  EXPECT_EQ(find_resume_checkpoint(run, "auto").step, 60);
}

// The state of an adamw8bit optimizer after a few steps.
struct EightBitRun {
  Model model = make_model(7);
  std::unique_ptr<Optimizer> optimizer = make_optimizer("adamw8bit", model.named());
  EightBitRun() { train(*optimizer, model, 4); }
};

TEST(CheckpointIo, EightBitStateSplitIntoShardsMergesBackBitwise) {
  EightBitRun run;
  OptimizerLayout layout = optimizer_layout(*run.optimizer);
  NamedTensors state = run.optimizer->state_tensors();
  ASSERT_TRUE(layout.find("blocks.0.big32")->eight_bit);
  ASSERT_TRUE(layout.find("blocks.0.big16")->eight_bit);
  ASSERT_FALSE(layout.find("small")->eight_bit);

  for (int world_size : {2, 3}) {
    SCOPED_TRACE("world size " + std::to_string(world_size));
    std::vector<FlatRange> ranges = zero_partition(layout.flat_numel, world_size);
    ASSERT_EQ(ranges.size(), static_cast<size_t>(world_size));
    for (const FlatRange& r : ranges) {
      EXPECT_EQ(r.begin % 256, 0);
      EXPECT_TRUE(r.end % 256 == 0 || r.end == layout.flat_numel);
    }
    std::vector<OptimizerShard> shards = split_optimizer_state(state, layout, ranges);
    // Some 8-bit parameter is cut between shards, on a block boundary; its pieces keep 8-bit
    // state even when small (decided per whole parameter).
    std::map<std::string, int> n_pieces;
    bool small_eight_bit_piece = false;
    for (const OptimizerShard& shard : shards)
      for (const ShardPiece& piece : shard.pieces) {
        EXPECT_EQ(piece.begin % 256, 0) << piece.parameter;
        ++n_pieces[piece.parameter];
        const OptimizerParameterLayout* p = layout.find(piece.parameter);
        if (p->eight_bit && piece.end - piece.begin < 4096) {
          bool has_codes = false;
          for (const auto& [name, tensor] : shard.tensors)
            if (name == piece.parameter + ".m_codes") {
              has_codes = true;
              EXPECT_EQ(tensor.numel(), piece.end - piece.begin);
              EXPECT_EQ(tensor.dtype(), DType::U8);
            }
          EXPECT_TRUE(has_codes) << piece.parameter;
          small_eight_bit_piece = small_eight_bit_piece || has_codes;
        }
      }
    EXPECT_TRUE(small_eight_bit_piece);
    int n_split = 0;
    for (const auto& [name, count] : n_pieces) n_split += count > 1;
    EXPECT_GE(n_split, 1);

    // Through files and back.
    fs::path dir = fresh_dir("shards" + std::to_string(world_size));
    for (const OptimizerShard& shard : shards)
      save_optimizer_shard((dir / optimizer_shard_file_name(shard.rank, world_size)).string(), shard);
    OptimizerLayout read_layout;
    NamedTensors merged = load_optimizer_state(dir.string(), &read_layout);
    EXPECT_TRUE(read_layout == layout);
    expect_same_state(state, merged);
    // Merged in memory, in any order.
    std::vector<OptimizerShard> reversed(shards.rbegin(), shards.rend());
    expect_same_state(state, merge_optimizer_shards(reversed));
    // A fresh optimizer takes the merged state.
    Model copy{run.model.big32.clone(), run.model.big16.clone(), run.model.small.clone(), run.model.bias.clone()};
    for (const auto& [name, p] : copy.named()) autograd::set_requires_grad(p, true, name);
    auto fresh = make_optimizer("adamw8bit", copy.named());
    fresh->load_state(merged);
    expect_same_state(state, fresh->state_tensors());
  }
}

TEST(CheckpointIo, ShardsWrittenForTwoRanksReshardForThreeAndOne) {
  EightBitRun run;
  OptimizerLayout layout = optimizer_layout(*run.optimizer);
  NamedTensors state = run.optimizer->state_tensors();
  fs::path dir = fresh_dir("reshard");
  for (const OptimizerShard& shard : split_optimizer_state(state, layout, zero_partition(layout.flat_numel, 2)))
    save_optimizer_shard((dir / optimizer_shard_file_name(shard.rank, 2)).string(), shard);

  std::vector<OptimizerShard> three = reshard_optimizer_state(dir.string(), 3);
  ASSERT_EQ(three.size(), 3u);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(three[r].range, zero_partition(layout.flat_numel, 3)[r]);
  // Equal to cutting the original state for three ranks directly.
  std::vector<OptimizerShard> direct = split_optimizer_state(state, layout, zero_partition(layout.flat_numel, 3));
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(three[r].pieces, direct[r].pieces);
    expect_same_state(three[r].tensors, direct[r].tensors);
  }
  expect_same_state(state, merge_optimizer_shards(three));
  std::vector<OptimizerShard> one = reshard_optimizer_state(dir.string(), 1);
  ASSERT_EQ(one.size(), 1u);
  expect_same_state(state, merge_optimizer_shards(one));

  // A missing rank file is an error naming it; so is a shard set with a hole.
  fs::remove(dir / optimizer_shard_file_name(1, 2));
  try {
    load_optimizer_state(dir.string());
    FAIL() << "no error";
  } catch (const WickError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Data);
    EXPECT_THAT(e.what(), HasSubstr("optimizer.rank1-of-2.safetensors"));
  }
  std::vector<OptimizerShard> holes = {direct[0], direct[2]};
  try {
    merge_optimizer_shards(holes);
    FAIL() << "no error";
  } catch (const WickError& e) {
    EXPECT_THAT(e.what(), HasSubstr("in none of the shards"));
  }
  // Ranges that are not block-aligned are refused.
  EXPECT_THROW(split_optimizer_state(state, layout, {{0, 100}, {100, layout.flat_numel}}), WickError);
}

TEST(CheckpointIo, ShardedCheckpointVerifiesAndLoads) {
  EightBitRun run;
  OptimizerLayout layout = optimizer_layout(*run.optimizer);
  fs::path run_dir = fresh_dir("sharded_checkpoint");
  CheckpointWriter writer(run_dir, 4);
  writer.write_model(run.model.named());
  for (const OptimizerShard& shard :
       split_optimizer_state(run.optimizer->state_tensors(), layout, zero_partition(layout.flat_numel, 2)))
    writer.write_optimizer_shard(shard);
  writer.write_training_state(training_state(4));
  fs::path dir = writer.commit(2, "h");
  CheckpointReport report = verify_checkpoint(dir);
  ASSERT_TRUE(report.valid()) << report.describe();
  EXPECT_EQ(report.manifest->world_size, 2);
  EXPECT_EQ(report.manifest->files.size(), 4u);
  expect_same_state(run.optimizer->state_tensors(), load_optimizer_state(dir.string()));
}

}  // namespace
}  // namespace wick
