// What only SD3's sampler has (models/sd3/sd3_sampler.h): the shifted schedule, SAI's single file as the source of
// the VAE and encoders, the negative prompt (used only with guidance, stored like any prompt), the position table's
// limit and CLIP-L's projected or unprojected pooling. What every architecture's sampler shows (images vs diffusers'
// StableDiffusion3Pipeline, the pipeline folder, determinism, stored prompts, errors) is SD3's row of
// arch_sampler_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "models/sd3/sd3_sampler.h"
#include "models/weights/weight_source.h"
#include "runtime/safetensors.h"
#include "tests/error_of.h"
#include "tests/models/arch_sampler.h"
#include "tests/models/arch_test_util.h"
#include "tests/models/weights_test_util.h"

namespace wick {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using wick::testing::data_path;
using wick::testing::error_of;
using wick::testing::relative_to_max;
using wick::testing::sampler_arch;
using wick::testing::SamplerArch;
using wick::testing::SamplerOptions;
using wick::testing::scratch_dir;

std::vector<std::pair<std::string, Tensor>> tensors_of(const std::string& path, const std::string& prefix = "") {
  WeightSource source = WeightSource::open(path);
  std::vector<std::pair<std::string, Tensor>> out;
  for (const std::string& name : source.names()) out.emplace_back(prefix + name, source.get(name));
  return out;
}

const SafetensorsFile& sample_case() {
  static const SafetensorsFile file = SafetensorsFile::open(data_path("sd3_sample/case.safetensors"));
  return file;
}

// ---- the schedule ----

TEST(Sd3Sampler, SigmasAreFlowMatchEulerDiscreteSchedulersWithShift3) {
  // diffusers' scheduler.sigmas after the pipeline's set_timesteps (float32), as the fixture recorded them.
  for (const auto& [name, steps] : {std::pair{"cfg", 6}, std::pair{"plain", 4}}) {
    const std::vector<double> want = sample_case().get(std::string(name) + ".sigmas").to_vector<double>();
    const std::vector<double> got = sd3::sd3_sigmas(steps, 3.0);
    ASSERT_EQ(got.size(), want.size()) << name;
    for (size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-7) << name << " " << k;
  }
  // SAI's sd3_infer.py get_sigmas(ModelSamplingDiscreteFlow(shift=3.0), 28) at fbf8f48 (f32 values as tolist() gives
  // them), run by exec-ing those two definitions out of sd3_impls.py and sd3_infer.py: the same schedule.
  const std::vector<double> sai28 = {
      1.0, 0.9873806834220886, 0.9741077423095703, 0.9601292610168457, 0.9453874230384827, 0.9298179745674133,
      0.913348913192749, 0.8959002494812012, 0.8773819208145142, 0.8576923608779907, 0.8367166519165039,
      0.8143247365951538, 0.790368378162384, 0.7646770477294922, 0.7370558977127075, 0.7072784900665283,
      0.6750823855400085, 0.6401601433753967, 0.602150559425354, 0.5606250166893005, 0.5150721073150635,
      0.4648760259151459, 0.40928882360458374, 0.34739264845848083, 0.2780487835407257, 0.19982700049877167,
      0.1109057292342186, 0.008928571827709675, 0.0};
  const std::vector<double> wick28 = sd3::sd3_sigmas(28, 3.0);
  ASSERT_EQ(wick28.size(), sai28.size());
  for (size_t k = 0; k < sai28.size(); ++k) EXPECT_NEAR(wick28[k], sai28[k], 1e-6) << "SAI, step " << k;
  // Not linspace(1, 0, steps + 1) shifted: the last σ before 0 is shift(shift(1/1000)) for every step count.
  const std::vector<double> s28 = sd3::sd3_sigmas(28, 3.0);
  ASSERT_EQ(s28.size(), 29u);
  EXPECT_EQ(s28.front(), 1.0);
  EXPECT_NEAR(s28[27], 0.0089286, 1e-6);
  EXPECT_EQ(s28.back(), 0.0);
  // Shift 1 is diffusers' unshifted schedule: linspace(1, 1/1000, steps).
  const std::vector<double> s1 = sd3::sd3_sigmas(4, 1.0);
  EXPECT_NEAR(s1[1], 1.0 - 0.999 / 3, 1e-7);
  EXPECT_NEAR(s1[3], 0.001, 1e-7);
  EXPECT_THAT(error_of([] { sd3::sd3_sigmas(0, 3.0); }), HasSubstr("steps must be >= 1"));
}

// ---- where the parts are ----

// SAI's single file: the MMDiT under model.diffusion_model., the VAE under first_stage_model., the encoders (as
// sd3_medium_incl_clips_t5xxlfp16.safetensors carries them) under text_encoders.*.transformer. (Its parts are not
// run here: without a config.json, the VAE's GroupNorm count (32) and CLIP's head width (64) are real models', which
// these 8- and 16-wide parts do not split into.)
TEST(Sd3Sampler, SingleFileGivesTheVaeAndEncoders) {
  const SamplerArch& row = sampler_arch("sd3");
  auto mmdit = row.load(data_path(row.model));
  ASSERT_TRUE(mmdit);
  const fs::path single = scratch_dir("sd3_sample_single_file") / "sd3.5_tiny_incl_clips.safetensors";
  {
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const auto& [name, tensor] : mmdit->named_parameters()) tensors.emplace_back("model.diffusion_model." + name,
                                                                                      tensor);
    for (auto& t : tensors_of(data_path("vae/flux_tiny_ae.safetensors"), "first_stage_model.")) tensors.push_back(t);
    for (auto& t : tensors_of(row.tiny_files.at("clip_l_path"), "text_encoders.clip_l.transformer."))
      tensors.push_back(t);
    for (auto& t : tensors_of(data_path("clip_text/clip_g/model.safetensors"), "text_encoders.clip_g.transformer."))
      tensors.push_back(t);
    for (auto& t : tensors_of(data_path("prompts/sd3_t5/model.safetensors"), "text_encoders.t5xxl.transformer."))
      tensors.push_back(t);
    save_safetensors(single.string(), tensors, {{"format", "pt"}});
  }
  ModelConfig single_model = row.model_config(single.string());
  single_model.options.set("clip_tokenizer_path", data_path("clip_tokenizer/bpe_simple_vocab_16e6.txt.gz"));
  single_model.options.set("t5_tokenizer_path", data_path("t5/spiece.model"));
  const sd3::Sd3SamplingFiles files = sd3::sampling_files(single_model);
  EXPECT_EQ(files.pipeline, "");
  EXPECT_EQ(files.vae, single.string());
  EXPECT_EQ(files.clip_l, single.string());
  EXPECT_EQ(files.clip_g, single.string());
  EXPECT_EQ(files.t5, single.string());
}

