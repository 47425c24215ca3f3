// What only Flux's sampler has (models/flux/flux_sampler.h): BFL's sigma schedule, the variants' T5 length and
// guidance input, the T5 length stored prompts were made with. What every architecture's sampler shows (images vs
// diffusers' FluxPipeline, the pipeline folder, determinism, stored prompts, errors) is Flux's row of
// arch_sampler_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/flux/flux.h"
#include "models/flux/flux_sampler.h"
#include "tests/error_of.h"
#include "tests/models/arch_sampler.h"
#include "tests/models/arch_test_util.h"

namespace wick {
namespace {

using ::testing::HasSubstr;
using wick::testing::data_path;
using wick::testing::error_of;
using wick::testing::relative_to_max;
using wick::testing::sampler_arch;
using wick::testing::SamplerArch;

flux::FluxImageSampler& as_flux(LatentImageSampler& sampler) { return dynamic_cast<flux::FluxImageSampler&>(sampler); }

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

// ---- the variants ----

// dev has a guidance input and takes 512 T5 tokens, schnell neither (BFL, diffusers, kohya).
TEST(FluxSampler, VariantsTakeTheirT5LengthAndGuidance) {
  const SamplerArch& row = sampler_arch("flux");
  for (const auto& [variant, path] : {std::pair<std::string, std::string>{"dev", "flux_sample/transformer"},
                                      {"schnell", "flux_sample/transformer_schnell"}}) {
    SCOPED_TRACE(variant);
    auto model = std::dynamic_pointer_cast<flux::FluxTransformer>(row.load(data_path(path)));
    ASSERT_TRUE(model);
    EXPECT_EQ(model->config().guidance_embed, variant == "dev");
    auto sampler = row.make({.files = row.tiny_files});
    EXPECT_EQ(as_flux(*sampler).t5_length_for(*model), variant == "dev" ? 512 : 256);
  }
}

// ---- calls ----

// "a photo of sks" written out, alone, is the image of "a photo of [trigger]" in a call of three (within the matrix
// products' blocking, which depends on the batch).
TEST(FluxSampler, TriggerWordWrittenOutAloneIsTheSameImage) {
  const SamplerArch& row = sampler_arch("flux");
  auto model = row.load(data_path(row.model));
  ASSERT_TRUE(model);
  auto sampler = row.make(
      {.files = row.tiny_files, .t5_length = 16, .default_height = 24, .default_width = 16, .trigger_word = "sks"});
  const SampleSettings settings{.steps = 3, .guidance = 3.5, .seed = 11};
  const Tensor first = sampler->generate(*model, {"a photo of [trigger]", "", "a photo of [trigger]"}, settings);
  const Tensor written = sampler->generate(*model, {"a photo of sks"}, settings);
  EXPECT_LT(relative_to_max(written, first.narrow(0, 0, 1)), 1e-6);
}

// ---- stored sample prompts ----

// With the encoders too, stored prompts still come from the dataset and the others are encoded; each image is its
// own prompt's, whatever the other prompts of the call are (compared in calls of as many images: the matrix products'
// blocking depends on the batch). Prompts stored with another T5 length than the model is sampled with are not used.
TEST(FluxSampler, StoredPromptsBesideEncodersAndTheirT5Length) {
  const SamplerArch& row = sampler_arch("flux");
  auto model = row.load(data_path(row.model));
  ASSERT_TRUE(model);
  wick::testing::SamplerOptions options{
      .files = row.tiny_files, .t5_length = 16, .default_height = 16, .default_width = 24, .trigger_word = "sks"};
  auto on_the_fly = row.make(options);
  const std::vector<std::string> captions = {"a red cube", "a photo of sks"};
  const text::PromptEmbeddings e = flux::encode_flux_prompts(*as_flux(*on_the_fly).encoders(), captions,
                                                             {.t5_length = 16});
  options.stored_prompts = wick::testing::stored_prompts(captions, e, DType::F16);
  auto both = row.make(options);
  ASSERT_NE(as_flux(*both).encoders(), nullptr);
  options.files = {{"vae_path", row.tiny_files.at("vae_path")}};
  auto rounded = row.make(options);
  EXPECT_TRUE(as_flux(*rounded).is_stored("a photo of [trigger]", 16));
  EXPECT_FALSE(as_flux(*rounded).is_stored("a photo of [trigger]", 8));

  const SampleSettings settings{.steps = 3, .guidance = 3.5, .seed = 5};
  const Tensor mixed = both->generate(*model, {"a photo of [trigger]", "a blue ball"}, settings);
  const Tensor stored_pair = rounded->generate(*model, {"a photo of [trigger]", "a red cube"}, settings);
  EXPECT_EQ(mixed.narrow(0, 0, 1).to_vector<float>(), stored_pair.narrow(0, 0, 1).to_vector<float>());
  // The prompt encoded alone vs in a batch of two: a matrix product's rows may round differently with the batch's
  // size (seen on an AMD EPYC machine), so the same image up to float rounding.
  EXPECT_LE(relative_to_max(mixed.narrow(0, 1, 1),
                            on_the_fly->generate(*model, {"a photo of [trigger]", "a blue ball"}, settings)
                                .narrow(0, 1, 1)),
            1e-5);

  // Stored with another T5 length than the model is sampled with: not used.
  options.t5_length = 8;
  options.trigger_word = "";
  auto other_length = row.make(options);
  EXPECT_THAT(error_of([&] { other_length->generate(*model, {"a red cube"}, settings); }),
              HasSubstr("made with 16 T5 tokens, not 8"));
}

}  // namespace
}  // namespace wick
