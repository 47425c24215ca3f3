// The training config: wick's own configs, ai-toolkit's and EriDiffusion's shapes, every kind of
// mistake (with file:line:column and the suggestion), --set overrides, the resolved YAML round trip.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "engine/config/train_config.h"
#include "models/registry.h"
#include "runtime/error.h"

namespace wick {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kConfigsDir = std::string(WICK_TEST_DATA_DIR) + "/../../configs";

// A minimal valid config body to append mistakes to.
const std::string kMinimal = "name: run\ndataset:\n  path: data/fashion.h5\n";

TrainConfig parse(const std::string& text, const std::vector<std::string>& overrides = {},
                  std::vector<std::string>* notes = nullptr, std::vector<std::string>* warnings = nullptr) {
  return parse_config_string(text, "cfg.yaml", config_schema(), overrides, notes, warnings);
}

// The message of the Config error `fn` throws ("" and a test failure if it throws nothing).
std::string config_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const WickError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected a Config error";
  return "";
}

std::string error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return config_error([&] { parse(text, overrides); });
}

void expect_round_trip(const TrainConfig& config) {
  std::string yaml = to_yaml(config);
  TrainConfig again = parse_config_string(yaml, "resolved.yaml", config_schema());
  EXPECT_TRUE(again == config) << yaml;
  EXPECT_EQ(to_yaml(again), yaml);
  EXPECT_EQ(config_hash(again), config_hash(config));
}

// ---- wick's own configs ----

TEST(Config, QuickstartParses) {
  TrainConfig c = parse_config_file(kConfigsDir + "/quickstart.yaml", config_schema());
  EXPECT_EQ(c.name, "quickstart");
  EXPECT_EQ(c.output_dir, "output");
  EXPECT_EQ(c.model.arch, "dit");
  EXPECT_EQ(c.model.options.get_int("hidden_size"), 96);
  EXPECT_EQ(c.model.options.get_int("depth"), 3);
  EXPECT_EQ(c.model.options.get_int("num_heads"), 4);
  EXPECT_EQ(c.model.options.get_int("patch_size"), 2);
  EXPECT_EQ(c.network.type, NetworkType::Full);
  EXPECT_EQ(c.train.batch_size, 32);
  EXPECT_EQ(c.train.steps, 3000);
  EXPECT_EQ(c.train.lr, 1e-3);
  EXPECT_EQ(c.train.optimizer, "adamw");
  EXPECT_EQ(c.train.lr_scheduler, "cosine");
  EXPECT_EQ(c.train.mixed_precision, MixedPrecision::No);
  ASSERT_EQ(c.datasets.size(), 1u);
  EXPECT_EQ(c.datasets[0].path, "data/fashion.h5");
  EXPECT_EQ(c.datasets[0].exclude_labels, std::vector<int64_t>{9});
  EXPECT_EQ(c.datasets[0].caption_dropout, 0.1);  // inherited from train.caption_dropout
  EXPECT_EQ(c.sample.n_per_class, 4);
  EXPECT_EQ(c.sample.sampler, SamplerKind::Euler);  // auto -> euler for flowmatch
  expect_round_trip(c);
}

TEST(Config, QuickstartLoraContextParses) {
  TrainConfig c = parse_config_file(kConfigsDir + "/quickstart_lora_context.yaml", config_schema());
  EXPECT_EQ(c.network.type, NetworkType::Lora);
  EXPECT_EQ(c.network.linear, 8);
  EXPECT_EQ(c.network.linear_alpha, 8.0);
  EXPECT_EQ(c.network.target, (std::vector<std::string>{"context_embedder"}));
  EXPECT_EQ(c.model.name_or_path, "output/quickstart/checkpoints/latest");
  ASSERT_EQ(c.datasets.size(), 1u);
  EXPECT_EQ(c.datasets[0].include_labels, std::vector<int64_t>{9});
  EXPECT_TRUE(c.datasets[0].exclude_labels.empty());
  expect_round_trip(c);
}

TEST(Config, QuickstartLoraParses) {
  TrainConfig c = parse_config_file(kConfigsDir + "/quickstart_lora.yaml", config_schema());
  EXPECT_EQ(c.network.type, NetworkType::Lora);
  EXPECT_TRUE(c.network.target.empty());  // the default preset
  ASSERT_EQ(c.datasets.size(), 2u);
  EXPECT_EQ(c.datasets[0].include_labels, std::vector<int64_t>{9});
  EXPECT_FALSE(c.datasets[0].is_reg);
  EXPECT_EQ(c.datasets[1].exclude_labels, std::vector<int64_t>{9});
  EXPECT_TRUE(c.datasets[1].is_reg);
  EXPECT_EQ(reg_per_batch(c), 16);
  expect_round_trip(c);
}

TEST(Config, FluxLoraInAiToolkitShapeParses) {
  std::vector<std::string> notes, warnings;
  TrainConfig c = parse_config_file(kConfigsDir + "/flux_lora.yaml", config_schema(), {}, &notes, &warnings);
  EXPECT_EQ(c.name, "flux_lora_v1");
  EXPECT_EQ(c.output_dir, "output");  // training_folder
  EXPECT_EQ(c.device, "cuda:0");
  EXPECT_EQ(c.trigger_word, "p3r5on");
  EXPECT_EQ(c.model.arch, "flux");
  EXPECT_EQ(c.model.dtype, DType::BF16);
  EXPECT_EQ(c.network.linear, 16);
  EXPECT_EQ(c.network.linear_alpha, 16.0);
  EXPECT_EQ(c.save.every, 250);
  EXPECT_EQ(c.save.keep_last, 4);
  EXPECT_EQ(c.save.dtype, DType::BF16);
  EXPECT_EQ(c.train.gradient_accumulation, 1);
  EXPECT_TRUE(c.train.gradient_checkpointing);
  EXPECT_EQ(c.train.mixed_precision, MixedPrecision::BF16);  // train.dtype
  EXPECT_EQ(c.train.optimizer, "adamw8bit");
  EXPECT_EQ(c.train.lr, 1e-4);
  ASSERT_EQ(c.datasets.size(), 1u);
  EXPECT_EQ(c.datasets[0].path, "data/flux_person.h5");  // folder_path
  EXPECT_EQ(c.datasets[0].caption_dropout, 0.05);
  EXPECT_EQ(c.sample.every, 0);
  EXPECT_EQ(c.sample.steps, 20);
  EXPECT_EQ(c.model.name_or_path, "models/flux1-dev.safetensors");
  EXPECT_EQ(c.model.options.get_float("guidance"), 1.0);
  EXPECT_EQ(c.train.timestep_sampling, TimestepSampling::FluxShift);
  EXPECT_EQ(c.save.format, LoraFormat::Kohya);
  EXPECT_EQ(c.sample.guidance, 3.5);
  EXPECT_EQ(c.sample.sampler, SamplerKind::Euler);
  EXPECT_EQ(c.sample.prompts.size(), 2u);
  EXPECT_EQ(c.sample.width, 1024);  // Flux samples at a chosen size
  EXPECT_EQ(c.sample.height, 1024);
  EXPECT_EQ(c.model.options.get_string("vae_path"), "");
  EXPECT_EQ(c.model.options.get_int("t5_length"), 0);
  EXPECT_EQ(c.distributed.backend, CommBackend::Nccl);
  // Ignored ai-toolkit options are reported with their location.
  bool saw_train_unet = false, saw_width = false, saw_walk_seed = false;
  for (const std::string& note : notes) {
    if (note.find("'train.train_unet'") != std::string::npos) {
      saw_train_unet = true;
      EXPECT_THAT(note, HasSubstr("flux_lora.yaml:35:9:"));
    }
    if (note.find("'sample.width'") != std::string::npos) saw_width = true;
    if (note.find("'sample.walk_seed'") != std::string::npos) saw_walk_seed = true;
  }
  EXPECT_TRUE(saw_train_unet);
  EXPECT_FALSE(saw_width);
  EXPECT_TRUE(saw_walk_seed);
  // train_unet: true and train_text_encoder: false ask for what wick does: notes only (quantize: false is
  // model.quantize: none).
  // The trigger word cannot reach the cached training captions: a warning.
  ASSERT_EQ(warnings.size(), 1u) << ::testing::PrintToString(warnings);
  EXPECT_THAT(warnings[0], AllOf(HasSubstr("flux_lora.yaml:17:21: trigger_word 'p3r5on' replaces [trigger] in the "
                                           "prompts wick encodes when it samples"),
                                HasSubstr("the training captions were encoded when the dataset was packed")));
  expect_round_trip(c);
}

