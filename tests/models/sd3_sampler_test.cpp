// SD3 / SD3.5 sample images (models/sd3/sd3_sampler.h): the shifted schedule, whole sampling runs against diffusers'
// StableDiffusion3Pipeline on tiny components, where the VAE and encoders are found (pipeline folder, SAI single
// file), stored prompts, determinism, and the errors.
//
// The parity fixture (tests/data/sd3_sample, written by tests/reference/make_sd3_sample_fixtures.py; its README lists
// every tensor) is diffusers 0.42.1's StableDiffusion3Pipeline run from given noise with a tiny random SD3.5-Medium-
// like transformer (attn2 in block 0, QK norm, context 48, pooled 48), the committed tiny CLIP-L (+ projection),
// bigG, T5, tokenizers and the 16-channel VAE with SD3's scaling and shift: guidance 4.5 with the empty negative prompt
// (6 steps), guidance 3.0 with a negative prompt (4 steps), guidance 1 (4 steps). Metric: max |wick - diffusers| /
// max |diffusers| over the final images in [0, 1].
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/sd3/sd3_architecture.h"
#include "models/sd3/sd3_sampler.h"
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
  static const SafetensorsFile file = SafetensorsFile::open(data("sd3_sample/case.safetensors"));
  return file;
}

std::vector<std::string> case_prompts() {
  return nlohmann::json::parse(sample_case().metadata().at("prompts")).get<std::vector<std::string>>();
}

double relative_to_max(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  if (got.shape() != want.shape()) return 1e9;
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double worst = 0, scale = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    worst = std::max(worst, std::fabs(g[i] - w[i]));
    scale = std::max(scale, std::fabs(w[i]));
  }
  return scale > 0 ? worst / scale : worst;
}

std::vector<std::pair<std::string, Tensor>> tensors_of(const std::string& path, const std::string& prefix = "") {
  WeightSource source = WeightSource::open(path);
  std::vector<std::pair<std::string, Tensor>> out;
  for (const std::string& name : source.names()) out.emplace_back(prefix + name, source.get(name));
  return out;
}

// SD3's CLIP-L (clip_l plus the committed text_projection) as one file, written once.
const std::string& sd3_clip_l() {
  static const std::string path = [] {
    const fs::path dir = scratch_dir("sd3_sampler_clip_l");
    auto tensors = tensors_of(data("clip_text/clip_l"));
    tensors.emplace_back("text_projection.weight", SafetensorsFile::open(data("prompts/sd3_clip_l_projection."
                                                                               "safetensors"))
                                                       .get("text_projection.weight"));
    save_safetensors((dir / "model.safetensors").string(), tensors, {{"format", "pt"}});
    fs::copy_file(data("clip_text/clip_l/config.json"), dir / "config.json", fs::copy_options::overwrite_existing);
    return (dir / "model.safetensors").string();
  }();
  return path;
}

// The committed tiny parts, as ComfyUI-style files (bigG's tokenizer: CLIP's vocabulary padded with "!").
sd3::Sd3SamplingFiles tiny_files() {
  return {.vae = data("vae/flux_tiny/vae"),
          .clip_l = sd3_clip_l(),
          .clip_g = data("clip_text/clip_g/model.safetensors"),
          .t5 = data("prompts/sd3_t5/model.safetensors"),
          .clip_tokenizer = data("clip_tokenizer/bpe_simple_vocab_16e6.txt.gz"),
          .t5_tokenizer = data("t5/spiece.model")};
}

const vae::LatentNormalization kSd3Vae{1.5305, 0.0609};

ModelConfig sd3_model_config(const std::string& path) {
  return {.arch = "sd3", .name_or_path = path, .options = ModelOptions::defaults(sd3_architecture().schema().keys)};
}