// ---- the negative prompt ----

TEST(Sd3Sampler, NegativePromptChangesTheImagesOnlyWithGuidance) {
  const SamplerArch& row = sampler_arch("sd3");
  auto model = row.load(data_path(row.model));
  ASSERT_TRUE(model);
  SamplerOptions options{.files = row.tiny_files, .t5_length = 16, .default_height = 24, .default_width = 16,
                         .trigger_word = "sks"};
  auto sampler = row.make(options);
  options.negative_prompt = "blurry [trigger]";
  auto negative = row.make(options);
  const SampleSettings settings{.steps = 3, .guidance = 4.5, .seed = 11};
  const std::string prompt = "a photo of [trigger]";
  const Tensor first = sampler->generate(*model, {prompt, "", prompt}, settings);
  EXPECT_GT(relative_to_max(negative->generate(*model, {prompt}, settings), first.narrow(0, 0, 1)), 1e-4);
  EXPECT_THAT(negative->describe(), HasSubstr("negative prompt \"blurry sks\""));
  // Guidance 1 does not use the negative prompt (one forward, as diffusers).
  EXPECT_EQ(negative->generate(*model, {prompt}, {.steps = 2, .guidance = 1.0, .seed = 11}).to_vector<float>(),
            sampler->generate(*model, {prompt}, {.steps = 2, .guidance = 1.0, .seed = 11}).to_vector<float>());
}

// The negative prompt comes from the stored prompts like any prompt: one that is not stored is an error naming it,
// unless guidance is 1 (then it is not needed).
TEST(Sd3Sampler, StoredPromptsHoldTheNegativePrompt) {
  const SamplerArch& row = sampler_arch("sd3");
  auto model = row.load(data_path(row.model));
  ASSERT_TRUE(model);
  SamplerOptions options{.files = row.tiny_files, .t5_length = 16, .default_height = 16, .default_width = 24};
  auto on_the_fly = row.make(options);
  const std::vector<std::string> captions = {"a red cube", "a photo of sks", ""};
  const text::PromptEmbeddings e = row.encode(*on_the_fly, captions);
  options.files = {{"vae_path", row.tiny_files.at("vae_path")}};
  options.stored_prompts = wick::testing::stored_prompts(captions, e, DType::F32);
  options.negative_prompt = "ugly";
  auto other_negative = row.make(options);
  const SampleSettings settings{.steps = 3, .guidance = 4.5, .seed = 5};
  EXPECT_THAT(error_of([&] { other_negative->generate(*model, {"a red cube"}, settings); }),
              HasSubstr("the negative prompt \"ugly\" is not among the sample prompts stored"));
  EXPECT_EQ(other_negative->generate(*model, {"a red cube"}, {.steps = 2, .guidance = 1.0, .seed = 5}).shape(),
            (Shape{1, 3, 16, 24}));
}

// ---- errors ----

TEST(Sd3Sampler, PositionTableAndClipLProjectionErrors) {
  const SamplerArch& row = sampler_arch("sd3");
  auto model = row.load(data_path(row.model));
  ASSERT_TRUE(model);
  auto sampler = row.make({.files = row.tiny_files, .t5_length = 8, .default_height = 16, .default_width = 24});
  // Larger than the model's 10 x 10 position table (latents 24 x 24: 12 x 12 patches).
  EXPECT_THAT(error_of([&] { sampler->generate(*model, {"x"}, {.steps = 1, .width = 48, .height = 48}); }),
              HasSubstr("position table of 10x10 patches"));
  // ComfyUI's CLIP-L has no text_projection: diffusers' projected pooling cannot be made from it.
  SamplerOptions plain_clip_l{.files = row.tiny_files, .t5_length = 8, .default_height = 16, .default_width = 24};
  plain_clip_l.files["clip_l_path"] = data_path("clip_text/clip_l/model.safetensors");
  auto unprojectable = row.make(plain_clip_l);
  EXPECT_THAT(error_of([&] { unprojectable->generate(*model, {"x"}, {.steps = 1}); }),
              AllOf(HasSubstr("has no text_projection.weight"), HasSubstr("--clip-l-pooled unprojected")));
  // Unprojected (SAI, ComfyUI) takes that file: CLIP-L's 16 + bigG's 32.
  plain_clip_l.unprojected_clip_l = true;
  EXPECT_EQ(row.make(plain_clip_l)->generate(*model, {"x"}, {.steps = 1}).shape(), (Shape{1, 3, 16, 24}));
}

}  // namespace
}  // namespace wick
