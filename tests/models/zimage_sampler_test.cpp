// What only Z-Image's sampler and text encoder have (models/zimage/zimage_sampler.h, zimage_text.h): the pipeline's
// schedule, Qwen3's caption rows padded to max_length with their mask, and a dropped caption (all-zero mask) as the
// transformer takes it. What every architecture's sampler shows (images vs diffusers' ZImagePipeline, the pipeline
// folder, determinism, stored prompts, errors) is Z-Image's row of arch_sampler_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/autograd/grad_mode.h"
#include "models/zimage/zimage.h"
#include "models/zimage/zimage_sampler.h"
#include "models/zimage/zimage_text.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/safetensors.h"
#include "tests/models/arch_sampler.h"
#include "tests/models/arch_test_util.h"

namespace wick {
namespace {

using wick::testing::data_path;
using wick::testing::relative_to_max;
using wick::testing::sampler_arch;

const SafetensorsFile& sample_case() {
  static const SafetensorsFile file = SafetensorsFile::open(data_path("zimage_sample/case.safetensors"));
  return file;
}

// The scheduler's sigmas of the fixture's calls (FlowMatchEulerDiscreteScheduler(shift=3) after set_timesteps with
// the pipeline's linspace), float32 for float32.
TEST(ZImageSampler, SigmasAreThePipelines) {
  for (const auto& [name, steps] : std::vector<std::pair<std::string, int64_t>>{{"turbo", 8}, {"base", 5}}) {
    SCOPED_TRACE(name);
    const std::vector<float> want = sample_case().get(name + ".sigmas").to_vector<float>();
    const std::vector<double> got = zimage::zimage_sigmas(steps, 3.0);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(static_cast<float>(got[i]), want[i]) << i;
  }
  EXPECT_EQ(zimage::zimage_sigmas(1, 3.0), (std::vector<double>{1.0, 0.0}));
}

// encode_zimage_prompts: each prompt's rows are the pipeline's (_encode_prompt), then zeros to max_length, the mask
// 1 on its rows; no pooled vector.
TEST(ZImageSampler, PromptRowsArePaddedWithTheirMask) {
  const testing::SamplerArch& row = sampler_arch("zimage");
  const auto te = zimage::ZImageTextEncoder::from_files(row.tiny_files.at("text_encoder_path"),
                                                        row.tiny_files.at("tokenizer_path"), {});
  const auto prompts =
      nlohmann::json::parse(sample_case().metadata().at("prompts")).get<std::vector<std::string>>();
  const text::PromptEmbeddings e = zimage::encode_zimage_prompts(te, prompts, {.max_length = 40});
  EXPECT_FALSE(te.qwen3.loaded());  // freed after the call
  const auto kept = zimage::ZImageTextEncoder::from_files(row.tiny_files.at("text_encoder_path"),
                                                          row.tiny_files.at("tokenizer_path"), {.keep_loaded = true});
  EXPECT_EQ(zimage::encode_zimage_prompts(kept, prompts, {.max_length = 40}).context.to_vector<float>(),
            e.context.to_vector<float>());
  EXPECT_TRUE(kept.qwen3.loaded());
  kept.unload();
  EXPECT_FALSE(kept.qwen3.loaded());
  ASSERT_EQ(e.context.shape(), (Shape{2, 40, 16}));
  EXPECT_EQ(e.pooled.shape(), (Shape{2, 0}));
  EXPECT_EQ(e.info.embeds_encoder, zimage::kTextEmbedsEncoder);
  EXPECT_EQ(e.info.max_length, 40);
  const std::vector<int64_t> mask = e.mask.to_vector<int64_t>();
  for (int64_t i = 0; i < 2; ++i) {
    const Tensor want = sample_case().get("prompt." + std::to_string(i));
    const int64_t n = want.size(0);
    const double error = relative_to_max(e.context.select(0, i).narrow(0, 0, n), want);
    std::printf("zimage prompt %lld [%lld, 16] vs ZImagePipeline._encode_prompt: rel err %.2e\n",
                static_cast<long long>(i), static_cast<long long>(n), error);
    EXPECT_LE(error, 1e-5);
    for (float v : e.context.select(0, i).narrow(0, n, 40 - n).contiguous().to_vector<float>()) ASSERT_EQ(v, 0.0f);
    for (int64_t k = 0; k < 40; ++k) EXPECT_EQ(mask[static_cast<size_t>(i * 40 + k)], k < n ? 1 : 0) << i << " " << k;
  }
}

// A caption dropped by train.caption_dropout (its mask all zeros, its rows zeros) is one zero feature row; the rest
// of the batch is unchanged.
TEST(ZImageSampler, ADroppedCaptionIsOneZeroRow) {
  const testing::SamplerArch& row = sampler_arch("zimage");
  auto loaded = row.load(data_path(row.model));
  auto& model = dynamic_cast<zimage::ZImageTransformer&>(*loaded);
  autograd::NoGradGuard no_grad;
  const Tensor x = sample_case().get("noise");  // [2, 16, 12, 20]
  const Tensor sigma = Tensor::from_vector<float>({0.7f, 0.4f}, {2});
  Tensor context = zeros({2, 20, 16});
  context.select(0, 0).narrow(0, 0, 17).copy_from(sample_case().get("prompt.0"));
  std::vector<float> mask(40, 0.0f);
  for (int k = 0; k < 17; ++k) mask[static_cast<size_t>(k)] = 1.0f;
  const Tensor out = model.predict(x, sigma, {.context = context, .context_mask = Tensor::from_vector(mask, {2, 20})});
  const std::vector<Tensor> each =
      model.forward({x.select(0, 0), x.select(0, 1)}, Tensor::from_vector<float>({1.0f - 0.7f, 1.0f - 0.4f}, {2}),
                    {sample_case().get("prompt.0"), zeros({1, 16})});
  EXPECT_LE(relative_to_max(out.select(0, 0), neg(each[0])), 1e-6);
  EXPECT_LE(relative_to_max(out.select(0, 1), neg(each[1])), 1e-6);
}

}  // namespace
}  // namespace wick