std::shared_ptr<sd3::MMDiT> load_sd3(const std::string& path) {
  ModelConfig model = sd3_model_config(path);
  auto built = sd3_architecture().build({.model = model, .dtype = DType::F32});
  return std::dynamic_pointer_cast<sd3::MMDiT>(built);
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

// ---- against diffusers ----

struct ParityCase {
  const char* name;
  int64_t steps;
  double guidance;
  const char* negative_prompt;
};

TEST(Sd3Sampler, ImagesMatchDiffusersStableDiffusion3Pipeline) {
  // Measured (f32, 2 cores of the development machine): see the printed lines and tests/data/sd3_sample/README.md.
  constexpr double kTolerance = 1e-4;
  auto model = load_sd3(data("sd3_sample/transformer"));
  ASSERT_TRUE(model);
  EXPECT_EQ(model->config().dual_attention_layers, std::vector<int64_t>{0});
  for (const ParityCase& c : {ParityCase{"cfg", 6, 4.5, ""}, ParityCase{"negative", 4, 3.0, "blurry, low quality"},
                              ParityCase{"plain", 4, 1.0, ""}}) {
    SCOPED_TRACE(c.name);
    sd3::Sd3ImageSampler sampler(
        {.files = tiny_files(), .t5_length = 256, .negative_prompt = c.negative_prompt, .normalization = kSd3Vae});
    Tensor images = sampler.generate_from_noise(*model, case_prompts(), sample_case().get("noise"),
                                                {.steps = c.steps, .guidance = c.guidance});
    const Tensor want = sample_case().get(std::string(c.name) + ".images");
    const double error = relative_to_max(images, want);
    std::printf("sd3 sampler vs diffusers StableDiffusion3Pipeline, %s (%lld steps, guidance %g, %zu images %lld x "
                "%lld): %.2e\n", c.name, static_cast<long long>(c.steps), c.guidance, case_prompts().size(),
                static_cast<long long>(want.size(3)), static_cast<long long>(want.size(2)), error);
    EXPECT_LE(error, kTolerance);
  }
  // The fixture is sensitive to what is tested: guidance and the negative prompt change the images.
  EXPECT_GT(relative_to_max(sample_case().get("cfg.images"), sample_case().get("plain.images")), 0.1);
}

// ---- where the parts are ----

TEST(Sd3Sampler, PipelineFolderAndSingleFileGiveTheDefaultsAndKeysWin) {
  const fs::path root = scratch_dir("sd3_sample_pipeline");
  const fs::path pipeline = root / "stable-diffusion-3.5-tiny";
  fs::create_directories(pipeline / "tokenizer_3");
  fs::create_directories(pipeline / "scheduler");
  fs::create_directories(pipeline / "text_encoder");
  fs::create_directory_symlink(fs::absolute(data("sd3_sample/transformer")), pipeline / "transformer");
  fs::create_directory_symlink(fs::absolute(data("vae/flux_tiny/vae")), pipeline / "vae");
  fs::copy_file(sd3_clip_l(), pipeline / "text_encoder" / "model.safetensors");
  fs::copy_file(data("clip_text/clip_l/config.json"), pipeline / "text_encoder" / "config.json");
  fs::create_directory_symlink(fs::absolute(data("clip_text/clip_g")), pipeline / "text_encoder_2");
  fs::create_directory_symlink(fs::absolute(data("prompts/sd3_t5")), pipeline / "text_encoder_3");
  // Files where tokenizer folders would be: load_clip_tokenizer reads them as open_clip's vocabulary.
  fs::create_symlink(fs::absolute(data("clip_tokenizer/bpe_simple_vocab_16e6.txt.gz")), pipeline / "tokenizer");
  fs::copy_file(data("t5/spiece.model"), pipeline / "tokenizer_3" / "spiece.model");
  std::ofstream(pipeline / "model_index.json") << R"({"_class_name": "StableDiffusion3Pipeline"})";
  std::ofstream(pipeline / "scheduler" / "scheduler_config.json")
      << R"({"_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000, "shift": 3.0})";

  ModelConfig model = sd3_model_config((pipeline / "transformer").string());
  sd3::Sd3SamplingFiles files = sd3::sampling_files(model);
  EXPECT_EQ(files.pipeline, pipeline.string());
  EXPECT_EQ(files.vae, (pipeline / "vae").string());
  EXPECT_EQ(files.clip_l, (pipeline / "text_encoder").string());
  EXPECT_EQ(files.clip_g, (pipeline / "text_encoder_2").string());
  EXPECT_EQ(files.t5, (pipeline / "text_encoder_3").string());
  EXPECT_EQ(files.clip_tokenizer, (pipeline / "tokenizer").string());
  EXPECT_EQ(files.clip_g_tokenizer, "");  // no tokenizer_2/: CLIP's vocabulary padded with "!"
  EXPECT_EQ(files.t5_tokenizer, (pipeline / "tokenizer_3").string());
  model.options.set("vae_path", std::string("my_vae.safetensors"));
  model.options.set("clip_g_path", std::string("clip_g.safetensors"));
  files = sd3::sampling_files(model);
  EXPECT_EQ(files.vae, "my_vae.safetensors");
  EXPECT_EQ(files.clip_g, "clip_g.safetensors");
  EXPECT_EQ(files.t5, (pipeline / "text_encoder_3").string());

  // SAI's single file: the MMDiT under model.diffusion_model., the VAE under first_stage_model., the encoders (as
  // sd3_medium_incl_clips_t5xxlfp16.safetensors carries them) under text_encoders.*.transformer.
  auto mmdit = load_sd3(pipeline.string());
  ASSERT_TRUE(mmdit);
  const fs::path single = root / "sd3.5_tiny_incl_clips.safetensors";
  {
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const auto& [name, tensor] : mmdit->named_parameters()) tensors.emplace_back("model.diffusion_model." + name,
                                                                                      tensor);
    for (auto& t : tensors_of(data("vae/flux_tiny_ae.safetensors"), "first_stage_model.")) tensors.push_back(t);
    for (auto& t : tensors_of(sd3_clip_l(), "text_encoders.clip_l.transformer.")) tensors.push_back(t);
    for (auto& t : tensors_of(data("clip_text/clip_g/model.safetensors"), "text_encoders.clip_g.transformer."))
      tensors.push_back(t);
    for (auto& t : tensors_of(data("prompts/sd3_t5/model.safetensors"), "text_encoders.t5xxl.transformer."))
      tensors.push_back(t);
    save_safetensors(single.string(), tensors, {{"format", "pt"}});
  }
  ModelConfig single_model = sd3_model_config(single.string());
  single_model.options.set("clip_tokenizer_path", data("clip_tokenizer/bpe_simple_vocab_16e6.txt.gz"));
  single_model.options.set("t5_tokenizer_path", data("t5/spiece.model"));
  files = sd3::sampling_files(single_model);
  EXPECT_EQ(files.pipeline, "");
  EXPECT_EQ(files.vae, single.string());
  EXPECT_EQ(files.clip_l, single.string());
  EXPECT_EQ(files.clip_g, single.string());
  EXPECT_EQ(files.t5, single.string());
  // A file without the VAE or encoders gives none of them.
  files = sd3::sampling_files(sd3_model_config(data("sd3/medium_sai.safetensors")));
  EXPECT_EQ(files.vae, "");
  EXPECT_EQ(files.clip_l, "");

  // The pipeline folder's parts and the files one by one make the same images. (The single file's parts are not run
  // here: without a config.json, the VAE's GroupNorm count (32) and CLIP's head width (64) are real models', which
  // these 8- and 16-wide parts do not split into.)
  model = sd3_model_config(pipeline.string());
  const SampleSettings settings{.steps = 2, .guidance = 4.5, .seed = 5};
  const std::vector<std::string> prompts = {"a red cube"};
  sd3::Sd3SamplerSetup setup{.t5_length = 16, .normalization = kSd3Vae, .default_height = 16, .default_width = 24};
  setup.files = sd3::sampling_files(model);
  const Tensor a = sd3::Sd3ImageSampler(setup).generate(*mmdit, prompts, settings);
  setup.files = tiny_files();
  const Tensor c = sd3::Sd3ImageSampler(setup).generate(*mmdit, prompts, settings);
  EXPECT_EQ(a.shape(), (Shape{1, 3, 16, 24}));
  EXPECT_EQ(a.to_vector<float>(), c.to_vector<float>());
}

