// SDXL sample images (models/sdxl/sdxl_sampler.h, models/diffusion/euler_discrete.h): EulerDiscreteScheduler's
// schedule, whole sampling runs against diffusers' StableDiffusionXLPipeline on tiny components, where the VAE and
// encoders are found (pipeline folder, SDXL single file), the empty negative prompt rule, stored prompts, determinism,
// and the errors.
//
// The parity fixture (tests/data/sdxl_sample, written by tests/reference/make_sdxl_sample_fixtures.py; its README
// lists every tensor) is diffusers 0.42.1's StableDiffusionXLPipeline run from given noise at 40 x 24 pixels with a
// tiny random SDXL-like UNet (2 levels, context 32, pooled 32, 8-wide size sinusoids), the committed tiny CLIP-L,
// bigG, tokenizers and 4-channel VAE, and SDXL base's EulerDiscreteScheduler: guidance 5 with no negative prompt
// (zero embeddings: force_zeros_for_empty_prompt), guidance 3 with a negative prompt, guidance 3 with an explicit ""
// (encoded), guidance 1, and guidance 3 with v-prediction. Metric: max |wick - diffusers| over the images in [0, 1].
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/diffusion/euler_discrete.h"
#include "models/sdxl/sdxl_architecture.h"
#include "models/sdxl/sdxl_sampler.h"
#include "models/weights/weight_source.h"
#include "runtime/safetensors.h"
#include "tests/error_of.h"
#include "tests/models/weights_test_util.h"
#include "tests/test_data.h"

namespace wick {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using wick::testing::error_of;
using wick::testing::scratch_dir;

std::string data(const std::string& name) { return wick::testing::test_data_dir() + "/" + name; }

const SafetensorsFile& sample_case() {
  static const SafetensorsFile file = SafetensorsFile::open(data("sdxl_sample/case.safetensors"));
  return file;
}

std::vector<std::string> case_prompts() {
  return nlohmann::json::parse(sample_case().metadata().at("prompts")).get<std::vector<std::string>>();
}

double max_abs_difference(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  if (got.shape() != want.shape()) return 1e9;
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::fabs(g[i] - w[i]));
  return worst;
}

// The committed tiny parts as files one by one (bigG's tokenizer: CLIP's vocabulary padded with "!").
sdxl::SdxlSamplingFiles tiny_files() {
  return {.vae = data("vae/sdxl_tiny/vae"),
          .clip_l = data("clip_text/clip_l/model.safetensors"),
          .clip_g = data("clip_text/clip_g/model.safetensors"),
          .clip_tokenizer = data("clip_tokenizer/bpe_simple_vocab_16e6.txt.gz")};
}

ModelConfig sdxl_model_config(const std::string& path) {
  return {.arch = "sdxl", .name_or_path = path, .options = ModelOptions::defaults(sdxl_architecture().schema().keys)};
}

std::shared_ptr<sdxl::Unet> load_unet(const std::string& path) {
  auto built = sdxl_architecture().build({.model = sdxl_model_config(path), .dtype = DType::F32});
  return std::dynamic_pointer_cast<sdxl::Unet>(built);
}

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

// ---- against diffusers ----

struct ParityCase {
  const char* name;
  int64_t steps;
  double guidance;
  const char* negative_prompt;
  bool zeros_for_empty_negative;
  bool v_prediction;
};

