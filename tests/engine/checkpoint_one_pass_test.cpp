// Checkpoints written and read in one pass: the streamed SHA-256 of a file being written equals
// sha256_file of the finished file (payloads of 0, 1, block and 4 MiB-chunk sizes and one past),
// commit() lists the digests recorded while writing without reading back, CheckpointFiles verifies
// files in parallel and loads the very bytes it hashed, and a flipped byte in the middle of
// model.safetensors stops the load before any parameter changes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "engine/autograd/backward.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/checkpoint_files.h"
#include "engine/checkpoint/optimizer_shards.h"
#include "engine/checkpoint/sha256.h"
#include "engine/checkpoint/training_state.h"
#include "engine/init.h"
#include "engine/optim/optimizer.h"
#include "engine/train/train_checkpoint.h"
#include "models/nn/linear.h"
#include "runtime/atomic_file.h"
#include "runtime/byte_observer_thread.h"
#include "runtime/ops/random.h"
#include "runtime/safetensors.h"

namespace wick {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr size_t kChunk = size_t{4} << 20;  // sha256_file's read size

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::path(::testing::TempDir()) / ("wick_checkpoint_one_pass_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::vector<uint8_t> pattern_bytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> out(n);
  uint32_t x = seed * 2654435761u + 1;
  for (uint8_t& b : out) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<uint8_t>(x);
  }
  return out;
}

Tensor u8_tensor(const std::vector<uint8_t>& bytes) {
  Tensor t = Tensor::empty({static_cast<int64_t>(bytes.size())}, DType::U8);
  if (!bytes.empty()) std::memcpy(t.data(), bytes.data(), bytes.size());
  return t;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  Tensor c = t.to(Device::cpu()).contiguous();
  const auto* p = static_cast<const uint8_t*>(c.data());
  return std::vector<uint8_t>(p, p + c.nbytes());
}

// Same names, and bitwise the same bytes under each name (the order may differ).
void expect_same_tensors(const NamedTensors& a, const NamedTensors& b) {
  ASSERT_EQ(a.size(), b.size());
  std::map<std::string, Tensor> by_name(b.begin(), b.end());
  for (const auto& [name, tensor] : a) {
    ASSERT_EQ(by_name.count(name), 1u) << name;
    EXPECT_EQ(bytes_of(tensor), bytes_of(by_name.at(name))) << name;
  }
}

// save_safetensors with the digest taken as the bytes are written.
FileDigest save_hashed(const fs::path& path, const NamedTensors& tensors) {
  Sha256 digest;
  save_safetensors(path.string(), tensors, {{"k", "v"}}, [&](const void* data, size_t n) { digest.update(data, n); });
  return digest.finish();
}

// Changes one byte in the middle of the file (same size).
void flip_middle_byte(const fs::path& path) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  const auto middle = static_cast<std::streamoff>(fs::file_size(path) / 2);
  char c = 0;
  file.seekg(middle);
  file.read(&c, 1);
  c = static_cast<char>(c ^ 0x01);
  file.seekp(middle);
  file.write(&c, 1);
}

TrainingState state_at(int64_t step) {
  TrainingState state;
  state.step = step;
  state.epoch = 1;
  state.sample_cursor = 96;
  state.seed = 7;
  state.global_batch = 32;
  return state;
}

TEST(CheckpointOnePass, StreamedSha256EqualsOneShotForEverySplit) {
  std::vector<uint8_t> data = pattern_bytes(1000, 1);
  const std::string whole = sha256_hex(data.data(), data.size());
  for (size_t split : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{999}, size_t{1000}}) {
    Sha256 digest;
    digest.update(data.data(), split);
    digest.update(data.data() + split, data.size() - split);
    FileDigest d = digest.finish();
    EXPECT_EQ(d.sha256, whole) << "split at " << split;
    EXPECT_EQ(d.bytes, 1000u);
  }
  Sha256 abc;
  for (char c : std::string("abc")) abc.update(&c, 1);
  EXPECT_EQ(abc.finish().sha256, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Sha256 once;
  once.finish();
  EXPECT_THROW(once.finish(), WickError);
}