TEST(Config, Sd35LoraInAiToolkitShapeParses) {
  std::vector<std::string> notes, warnings;
  TrainConfig c = parse_config_file(kConfigsDir + "/sd35_lora.yaml", config_schema(), {}, &notes, &warnings);
  EXPECT_EQ(c.name, "sd35_large_lora_v1");
  EXPECT_EQ(c.model.arch, "sd3");  // is_v3
  EXPECT_EQ(c.model.name_or_path, "models/sd3.5_large.safetensors");
  EXPECT_EQ(c.model.dtype, DType::BF16);
  EXPECT_EQ(c.model.options.get_int("head_dim"), 0);
  EXPECT_EQ(c.network.type, NetworkType::Lora);
  EXPECT_EQ(c.network.linear, 16);
  EXPECT_TRUE(c.network.target.empty());  // the arch's default preset (all)
  EXPECT_EQ(c.save.format, LoraFormat::Peft);
  EXPECT_EQ(c.train.timestep_sampling, TimestepSampling::Shift);
  EXPECT_EQ(c.train.timestep_shift, 3.0);
  EXPECT_EQ(c.train.lr, 1e-5);
  EXPECT_EQ(c.train.max_grad_norm, 0.1);
  EXPECT_EQ(c.train.mixed_precision, MixedPrecision::BF16);
  EXPECT_TRUE(c.train.gradient_checkpointing);
  EXPECT_EQ(c.train.optimizer, "adamw8bit");
  EXPECT_EQ(c.sample.every, 250);
  EXPECT_EQ(c.sample.guidance, 4.5);
  EXPECT_EQ(c.sample.width, 1024);  // sd3 samples at a chosen size
  EXPECT_EQ(c.sample.negative_prompt, "");
  ASSERT_EQ(warnings.size(), 1u) << ::testing::PrintToString(warnings);  // the trigger word, as for Flux
  EXPECT_THAT(warnings[0], HasSubstr("trigger_word 'p3r5on'"));
  expect_round_trip(c);
  // Without save.format the architecture's default applies: PEFT for sd3 (kohya for Flux and the DiT).
  TrainConfig kohya = parse_config_file(kConfigsDir + "/sd35_lora.yaml", config_schema(), {"save.format=kohya"});
  EXPECT_EQ(kohya.save.format, LoraFormat::Kohya);
}

TEST(Config, ZImageLoraInAiToolkitShapeParses) {
  std::vector<std::string> notes, warnings;
  TrainConfig c = parse_config_file(kConfigsDir + "/zimage_lora.yaml", config_schema(), {}, &notes, &warnings);
  EXPECT_EQ(c.name, "zimage_lora_v1");
  EXPECT_EQ(c.model.arch, "zimage");  // is_zimage
  EXPECT_EQ(c.model.name_or_path, "models/Z-Image");
  EXPECT_EQ(c.model.dtype, DType::BF16);
  EXPECT_EQ(c.model.options.get_float("sample_shift"), 0.0);  // the pipeline's scheduler_config.json
  EXPECT_EQ(c.model.options.get_int("max_length"), 512);
  EXPECT_EQ(c.network.type, NetworkType::Lora);
  EXPECT_EQ(c.network.linear, 16);
  EXPECT_TRUE(c.network.target.empty());  // the arch's default preset (all)
  EXPECT_EQ(c.save.format, LoraFormat::Peft);
  EXPECT_EQ(c.train.timestep_sampling, TimestepSampling::Shift);
  EXPECT_EQ(c.train.timestep_shift, 3.0);
  EXPECT_EQ(c.train.lr, 1e-4);
  EXPECT_EQ(c.train.mixed_precision, MixedPrecision::BF16);
  EXPECT_TRUE(c.train.gradient_checkpointing);
  EXPECT_EQ(c.sample.every, 250);
  EXPECT_EQ(c.sample.guidance, 4.0);
  EXPECT_EQ(c.sample.steps, 28);
  EXPECT_EQ(c.sample.width, 1024);  // zimage samples at a chosen size
  ASSERT_EQ(warnings.size(), 1u) << ::testing::PrintToString(warnings);  // the trigger word, as for Flux
  EXPECT_THAT(warnings[0], HasSubstr("trigger_word 'p3r5on'"));
  expect_round_trip(c);
  // Without sample.guidance Z-Image samples as Turbo does: no classifier-free guidance.
  TrainConfig turbo = parse_config_file(kConfigsDir + "/zimage_lora.yaml", config_schema(), {"sample.guidance=1"});
  EXPECT_EQ(turbo.sample.guidance, 1.0);
  EXPECT_EQ(parse(kMinimal + "model: {arch: z-image, name_or_path: z.safetensors}\n").sample.guidance, 1.0);
}

TEST(Config, QwenImageLoraInAiToolkitShapeParses) {
  std::vector<std::string> notes, warnings;
  TrainConfig c = parse_config_file(kConfigsDir + "/qwen_image_lora.yaml", config_schema(), {}, &notes, &warnings);
  EXPECT_EQ(c.name, "qwen_image_lora_v1");
  EXPECT_EQ(c.model.arch, "qwenimage");  // is_qwen_image
  EXPECT_EQ(c.model.name_or_path, "models/Qwen-Image");
  EXPECT_EQ(c.model.dtype, DType::BF16);
  EXPECT_EQ(c.model.quantize, QuantizeMode::Float8);
  EXPECT_EQ(c.model.options.get_int("max_length"), 512);
  EXPECT_EQ(c.network.type, NetworkType::Lora);
  EXPECT_TRUE(c.network.target.empty());  // the arch's default preset (all)
  EXPECT_EQ(c.save.format, LoraFormat::Peft);
  EXPECT_EQ(c.train.timestep_sampling, TimestepSampling::Shift);
  EXPECT_EQ(c.train.timestep_shift, 2.2);
  EXPECT_EQ(c.sample.guidance, 4.0);
  EXPECT_EQ(c.sample.negative_prompt, "");
  EXPECT_EQ(c.sample.steps, 30);
  EXPECT_EQ(c.sample.width, 1024);
  ASSERT_EQ(warnings.size(), 1u) << ::testing::PrintToString(warnings);  // the trigger word
  EXPECT_THAT(warnings[0], HasSubstr("trigger_word 'p3r5on'"));
  expect_round_trip(c);
  // musubi-tuner's qwen_shift, and the default true CFG scale of the pipeline without sample.guidance.
  const TrainConfig q = parse(kMinimal + "model: {arch: qwen-image, name_or_path: q.safetensors}\n"
                                         "train: {timestep_sampling: qwen_shift}\n");
  EXPECT_EQ(q.train.timestep_sampling, TimestepSampling::QwenShift);
  EXPECT_EQ(q.sample.guidance, 4.0);
}