TEST(SdxlSampler, ImagesMatchDiffusersStableDiffusionXLPipeline) {
  // Measured (f32, 2 cores of the development machine): see the printed lines and tests/data/sdxl_sample/README.md.
  constexpr double kTolerance = 1e-5;
  auto unet = load_unet(data("sdxl_sample/unet"));
  ASSERT_TRUE(unet);
  EXPECT_EQ(unet->config().context_dim, 32);
  EXPECT_EQ(unet->config().pooled_dim(), 32);
  for (const ParityCase& c : {ParityCase{"cfg", 6, 5.0, "", true, false},
                              ParityCase{"negative", 4, 3.0, "blurry, low quality", true, false},
                              ParityCase{"encoded", 4, 3.0, "", false, false},
                              ParityCase{"plain", 4, 1.0, "", true, false},
                              ParityCase{"vpred", 4, 3.0, "", true, true}}) {
    SCOPED_TRACE(c.name);
    sdxl::SdxlImageSampler sampler({.files = tiny_files(),
                                    .negative_prompt = c.negative_prompt,
                                    .zeros_for_empty_negative = c.zeros_for_empty_negative,
                                    .v_prediction = c.v_prediction});
    Tensor images = sampler.generate_from_noise(*unet, case_prompts(), sample_case().get("noise"),
                                                {.steps = c.steps, .guidance = c.guidance});
    const Tensor want = sample_case().get(std::string(c.name) + ".images");
    const double error = max_abs_difference(images, want);
    std::printf("sdxl sampler vs diffusers StableDiffusionXLPipeline, %s (%lld steps, guidance %g, %zu images %lld x "
                "%lld): max abs %.2e\n", c.name, static_cast<long long>(c.steps), c.guidance, case_prompts().size(),
                static_cast<long long>(want.size(3)), static_cast<long long>(want.size(2)), error);
    EXPECT_LE(error, kTolerance);
  }
  // The fixture is sensitive to what is tested: the zeroed and the encoded empty negative prompt, guidance and the
  // prediction type each change the images.
  for (const char* other : {"encoded", "plain", "negative", "vpred"})
    EXPECT_GT(max_abs_difference(sample_case().get("cfg.images"), sample_case().get(std::string(other) + ".images")),
              0.05)
        << other;
  EXPECT_GT(max_abs_difference(sample_case().get("encoded.images"), sample_case().get("negative.images")), 0.01);
}

// ---- where the parts are ----

