// Flux sample images (models/flux/flux_sampler.h): BFL's sigma schedule, a whole sampling run against diffusers'
// FluxPipeline on tiny components, where the VAE and encoders are found, determinism, and the errors.
//
// The parity fixture (tests/data/flux_sample, written by tests/reference/make_flux_sample_fixtures.py; its README
// lists every tensor) is diffusers 0.42.1's FluxPipeline run from given noise with a tiny random transformer
// (img_in 64, txt_in 32, vector_in 16) and the committed tiny CLIP-L, T5, tokenizers and VAE: dev (6 steps,
// guidance 3.5, T5 512) and schnell (4 unshifted steps, T5 256). Metric: max |wick - diffusers| / max |diffusers|
// over the final images in [0, 1].
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/flux/flux_architecture.h"
#include "models/flux/flux_sampler.h"
#include "models/text/stored_prompts.h"
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
  static const SafetensorsFile file = SafetensorsFile::open(data("flux_sample/case.safetensors"));
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

// The committed tiny parts, as ComfyUI-style files.
flux::FluxSamplingFiles tiny_files() {
  return {.vae = data("vae/flux_tiny/vae"),
          .clip_l = data("clip_text/clip_l/model.safetensors"),
          .t5 = data("t5/t5xxl_comfy.safetensors"),
          .clip_tokenizer = data("clip_tokenizer/bpe_simple_vocab_16e6.txt.gz"),
          .t5_tokenizer = data("t5/spiece.model")};
}

std::shared_ptr<flux::FluxTransformer> load_flux(const std::string& path) {
  ModelConfig model{.arch = "flux", .name_or_path = path,
                    .options = ModelOptions::defaults(flux_architecture().schema().keys)};
  auto built = flux_architecture().build({.model = model, .dtype = DType::F32});
  return std::dynamic_pointer_cast<flux::FluxTransformer>(built);
}

// ---- the schedule ----

// BFL's get_schedule(steps, (h / 2)·(w / 2), shift) at 802fb47 (src/flux/sampling.py), f32 values as tolist()
// gives them. h, w: latent pixels (1024 x 1024 -> 128 x 128, 4096 tokens). Made with
//   git --git-dir=/work/.mirror/black-forest-labs+flux/repo archive 802fb47 src | tar -x -C /tmp/bfl_flux
//   PYTHONPATH=/tmp/bfl_flux/src /tmp/venv/bin/python -c "
//   import sys; from unittest import mock
//   sys.modules['cv2'] = sys.modules['imwatermark'] = mock.MagicMock()  # imported by flux/, unused here
//   from flux.sampling import get_schedule
//   print(get_schedule(STEPS, (H // 2) * (W // 2), shift=SHIFT))"
struct ScheduleCase {
  int64_t steps, h, w;
  bool shift;
  std::vector<double> sigmas;
};
const std::vector<ScheduleCase> kBflSchedules = {
    {4, 128, 128, false, {1.0, 0.75, 0.5, 0.25, 0.0}},  // schnell: unshifted, as BFL's CLI
    {4, 128, 128, true, {1.0, 0.9045307636260986, 0.7595109343528748, 0.5128440856933594, 0.0}},
    {28, 128, 128, true, {1.0, 0.988408625125885, 0.9762224555015564, 0.9633944630622864, 0.949872612953186,
                          0.9355989694595337, 0.9205090403556824, 0.9045307636260986, 0.8875834345817566,
                          0.8695758581161499, 0.8504056334495544, 0.8299563527107239, 0.808095395565033,
                          0.7846716046333313, 0.7595109343528748, 0.7324128746986389, 0.7031446695327759,
                          0.6714348196983337, 0.6369644999504089, 0.5993567705154419, 0.5581628084182739,
                          0.5128440856933594, 0.4627484083175659, 0.40707841515541077, 0.3448489308357239,
                          0.2748279869556427, 0.19545459747314453, 0.10472090542316437, 0.0}},
    {20, 64, 96, true, {1.0, 0.9749400615692139, 0.9485288262367249, 0.9206541180610657, 0.8911906480789185,
                        0.8599985837936401, 0.8269215226173401, 0.7917828559875488, 0.7543839812278748,
                        0.7144992351531982, 0.671872615814209, 0.6262110471725464, 0.5771785378456116,
                        0.5243874788284302, 0.4673885405063629, 0.40565770864486694, 0.3385802209377289,
                        0.26542994379997253, 0.1853431761264801, 0.09728410094976425, 0.0}},
    {10, 170, 96, true, {1.0, 0.9659247994422913, 0.9264630675315857, 0.88022780418396, 0.825311541557312,
                         0.7590158581733704, 0.6773951649665833, 0.5744409561157227, 0.4405321180820465,
                         0.25923797488212585, 0.0}},  // 1360 x 768
    {6, 12, 20, true, {1.0, 0.8885743021965027, 0.7613272070884705, 0.6146315336227417, 0.4436592161655426,
                       0.24184055626392365, 0.0}},  // 60 tokens: below 256, μ < 0.5
    {8, 192, 192, true, {1.0, 0.981340765953064, 0.9575185775756836, 0.9260467886924744, 0.8825358748435974,
                         0.8184439539909363, 0.714645504951477, 0.5176817178726196, 0.0}},  // 9216 tokens: μ > 1.15
    {3, 32, 32, true, {1.0, 0.767303466796875, 0.45186275243759155, 0.0}},
};