// ---- calls ----

TEST(Sd3Sampler, ImagesAreDeterministicPerSeedAndTheModeIsRestored) {
  auto model = load_sd3(data("sd3_sample/transformer"));
  ASSERT_TRUE(model);
  model->train(true);
  sd3::Sd3ImageSampler sampler({.files = tiny_files(), .t5_length = 16, .normalization = kSd3Vae,
                                .default_height = 24, .default_width = 16, .trigger_word = "sks"});
  const std::vector<std::string> prompts = {"a photo of [trigger]", "", "a photo of [trigger]"};
  const SampleSettings settings{.steps = 3, .guidance = 4.5, .seed = 11};
  Tensor first = sampler.generate(*model, prompts, settings);
  EXPECT_TRUE(model->is_training());
  EXPECT_EQ(first.shape(), (Shape{3, 3, 24, 16}));
  EXPECT_EQ(first.dtype(), DType::F32);
  std::vector<float> pixels = first.to_vector<float>();
  EXPECT_GE(*std::min_element(pixels.begin(), pixels.end()), 0.0f);
  EXPECT_LE(*std::max_element(pixels.begin(), pixels.end()), 1.0f);
  EXPECT_GT(*std::max_element(pixels.begin(), pixels.end()) - *std::min_element(pixels.begin(), pixels.end()), 0.1f);
  EXPECT_EQ(sampler.generate(*model, prompts, settings).to_vector<float>(), pixels);  // bitwise
  // Images 0 and 2 share a prompt but not their noise (derive_stream(seed, i)).
  EXPECT_GT(relative_to_max(first.narrow(0, 0, 1), first.narrow(0, 2, 1)), 1e-3);
  // The trigger word is the prompt's: "a photo of sks" written out gives the same images (a call of as many images:
  // the matrix products' blocking depends on the batch).
  Tensor written = sampler.generate(*model, {"a photo of sks", "", "a photo of sks"}, settings);
  EXPECT_EQ(written.to_vector<float>(), pixels);
  // Another seed, another guidance, another negative prompt, another size.
  EXPECT_GT(relative_to_max(sampler.generate(*model, {prompts[0]}, {.steps = 3, .guidance = 4.5, .seed = 12}),
                            first.narrow(0, 0, 1)),
            1e-3);
  EXPECT_GT(relative_to_max(sampler.generate(*model, {prompts[0]}, {.steps = 3, .guidance = 1.0, .seed = 11}),
                            first.narrow(0, 0, 1)),
            1e-4);
  sd3::Sd3ImageSampler negative({.files = tiny_files(), .t5_length = 16, .negative_prompt = "blurry [trigger]",
                                 .normalization = kSd3Vae, .default_height = 24, .default_width = 16,
                                 .trigger_word = "sks"});
  EXPECT_GT(relative_to_max(negative.generate(*model, {prompts[0]}, settings), first.narrow(0, 0, 1)), 1e-4);
  EXPECT_THAT(negative.describe(), HasSubstr("negative prompt \"blurry sks\""));
  // Guidance 1 does not use the negative prompt (one forward, as diffusers).
  EXPECT_EQ(negative.generate(*model, {prompts[0]}, {.steps = 2, .guidance = 1.0, .seed = 11}).to_vector<float>(),
            sampler.generate(*model, {prompts[0]}, {.steps = 2, .guidance = 1.0, .seed = 11}).to_vector<float>());
  EXPECT_EQ(sampler.generate(*model, {prompts[0]}, {.steps = 1, .seed = 11, .width = 8, .height = 12}).shape(),
            (Shape{1, 3, 12, 8}));
  EXPECT_EQ(sampler.generate(*model, {}, settings).shape(), (Shape{0, 3, 24, 16}));
}