TEST(SdxlSampler, PipelineFolderAndSingleFileGiveTheDefaultsAndKeysWin) {
  const fs::path root = scratch_dir("sdxl_sample_pipeline");
  const fs::path pipeline = root / "stable-diffusion-xl-tiny";
  fs::create_directories(pipeline);
  fs::create_directory_symlink(fs::absolute(data("sdxl_sample/unet")), pipeline / "unet");
  fs::create_directory_symlink(fs::absolute(data("vae/sdxl_tiny/vae")), pipeline / "vae");
  fs::create_directory_symlink(fs::absolute(data("clip_text/clip_l")), pipeline / "text_encoder");
  fs::create_directory_symlink(fs::absolute(data("clip_text/clip_g")), pipeline / "text_encoder_2");
  // A file where the tokenizer folder would be: load_clip_tokenizer reads it as open_clip's vocabulary.
  fs::create_symlink(fs::absolute(data("clip_tokenizer/bpe_simple_vocab_16e6.txt.gz")), pipeline / "tokenizer");
  std::ofstream(pipeline / "model_index.json")
      << R"({"_class_name": "StableDiffusionXLPipeline", "force_zeros_for_empty_prompt": false})";

  ModelConfig model = sdxl_model_config((pipeline / "unet").string());
  sdxl::SdxlSamplingFiles files = sdxl::sampling_files(model);
  EXPECT_EQ(files.pipeline, pipeline.string());
  EXPECT_EQ(files.vae, (pipeline / "vae").string());
  EXPECT_EQ(files.clip_l, (pipeline / "text_encoder").string());
  EXPECT_EQ(files.clip_g, (pipeline / "text_encoder_2").string());
  EXPECT_EQ(files.clip_tokenizer, (pipeline / "tokenizer").string());
  EXPECT_EQ(files.clip_g_tokenizer, "");  // no tokenizer_2/: CLIP's vocabulary padded with "!"
  EXPECT_FALSE(sdxl::pipeline_force_zeros(files.pipeline));
  EXPECT_TRUE(sdxl::pipeline_force_zeros(""));
  model.options.set("vae_path", std::string("my_vae.safetensors"));
  model.options.set("clip_g_path", std::string("clip_g.safetensors"));
  files = sdxl::sampling_files(model);
  EXPECT_EQ(files.vae, "my_vae.safetensors");
  EXPECT_EQ(files.clip_g, "clip_g.safetensors");
  EXPECT_EQ(files.clip_l, (pipeline / "text_encoder").string());

  // sd_xl_base_1.0.safetensors' layout: the UNet under model.diffusion_model., the VAE under first_stage_model., the
  // encoders under conditioner.embedders.0.transformer. (CLIP-L) and .1.model. (bigG, open_clip's names). Only headers
  // are read: the VAE file with its one UNet tensor, and one tensor for each encoder, stand for it.
  const fs::path single = root / "sd_xl_tiny.safetensors";
  {
    std::vector<std::pair<std::string, Tensor>> tensors;
    const WeightSource vae = WeightSource::open(data("vae/sdxl_tiny_ldm.safetensors"));
    for (const std::string& name : vae.names()) tensors.emplace_back(name, vae.get(name));
    tensors.emplace_back("conditioner.embedders.0.transformer.text_model.final_layer_norm.weight",
                         Tensor::from_vector<float>({1.0f}, {1}));
    tensors.emplace_back("conditioner.embedders.1.model.ln_final.weight", Tensor::from_vector<float>({1.0f}, {1}));
    save_safetensors(single.string(), tensors, {{"format", "pt"}});
  }
  files = sdxl::sampling_files(sdxl_model_config(single.string()));
  EXPECT_EQ(files.pipeline, "");
  EXPECT_EQ(files.vae, single.string());
  EXPECT_EQ(files.clip_l, single.string());
  EXPECT_EQ(files.clip_g, single.string());
  // A file without the VAE or encoders gives none of them.
  files = sdxl::sampling_files(sdxl_model_config(data("sdxl_sample/unet/diffusion_pytorch_model.safetensors")));
  EXPECT_EQ(files.vae, "");
  EXPECT_EQ(files.clip_l, "");

  // The pipeline folder's parts and the files one by one make the same images.
  auto unet = load_unet(pipeline.string());
  ASSERT_TRUE(unet);
  const SampleSettings settings{.steps = 2, .guidance = 5.0, .seed = 5};
  sdxl::SdxlSamplerSetup setup{.default_height = 16, .default_width = 24};
  setup.files = sdxl::sampling_files(sdxl_model_config(pipeline.string()));
  const Tensor a = sdxl::SdxlImageSampler(setup).generate(*unet, {"a red cube"}, settings);
  setup.files = tiny_files();
  const Tensor b = sdxl::SdxlImageSampler(setup).generate(*unet, {"a red cube"}, settings);
  EXPECT_EQ(a.shape(), (Shape{1, 3, 16, 24}));
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
}

// ---- calls ----