TEST(Config, SdxlLoraInAiToolkitShapeParses) {
  std::vector<std::string> notes, warnings;
  TrainConfig c = parse_config_file(kConfigsDir + "/sdxl_lora.yaml", config_schema(), {}, &notes, &warnings);
  EXPECT_EQ(c.name, "sdxl_lora_v1");
  EXPECT_EQ(c.model.arch, "sdxl");  // is_xl
  EXPECT_EQ(c.model.name_or_path, "models/sd_xl_base_1.0.safetensors");
  EXPECT_EQ(c.network.type, NetworkType::Lora);
  EXPECT_EQ(c.network.linear, 16);
  EXPECT_EQ(c.network.conv, 8);
  EXPECT_EQ(c.network.conv_alpha, 4.0);
  EXPECT_EQ(c.save.format, LoraFormat::Kohya);  // sdxl's default: ComfyUI reads no PEFT SDXL LoRA
  EXPECT_EQ(c.train.noise_scheduler, NoiseScheduler::Ddpm);
  EXPECT_EQ(c.train.prediction_type, PredictionType::Epsilon);
  EXPECT_EQ(c.train.min_snr_gamma, 5.0);
  EXPECT_EQ(c.train.noise_offset, 0.0357);
  EXPECT_EQ(c.train.mixed_precision, MixedPrecision::BF16);
  EXPECT_EQ(c.sample.every, 0);
  // SDXL samples with Euler (EulerDiscreteScheduler) at diffusers' guidance 5 unless the config says otherwise.
  EXPECT_EQ(c.sample.sampler, SamplerKind::Euler);
  EXPECT_EQ(c.sample.guidance, 5.0);
  ASSERT_EQ(warnings.size(), 1u) << ::testing::PrintToString(warnings);
  EXPECT_THAT(warnings[0], HasSubstr("trigger_word 'p3r5on'"));
  expect_round_trip(c);
  // kohya's spellings; the defaults (ddpm, conv_alpha = conv) without them; the conflicts are Config errors.
  TrainConfig kohya = parse_config_file(kConfigsDir + "/sdxl_lora.yaml", config_schema(),
                                        {"network.conv_dim=4", "train.prediction_type=v_prediction"});
  EXPECT_EQ(kohya.network.conv, 4);
  EXPECT_EQ(kohya.train.prediction_type, PredictionType::V);
  // v-prediction with sample grids parses: SDXL's sampler reads v (the DiT's DDIM sampler refuses it when made).
  TrainConfig v_samples = parse_config_file(kConfigsDir + "/sdxl_lora.yaml", config_schema(),
                                            {"train.prediction_type=v", "sample.every=10", "sample.prompts=[a cat]"});
  EXPECT_EQ(v_samples.sample.every, 10);
  TrainConfig defaults =
      parse(kMinimal + "network:\n  type: lora\n  conv: 6\n", {"model.arch=sdxl", "model.path=base.safetensors"});
  EXPECT_EQ(defaults.network.conv_alpha, 6.0);
  EXPECT_EQ(defaults.train.noise_scheduler, NoiseScheduler::Ddpm);
  EXPECT_THAT(error_of(kMinimal, {"train.prediction_type=v", "train.noise_scheduler=flowmatch"}),
              HasSubstr("v_prediction is a DDPM target"));
  EXPECT_THAT(error_of(kMinimal + "network:\n  type: dora\n  conv: 4\n"),
              HasSubstr("LoCon needs network.type lora"));
  EXPECT_THAT(error_of(kMinimal + "network:\n  type: lora\n  conv: 4\n  conv_alpha: 0\n"),
              HasSubstr("network.conv_alpha must be > 0"));
}

// ai-toolkit options wick does not honour: a value that asks for what wick does is noted, any other
// value that would change training in ai-toolkit is a warning naming the key, its value and location.
// train.global_batch_size: parsed, written into the resolved config only when set (a batch_size-only
// config's resolved text is unchanged), and train.batch_size beside it draws a warning.
TEST(Config, GlobalBatchSize) {
  std::vector<std::string> notes, warnings;
  TrainConfig c = parse(kMinimal + "train:\n  global_batch_size: 10\n", {}, &notes, &warnings);
  EXPECT_EQ(c.train.global_batch_size, 10);
  EXPECT_TRUE(warnings.empty()) << ::testing::PrintToString(warnings);
  EXPECT_NE(to_yaml(c).find("global_batch_size: 10"), std::string::npos);
  EXPECT_EQ(parse(to_yaml(c)).train.global_batch_size, 10);
  EXPECT_EQ(to_yaml(parse(kMinimal)).find("global_batch_size"), std::string::npos);
  EXPECT_THROW(parse(kMinimal + "train:\n  global_batch_size: 0\n"), WickError);
  parse(kMinimal + "train:\n  batch_size: 4\n  global_batch_size: 10\n", {}, &notes, &warnings);
  EXPECT_EQ(warnings, (std::vector<std::string>{"cfg.yaml:5:15: train.batch_size is ignored: train.global_batch_size "
                                                "(10) sets the samples per micro-step over all ranks"}));
}

TEST(Config, IgnoredAiToolkitOptionsThatChangeTrainingWarn) {
  std::vector<std::string> notes, warnings;
  parse(kMinimal + "train:\n  loss_type: l1\n  ema_config: {use_ema: true, ema_decay: 0.99}\n"
                   "  optimizer_params: {decouple: true}\n  skip_first_sample: true\n",
        {"dataset.num_repeats=10", "dataset.flip_x=true"}, &notes, &warnings);
  EXPECT_EQ(warnings, (std::vector<std::string>{
                          "cfg.yaml:5:3: 'train.loss_type' (l1) is ignored by wick but changes training in ai-toolkit: "
                          "wick's loss is always the mean squared error",
                          "cfg.yaml:6:3: 'train.ema_config' is ignored by wick but changes training in ai-toolkit: wick "
                          "keeps no EMA of the weights",
                          "cfg.yaml:7:3: 'train.optimizer_params' is ignored by wick but changes training in "
                          "ai-toolkit: wick's optimizer takes only train.lr, betas, eps and weight_decay",
                          "--set dataset.num_repeats=10: 'dataset.num_repeats' (10) is ignored by wick but changes "
                          "training in ai-toolkit: wick shows every sample once per epoch",
                          "--set dataset.flip_x=true: 'dataset.flip_x' (true) is ignored by wick but changes training "
                          "in ai-toolkit: wick does not flip the cached latents"}));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], "cfg.yaml:8:3: 'train.skip_first_sample' is accepted for compatibility and ignored by wick");

  // The values that mean what wick does anyway: notes, no warning.
  notes.clear();
  warnings.clear();
  parse(kMinimal + "train:\n  loss_type: MSE\n  ema_config: {use_ema: false}\n  optimizer_params: {}\n"
                   "  train_text_encoder: false\n  content_or_style: balanced\n  linear_timesteps: false\n"
                   "network:\n  network_kwargs: {}\n",
        {"dataset.num_repeats=1", "dataset.random_flip=false", "dataset.token_dropout_rate=0.0"}, &notes, &warnings);
  EXPECT_TRUE(warnings.empty()) << ::testing::PrintToString(warnings);
  EXPECT_EQ(notes.size(), 10u);
}