TEST(FluxSampler, SigmasAreBflsGetSchedule) {
  for (const ScheduleCase& c : kBflSchedules) {
    SCOPED_TRACE(std::to_string(c.steps) + " steps, " + std::to_string(c.h) + " x " + std::to_string(c.w) +
                 (c.shift ? ", shifted" : ", unshifted"));
    std::vector<double> sigmas = flux::flux_sigmas(c.steps, c.h, c.w, c.shift);
    ASSERT_EQ(sigmas.size(), c.sigmas.size());
    for (size_t k = 0; k < sigmas.size(); ++k) EXPECT_NEAR(sigmas[k], c.sigmas[k], 1e-7) << k;  // BFL's are f32
  }
}

// ---- against diffusers ----

struct ParityCase {
  const char* name;
  const char* transformer;
  int64_t steps;
  double guidance;
};

TEST(FluxSampler, ImagesMatchDiffusersFluxPipeline) {
  // Measured (f32, 2 cores of the development machine): dev 1.13e-6, schnell 1.25e-6.
  constexpr double kTolerance = 1e-4;
  for (const ParityCase& c : {ParityCase{"dev", "flux_sample/transformer", 6, 3.5},
                              ParityCase{"schnell", "flux_sample/transformer_schnell", 4, 0.0}}) {
    SCOPED_TRACE(c.name);
    auto model = load_flux(data(c.transformer));
    ASSERT_TRUE(model);
    EXPECT_EQ(model->config().guidance_embed, std::string(c.name) == "dev");
    flux::FluxImageSampler sampler({.files = tiny_files()});
    EXPECT_EQ(sampler.t5_length_for(*model), std::string(c.name) == "dev" ? 512 : 256);
    Tensor images = sampler.generate_from_noise(*model, case_prompts(), sample_case().get("noise"),
                                                {.steps = c.steps, .guidance = c.guidance});
    const Tensor want = sample_case().get(std::string(c.name) + ".images");
    const double error = relative_to_max(images, want);
    std::printf("flux sampler vs diffusers FluxPipeline, %s (%lld steps, %zu images %lld x %lld): %.2e\n", c.name,
                static_cast<long long>(c.steps), case_prompts().size(), static_cast<long long>(want.size(3)),
                static_cast<long long>(want.size(2)), error);
    EXPECT_LE(error, kTolerance);
  }
}

// ---- where the parts are ----