TEST(SdxlSampler, ImagesAreDeterministicPerSeedAndTheNegativeRuleHolds) {
  auto unet = load_unet(data("sdxl_sample/unet"));
  ASSERT_TRUE(unet);
  unet->train(true);
  sdxl::SdxlImageSampler sampler(
      {.files = tiny_files(), .default_height = 24, .default_width = 16, .trigger_word = "sks"});
  EXPECT_TRUE(sampler.zeroes_negative());
  EXPECT_THAT(sampler.describe(), HasSubstr("zero embeddings"));
  const std::vector<std::string> prompts = {"a photo of [trigger]", "", "a photo of [trigger]"};
  const SampleSettings settings{.steps = 3, .guidance = 5.0, .seed = 11};
  Tensor first = sampler.generate(*unet, prompts, settings);
  EXPECT_TRUE(unet->is_training());
  EXPECT_EQ(first.shape(), (Shape{3, 3, 24, 16}));
  std::vector<float> pixels = first.to_vector<float>();
  EXPECT_GE(*std::min_element(pixels.begin(), pixels.end()), 0.0f);
  EXPECT_LE(*std::max_element(pixels.begin(), pixels.end()), 1.0f);
  EXPECT_EQ(sampler.generate(*unet, prompts, settings).to_vector<float>(), pixels);  // bitwise
  // Images 0 and 2 share a prompt but not their noise.
  EXPECT_GT(max_abs_difference(first.narrow(0, 0, 1), first.narrow(0, 2, 1)), 1e-3);
  EXPECT_EQ(sampler.generate(*unet, {"a photo of sks", "", "a photo of sks"}, settings).to_vector<float>(), pixels);
  // The empty negative encoded instead of zeroed, another negative prompt: other images.
  sdxl::SdxlImageSampler encoded({.files = tiny_files(), .zeros_for_empty_negative = false, .default_height = 24,
                                  .default_width = 16});
  EXPECT_FALSE(encoded.zeroes_negative());
  // Guidance 0 keeps the negative's prediction only: with zeros, every prompt gives the same image; with "" encoded,
  // the image of the prompt "" without guidance (only the negative is zeroed: a prompt "" is encoded).
  const SampleSettings unconditional{.steps = 2, .guidance = 0.0, .seed = 11};
  const Tensor zeroed_negative = sampler.generate(*unet, {"a red cube"}, unconditional);
  EXPECT_EQ(sampler.generate(*unet, {"a blue ball"}, unconditional).to_vector<float>(),
            zeroed_negative.to_vector<float>());
  const Tensor empty_prompt = sampler.generate(*unet, {""}, {.steps = 2, .guidance = 1.0, .seed = 11});
  EXPECT_GT(max_abs_difference(empty_prompt, zeroed_negative), 1e-3);
  EXPECT_LT(max_abs_difference(encoded.generate(*unet, {"a red cube"}, unconditional), empty_prompt), 1e-5);
  EXPECT_GT(max_abs_difference(encoded.generate(*unet, {prompts[0]}, settings), first.narrow(0, 0, 1)), 1e-4);
  sdxl::SdxlImageSampler negative({.files = tiny_files(), .negative_prompt = "blurry [trigger]", .default_height = 24,
                                   .default_width = 16, .trigger_word = "sks"});
  EXPECT_THAT(negative.describe(), HasSubstr("negative prompt \"blurry sks\""));
  EXPECT_GT(max_abs_difference(negative.generate(*unet, {prompts[0]}, settings), first.narrow(0, 0, 1)), 1e-4);
  // Guidance 1 does not use the negative prompt.
  EXPECT_EQ(negative.generate(*unet, {prompts[0]}, {.steps = 2, .guidance = 1.0, .seed = 11}).to_vector<float>(),
            sampler.generate(*unet, {prompts[0]}, {.steps = 2, .guidance = 1.0, .seed = 11}).to_vector<float>());
  // Another size (non-square), and no prompts.
  EXPECT_EQ(sampler.generate(*unet, {prompts[0]}, {.steps = 1, .seed = 11, .width = 40, .height = 8}).shape(),
            (Shape{1, 3, 8, 40}));
  EXPECT_EQ(sampler.generate(*unet, {}, settings).shape(), (Shape{0, 3, 24, 16}));
}

// ---- stored sample prompts ----