TEST(Config, TimestepSamplingShiftDefaultsToSd3Shift) {
  EXPECT_EQ(kDefaultTimestepShift, 3.0);
  TrainConfig c = parse(kMinimal + "train:\n  timestep_sampling: shift\n");
  EXPECT_EQ(c.train.timestep_sampling, TimestepSampling::Shift);
  EXPECT_EQ(c.train.timestep_shift, 3.0);
  expect_round_trip(c);
  EXPECT_EQ(parse(kMinimal + "train:\n  timestep_type: shift\n  timestep_shift: 1.5\n").train.timestep_shift, 1.5);
  // Without the shift sampling, the shift stays 1 (none) unless given.
  EXPECT_EQ(parse(kMinimal + "train:\n  timestep_sampling: uniform\n").train.timestep_shift, 1.0);
  EXPECT_EQ(error_of(kMinimal + "train:\n  timestep_sampling: shift\n  timestep_shift: 1\n"),
            "cfg.yaml:6:19: train.timestep_sampling shift with train.timestep_shift 1 is plain uniform sampling: use "
            "timestep_sampling uniform, or a shift other than 1 (leave timestep_shift out for SD3's 3)");
}

// ---- the shapes of the trainers wick's users come from ----

TEST(Config, EriDiffusionSdxlExample) {
  // EriDiffusion's example_sdxl_lora.yaml shape (ai-toolkit's nesting, SDXL, ddpm).
  const std::string text = R"(job: extension
config:
  name: "example_sdxl_lora"
  process:
    - type: 'sd_trainer'
      device: cuda:0
      trigger_word: "my_trigger"
      model:
        name_or_path: "/models/sdxl.safetensors"
        is_sdxl: true
      network:
        type: "lora"
        linear: 16
        linear_alpha: 8
      save:
        dtype: float16
        save_every: 500
        max_step_saves_to_keep: 2
      datasets:
        - folder_path: "/data/sdxl_latents.h5"
          caption_ext: "txt"
          caption_dropout_rate: 0.05
          resolution: [1024]
      train:
        batch_size: 1
        steps: 1000
        gradient_accumulation: 4
        train_unet: true
        gradient_checkpointing: true
        optimizer: "adamw8bit"
        lr: 1e-4
        dtype: bf16
      sample:
        sampler: "ddim"
        sample_every: 250
        sample_steps: 30
        guidance_scale: 7.5
        prompts:
          - "a photo of [trigger]"
        neg: "low quality, blurry"
        width: 1024
        height: 1024
)";
  // is_sdxl selects the registered SDXL UNet, a DDPM (DDIM samples) with kohya LoRA files by default.
  TrainConfig c = parse(text);
  EXPECT_EQ(c.model.arch, "sdxl");
  EXPECT_EQ(c.train.noise_scheduler, NoiseScheduler::Ddpm);
  EXPECT_EQ(c.train.prediction_type, PredictionType::Epsilon);
  EXPECT_EQ(c.sample.sampler, SamplerKind::Ddim);
  EXPECT_EQ(c.save.format, LoraFormat::Kohya);
  EXPECT_EQ(c.network.linear_alpha, 8.0);
  EXPECT_EQ(c.network.conv, 0);
  expect_round_trip(c);
  EXPECT_EQ(error_of(kMinimal + "model:\n  arch: sdxl2\n"),
            "cfg.yaml:5:9: model.arch: unknown architecture 'sdxl2'; registered: dit, flux, sd3, sdxl, zimage, qwenimage");
}

TEST(Config, EriDiffusionFlatShapeWithAliases) {
  // The same keys without ai-toolkit's wrapper, with the alternative spellings.
  const std::string text = R"(name: flat
training_folder: runs
model:
  architecture: flux1
  path: /models/flux1-dev.safetensors
network:
  adapter_type: dora
  rank: 32
  alpha: 16
  target_modules: [to_q, to_k, to_v]
  dropout: 0.1
train:
  batch_size: 4
  gradient_accumulation_steps: 2
  learning_rate: 5e-5
  lr_scheduler: cosine
  lr_warmup_steps: 100
  max_grad_norm: 1.0
  mixed_precision: fp16
  snr_gamma: 5.0
  seed: 7
dataset:
  dataset_path: /data/sd35.h5
)";
  TrainConfig c = parse(text);
  EXPECT_EQ(c.output_dir, "runs");
  EXPECT_EQ(c.model.arch, "flux");
  EXPECT_EQ(c.model.name_or_path, "/models/flux1-dev.safetensors");
  EXPECT_EQ(c.network.type, NetworkType::Dora);
  EXPECT_EQ(c.network.linear, 32);
  EXPECT_EQ(c.network.linear_alpha, 16.0);
  EXPECT_EQ(c.network.target, (std::vector<std::string>{"to_q", "to_k", "to_v"}));
  EXPECT_EQ(c.train.gradient_accumulation, 2);
  EXPECT_EQ(c.train.lr, 5e-5);
  EXPECT_EQ(c.train.warmup, 100);
  EXPECT_EQ(c.train.mixed_precision, MixedPrecision::FP16);
  EXPECT_EQ(c.train.min_snr_gamma, 5.0);
  EXPECT_EQ(c.datasets[0].path, "/data/sd35.h5");
  expect_round_trip(c);
}