TEST(CheckpointOnePass, DigestStreamedWhileWritingEqualsTheFinishedFile) {
  fs::path dir = fresh_dir("streamed");
  // Payload sizes around the SHA-256 block (64) and sha256_file's 4 MiB chunk.
  for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, kChunk - 1, kChunk, kChunk + 1}) {
    SCOPED_TRACE("payload " + std::to_string(n) + " bytes");
    fs::path path = dir / ("payload_" + std::to_string(n) + ".safetensors");
    FileDigest streamed = save_hashed(path, {{"payload", u8_tensor(pattern_bytes(n, static_cast<uint32_t>(n)))}});
    uint64_t file_bytes = 0;
    EXPECT_EQ(streamed.sha256, sha256_file(path.string(), &file_bytes));
    EXPECT_EQ(streamed.bytes, file_bytes);
    EXPECT_EQ(streamed.bytes, fs::file_size(path));
    EXPECT_FALSE(fs::exists(atomic_temporary_path(path)));
  }
  // Several tensors of mixed dtypes, one of them a non-contiguous view (written from a copy).
  Tensor matrix = randn({300, 70}, derive_stream(5, 0, 0, RngPurpose::Test));
  fs::path path = dir / "mixed.safetensors";
  FileDigest streamed = save_hashed(path, {{"a", matrix.transpose(0, 1)},
                                           {"b", matrix.to(DType::BF16)},
                                           {"c", u8_tensor(pattern_bytes(kChunk + 1, 9))},
                                           {"empty", Tensor::empty({0}, DType::F32)}});
  EXPECT_EQ(streamed.sha256, sha256_file(path.string()));
  EXPECT_EQ(streamed.bytes, fs::file_size(path));
  SafetensorsFile back = SafetensorsFile::open(path.string());
  EXPECT_EQ(bytes_of(back.get("a")), bytes_of(matrix.transpose(0, 1)));
}

TEST(CheckpointOnePass, ObserverSeesEveryRangeInOrderAndItsErrorFailsTheSave) {
  // Ranges pushed as temporary copies under a small limit: the pusher waits for room, the order holds.
  std::vector<uint8_t> seen;
  std::vector<uint8_t> expected;
  {
    ByteObserverThread observer(
        [&](const void* data, size_t n) {
          const auto* p = static_cast<const uint8_t*>(data);
          seen.insert(seen.end(), p, p + n);
        },
        /*max_copy_bytes=*/1000);
    for (uint32_t i = 0; i < 200; ++i) {
      auto copy = std::make_shared<std::vector<uint8_t>>(pattern_bytes(1 + (i * 37) % 900, i));
      expected.insert(expected.end(), copy->begin(), copy->end());
      observer.push(copy, copy->data(), copy->size(), /*temporary_copy=*/i % 2 == 0);
    }
    observer.finish();
  }
  EXPECT_EQ(seen, expected);

  // A failing observer fails the save, and nothing is left behind.
  fs::path path = fresh_dir("observer_error") / "x.safetensors";
  try {
    save_safetensors(path.string(), {{"t", u8_tensor(pattern_bytes(100, 1))}}, {},
                     [](const void*, size_t) { throw std::runtime_error("observer gave up"); });
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("observer gave up"));
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(atomic_temporary_path(path)));
}

// A module whose trainable parameters are checkpointed, with an 8-bit optimizer that took steps.
struct Trained {
  std::shared_ptr<nn::Linear> layer;
  std::unique_ptr<Optimizer> optimizer;
  explicit Trained(uint64_t seed) {
    set_init_seed(seed);
    layer = std::make_shared<nn::Linear>(300, 40);  // 12000 weights: 8-bit state; the bias: 32-bit
    optimizer = make_optimizer("adamw8bit", layer->trainable_parameters());
    for (uint64_t s = 0; s < 2; ++s) {
      autograd::GradientStore grads;
      for (const auto& [name, p] : layer->trainable_parameters())
        grads.add(p, randn(p.shape(), derive_stream(seed, s, name.size(), RngPurpose::Test)), true);
      optimizer->step(grads, 1e-2f);
    }
  }
  NamedTensors weights() const { return layer->trainable_parameters(); }
};