TEST(SdxlSampler, StoredPromptsNeedNoEncodersAndMatchOnTheFly) {
  auto unet = load_unet(data("sdxl_sample/unet"));
  ASSERT_TRUE(unet);
  const sdxl::SdxlSamplingFiles files = tiny_files();
  sdxl::SdxlImageSampler on_the_fly({.files = files, .default_height = 16, .default_width = 24});
  const std::vector<std::string> captions = {"a red cube", "ugly"};
  text::PromptEmbeddings e = sdxl::encode_sdxl_prompts(*on_the_fly.encoders(), captions);
  const SamplePrompts stored{.captions = captions, .embeds = e.context.to(DType::F32),
                             .pooled = e.pooled.to(DType::F32), .mask = e.mask.to(DType::U8)};
  const sdxl::SdxlSamplingFiles vae_only{.vae = files.vae};
  sdxl::SdxlImageSampler exact({.files = vae_only, .default_height = 16, .default_width = 24, .stored_prompts = stored});
  EXPECT_EQ(exact.encoders(), nullptr);
  EXPECT_THAT(exact.describe(), AllOf(HasSubstr("the embeddings of the 2 sample prompts stored in the dataset"),
                                      HasSubstr("no text encoders"), HasSubstr("model.clip_g_path")));
  // The zeroed empty negative needs no stored row.
  const SampleSettings settings{.steps = 2, .guidance = 5.0, .seed = 5};
  EXPECT_EQ(exact.generate(*unet, {"a red cube"}, settings).to_vector<float>(),
            on_the_fly.generate(*unet, {"a red cube"}, settings).to_vector<float>());
  // A stored negative prompt.
  sdxl::SdxlImageSampler stored_negative({.files = vae_only, .negative_prompt = "ugly", .default_height = 16,
                                          .default_width = 24, .stored_prompts = stored});
  sdxl::SdxlImageSampler encoded_negative(
      {.files = files, .negative_prompt = "ugly", .default_height = 16, .default_width = 24});
  EXPECT_EQ(stored_negative.generate(*unet, {"a red cube"}, settings).to_vector<float>(),
            encoded_negative.generate(*unet, {"a red cube"}, settings).to_vector<float>());
  // Not stored, no encoders: the prompt or the negative prompt and the missing parts are named.
  EXPECT_THAT(error_of([&] { exact.generate(*unet, {"a blue ball"}, settings); }),
              AllOf(HasSubstr("the prompt \"a blue ball\" is not among the sample prompts stored in the dataset "
                              "(\"a red cube\", \"ugly\")"),
                    HasSubstr("model.clip_l_path"), HasSubstr("model.clip_tokenizer_path")));
  sdxl::SdxlImageSampler unzeroed({.files = vae_only, .zeros_for_empty_negative = false, .default_height = 16,
                                   .default_width = 24, .stored_prompts = stored});
  EXPECT_THAT(error_of([&] { unzeroed.generate(*unet, {"a red cube"}, settings); }),
              HasSubstr("the negative prompt \"\" is not among the sample prompts stored"));
  EXPECT_EQ(unzeroed.generate(*unet, {"a red cube"}, {.steps = 1, .guidance = 1.0, .seed = 5}).shape(),
            (Shape{1, 3, 16, 24}));
}

TEST(SdxlSampler, ErrorsNameTheProblem) {
  auto unet = load_unet(data("sdxl_sample/unet"));
  ASSERT_TRUE(unet);
  sdxl::SdxlImageSampler sampler({.files = tiny_files(), .default_height = 16, .default_width = 24});
  // The x4 VAE times the 2-level UNet's 2: multiples of 8 pixels.
  EXPECT_THAT(error_of([&] { sampler.generate(*unet, {"x"}, {.steps = 1, .width = 28, .height = 16}); }),
              AllOf(HasSubstr("image size 28 x 16"), HasSubstr("multiples of 8 pixels"),
                    HasSubstr("the nearest are 32 x 16")));
  EXPECT_THAT(error_of([&] { sampler.generate(*unet, {"x"}, {.steps = 0}); }), HasSubstr("steps must be"));
  // A UNet whose widths do not fit the encoders (tests/data/sdxl: pooled 16).
  auto other = load_unet(data("sdxl/tiny_diffusers"));
  ASSERT_TRUE(other);
  EXPECT_THAT(error_of([&] { sampler.generate(*other, {"x"}, {.steps = 1, .width = 32, .height = 16}); }),
              AllOf(HasSubstr("16-wide pooled vector"), HasSubstr("pools to 32")));
  sdxl::SdxlSamplingFiles no_vae = tiny_files();
  no_vae.vae = "";
  EXPECT_THAT(error_of([&] { sdxl::SdxlImageSampler bad({.files = no_vae}); }), HasSubstr("the VAE"));
  sdxl::SdxlSamplingFiles no_clip_g = tiny_files();
  no_clip_g.clip_g = "";
  EXPECT_THAT(error_of([&] { sdxl::SdxlImageSampler bad({.files = no_clip_g}); }), HasSubstr("CLIP-G weights"));
}

}  // namespace
}  // namespace wick