// ---- stored sample prompts ----

// The dataset's /sample_prompts in place of the encoders: the encoders' own output stored (f32) gives bitwise the
// images encoded on the fly, the negative prompt included; no encoder is opened; a prompt or a negative prompt that
// is not stored is an error naming it.
TEST(Sd3Sampler, StoredPromptsNeedNoEncodersAndMatchOnTheFly) {
  auto model = load_sd3(data("sd3_sample/transformer"));
  ASSERT_TRUE(model);
  const sd3::Sd3SamplingFiles files = tiny_files();
  sd3::Sd3ImageSampler on_the_fly({.files = files, .t5_length = 16, .normalization = kSd3Vae, .default_height = 16,
                                   .default_width = 24, .trigger_word = "sks"});
  const std::vector<std::string> captions = {"a red cube", "a photo of sks", ""};
  text::PromptEmbeddings e = sd3::encode_sd3_prompts(*on_the_fly.encoders(), captions, {.t5_length = 16});
  const SamplePrompts stored{.captions = captions, .embeds = e.context.to(DType::F32),
                             .pooled = e.pooled.to(DType::F32), .mask = e.mask.to(DType::U8)};
  const sd3::Sd3SamplingFiles vae_only{.vae = files.vae};
  sd3::Sd3ImageSampler exact({.files = vae_only, .t5_length = 16, .normalization = kSd3Vae, .default_height = 16,
                              .default_width = 24, .trigger_word = "sks", .stored_prompts = stored});
  EXPECT_EQ(exact.encoders(), nullptr);
  EXPECT_THAT(exact.describe(), AllOf(HasSubstr("the embeddings of the 3 sample prompts stored in the dataset"),
                                      HasSubstr("no text encoders"), HasSubstr("model.clip_g_path")));
  EXPECT_TRUE(exact.is_stored("a photo of [trigger]"));
  EXPECT_FALSE(exact.is_stored("a red cube."));

  const std::vector<std::string> prompts = {"a photo of [trigger]", "a red cube", "a photo of sks"};
  const SampleSettings settings{.steps = 3, .guidance = 4.5, .seed = 5};
  const Tensor want = on_the_fly.generate(*model, prompts, settings);
  EXPECT_EQ(exact.generate(*model, prompts, settings).to_vector<float>(), want.to_vector<float>());
  // Rounded to f16, as the dataset file keeps them: they differ by the rounding only.
  SamplePrompts rounded_rows = stored;
  rounded_rows.embeds = stored.embeds.to(DType::F16).to(DType::F32);
  rounded_rows.pooled = stored.pooled.to(DType::F16).to(DType::F32);
  sd3::Sd3ImageSampler rounded({.files = vae_only, .t5_length = 16, .normalization = kSd3Vae, .default_height = 16,
                                .default_width = 24, .trigger_word = "sks", .stored_prompts = rounded_rows});
  const double difference = relative_to_max(rounded.generate(*model, prompts, settings), want);
  std::printf("stored f16 sd3 sample prompts vs encoded on the fly: images differ by %.2e of the largest pixel\n",
              difference);
  EXPECT_GT(difference, 0.0);
  EXPECT_LT(difference, 1e-3);

  // Not stored, no encoders: the prompt, or the negative prompt, and the missing parts are named.
  EXPECT_THAT(error_of([&] { exact.generate(*model, {"a blue ball"}, settings); }),
              AllOf(HasSubstr("the prompt \"a blue ball\" is not among the sample prompts stored in the dataset "
                              "(\"a red cube\", \"a photo of sks\", \"\")"),
                    HasSubstr("model.clip_l_path"), HasSubstr("model.t5_tokenizer_path")));
  sd3::Sd3ImageSampler other_negative({.files = vae_only, .t5_length = 16, .negative_prompt = "ugly",
                                       .normalization = kSd3Vae, .default_height = 16, .default_width = 24,
                                       .stored_prompts = stored});
  EXPECT_THAT(error_of([&] { other_negative.generate(*model, {"a red cube"}, settings); }),
              HasSubstr("the negative prompt \"ugly\" is not among the sample prompts stored"));
  // Without guidance the negative prompt is not needed.
  EXPECT_EQ(other_negative.generate(*model, {"a red cube"}, {.steps = 2, .guidance = 1.0, .seed = 5}).shape(),
            (Shape{1, 3, 16, 24}));
}