fs::path write_checkpoint(const fs::path& run, int64_t step, const Trained& trained) {
  CheckpointWriter writer(run, step);
  writer.write_model(trained.weights());
  writer.write_optimizer(*trained.optimizer);
  writer.write_training_state(state_at(step));
  return writer.commit(1, "one-pass");
}

TEST(CheckpointOnePass, ManifestTakesTheDigestsRecordedWhileWriting) {
  Trained trained(11);
  fs::path run = fresh_dir("manifest");
  fs::path dir = write_checkpoint(run, 5, trained);
  CheckpointReport report = verify_checkpoint(dir);
  ASSERT_TRUE(report.valid()) << report.describe();
  ASSERT_EQ(report.manifest->files.size(), 3u);
  for (const ManifestFile& file : report.manifest->files) {
    uint64_t bytes = 0;
    EXPECT_EQ(file.sha256, sha256_file((dir / file.name).string(), &bytes)) << file.name;
    EXPECT_EQ(file.bytes, bytes) << file.name;
  }

  // commit() lists what was recorded and reads nothing back: a wrong recorded digest reaches the
  // manifest (and verification catches it). A file put into the staging directory without a
  // digest is read back and hashed.
  {
    CheckpointWriter writer(run, 6);
    writer.write_model(trained.weights());
    writer.write_training_state(state_at(6));
    FileDigest real = {fs::file_size(writer.staging_dir() / "training_state.json"),
                       sha256_file((writer.staging_dir() / "training_state.json").string())};
    writer.record_digest("training_state.json", {real.bytes, std::string(64, 'a')});
    std::ofstream(writer.staging_dir() / "notes.txt") << "";  // empty, no digest recorded
    fs::path six = writer.commit(1, "one-pass");
    CheckpointReport broken = verify_checkpoint(six);
    EXPECT_EQ(broken.state, CheckpointState::Corrupt);
    ASSERT_EQ(broken.problems.size(), 1u) << broken.describe();
    EXPECT_THAT(broken.problems[0], HasSubstr("training_state.json: SHA-256 " + real.sha256));
    CheckpointManifest manifest = read_manifest(six);
    ASSERT_EQ(manifest.files.size(), 3u);
    EXPECT_EQ(manifest.files[0].name, "model.safetensors");
    EXPECT_EQ(manifest.files[1].name, "notes.txt");
    EXPECT_EQ(manifest.files[1].bytes, 0u);
    EXPECT_EQ(manifest.files[1].sha256, sha256_hex("", 0));
  }
  // A recorded size that is not the file's: the file changed after it was written.
  {
    CheckpointWriter writer(run, 7);
    writer.write_training_state(state_at(7));
    std::ofstream(writer.staging_dir() / "training_state.json", std::ios::app) << " ";
    try {
      writer.commit(1, "one-pass");
      FAIL() << "no error";
    } catch (const WickError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Data);
      EXPECT_THAT(e.what(), HasSubstr("training_state.json"));
      EXPECT_THAT(e.what(), HasSubstr("changed after it was written"));
    }
    EXPECT_FALSE(fs::exists(run / "checkpoints" / "step_00000007"));
  }
  EXPECT_THROW(CheckpointWriter(run, 8).record_digest("a/b", {1, std::string(64, '0')}), WickError);
  EXPECT_THROW(CheckpointWriter(run, 8).record_digest("x", {1, "abc"}), WickError);
}