TEST(FluxSampler, PipelineFolderGivesTheDefaultsAndKeysWin) {
  const fs::path root = scratch_dir("flux_sample_pipeline");
  const fs::path pipeline = root / "FLUX.1-tiny";
  fs::create_directories(pipeline / "tokenizer_2");
  fs::create_directory_symlink(fs::absolute(data("flux_sample/transformer")), pipeline / "transformer");
  fs::create_directory_symlink(fs::absolute(data("vae/flux_tiny/vae")), pipeline / "vae");
  fs::create_directory_symlink(fs::absolute(data("clip_text/clip_l")), pipeline / "text_encoder");
  fs::create_directory_symlink(fs::absolute(data("t5/pipeline/text_encoder_3")), pipeline / "text_encoder_2");
  // A file where a tokenizer/ folder would be: load_clip_tokenizer reads it as open_clip's vocabulary.
  fs::create_symlink(fs::absolute(data("clip_tokenizer/bpe_simple_vocab_16e6.txt.gz")), pipeline / "tokenizer");
  fs::copy_file(data("t5/spiece.model"), pipeline / "tokenizer_2" / "spiece.model");

  // The folder, its transformer/, and a file inside a folder with model_index.json.
  EXPECT_EQ(flux::pipeline_folder(pipeline.string()), pipeline.string());
  EXPECT_EQ(flux::pipeline_folder(pipeline.string() + "/"), pipeline.string());
  EXPECT_EQ(flux::pipeline_folder((pipeline / "transformer").string()), std::nullopt);  // no model_index.json
  std::ofstream(pipeline / "model_index.json") << R"({"_class_name": "FluxPipeline"})";
  EXPECT_EQ(flux::pipeline_folder((pipeline / "transformer").string()), pipeline.string());
  EXPECT_EQ(flux::pipeline_folder((pipeline / "flux1-tiny.safetensors").string()), pipeline.string());
  EXPECT_EQ(flux::pipeline_folder(data("flux/dev_bfl.safetensors")), std::nullopt);
  EXPECT_EQ(flux::pipeline_folder(""), std::nullopt);

  ModelConfig model{.arch = "flux", .name_or_path = (pipeline / "transformer").string(),
                    .options = ModelOptions::defaults(flux_architecture().schema().keys)};
  flux::FluxSamplingFiles files = flux::sampling_files(model);
  EXPECT_EQ(files.pipeline, pipeline.string());
  EXPECT_EQ(files.vae, (pipeline / "vae").string());
  EXPECT_EQ(files.clip_l, (pipeline / "text_encoder").string());
  EXPECT_EQ(files.t5, (pipeline / "text_encoder_2").string());
  EXPECT_EQ(files.clip_tokenizer, (pipeline / "tokenizer").string());
  EXPECT_EQ(files.t5_tokenizer, (pipeline / "tokenizer_2").string());
  model.options.set("vae_path", std::string("my_ae.safetensors"));
  model.options.set("t5_path", std::string("t5xxl_fp16.safetensors"));
  files = flux::sampling_files(model);
  EXPECT_EQ(files.vae, "my_ae.safetensors");
  EXPECT_EQ(files.t5, "t5xxl_fp16.safetensors");
  EXPECT_EQ(files.clip_l, (pipeline / "text_encoder").string());
  // A single file outside any pipeline folder gives nothing.
  model.name_or_path = data("flux/dev_bfl.safetensors");
  files = flux::sampling_files(model);
  EXPECT_EQ(files.pipeline, "");
  EXPECT_EQ(files.clip_l, "");

  // The pipeline folder's parts make the same images as the files one by one.
  model.options = ModelOptions::defaults(flux_architecture().schema().keys);
  model.name_or_path = pipeline.string();
  flux::FluxImageSampler from_folder({.files = flux::sampling_files(model), .default_height = 16,
                                      .default_width = 24});
  flux::FluxImageSampler from_files({.files = tiny_files(), .default_height = 16, .default_width = 24});
  auto flux_model = load_flux(pipeline.string());
  ASSERT_TRUE(flux_model);
  const SampleSettings settings{.steps = 2, .guidance = 3.5, .seed = 5};
  Tensor a = from_folder.generate(*flux_model, {"a red cube"}, settings);
  Tensor b = from_files.generate(*flux_model, {"a red cube"}, settings);
  EXPECT_EQ(a.shape(), (Shape{1, 3, 16, 24}));
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
}

// ---- calls ----

TEST(FluxSampler, ImagesAreDeterministicPerSeedAndTheModeIsRestored) {
  auto model = load_flux(data("flux_sample/transformer"));
  ASSERT_TRUE(model);
  model->train(true);
  flux::FluxImageSampler sampler(
      {.files = tiny_files(), .t5_length = 16, .default_height = 24, .default_width = 16, .trigger_word = "sks"});
  const std::vector<std::string> prompts = {"a photo of [trigger]", "", "a photo of [trigger]"};
  const SampleSettings settings{.steps = 3, .guidance = 3.5, .seed = 11};
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
  // The trigger word is the prompt's: "a photo of sks" written out is the same image.
  Tensor written = sampler.generate(*model, {"a photo of sks"}, settings);
  EXPECT_LT(relative_to_max(written, first.narrow(0, 0, 1)), 1e-6);
  // Another seed, another guidance, another size.
  EXPECT_GT(relative_to_max(sampler.generate(*model, {prompts[0]}, {.steps = 3, .guidance = 3.5, .seed = 12}),
                            first.narrow(0, 0, 1)),
            1e-3);
  EXPECT_GT(relative_to_max(sampler.generate(*model, {prompts[0]}, {.steps = 3, .guidance = 1.0, .seed = 11}),
                            first.narrow(0, 0, 1)),
            1e-4);
  EXPECT_EQ(sampler.generate(*model, {prompts[0]}, {.steps = 1, .seed = 11, .width = 8, .height = 12}).shape(),
            (Shape{1, 3, 12, 8}));
  EXPECT_EQ(sampler.generate(*model, {}, settings).shape(), (Shape{0, 3, 24, 16}));
}