TEST(Sd3Sampler, ErrorsNameTheProblem) {
  auto model = load_sd3(data("sd3_sample/transformer"));
  ASSERT_TRUE(model);
  sd3::Sd3ImageSampler sampler(
      {.files = tiny_files(), .t5_length = 8, .normalization = kSd3Vae, .default_height = 16, .default_width = 24});
  EXPECT_THAT(error_of([&] { sampler.generate(*model, {"x"}, {.steps = 1, .width = 26, .height = 16}); }),
              AllOf(HasSubstr("image size 26 x 16"), HasSubstr("multiples of 4 pixels"),
                    HasSubstr("the nearest are 28 x 16")));
  EXPECT_THAT(error_of([&] { sampler.generate(*model, {"x"}, {.steps = 0}); }), HasSubstr("steps must be >= 1"));
  // Larger than the model's 10 x 10 position table (latents 24 x 24: 12 x 12 patches).
  EXPECT_THAT(error_of([&] { sampler.generate(*model, {"x"}, {.steps = 1, .width = 48, .height = 48}); }),
              HasSubstr("position table of 10x10 patches"));
  // A model whose widths do not fit the encoders (tests/data/sd3 medium: context 32, pooled 64).
  auto other = load_sd3(data("sd3/medium_diffusers"));
  ASSERT_TRUE(other);
  EXPECT_THAT(error_of([&] { sampler.generate(*other, {"x"}, {.steps = 1}); }),
              AllOf(HasSubstr("32-wide text"), HasSubstr("sd3_t5"), HasSubstr("48 wide")));
  // Parts that are not given, or not what they should be.
  sd3::Sd3SamplingFiles no_clip_g = tiny_files();
  no_clip_g.clip_g = "";
  EXPECT_THAT(error_of([&] { sd3::Sd3ImageSampler bad({.files = no_clip_g}); }), HasSubstr("CLIP-G weights"));
  sd3::Sd3SamplingFiles no_vae = tiny_files();
  no_vae.vae = "";
  EXPECT_THAT(error_of([&] { sd3::Sd3ImageSampler bad({.files = no_vae}); }), HasSubstr("the VAE"));
  sd3::Sd3SamplingFiles swapped = tiny_files();
  swapped.vae = data("clip_text/clip_l/model.safetensors");
  EXPECT_THAT(error_of([&] { sd3::Sd3ImageSampler bad({.files = swapped}); }), HasSubstr("model.safetensors"));
  // ComfyUI's CLIP-L has no text_projection: diffusers' projected pooling cannot be made from it.
  sd3::Sd3SamplingFiles plain_clip_l = tiny_files();
  plain_clip_l.clip_l = data("clip_text/clip_l/model.safetensors");
  sd3::Sd3ImageSampler unprojectable({.files = plain_clip_l, .t5_length = 8, .normalization = kSd3Vae,
                                      .default_height = 16, .default_width = 24});
  EXPECT_THAT(error_of([&] { unprojectable.generate(*model, {"x"}, {.steps = 1}); }),
              AllOf(HasSubstr("has no text_projection.weight"), HasSubstr("--clip-l-pooled unprojected")));
  // Unprojected (SAI, ComfyUI) takes that file: CLIP-L's 16 + bigG's 32.
  sd3::Sd3ImageSampler unprojected({.files = plain_clip_l,
                                    .t5_length = 8,
                                    .clip_l_pooled = sd3::ClipLPooled::Unprojected,
                                    .normalization = kSd3Vae, .default_height = 16, .default_width = 24});
  EXPECT_EQ(unprojected.generate(*model, {"x"}, {.steps = 1}).shape(), (Shape{1, 3, 16, 24}));
}

}  // namespace
}  // namespace wick