// Where a Flux run finds what sample images need: wick's keys, kohya's argument names (ae, clip_l, t5xxl,
// t5xxl_max_token_length) and EriDiffusion's (text_encoder_path = CLIP-L, text_encoder_2_path = T5);
// sample.width / height and Flux's default guidance 3.5; the same keys ignored for the DiT.
TEST(Config, FluxSamplingKeysAndTheirAliases) {
  const std::string flux = kMinimal + "model:\n  arch: flux\n  name_or_path: flux1-dev.safetensors\n";
  TrainConfig c = parse(flux + "  vae_path: ae.safetensors\n  clip_l_path: clip_l.safetensors\n"
                               "  t5_path: t5xxl_fp16.safetensors\n  clip_tokenizer_path: tokenizer\n"
                               "  t5_tokenizer_path: spiece.model\n  t5_length: 256\n  keep_encoders_loaded: true\n"
                               "sample:\n  width: 768\n  height: 512\n");
  EXPECT_EQ(c.model.options.get_string("vae_path"), "ae.safetensors");
  EXPECT_EQ(c.model.options.get_string("clip_l_path"), "clip_l.safetensors");
  EXPECT_EQ(c.model.options.get_string("t5_path"), "t5xxl_fp16.safetensors");
  EXPECT_EQ(c.model.options.get_string("clip_tokenizer_path"), "tokenizer");
  EXPECT_EQ(c.model.options.get_string("t5_tokenizer_path"), "spiece.model");
  EXPECT_EQ(c.model.options.get_int("t5_length"), 256);
  EXPECT_TRUE(c.model.options.get_bool("keep_encoders_loaded"));
  EXPECT_EQ(c.sample.width, 768);
  EXPECT_EQ(c.sample.height, 512);
  EXPECT_EQ(c.sample.guidance, 3.5);  // Flux's default: dev's guidance input
  expect_round_trip(c);

  TrainConfig kohya = parse(flux + "  ae: a.safetensors\n  clip_l: c.safetensors\n  t5xxl: t.safetensors\n"
                                   "  t5xxl_max_token_length: 512\n");
  EXPECT_EQ(kohya.model.options.get_string("vae_path"), "a.safetensors");
  EXPECT_EQ(kohya.model.options.get_string("clip_l_path"), "c.safetensors");
  EXPECT_EQ(kohya.model.options.get_string("t5_path"), "t.safetensors");
  EXPECT_EQ(kohya.model.options.get_int("t5_length"), 512);
  std::vector<std::string> notes;
  TrainConfig eri = parse(flux + "  text_encoder_path: c.safetensors\n  text_encoder_2_path: t.safetensors\n"
                                 "sample:\n  guidance_scale: 4\n",
                          {}, &notes);
  EXPECT_EQ(eri.model.options.get_string("clip_l_path"), "c.safetensors");
  EXPECT_EQ(eri.model.options.get_string("t5_path"), "t.safetensors");
  EXPECT_EQ(eri.sample.guidance, 4.0);  // given: kept
  EXPECT_TRUE(notes.empty()) << ::testing::PrintToString(notes);
  EXPECT_THAT(error_of(flux + "  t5_length: -1\n"), HasSubstr("model.t5_length"));

  // The DiT: EriDiffusion's encoder paths and a chosen sample size are noted and ignored (the size reset to 0);
  // Flux's own keys are an error that says whose they are.
  notes.clear();
  TrainConfig dit = parse(kMinimal + "model:\n  text_encoder_path: c.safetensors\n"
                                     "sample:\n  width: 512\n  height: 512\n",
                          {}, &notes);
  EXPECT_EQ(dit.sample.width, 0);
  EXPECT_EQ(dit.sample.height, 0);
  EXPECT_EQ(dit.sample.guidance, 4.0);
  EXPECT_EQ(notes, (std::vector<std::string>{
                       "cfg.yaml:5:3: 'model.text_encoder_path' is accepted for compatibility and ignored by wick",
                       "cfg.yaml:7:10: 'sample.width' is accepted for compatibility and ignored by wick (model.arch "
                       "dit samples at the dataset's latent size)",
                       "cfg.yaml:8:11: 'sample.height' is accepted for compatibility and ignored by wick (model.arch "
                       "dit samples at the dataset's latent size)"}));
  expect_round_trip(dit);
  EXPECT_THAT(error_of(kMinimal + "model:\n  vae_path: ae.safetensors\n"),
              HasSubstr("model.vae_path is a key of arch flux, but this config's model.arch is dit"));
}

TEST(Config, DefaultsOfAMinimalConfig) {
  TrainConfig c = parse(kMinimal);
  TrainConfig expected;
  expected.name = "run";
  expected.model.arch = "dit";
  expected.model.options = ModelOptions::defaults(find_architecture("dit").schema().keys);
  expected.datasets = {DatasetConfig{.path = "data/fashion.h5", .caption_dropout = 0.0}};
  expected.sample.sampler = SamplerKind::Euler;
  EXPECT_TRUE(c == expected) << to_yaml(c);
  EXPECT_EQ(c.network.linear_alpha, double(c.network.linear));
}

// ---- mistakes ----

TEST(ConfigErrors, UnknownKeysNameLocationAndNearestKey) {
  // Top level.
  EXPECT_EQ(error_of(kMinimal + "ouput_dir: x\n"),
            "cfg.yaml:4:1: unknown key 'ouput_dir'; did you mean 'output_dir'?");
  // In a section; the nearest key may be an alias.
  EXPECT_EQ(error_of(kMinimal + "train:\n  steps: 10\n  lerning_rate: 1e-4\n"),
            "cfg.yaml:6:3: unknown key 'train.lerning_rate'; did you mean 'learning_rate' (alias of 'lr')?");
  EXPECT_EQ(error_of(kMinimal + "save:\n  max_step_save_to_keep: 3\n"),
            "cfg.yaml:5:3: unknown key 'save.max_step_save_to_keep'; did you mean 'max_step_saves_to_keep' "
            "(alias of 'keep_last')?");
  // In a list entry.
  EXPECT_EQ(error_of("name: run\ndatasets:\n  - path: a.h5\n  - path: b.h5\n    include_label: [1]\n"),
            "cfg.yaml:5:5: unknown key 'datasets[1].include_label'; did you mean 'include_labels'?");
  // Nothing close: the valid keys are listed.
  EXPECT_THAT(error_of(kMinimal + "distributed:\n  zzzzzzzzzzzz: 1\n"),
              StartsWith("cfg.yaml:5:3: unknown key 'distributed.zzzzzzzzzzzz'; valid keys under 'distributed': "
                         "backend, shard, shard_optimizer, shard_group, bucket_mb, timeout_s"));
  // Deep inside ai-toolkit's wrapper the location is still the file's.
  EXPECT_EQ(error_of("config:\n  name: x\n  process:\n    - type: sd_trainer\n      dataset:\n        path: a.h5\n"
                     "      network:\n        liner: 4\n"),
            "cfg.yaml:8:9: unknown key 'network.liner'; did you mean 'linear'?");
  EXPECT_THAT(error_of("config:\n  nme: x\n  process: []\n"),
              StartsWith("cfg.yaml:2:3: unknown key 'config.nme'; did you mean 'name'?"));
}

TEST(ConfigErrors, WrongTypesAndRanges) {
  EXPECT_EQ(error_of(kMinimal + "train:\n  steps: abc\n"), "cfg.yaml:5:10: train.steps must be an integer, got 'abc'");
  EXPECT_EQ(error_of(kMinimal + "train:\n  steps: 2.5\n"), "cfg.yaml:5:10: train.steps must be an integer, got '2.5'");
  EXPECT_EQ(error_of(kMinimal + "train:\n  lr: -1\n"), "cfg.yaml:5:7: train.lr must be > 0, got -1");
  EXPECT_EQ(error_of(kMinimal + "train:\n  lr: fast\n"), "cfg.yaml:5:7: train.lr must be a number, got 'fast'");
  EXPECT_EQ(error_of(kMinimal + "network:\n  dropout: 1\n"), "cfg.yaml:5:12: network.dropout must be in [0, 1), got 1");
  EXPECT_EQ(error_of(kMinimal + "train:\n  gradient_checkpointing: maybe\n"),
            "cfg.yaml:5:27: train.gradient_checkpointing must be true or false, got 'maybe'");
  EXPECT_EQ(error_of(kMinimal + "train:\n  betas: [0.9]\n"),
            "cfg.yaml:5:10: train.betas must be a list of two numbers [beta1, beta2], got 1");
  EXPECT_EQ(error_of(kMinimal + "train: 5\n"), "cfg.yaml:4:8: 'train' must be a mapping of keys, got a scalar");
  EXPECT_EQ(error_of(kMinimal + "sample:\n  prompts: {a: 1}\n"),
            "cfg.yaml:5:12: sample.prompts must be a list of strings, got a mapping");
  EXPECT_EQ(error_of(kMinimal + "train:\n  batch_size: [1, 2]\n"),
            "cfg.yaml:5:15: train.batch_size must be an integer, got a list");
}

