// models/diffusion/train on engine/train/step_loop: short CPU runs of a tiny DiT on a synthetic cached-latent dataset — the loss
// falls, the run directory is complete, a resumed run repeats the uninterrupted one bitwise, LoRA
// runs, mixed precision and DDPM stay finite, bad input stops before the first step without touching
// the run directory, and non-finite losses end the run with a Training error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/latest_pointer.h"
#include "engine/config/train_config.h"
#include "engine/logging/image.h"
#include "engine/logging/metrics_log.h"
#include "models/diffusion/train.h"
#include "models/registry.h"
#include "runtime/safetensors.h"
#include "tests/train/synthetic_dataset.h"

namespace fs = std::filesystem;
using ::testing::HasSubstr;

namespace wick {
namespace {

fs::path temp_dir(const std::string& name) {
  fs::path dir = fs::path(::testing::TempDir()) / ("wick_train_loop_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A tiny run on `dataset`: hidden 32, depth 2, batch 8, 20 steps, a checkpoint every 5 steps.
TrainConfig run_config(const fs::path& dir, const std::string& dataset, std::vector<std::string> sets = {}) {
  std::string yaml = "name: run\noutput_dir: " + dir.string() +
                     "\ndevice: cpu\n"
                     "model: {hidden_size: 32, depth: 2, num_heads: 2}\n"
                     "train: {batch_size: 8, steps: 20, lr: 3.0e-3, optimizer: adamw, weight_decay: 0.0,"
                     " log_every: 1, caption_dropout: 0.2, seed: 3}\n"
                     "dataset: {path: " + dataset + "}\n"
                     "save: {every: 5, keep_last: 0, dtype: f32}\n";
  return parse_config_string(yaml, "<test>", config_schema(), sets);
}

std::string synthetic(const fs::path& dir) {
  std::string path = (dir / "synthetic.h5").string();
  testing::write_synthetic_dataset(path, {.n_samples = 48});
  return path;
}

TrainOptions quiet(const std::string& resume = "auto", int64_t stop_after = 0) {
  return {.resume = resume, .progress = false, .stop_after_step = stop_after};
}

std::vector<double> logged_losses(const fs::path& run_dir) {
  std::vector<double> out;
  for (const MetricsRecord& r : read_metrics((run_dir / "metrics.jsonl").string())) out.push_back(r.loss);
  return out;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

double mean(const std::vector<double>& v, size_t begin, size_t end) {
  double s = 0;
  for (size_t i = begin; i < end; ++i) s += v[i];
  return s / static_cast<double>(end - begin);
}

TEST(TrainLoop, TwentyStepsLossFallsAndTheRunDirectoryIsComplete) {
  fs::path dir = temp_dir("twenty");
  TrainResult r = train(run_config(dir, synthetic(dir)), quiet());
  ASSERT_EQ(r.losses.size(), 20u);
  for (double loss : r.losses) EXPECT_TRUE(std::isfinite(loss));
  EXPECT_LT(mean(r.losses, 15, 20), 0.8 * mean(r.losses, 0, 5)) << "first " << r.losses[0] << " last " << r.losses[19];
  EXPECT_EQ(r.first_step, 1);
  EXPECT_EQ(r.last_step, 20);
  const fs::path run = dir / "run";
  EXPECT_EQ(r.run_dir, run);
  // The resolved config, with the memory plan's choices written in (this run fits with all of them off).
  TrainConfig resolved = run_config(dir, (dir / "synthetic.h5").string());
  resolved.train.gradient_checkpointing_auto = false;
  resolved.model.quantize = QuantizeMode::None;
  resolved.train.blocks_to_swap = 0;
  EXPECT_EQ(parse_config_file((run / "config.yaml").string(), config_schema()), resolved);
  EXPECT_EQ(logged_losses(run), r.losses);
  EXPECT_TRUE(fs::is_regular_file(run / "loss.png"));
  int n_events = 0;
  for (const auto& entry : fs::directory_iterator(run))
    n_events += entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  EXPECT_EQ(n_events, 1);
  for (int step : {5, 10, 15, 20})
    EXPECT_TRUE(verify_checkpoint(checkpoints_dir(run) / checkpoint_dir_name(step)).valid()) << step;
  EXPECT_EQ(read_latest(checkpoints_dir(run)).checkpoint, checkpoints_dir(run) / "step_00000020");
  EXPECT_FALSE(r.lora_file.has_value());
  // network.type full: the model exported in save.dtype (f32 here), equal to the final checkpoint.
  ASSERT_TRUE(r.model_file.has_value());
  EXPECT_EQ(*r.model_file, run / "model" / "run.safetensors");
  SafetensorsFile exported = SafetensorsFile::open(r.model_file->string());
  SafetensorsFile final_weights = SafetensorsFile::open((checkpoints_dir(run) / "step_00000020" / "model.safetensors").string());
  EXPECT_EQ(exported.metadata().at("wick_step"), "20");
  EXPECT_EQ(exported.metadata().at("wick_network_type"), "full");
  ASSERT_EQ(exported.names(), final_weights.names());
  for (const std::string& name : exported.names()) {
    EXPECT_EQ(exported.get(name).dtype(), DType::F32) << name;
    EXPECT_EQ(exported.get(name).to_vector<float>(), final_weights.get(name).to_vector<float>()) << name;
  }
}

TEST(TrainLoop, AResumedRunRepeatsTheUninterruptedOneBitwise) {
  fs::path dir = temp_dir("resume");
  std::string data = synthetic(dir);
  // Gradient accumulation and caption dropout are on: both must replay exactly.
  std::vector<std::string> sets = {"train.gradient_accumulation=2", "train.lr_scheduler=cosine", "train.warmup=3"};
  TrainResult whole = train(run_config(dir / "whole", data, sets), quiet());

  TrainConfig parts = run_config(dir / "parts", data, sets);
  TrainResult first = train(parts, quiet("auto", 8));  // checkpoints at 5 and 8, then the process "ends"
  EXPECT_EQ(first.last_step, 8);
  // Lose the newest checkpoint, as a crash between step 5 and 8 would: the resume replays 6..8.
  fs::remove_all(checkpoints_dir(dir / "parts" / "run") / "step_00000008");
  TrainResult second = train(parts, quiet("auto"));
  ASSERT_TRUE(second.resumed_from.has_value());
  EXPECT_EQ(second.resumed_from->filename(), "step_00000005");
  EXPECT_EQ(second.first_step, 6);
  ASSERT_EQ(second.losses.size(), 15u);
  for (size_t i = 0; i < 15; ++i) EXPECT_EQ(second.losses[i], whole.losses[i + 5]) << "step " << i + 6;
  EXPECT_EQ(logged_losses(dir / "parts" / "run"), whole.losses);  // the last line of each step wins

  SafetensorsFile a = SafetensorsFile::open((checkpoints_dir(dir / "whole" / "run") / "step_00000020" / "model.safetensors").string());
  SafetensorsFile b = SafetensorsFile::open((checkpoints_dir(dir / "parts" / "run") / "step_00000020" / "model.safetensors").string());
  ASSERT_EQ(a.names(), b.names());
  for (const std::string& name : a.names()) EXPECT_EQ(a.get(name).to_vector<float>(), b.get(name).to_vector<float>()) << name;

  // A finished run resumed again has nothing left to do.
  TrainResult again = train(parts, quiet("auto"));
  EXPECT_TRUE(again.losses.empty());
}

TEST(TrainLoop, LoraOnACheckpointTrainsOnlyTheAdaptersAndWritesTheFile) {
  fs::path dir = temp_dir("lora");
  std::string data = synthetic(dir);
  train(run_config(dir / "base", data, {"train.steps=10"}), quiet());
  const fs::path base = checkpoints_dir(dir / "base" / "run") / "latest";
  TrainConfig lora = run_config(dir / "lora", data,
                                {"model.name_or_path=" + base.string(), "network.type=lora", "network.linear=4",
                                 "dataset.include_labels=[2]", "train.steps=10", "network.dropout=0.1"});
  TrainResult r = train(lora, quiet());
  ASSERT_TRUE(r.lora_file.has_value());
  EXPECT_EQ(*r.lora_file, dir / "lora" / "run" / "lora" / "run.safetensors");
  SafetensorsFile file = SafetensorsFile::open(r.lora_file->string());
  EXPECT_TRUE(file.contains("lora_unet_blocks_1_attn_kv.lora_down.weight"));
  EXPECT_EQ(file.metadata().at("ss_steps"), "10");
  EXPECT_EQ(file.metadata().at("ss_base_model_hash").size(), 64u);
  // The checkpoint holds only the adapters.
  SafetensorsFile model = SafetensorsFile::open((*r.last_checkpoint / "model.safetensors").string());
  for (const std::string& name : model.names()) EXPECT_THAT(name, ::testing::AnyOf(HasSubstr("lora_down"), HasSubstr("lora_up")));
  for (double loss : r.losses) EXPECT_TRUE(std::isfinite(loss));
}

// network.dropout draws its masks per sample (docs/training.md "Randomness"): a LoRA run with dropout
// resumes bitwise, and gradient checkpointing replays the masks (the same losses and adapters).
TEST(TrainLoop, LoraDropoutResumesBitwiseAndReplaysUnderGradientCheckpointing) {
  fs::path dir = temp_dir("lora_dropout");
  std::string data = synthetic(dir);
  // The base: a full run's exported model in bf16 (save.dtype), loaded and cast to the f32 model.
  TrainResult base_run = train(run_config(dir / "base", data, {"train.steps=5", "save.dtype=bf16"}), quiet());
  ASSERT_TRUE(base_run.model_file.has_value());
  const std::string base = base_run.model_file->string();
  EXPECT_EQ(SafetensorsFile::open(base).get("pos_embed").dtype(), DType::BF16);
  auto config = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> sets = {"model.name_or_path=" + base, "network.type=lora", "network.linear=4",
                                     "network.dropout=0.3", "train.steps=12", "train.gradient_accumulation=2"};
    sets.insert(sets.end(), extra.begin(), extra.end());
    return run_config(dir / name, data, sets);
  };
  auto adapters = [&](const std::string& name) {
    SafetensorsFile f = SafetensorsFile::open((checkpoints_dir(dir / name / "run") / "step_00000012" / "model.safetensors").string());
    std::vector<std::vector<float>> values;
    for (const std::string& n : f.names()) values.push_back(f.get(n).to_vector<float>());
    return values;
  };
  TrainResult whole = train(config("whole", {}), quiet());
  ASSERT_EQ(whole.losses.size(), 12u);
  // The dropout is live: without it the losses differ from step 2 on (lora_up starts at zero).
  TrainResult no_dropout = train(config("no_dropout", {"network.dropout=0"}), quiet());
  EXPECT_NE(no_dropout.losses, whole.losses);

  TrainConfig parts = config("parts", {});
  train(parts, quiet("auto", 8));
  fs::remove_all(checkpoints_dir(dir / "parts" / "run") / "step_00000008");  // resume from step 5
  TrainResult second = train(parts, quiet("auto"));
  ASSERT_TRUE(second.resumed_from.has_value());
  EXPECT_EQ(logged_losses(dir / "parts" / "run"), whole.losses);
  EXPECT_EQ(adapters("parts"), adapters("whole"));

  TrainResult checkpointed = train(config("checkpointed", {"train.gradient_checkpointing=true"}), quiet());
  EXPECT_EQ(checkpointed.losses, whole.losses);
  EXPECT_EQ(adapters("checkpointed"), adapters("whole"));
}

TEST(TrainLoop, GradientCheckpointingTrainsTheSameLossesBitwise) {
  fs::path dir = temp_dir("checkpointing");
  std::string data = synthetic(dir);
  std::vector<std::string> sets = {"train.steps=6", "save.every=100"};
  TrainResult plain = train(run_config(dir / "plain", data, sets), quiet());
  sets.push_back("train.gradient_checkpointing=true");
  TrainResult checkpointed = train(run_config(dir / "checkpointed", data, sets), quiet());
  ASSERT_EQ(plain.losses.size(), 6u);
  EXPECT_EQ(plain.losses, checkpointed.losses);
}

TEST(TrainLoop, MixedPrecisionDdpmAndWeightingsStayFinite) {
  fs::path dir = temp_dir("variants");
  std::string data = synthetic(dir);
  const std::vector<std::vector<std::string>> variants = {
      {"train.mixed_precision=bf16"},
      {"train.mixed_precision=fp16"},
      {"train.noise_scheduler=ddpm", "train.min_snr_gamma=5"},
      {"train.min_snr_gamma=5", "train.noise_offset=0.05", "train.timestep_sampling=shift", "train.timestep_shift=3"},
      {"train.optimizer=adamw8bit"},
      {"train.optimizer=sgd", "train.lr=0.05"},
  };
  int i = 0;
  for (std::vector<std::string> sets : variants) {
    sets.push_back("train.steps=4");
    TrainResult r = train(run_config(dir / std::to_string(i++), data, sets), quiet());
    ASSERT_EQ(r.losses.size(), 4u) << sets[0];
    for (double loss : r.losses) EXPECT_TRUE(std::isfinite(loss)) << sets[0];
  }
  std::vector<MetricsRecord> fp16 = read_metrics((dir / "1" / "run" / "metrics.jsonl").string());
  bool has_scale = false;
  for (const auto& [name, value] : fp16.back().extra) has_scale = has_scale || (name == "loss_scale" && value > 0);
  EXPECT_TRUE(has_scale);
}

TEST(TrainLoop, NonFiniteLossesAreSkippedThenStopTheRunWithTheLastCheckpointIntact) {
  fs::path dir = temp_dir("nonfinite");
  // An absurd learning rate: step 1 is finite, its update overflows every later forward.
  TrainConfig config = run_config(dir, synthetic(dir), {"train.lr=1e30", "train.max_nonfinite_steps=3", "save.every=1",
                                                        "train.max_grad_norm=0"});
  try {
    train(config, quiet());
    ADD_FAILURE() << "the run did not stop";
  } catch (const WickError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Training);
    EXPECT_THAT(e.what(), HasSubstr("3 non-finite losses in a row"));
  }
  const fs::path run = dir / "run";
  std::vector<MetricsRecord> rows = read_metrics((run / "metrics.jsonl").string());
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_TRUE(std::isfinite(rows[0].loss));
  for (int s = 1; s < 4; ++s) EXPECT_FALSE(std::isfinite(rows[s].loss)) << s;
  EXPECT_EQ(read_latest(checkpoints_dir(run)).checkpoint, checkpoints_dir(run) / "step_00000001");
  EXPECT_TRUE(verify_checkpoint(checkpoints_dir(run) / "step_00000001").valid());
  EXPECT_FALSE(fs::exists(checkpoints_dir(run) / "step_00000002"));
}

TEST(TrainLoop, SampleGridsAreWrittenEverySampleEverySteps) {
  fs::path dir = temp_dir("samples");
  TrainConfig config = run_config(dir, synthetic(dir), {"train.steps=6", "sample.every=3", "sample.n_per_class=2",
                                                        "sample.steps=4", "sample.prompts=[wide stripes]"});
  TrainResult r = train(config, quiet());
  ASSERT_EQ(r.sample_grids.size(), 2u);
  EXPECT_EQ(r.sample_grids[0], dir / "run" / "samples" / "step_3.png");
  EXPECT_EQ(r.sample_grids[1], dir / "run" / "samples" / "step_6.png");
  Image grid = load_png(r.sample_grids[1].string());
  // 3 class rows of 2 cells and a row for the prompt; 16x16 images (4x8x8 latents unpacked) scaled by 2.
  EXPECT_EQ(grid.width, 2 * (32 + 2) + 2);
  EXPECT_GT(grid.height, 4 * (32 + 2));
  EXPECT_EQ(grid.channels, 1);
  // The dark stripes of generated images and the white padding both appear.
  int64_t dark = 0;
  for (uint8_t p : grid.pixels) dark += p < 64;
  EXPECT_GT(dark, 0);

  std::string unlabelled = (dir / "unlabelled.h5").string();
  {
    LatentDatasetWriter writer(unlabelled, {.model_family = "fashion-dit", .latent_channels = 4,
                                            .text_encoder = HashedTextEncoder::name});
    HashedTextEncoder encoder(8, 16);
    TextEncoding text = encoder.encode({"a", "b"});
    writer.append({.latents = Tensor::from_vector<float>(std::vector<float>(2 * 4 * 8 * 8, 0.5f), {2, 4, 8, 8}),
                   .text_embeds = text.embeds, .text_pooled = text.pooled, .text_mask = text.mask,
                   .captions = {"a", "b"}});
  }
  try {
    train(run_config(dir / "u", unlabelled, {"sample.every=3", "sample.n_per_class=2"}), quiet());
    ADD_FAILURE() << "no error";
  } catch (const WickError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config);
    EXPECT_THAT(e.what(), HasSubstr("has no labels"));
  }
}

// Runs `config` and returns the error, checking that it is of `kind`.
std::string failure(const TrainConfig& config, ErrorKind kind, const std::string& resume = "auto") {
  try {
    train(config, quiet(resume));
  } catch (const WickError& e) {
    EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(kind)) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(TrainBadInput, EachCaseStopsBeforeTheFirstStepWithItsMessage) {
  fs::path dir = temp_dir("bad");
  std::string data = synthetic(dir);
  EXPECT_THAT(failure(run_config(dir / "a", (dir / "absent.h5").string()), ErrorKind::Data), HasSubstr("absent.h5"));
  std::ofstream(dir / "text.h5") << "not an HDF5 file\n";
  EXPECT_THAT(failure(run_config(dir / "b", (dir / "text.h5").string()), ErrorKind::Data), HasSubstr("text.h5"));
  testing::write_synthetic_dataset((dir / "nan.h5").string(), {.n_samples = 16, .nan_sample = 5});
  EXPECT_THAT(failure(run_config(dir / "c", (dir / "nan.h5").string()), ErrorKind::Data), HasSubstr("non-finite"));
  EXPECT_THAT(failure(run_config(dir / "d", data, {"model.in_channels=16"}), ErrorKind::Config),
              HasSubstr("model.in_channels is 16 but the latents have 4 channels"));
  EXPECT_THAT(failure(run_config(dir / "e", data, {"model.patch_size=3"}), ErrorKind::Config),
              HasSubstr("does not divide the latent size 8"));
  std::ofstream(dir / "a_file") << "x";
  EXPECT_THAT(failure(run_config(dir / "a_file", data), ErrorKind::Config), HasSubstr("cannot be created"));
  // A base weights file that is not safetensors (the dataset given by mistake): a Data error.
  TrainConfig not_weights = run_config(dir / "f", data, {"network.type=lora", "model.name_or_path=" + data});
  EXPECT_THAT(failure(not_weights, ErrorKind::Data), HasSubstr(data));
  EXPECT_THAT(failure(run_config(dir / "g", data, {"dataset.include_labels=[7]"}), ErrorKind::Config),
              HasSubstr("no sample is left"));
  for (const char* name : {"a", "b", "c", "d", "e", "f", "g"})
    EXPECT_FALSE(fs::exists(dir / name / "run" / "config.yaml")) << name;
}

TEST(TrainBadInput, AFailedStartLeavesAnEarlierRunUntouched) {
  fs::path dir = temp_dir("untouched");
  std::string data = synthetic(dir);
  train(run_config(dir, data, {"train.steps=5"}), quiet());
  const fs::path run = dir / "run";
  const std::string metrics = read_bytes(run / "metrics.jsonl"), config = read_bytes(run / "config.yaml");
  testing::write_synthetic_dataset((dir / "nan.h5").string(), {.n_samples = 16, .nan_sample = 0});
  failure(run_config(dir, (dir / "nan.h5").string(), {"train.steps=10"}), ErrorKind::Data);
  EXPECT_THAT(failure(run_config(dir, data, {"train.steps=10"}), ErrorKind::Config, "none"),
              HasSubstr("already holds a run"));
  EXPECT_THAT(failure(run_config(dir, data, {"train.steps=10", "train.seed=4"}), ErrorKind::Config),
              HasSubstr("seed"));
  EXPECT_EQ(read_bytes(run / "metrics.jsonl"), metrics);
  EXPECT_EQ(read_bytes(run / "config.yaml"), config);
  EXPECT_EQ(read_latest(checkpoints_dir(run)).checkpoint, checkpoints_dir(run) / "step_00000005");
}

}  // namespace
}  // namespace wick