// ---- stored sample prompts ----

TEST(FluxSampler, PromptTextIsWhatDatasetEncodeStores) {
  EXPECT_EQ(text::prompt_text("a photo of [trigger]", "sks"), "a photo of sks");
  EXPECT_EQ(text::prompt_text("[name] and [trigger] ", "sks"), "sks and sks");  // as apply_trigger(..., false)
  EXPECT_EQ(text::prompt_text("  a cat", ""), "a cat");
  EXPECT_EQ(text::prompt_text("[trigger] on the moon", "ohwx"), "ohwx on the moon");
}

// The dataset's /sample_prompts (a caption -> T5 states and CLIP-L pooled, f16 in the file) in place of the
// encoders: with the encoders' own output stored (f32) the images are bitwise those encoded on the fly, so the
// stored path changes nothing but where the embeddings come from; with the embeddings rounded to f16, as the
// file keeps them, they differ by the measured rounding only. No encoder is opened, and a prompt that is not
// stored is an error naming it and the missing parts.
TEST(FluxSampler, StoredPromptsNeedNoEncodersAndMatchOnTheFly) {
  auto model = load_flux(data("flux_sample/transformer"));
  ASSERT_TRUE(model);
  const flux::FluxSamplingFiles files = tiny_files();
  flux::FluxImageSampler on_the_fly(
      {.files = files, .t5_length = 16, .default_height = 16, .default_width = 24, .trigger_word = "sks"});
  const std::vector<std::string> captions = {"a red cube", "a photo of sks"};
  text::PromptEmbeddings e = flux::encode_flux_prompts(*on_the_fly.encoders(), captions, {.t5_length = 16});
  auto stored = [&](DType dtype) {
    return SamplePrompts{.captions = captions,
                         .embeds = e.context.to(dtype).to(DType::F32),
                         .pooled = e.pooled.to(dtype).to(DType::F32),
                         .mask = e.mask.to(DType::U8)};
  };
  const flux::FluxSamplingFiles vae_only{.vae = files.vae};
  flux::FluxImageSampler exact({.files = vae_only, .t5_length = 16, .default_height = 16, .default_width = 24,
                                .trigger_word = "sks", .stored_prompts = stored(DType::F32)});
  flux::FluxImageSampler rounded({.files = vae_only, .t5_length = 16, .default_height = 16, .default_width = 24,
                                  .trigger_word = "sks", .stored_prompts = stored(DType::F16)});
  EXPECT_EQ(exact.encoders(), nullptr);
  EXPECT_THAT(rounded.describe(), AllOf(HasSubstr("the embeddings of the 2 sample prompts stored in the dataset"),
                                        HasSubstr("no text encoders"), HasSubstr("model.t5_path")));
  EXPECT_TRUE(rounded.is_stored("a photo of [trigger]", 16));
  EXPECT_FALSE(rounded.is_stored("a photo of [trigger]", 8));
  EXPECT_FALSE(rounded.is_stored("a red cube.", 16));

  // Image 2 repeats image 0's prompt with its own noise; "[trigger]" and the written-out word are one prompt.
  const std::vector<std::string> prompts = {"a photo of [trigger]", "a red cube", "a photo of sks"};
  const SampleSettings settings{.steps = 3, .guidance = 3.5, .seed = 5};
  const Tensor want = on_the_fly.generate(*model, prompts, settings);
  EXPECT_EQ(exact.generate(*model, prompts, settings).to_vector<float>(), want.to_vector<float>());
  const Tensor got = rounded.generate(*model, prompts, settings);
  const double difference = relative_to_max(got, want);
  std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  double largest = 0;
  for (size_t i = 0; i < w.size(); ++i) largest = std::max(largest, std::fabs(static_cast<double>(g[i]) - w[i]));
  std::printf("stored f16 sample prompts vs encoded on the fly: images differ by %.2e of the largest pixel (%.2e "
              "absolute, %.3f of an 8-bit level)\n", difference, largest, largest * 255);
  EXPECT_GT(difference, 0.0);  // the rounding is there...
  EXPECT_LT(difference, 1e-3);  // ...and small

  // With the encoders too, stored prompts still come from the dataset and the others are encoded; each image is
  // its own prompt's, whatever the other prompts of the call are (compared in calls of as many images: the matrix
  // products' blocking depends on the batch).
  flux::FluxImageSampler both({.files = files, .t5_length = 16, .default_height = 16, .default_width = 24,
                               .trigger_word = "sks", .stored_prompts = stored(DType::F16)});
  ASSERT_NE(both.encoders(), nullptr);
  const Tensor mixed = both.generate(*model, {"a photo of [trigger]", "a blue ball"}, settings);
  const Tensor stored_pair = rounded.generate(*model, {"a photo of [trigger]", "a red cube"}, settings);
  EXPECT_EQ(mixed.narrow(0, 0, 1).to_vector<float>(), stored_pair.narrow(0, 0, 1).to_vector<float>());
  EXPECT_EQ(mixed.narrow(0, 1, 1).to_vector<float>(),
            on_the_fly.generate(*model, {"a photo of [trigger]", "a blue ball"}, settings)
                .narrow(0, 1, 1)
                .to_vector<float>());

  // Not stored, no encoders: the prompt and the missing parts are named.
  EXPECT_THAT(error_of([&] { rounded.generate(*model, {"a blue ball"}, settings); }),
              AllOf(HasSubstr("the prompt \"a blue ball\" is not among the sample prompts stored in the dataset "
                              "(\"a red cube\", \"a photo of sks\")"),
                    HasSubstr("model.clip_l_path"), HasSubstr("model.t5_tokenizer_path")));
  // Stored with another T5 length than the model is sampled with: not used.
  flux::FluxImageSampler other_length({.files = vae_only, .t5_length = 8, .default_height = 16, .default_width = 24,
                                       .stored_prompts = stored(DType::F16)});
  EXPECT_THAT(error_of([&] { other_length.generate(*model, {"a red cube"}, settings); }),
              HasSubstr("made with 16 T5 tokens, not 8"));
}