TEST(ConfigErrors, UnknownEnumValuesListTheValidOnes) {
  EXPECT_EQ(error_of(kMinimal + "train:\n  optimizer: adam\n"),
            "cfg.yaml:5:14: train.optimizer: unknown value 'adam'; valid values: adamw8bit, adamw, sgd");
  EXPECT_EQ(error_of(kMinimal + "model:\n  arch: unet\n"),
            "cfg.yaml:5:9: model.arch: unknown architecture 'unet'; registered: dit, flux, sd3, sdxl, zimage, qwenimage");
  EXPECT_EQ(error_of(kMinimal + "train:\n  mixed_precision: fp8\n"),
            "cfg.yaml:5:20: train.mixed_precision: unknown value 'fp8'; valid values: no, bf16, fp16");
  EXPECT_THAT(error_of(kMinimal + "train:\n  lr_scheduler: cosine_annealing\n"),
              AllOf(StartsWith("cfg.yaml:5:17: train.lr_scheduler: unknown value 'cosine_annealing'; valid values: "),
                    HasSubstr("cosine"), HasSubstr("constant")));
  EXPECT_EQ(error_of(kMinimal + "device: gpu\n"),
            "cfg.yaml:4:9: device: unknown value 'gpu'; valid values: auto, cpu, cuda, cuda:N");
  EXPECT_EQ(error_of(kMinimal + "distributed:\n  backend: gloo\n"),
            "cfg.yaml:5:12: distributed.backend: unknown value 'gloo'; valid values: auto, nccl, mpi, none");
}

TEST(ConfigErrors, StructuralMistakes) {
  EXPECT_EQ(error_of("name: run\ndataset:\n  path: a.h5\ndatasets:\n  - path: b.h5\n"),
            "cfg.yaml:5:3: 'dataset' and 'datasets' are both given; use 'dataset' for one dataset or 'datasets' "
            "for a list, not both");
  EXPECT_EQ(error_of("name: run\n"), "cfg.yaml: missing required key 'dataset' (or a 'datasets' list)");
  EXPECT_EQ(error_of("name: run\ndataset:\n  include_labels: [1]\n"),
            "cfg.yaml:3:3: missing required key 'dataset.path' (the cached-latent HDF5 file)");
  EXPECT_EQ(error_of("name: run\ndatasets:\n  - path: a.h5\n  - weight: 2\n"),
            "cfg.yaml:4:5: missing required key 'datasets[1].path' (the cached-latent HDF5 file)");
  // One dataset: a sampling weight has nothing to weigh.
  EXPECT_EQ(error_of(kMinimal + "  weight: 2.5\n"),
            "cfg.yaml:4:11: dataset.weight is 2.5, but the run has one dataset and a sampling weight among datasets "
            "has nothing to weigh (remove it; wick trains on one dataset per run)");
  EXPECT_EQ(error_of("name: run\ndatasets:\n  - path: a.h5\n    weight: 0.5\n"),
            "cfg.yaml:4:13: datasets[0].weight is 0.5, but the run has one dataset and a sampling weight among "
            "datasets has nothing to weigh (remove it; wick trains on one dataset per run)");
  EXPECT_EQ(parse(kMinimal + "  weight: 1\n").datasets[0].weight, 1.0);
  EXPECT_EQ(error_of("dataset:\n  path: a.h5\n"),
            "cfg.yaml: missing required key 'name' (the run directory is <output_dir>/<name>)");
  EXPECT_EQ(error_of(kMinimal + "save:\n  every: 10\n  save_every: 20\n"),
            "cfg.yaml:6:3: 'save.save_every' given twice (as 'every' and 'save_every', which are aliases)");
  EXPECT_EQ(error_of(kMinimal + "network:\n  type: lora\n"),
            "cfg.yaml:5:9: network.type lora trains an adapter on a base model: set model.name_or_path");
  EXPECT_EQ(error_of(kMinimal + "model:\n  arch: dit\n  name_or_path: x\n  is_flux: true\n"),
            "cfg.yaml:7:12: model.is_flux: true contradicts model.arch 'dit'");
  // A key of another architecture says whose it is.
  EXPECT_EQ(error_of(kMinimal + "model:\n  is_flux: true\n  name_or_path: x\n  hidden_size: 64\n"),
            "cfg.yaml:7:3: model.hidden_size is a key of arch dit, but this config's model.arch is flux (its keys: "
            "guidance, axes_dim, vae_path, clip_l_path, t5_path, clip_tokenizer_path, t5_tokenizer_path, t5_length, "
            "keep_encoders_loaded)");
  EXPECT_EQ(error_of(kMinimal + "model:\n  is_flux: true\n"),
            "cfg.yaml:5:12: model.arch flux needs model.name_or_path (the base weights)");
  EXPECT_EQ(error_of(kMinimal + "model:\n  hidden_size: 100\n  num_heads: 3\n"),
            "cfg.yaml:6:14: model.hidden_size (100) must be divisible by model.num_heads (3)");
  EXPECT_EQ(error_of(kMinimal + "sample:\n  every: 100\n"),
            "cfg.yaml:5:10: sample.every is 100 but there is nothing to sample: give sample.prompts or "
            "sample.n_per_class");
  EXPECT_EQ(error_of("config:\n  name: x\n  process:\n    - dataset: {path: a}\n    - dataset: {path: b}\n"),
            "cfg.yaml:5:7: config.process has 2 entries; wick runs one process per config (split them into several "
            "files)");
  EXPECT_EQ(error_of(""), "cfg.yaml: the config is empty");
  EXPECT_THAT(error_of("name: run\ntrain:\n  steps: [1, 2\n"), StartsWith("cfg.yaml:4:1: YAML syntax error"));
  EXPECT_EQ(config_error([] { parse_config_file("/nonexistent/cfg.yaml", config_schema()); }),
            "/nonexistent/cfg.yaml: cannot open the config file");
}

// ---- --set ----

