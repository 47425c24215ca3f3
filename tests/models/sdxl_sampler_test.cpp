// What only SDXL's sampler has (models/sdxl/sdxl_sampler.h, models/diffusion/euler_discrete.h):
// EulerDiscreteScheduler's schedule, the SDXL single file as the source of the VAE and encoders, the empty negative
// prompt rule (force_zeros_for_empty_prompt, from the pipeline's model_index.json) and the negative prompt from stored
// prompts. What every architecture's sampler shows (images vs diffusers' StableDiffusionXLPipeline, the pipeline
// folder, determinism, stored prompts, errors) is SDXL's row of arch_sampler_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "models/diffusion/euler_discrete.h"
#include "models/sdxl/sdxl_sampler.h"
#include "models/weights/weight_source.h"
#include "runtime/safetensors.h"
#include "tests/error_of.h"
#include "tests/models/arch_sampler.h"
#include "tests/models/arch_test_util.h"
#include "tests/models/weights_test_util.h"

namespace wick {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using wick::testing::data_path;
using wick::testing::error_of;
using wick::testing::max_abs_difference;
using wick::testing::sampler_arch;
using wick::testing::SamplerArch;
using wick::testing::SamplerOptions;
using wick::testing::scratch_dir;

const SafetensorsFile& sample_case() {
  static const SafetensorsFile file = SafetensorsFile::open(data_path("sdxl_sample/case.safetensors"));
  return file;
}

sdxl::SdxlImageSampler& as_sdxl(LatentImageSampler& sampler) { return dynamic_cast<sdxl::SdxlImageSampler&>(sampler); }

// ---- the schedule ----

TEST(SdxlSampler, EulerDiscreteScheduleIsDiffusersBitForBit) {
  // diffusers' scheduler.timesteps, .sigmas (float32) and init_noise_sigma after the pipeline's set_timesteps.
  for (const auto& [name, steps] : {std::pair{"cfg", 6}, std::pair{"plain", 4}}) {
    SCOPED_TRACE(name);
    const diffusion::EulerDiscreteSchedule s = diffusion::euler_discrete_schedule(steps);
    const std::vector<float> sigmas = sample_case().get(std::string(name) + ".sigmas").to_vector<float>();
    const std::vector<float> timesteps = sample_case().get(std::string(name) + ".timesteps").to_vector<float>();
    EXPECT_EQ(s.sigmas, sigmas);
    ASSERT_EQ(s.timesteps.size(), timesteps.size());
    for (size_t k = 0; k < timesteps.size(); ++k) EXPECT_EQ(static_cast<float>(s.timesteps[k]), timesteps[k]) << k;
    EXPECT_EQ(s.init_noise_sigma, sample_case().get(std::string(name) + ".init_noise_sigma").to_vector<float>()[0]);
  }
  // "leading" with steps_offset 1: 1000 // 30 = 33, so 958 .. 1; SDXL base's 30 steps never visit 999.
  const diffusion::EulerDiscreteSchedule s30 = diffusion::euler_discrete_schedule(30);
  EXPECT_EQ(s30.timesteps.front(), 958);
  EXPECT_EQ(s30.timesteps.back(), 1);
  EXPECT_EQ(s30.sigmas.back(), 0.0f);
  // σ at t = 999 is 14.6146 (the table's last value); 1000 steps with offset 1 reach t = 1000, past the table: np.interp
  // holds the last value.
  const diffusion::EulerDiscreteSchedule all = diffusion::euler_discrete_schedule(1000);
  EXPECT_EQ(all.timesteps.front(), 1000);
  EXPECT_NEAR(all.sigmas.front(), 14.6146, 1e-4);
  EXPECT_EQ(all.sigmas[0], all.sigmas[1]);
  EXPECT_THAT(error_of([] { diffusion::euler_discrete_schedule(0); }), HasSubstr("steps must be in [1, 1000]"));
  EXPECT_THAT(error_of([] { diffusion::euler_discrete_schedule(1001); }), HasSubstr("got 1001"));
}

// ---- where the parts are ----

// sd_xl_base_1.0.safetensors' layout: the UNet under model.diffusion_model., the VAE under first_stage_model., the
// encoders under conditioner.embedders.0.transformer. (CLIP-L) and .1.model. (bigG, open_clip's names). Only headers
// are read: the VAE file with its one UNet tensor, and one tensor for each encoder, stand for it.
TEST(SdxlSampler, SingleFileGivesTheVaeAndEncoders) {
  const SamplerArch& row = sampler_arch("sdxl");
  const fs::path single = scratch_dir("sdxl_sample_single_file") / "sd_xl_tiny.safetensors";
  {
    std::vector<std::pair<std::string, Tensor>> tensors;
    const WeightSource vae = WeightSource::open(data_path("vae/sdxl_tiny_ldm.safetensors"));
    for (const std::string& name : vae.names()) tensors.emplace_back(name, vae.get(name));
    tensors.emplace_back("conditioner.embedders.0.transformer.text_model.final_layer_norm.weight",
                         Tensor::from_vector<float>({1.0f}, {1}));
    tensors.emplace_back("conditioner.embedders.1.model.ln_final.weight", Tensor::from_vector<float>({1.0f}, {1}));
    save_safetensors(single.string(), tensors, {{"format", "pt"}});
  }
  const sdxl::SdxlSamplingFiles files = sdxl::sampling_files(row.model_config(single.string()));
  EXPECT_EQ(files.pipeline, "");
  EXPECT_EQ(files.vae, single.string());
  EXPECT_EQ(files.clip_l, single.string());
  EXPECT_EQ(files.clip_g, single.string());
}

// A pipeline's model_index.json may turn force_zeros_for_empty_prompt off; without a pipeline it is on (SDXL base's).
TEST(SdxlSampler, ModelIndexSetsTheEmptyNegativeRule) {
  const fs::path pipeline = scratch_dir("sdxl_sample_model_index") / "stable-diffusion-xl-tiny";
  fs::create_directories(pipeline);
  std::ofstream(pipeline / "model_index.json")
      << R"({"_class_name": "StableDiffusionXLPipeline", "force_zeros_for_empty_prompt": false})";
  EXPECT_FALSE(sdxl::pipeline_force_zeros(pipeline.string()));
  EXPECT_TRUE(sdxl::pipeline_force_zeros(""));
}

// ---- the negative prompt ----

// An empty negative prompt is zero embeddings (force_zeros_for_empty_prompt) or encoded like any prompt; another
// negative prompt changes the images; guidance 1 does not use it.
TEST(SdxlSampler, EmptyNegativeIsZeroedOrEncodedAndGuidanceOneIgnoresIt) {
  const SamplerArch& row = sampler_arch("sdxl");
  auto unet = row.load(data_path(row.model));
  ASSERT_TRUE(unet);
  SamplerOptions options{.files = row.tiny_files, .default_height = 24, .default_width = 16, .trigger_word = "sks"};
  auto sampler = row.make(options);
  EXPECT_TRUE(as_sdxl(*sampler).zeroes_negative());
  EXPECT_THAT(sampler->describe(), HasSubstr("zero embeddings"));
  const std::string prompt = "a photo of [trigger]";
  const SampleSettings settings{.steps = 3, .guidance = 5.0, .seed = 11};
  const Tensor first = sampler->generate(*unet, {prompt, "", prompt}, settings);
  // The empty negative encoded instead of zeroed, another negative prompt: other images.
  auto encoded = row.make({.files = row.tiny_files, .zeros_for_empty_negative = false, .default_height = 24,
                           .default_width = 16});
  EXPECT_FALSE(as_sdxl(*encoded).zeroes_negative());
  // Guidance 0 keeps the negative's prediction only: with zeros, every prompt gives the same image; with "" encoded,
  // the image of the prompt "" without guidance (only the negative is zeroed: a prompt "" is encoded).
  const SampleSettings unconditional{.steps = 2, .guidance = 0.0, .seed = 11};
  const Tensor zeroed_negative = sampler->generate(*unet, {"a red cube"}, unconditional);
  EXPECT_EQ(sampler->generate(*unet, {"a blue ball"}, unconditional).to_vector<float>(),
            zeroed_negative.to_vector<float>());
  const Tensor empty_prompt = sampler->generate(*unet, {""}, {.steps = 2, .guidance = 1.0, .seed = 11});
  EXPECT_GT(max_abs_difference(empty_prompt, zeroed_negative), 1e-3);
  EXPECT_LT(max_abs_difference(encoded->generate(*unet, {"a red cube"}, unconditional), empty_prompt), 1e-5);
  EXPECT_GT(max_abs_difference(encoded->generate(*unet, {prompt}, settings), first.narrow(0, 0, 1)), 1e-4);
  options.negative_prompt = "blurry [trigger]";
  auto negative = row.make(options);
  EXPECT_THAT(negative->describe(), HasSubstr("negative prompt \"blurry sks\""));
  EXPECT_GT(max_abs_difference(negative->generate(*unet, {prompt}, settings), first.narrow(0, 0, 1)), 1e-4);
  // Guidance 1 does not use the negative prompt.
  EXPECT_EQ(negative->generate(*unet, {prompt}, {.steps = 2, .guidance = 1.0, .seed = 11}).to_vector<float>(),
            sampler->generate(*unet, {prompt}, {.steps = 2, .guidance = 1.0, .seed = 11}).to_vector<float>());
}

// A stored negative prompt is used like an encoded one; the empty negative, when not zeroed, must be stored unless
// guidance is 1.
TEST(SdxlSampler, StoredPromptsHoldTheNegativePrompt) {
  const SamplerArch& row = sampler_arch("sdxl");
  auto unet = row.load(data_path(row.model));
  ASSERT_TRUE(unet);
  auto on_the_fly = row.make({.files = row.tiny_files, .default_height = 16, .default_width = 24});
  const std::vector<std::string> captions = {"a red cube", "ugly"};
  const SamplePrompts stored = wick::testing::stored_prompts(captions, row.encode(*on_the_fly, captions), DType::F32);
  const SampleSettings settings{.steps = 2, .guidance = 5.0, .seed = 5};
  const wick::testing::SamplerFiles vae_only = {{"vae_path", row.tiny_files.at("vae_path")}};
  auto stored_negative = row.make({.files = vae_only, .negative_prompt = "ugly", .default_height = 16,
                                   .default_width = 24, .stored_prompts = stored});
  auto encoded_negative =
      row.make({.files = row.tiny_files, .negative_prompt = "ugly", .default_height = 16, .default_width = 24});
  EXPECT_EQ(stored_negative->generate(*unet, {"a red cube"}, settings).to_vector<float>(),
            encoded_negative->generate(*unet, {"a red cube"}, settings).to_vector<float>());
  auto unzeroed = row.make({.files = vae_only, .zeros_for_empty_negative = false, .default_height = 16,
                            .default_width = 24, .stored_prompts = stored});
  EXPECT_THAT(error_of([&] { unzeroed->generate(*unet, {"a red cube"}, settings); }),
              HasSubstr("the negative prompt \"\" is not among the sample prompts stored"));
  EXPECT_EQ(unzeroed->generate(*unet, {"a red cube"}, {.steps = 1, .guidance = 1.0, .seed = 5}).shape(),
            (Shape{1, 3, 16, 24}));
}

}  // namespace
}  // namespace wick