TEST(FluxSampler, ErrorsNameTheProblem) {
  auto model = load_flux(data("flux_sample/transformer"));
  ASSERT_TRUE(model);
  flux::FluxImageSampler sampler({.files = tiny_files(), .t5_length = 8, .default_height = 16, .default_width = 24});
  EXPECT_THAT(error_of([&] { sampler.generate(*model, {"x"}, {.steps = 1, .width = 26, .height = 16}); }),
              AllOf(HasSubstr("image size 26 x 16"), HasSubstr("multiples of 4 pixels"),
                    HasSubstr("the nearest are 28 x 16")));
  EXPECT_THAT(error_of([&] { sampler.generate(*model, {"x"}, {.steps = 0}); }), HasSubstr("steps must be >= 1"));
  // A model whose widths do not fit the encoders (tests/data/flux: pooled 24, latents 4 channels).
  auto other = load_flux(data("flux/dev_diffusers"));
  ASSERT_TRUE(other);
  EXPECT_THAT(error_of([&] { sampler.generate(*other, {"x"}, {.steps = 1}); }),
              AllOf(HasSubstr("4-channel latents"), HasSubstr("flux_tiny/vae"), HasSubstr("has 16")));
  // Parts that are not given, or not what they should be.
  flux::FluxSamplingFiles no_t5 = tiny_files();
  no_t5.t5 = "";
  EXPECT_THAT(error_of([&] { flux::FluxImageSampler bad({.files = no_t5}); }), HasSubstr("T5 weights"));
  flux::FluxSamplingFiles swapped = tiny_files();
  swapped.vae = data("clip_text/clip_l/model.safetensors");
  EXPECT_THAT(error_of([&] { flux::FluxImageSampler bad({.files = swapped}); }), HasSubstr("model.safetensors"));
}

}  // namespace
}  // namespace wick