TEST(ConfigOverrides, NestedScalarsListsAndDatasets) {
  TrainConfig c = parse(kMinimal, {"train.lr=3e-4", "train.steps=20", "network.target=[attn*, mlp*]",
                                   "dataset.include_labels=[1, 2]", "datasets.1.path=extra.h5", "name=other",
                                   "train.gradient_accumulation_steps=3", "sample.prompts=a boot"});
  EXPECT_EQ(c.train.lr, 3e-4);
  EXPECT_EQ(c.train.steps, 20);
  EXPECT_EQ(c.network.target, (std::vector<std::string>{"attn*", "mlp*"}));
  ASSERT_EQ(c.datasets.size(), 2u);
  EXPECT_EQ(c.datasets[0].path, "data/fashion.h5");
  EXPECT_EQ(c.datasets[0].include_labels, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(c.datasets[1].path, "extra.h5");
  EXPECT_EQ(c.name, "other");
  EXPECT_EQ(c.train.gradient_accumulation, 3);
  EXPECT_EQ(c.sample.prompts, std::vector<std::string>{"a boot"});
  expect_round_trip(c);
}

TEST(ConfigOverrides, DependentDefaultsFollowTheOverride) {
  TrainConfig c = parse(kMinimal, {"network.linear=32"});
  EXPECT_EQ(c.network.linear_alpha, 32.0);  // linear_alpha defaults to linear
  c = parse(kMinimal + "network:\n  linear_alpha: 4\n", {"network.linear=32"});
  EXPECT_EQ(c.network.linear_alpha, 4.0);
  // The override is applied last: it wins over the file.
  c = parse(kMinimal + "train:\n  steps: 10\n", {"train.steps=99"});
  EXPECT_EQ(c.train.steps, 99);
}

TEST(ConfigOverrides, InvalidOverridesNameTheArgument) {
  EXPECT_EQ(error_of(kMinimal, {"train.lerning_rate=1"}),
            "--set train.lerning_rate=1: unknown key 'train.lerning_rate'; did you mean 'learning_rate' (alias of "
            "'lr')?");
  EXPECT_EQ(error_of(kMinimal, {"train.steps=abc"}), "--set train.steps=abc: train.steps must be an integer, got 'abc'");
  EXPECT_EQ(error_of(kMinimal, {"train.optimizer=lion"}),
            "--set train.optimizer=lion: train.optimizer: unknown value 'lion'; valid values: adamw8bit, adamw, sgd");
  EXPECT_EQ(error_of(kMinimal, {"train.steps"}), "--set train.steps: expected key.path=value");
  EXPECT_EQ(error_of(kMinimal, {"datasets.5.path=x"}), "--set datasets.5.path=x: datasets has 1 entries");
  EXPECT_EQ(error_of(kMinimal, {"train..lr=1"}), "--set train..lr=1: empty component in key 'train..lr'");
  EXPECT_THAT(error_of(kMinimal, {"network.target=[a, "}), StartsWith("--set network.target=[a, : the value is not valid YAML"));
  // A cross-key check broken by an override points at the override.
  EXPECT_EQ(error_of(kMinimal, {"network.type=lora"}),
            "--set network.type=lora: network.type lora trains an adapter on a base model: set model.name_or_path");
}

// ---- resolved YAML and hash ----

TEST(ConfigResolved, RoundTripOfNonDefaultValues) {
  TrainConfig c = parse(kMinimal);
  c.name = "we\"ird: name #1";
  c.device = "cuda:3";
  c.trigger_word = "yes";  // a YAML 1.1 boolean word must stay a string
  c.model.name_or_path = "/m/dit.safetensors";
  c.model.dtype = DType::BF16;
  c.model.options.set("in_channels", int64_t{16});
  c.model.options.set("patch_size", int64_t{1});
  c.model.options.set("hidden_size", int64_t{96});
  c.model.options.set("depth", int64_t{2});
  c.model.options.set("num_heads", int64_t{3});
  c.model.options.set("mlp_ratio", 2.5);
  c.model.options.set("text_dim", int64_t{77});
  c.network = {.type = NetworkType::Dora, .linear = 4, .linear_alpha = 0.1, .dropout = 0.3, .target = {"*", "a b"}};
  c.train.lr = 1.0 / 3.0;
  c.train.betas = {0.95, 0.99999};
  c.train.eps = 1e-30;
  c.train.mixed_precision = MixedPrecision::FP16;
  c.train.noise_scheduler = NoiseScheduler::Ddpm;
  c.train.timestep_sampling = TimestepSampling::Shift;
  c.train.timestep_shift = 3.0;
  c.train.logit_mean = -0.5;
  c.datasets.push_back({.path = "b.h5", .include_labels = {0, 3}, .exclude_labels = {4}, .caption_dropout = 0.25,
                        .weight = 2.0});
  c.save = {.every = 0, .keep_last = 0, .dtype = DType::F32, .format = LoraFormat::Peft};
  c.sample = {.every = 7, .prompts = {"", "null", "[trigger], a \"quoted\" prompt"}, .negative_prompt = "~",
              .steps = 3, .guidance = 1.0, .seed = 0, .n_per_class = 2, .sampler = SamplerKind::Ddim};
  c.distributed = {.backend = CommBackend::Mpi, .shard_optimizer = false, .bucket_mb = 1, .timeout_s = 5};
  expect_round_trip(c);
}

// A regularization dataset: listed first or second it is datasets[1] once parsed; the mix and the
// loss factor round-trip, and the keys act only with it.
TEST(Config, RegularizationDataset) {
  const std::string two = "name: run\ntrain:\n  batch_size: 8\n  reg_ratio: 0.25\n  prior_loss_weight: 0.5\n"
                          "datasets:\n  - path: f.h5\n    include_labels: [0, 1]\n    is_reg: true\n"
                          "  - path: f.h5\n    include_labels: [9]\n";
  TrainConfig c = parse(two);
  ASSERT_EQ(c.datasets.size(), 2u);
  EXPECT_FALSE(c.datasets[0].is_reg);
  EXPECT_EQ(c.datasets[0].include_labels, std::vector<int64_t>{9});
  EXPECT_TRUE(c.datasets[1].is_reg);
  EXPECT_EQ(reg_per_batch(c), 2);
  EXPECT_EQ(c.train.prior_loss_weight, 0.5);
  expect_round_trip(c);
  // kohya's default: half of every batch, loss weight 1; reg_weight is accepted for prior_loss_weight.
  TrainConfig half = parse(two, {"train.reg_ratio=0.5"});
  EXPECT_EQ(reg_per_batch(half), 4);
  EXPECT_EQ(parse("name: run\ntrain:\n  batch_size: 2\n  reg_weight: 3\ndatasets:\n  - path: f.h5\n  - path: f.h5\n"
                  "    is_reg: true\n").train.prior_loss_weight, 3.0);
  // Without a regularization dataset: nothing of it in the canonical text (existing hashes stay), and
  // its keys are refused.
  EXPECT_EQ(reg_per_batch(parse(kMinimal)), 0);
  EXPECT_EQ(to_yaml(parse(kMinimal)).find("reg"), std::string::npos);
  EXPECT_EQ(error_of(kMinimal + "train:\n  prior_loss_weight: 2\n"),
            "cfg.yaml:5:22: train.prior_loss_weight is set but no dataset is marked is_reg: true (regularization "
            "data); remove it or add the regularization dataset");
  EXPECT_NE(error_of(two, {"datasets.1.path=g.h5"}).find("wick reads both from one file"), std::string::npos);
  EXPECT_NE(error_of(two, {"train.reg_ratio=0.01"}).find("gives 0 regularization samples per batch"),
            std::string::npos);
  EXPECT_NE(error_of(two, {"train.reg_ratio=1"}).find("train.reg_ratio"), std::string::npos);
  EXPECT_NE(error_of(two, {"datasets.1.is_reg=true"}).find("more than one dataset is marked is_reg"),
            std::string::npos);
  EXPECT_NE(error_of(two, {"datasets.0.caption_dropout=0.2"}).find("caption_dropout and latent_sampling"),
            std::string::npos);
  // With train.global_batch_size the ratio is of the global batch: round(0.25 x 10) = 3 (2.5 rounds up).
  TrainConfig global = parse(two, {"train.global_batch_size=10"});
  EXPECT_EQ(reg_per_batch(global), 3);
  expect_round_trip(global);
  const std::string none = error_of(two, {"train.global_batch_size=1"});
  EXPECT_NE(none.find("train.reg_ratio 0.25 of train.global_batch_size 1 gives 0 regularization samples per global "
                      "batch"), std::string::npos) << none;
}

TEST(ConfigResolved, HashIsStableAndSensitive) {
  TrainConfig a = parse(kMinimal);
  TrainConfig b = parse("# the same config, other spelling\nname: run\ndatasets:\n  - folder_path: data/fashion.h5\n");
  EXPECT_EQ(config_hash(a), config_hash(b));
  EXPECT_EQ(config_hash(a).size(), 16u);
  EXPECT_EQ(config_hash(a).find_first_not_of("0123456789abcdef"), std::string::npos);
  TrainConfig c = parse(kMinimal, {"train.seed=43"});
  EXPECT_NE(config_hash(a), config_hash(c));
  // The hash is over the canonical text, which starts with the top-level keys in a fixed order.
  EXPECT_EQ(to_yaml(a).substr(0, 48), "name: \"run\"\noutput_dir: \"output\"\ndevice: \"auto\"\n");
}

// model.quantize (ai-toolkit's quantize: true is float8), train.blocks_to_swap and train.max_memory.
TEST(Config, QuantizeSwapAndMemoryBudget) {
  TrainConfig c = parse(kMinimal + "model:\n  quantize: true\n  quantize_scale: per_tensor\n"
                                   "train:\n  blocks_to_swap: 8\n  max_memory: 24GB\n");
  EXPECT_EQ(c.model.quantize, QuantizeMode::Float8);
  EXPECT_EQ(c.model.quantize_scale, QuantizeScale::PerTensor);
  EXPECT_EQ(c.train.blocks_to_swap, 8);
  EXPECT_EQ(c.train.max_memory, 24'000'000'000);
  expect_round_trip(c);
  EXPECT_EQ(parse(kMinimal + "model: {quantize: false}\n").model.quantize, QuantizeMode::None);
  EXPECT_EQ(parse(kMinimal + "model: {fp8_base: float8}\n").model.quantize, QuantizeMode::Float8);  // kohya's name
  TrainConfig defaults = parse(kMinimal);
  EXPECT_EQ(defaults.model.quantize, QuantizeMode::Auto);
  EXPECT_EQ(defaults.train.blocks_to_swap, -1);
  EXPECT_EQ(defaults.train.max_memory, 0);
  TrainConfig automatic = parse(kMinimal + "train: {blocks_to_swap: auto, gradient_checkpointing: auto, "
                                           "max_memory: 1.5GiB}\n");
  EXPECT_EQ(automatic.train.blocks_to_swap, -1);
  EXPECT_TRUE(automatic.train.gradient_checkpointing_auto);
  EXPECT_EQ(automatic.train.max_memory, 1'610'612'736);
  expect_round_trip(automatic);
  EXPECT_FALSE(parse(kMinimal + "train: {gradient_checkpointing: false}\n").train.gradient_checkpointing_auto);
  EXPECT_THAT(error_of(kMinimal + "model: {quantize: int4}\n"), AllOf(HasSubstr("int4"), HasSubstr("float8")));
  EXPECT_THAT(error_of(kMinimal + "train: {blocks_to_swap: -2}\n"), HasSubstr("train.blocks_to_swap"));
  EXPECT_THAT(error_of(kMinimal + "train: {max_memory: lots}\n"), HasSubstr("is not a size; write e.g. 24GB"));
  EXPECT_EQ(parse_byte_size("800 MB"), 800'000'000);
  EXPECT_EQ(parse_byte_size("1k"), 1000);
  EXPECT_EQ(parse_byte_size("2.5.1GB"), std::nullopt);
  EXPECT_EQ(parse_byte_size("GB"), std::nullopt);
}

// distributed.shard: none | optimizer | weights (the older shard_optimizer boolean still read); gradients is refused
// with what to use, and a contradicting shard_optimizer names both keys. The resolved config writes shard.
TEST(Config, DistributedShardLevels) {
  EXPECT_TRUE(parse(kMinimal).distributed.shard_optimizer);
  EXPECT_FALSE(parse(kMinimal).distributed.shard_weights);
  const TrainConfig weights = parse(kMinimal + "distributed:\n  shard: weights\n");
  EXPECT_TRUE(weights.distributed.shard_optimizer);
  EXPECT_TRUE(weights.distributed.shard_weights);
  EXPECT_THAT(to_yaml(weights), HasSubstr("shard: weights"));
  const TrainConfig none = parse(kMinimal, {"distributed.shard=none"});
  EXPECT_FALSE(none.distributed.shard_optimizer);
  EXPECT_FALSE(none.distributed.shard_weights);
  EXPECT_THAT(to_yaml(none), HasSubstr("shard: none"));
  EXPECT_FALSE(parse(kMinimal + "distributed:\n  shard_optimizer: false\n").distributed.shard_optimizer);
  EXPECT_EQ(parse(to_yaml(weights)).distributed, weights.distributed);
  EXPECT_THAT(error_of(kMinimal + "distributed:\n  shard: gradients\n"), HasSubstr("gradients (ZeRO-2) is not available yet"));
  EXPECT_THAT(error_of(kMinimal + "distributed:\n  shard: all\n"), HasSubstr("valid: none, optimizer, weights, auto"));
  const TrainConfig automatic = parse(kMinimal + "distributed:\n  shard: auto\n");
  EXPECT_TRUE(automatic.distributed.shard_auto);
  EXPECT_TRUE(automatic.distributed.shard_optimizer);
  EXPECT_FALSE(automatic.distributed.shard_weights);
  EXPECT_THAT(to_yaml(automatic), HasSubstr("shard: auto"));
  EXPECT_EQ(parse(to_yaml(automatic)).distributed, automatic.distributed);
  EXPECT_FALSE(weights.distributed.shard_within_node);
  EXPECT_THAT(to_yaml(weights), HasSubstr("shard_group: world"));
  const TrainConfig node = parse(kMinimal + "distributed:\n  shard: weights\n  shard_group: node\n");
  EXPECT_TRUE(node.distributed.shard_within_node);
  EXPECT_EQ(parse(to_yaml(node)).distributed, node.distributed);
  EXPECT_THAT(error_of(kMinimal + "distributed:\n  shard_group: rack\n"), HasSubstr("valid: world, node"));
  EXPECT_THAT(error_of(kMinimal + "distributed:\n  shard: weights\n  shard_optimizer: false\n"),
              HasSubstr("distributed.shard_optimizer: false contradicts distributed.shard: weights"));
}

}  // namespace
}  // namespace wick