TEST(CheckpointOnePass, FlippedByteInTheModelIsCaughtBeforeAnyParameterChanges) {
  Trained first(21), second(22);
  fs::path run = fresh_dir("flipped");
  write_checkpoint(run, 1, first);
  fs::path step2 = write_checkpoint(run, 2, second);
  flip_middle_byte(step2 / "model.safetensors");

  // A model whose parameters must survive the attempt untouched.
  Trained target(23);
  std::map<std::string, std::vector<uint8_t>> before;
  for (const auto& [name, p] : target.weights()) before[name] = bytes_of(p);

  CheckpointFiles corrupt = CheckpointFiles::verify(step2);
  EXPECT_TRUE(corrupt.verified());
  EXPECT_EQ(corrupt.report().state, CheckpointState::Corrupt);
  EXPECT_THAT(corrupt.report().describe(), HasSubstr("model.safetensors: SHA-256"));
  try {
    load_trainable_weights(*target.layer, corrupt);
    FAIL() << "no error";
  } catch (const WickError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Data);
    EXPECT_THAT(e.what(), HasSubstr("model.safetensors: SHA-256"));
    EXPECT_THAT(e.what(), HasSubstr("nothing is loaded from it"));
  }
  for (const auto& [name, p] : target.weights()) EXPECT_EQ(bytes_of(p), before[name]) << name;
  EXPECT_THROW(load_optimizer_state(corrupt), WickError);
  EXPECT_THROW(corrupt.text("training_state.json"), WickError);
  EXPECT_THROW(corrupt.names(), WickError);

  // Resume skips it with its warning and loads step 1 from the bytes it verified, bitwise.
  ResumeChoice choice = find_resume_checkpoint(run, "auto");
  ASSERT_TRUE(choice.checkpoint);
  EXPECT_EQ(choice.step, 1);
  ASSERT_EQ(choice.warnings.size(), 1u);
  EXPECT_THAT(choice.warnings[0], HasSubstr("step_00000002"));
  EXPECT_THAT(choice.warnings[0], HasSubstr("model.safetensors: SHA-256"));
  ASSERT_TRUE(choice.files);
  EXPECT_TRUE(choice.files->verified());
  EXPECT_TRUE(choice.files->report().valid());
  load_trainable_weights(*target.layer, *choice.files);
  for (const auto& [name, p] : target.weights()) {
    for (const auto& [first_name, q] : first.weights())
      if (first_name == name) {
        EXPECT_EQ(bytes_of(p), bytes_of(q)) << name;
      }
  }
  expect_same_tensors(load_optimizer_state(*choice.files), first.optimizer->state_tensors());
  EXPECT_TRUE(training_state_from_json(choice.files->text("training_state.json"), "t") == state_at(1));
}

TEST(CheckpointOnePass, ParallelVerificationReportsEveryBrokenFileInManifestOrder) {
  Trained trained(31);
  OptimizerLayout layout = optimizer_layout(*trained.optimizer);
  fs::path run = fresh_dir("parallel");
  CheckpointWriter writer(run, 3);
  writer.write_model(trained.weights());
  for (const OptimizerShard& shard :
       split_optimizer_state(trained.optimizer->state_tensors(), layout, zero_partition(layout.flat_numel, 4)))
    writer.write_optimizer_shard(shard);
  writer.write_training_state(state_at(3));
  fs::path dir = writer.commit(4, "h");
  std::ofstream(dir / "stray.bin") << "not listed";

  CheckpointFiles good = CheckpointFiles::verify(dir);
  ASSERT_TRUE(good.report().valid()) << good.report().describe();
  EXPECT_EQ(good.names().size(), 6u);  // the manifest's files: model, 4 shards, training state
  EXPECT_FALSE(good.contains("stray.bin"));
  EXPECT_THAT(good.report().notes.at(0), HasSubstr("stray.bin"));
  EXPECT_THROW(good.safetensors("stray.bin"), WickError);
  EXPECT_TRUE(CheckpointFiles::unverified(dir).contains("stray.bin"));
  expect_same_tensors(load_optimizer_state(good), trained.optimizer->state_tensors());

  flip_middle_byte(dir / optimizer_shard_file_name(3, 4));
  flip_middle_byte(dir / optimizer_shard_file_name(1, 4));
  fs::resize_file(dir / "model.safetensors", fs::file_size(dir / "model.safetensors") - 1);
  CheckpointReport report = verify_checkpoint(dir);
  ASSERT_EQ(report.problems.size(), 3u) << report.describe();
  EXPECT_THAT(report.problems[0], HasSubstr("model.safetensors: "));
  EXPECT_THAT(report.problems[0], HasSubstr("truncated"));
  EXPECT_THAT(report.problems[1], HasSubstr("optimizer.rank1-of-4.safetensors: SHA-256"));
  EXPECT_THAT(report.problems[2], HasSubstr("optimizer.rank3-of-4.safetensors: SHA-256"));
  EXPECT_EQ(CheckpointFiles::verify(dir).report().problems, report.problems);
}

}  // namespace
}  // namespace wick
