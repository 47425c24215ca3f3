// Each pipeline's prompt embeddings from its language-model text encoder (models/llm/llm_prompts.h) against
// diffusers 0.42.1's own encode_prompt code on a tiny random Qwen3 (28 layers of 16, 2 / 1 heads of 8, the real
// vocabulary of 151,936 rows) with the truncated real Qwen3 tokenizer of tests/data/bpe/qwen3: fixtures from
// tests/reference/make_llm_prompt_fixtures.py in tests/data/llm_prompts. Prompts: "A cat", "", a German one with
// an emoji, and one longer than 512 tokens (truncation).
// The fixture stores only the embedding rows the prompts use; this test writes the full file (every other row 0)
// and loads it as a published single-file Qwen3.
//
// Metric, per tensor: max_i |wick_i - ref_i| / max_i |ref_i|.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "engine/autograd/grad_mode.h"
#include "models/bpe/qwen_tokenizer.h"
#include "models/bpe/tekken_tokenizer.h"
#include "models/llm/llm_encoder.h"
#include "models/llm/llm_prompts.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"
#include "tests/error_of.h"
#include "tests/llm_fixture.h"
#include "tests/models/bpe_test_util.h"
#include "tests/test_data.h"

namespace wick::llm {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using wick::testing::error_of;

constexpr double kTolerance = 1e-5;

std::string data_path(const std::string& name) { return wick::testing::test_data_dir() + "/llm_prompts/" + name; }

const SafetensorsFile& cases() {
  static const SafetensorsFile file = SafetensorsFile::open(data_path("cases.safetensors"));
  return file;
}

std::vector<std::string> prompts() {
  return nlohmann::json::parse(cases().metadata().at("prompts")).get<std::vector<std::string>>();
}

const bpe::QwenTokenizer& tokenizer() {
  static const bpe::QwenTokenizer t = bpe::QwenTokenizer::from_folder(wick::testing::test_data_dir() + "/bpe/qwen3");
  return t;
}

double relative_to_max(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double worst = 0, scale = 0;
  for (size_t i = 0; i < w.size() && i < g.size(); ++i) {
    worst = std::max(worst, std::fabs(g[i] - w[i]));
    scale = std::max(scale, std::fabs(w[i]));
  }
  return scale > 0 ? worst / scale : worst;
}

// A fixture encoder ("qwen3", "mistral", "qwen2vl") as one safetensors file (model.* names, the full embedding).
std::string full_file(const std::string& name) {
  // The written files (10 MB each for the 151,936-row embeddings) go when the test binary exits.
  struct ScratchDir {
    fs::path path = fs::path(::testing::TempDir()) / ("wick_llm_prompts_" + std::to_string(::getpid()));
    ScratchDir() { fs::create_directories(path); }
    ~ScratchDir() {
      std::error_code ignored;
      fs::remove_all(path, ignored);
    }
  };
  static const ScratchDir dir;
  const std::string file = (dir.path / (name + ".safetensors")).string();
  wick::testing::write_full_llm_file(data_path(name + ".safetensors"), file);
  return file;
}

// The fixture encoder `name` in f32, written once per test binary run. The head width comes from the fixture
// (Mistral's and Qwen2's weights do not say it; a published folder's config.json does).
std::shared_ptr<LlmEncoder> load_encoder(const std::string& name, const LlmOutput& output) {
  static std::map<std::string, std::string> files;
  if (files.count(name) == 0) files[name] = full_file(name);
  const int64_t head_dim =
      std::stoll(SafetensorsFile::open(data_path(name + ".safetensors")).metadata().at("head_dim"));
  return LlmEncoder::load(files[name], {.output = output, .dtype = DType::F32, .head_dim = head_dim});
}

std::shared_ptr<LlmEncoder> load_qwen3(const LlmOutput& output) { return load_encoder("qwen3", output); }

TEST(LlmPromptsTest, ZImageMatchesDiffusersEncodePrompt) {
  auto encoder = load_qwen3(zimage_text_output());
  EXPECT_EQ(encoder->n_layers_built(), 27);  // hidden_states[-2] of 28 layers: layer 28 and the norm never built
  EXPECT_FALSE(encoder->has_final_norm());
  autograd::NoGradGuard no_grad;
  const std::vector<std::string> p = prompts();
  const std::vector<Tensor> got = zimage_prompt_embeds(tokenizer(), *encoder, p);
  ASSERT_EQ(got.size(), p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    const Tensor want = cases().get("zimage." + std::to_string(i));
    const double err = relative_to_max(got[i], want);
    EXPECT_LE(err, kTolerance) << "prompt " << i;
    std::printf("  zimage prompt %zu: %lld rows, rel err %.2e\n", i, static_cast<long long>(want.shape()[0]), err);
  }
  EXPECT_EQ(got[1].shape()[0], 10);   // "": the template alone
  EXPECT_EQ(got[3].shape()[0], 512);  // the long prompt, truncated
}

TEST(LlmPromptsTest, Flux2KleinMatchesDiffusersEncodePrompt) {
  auto encoder = load_qwen3(flux2_klein_text_output());
  EXPECT_EQ(encoder->n_layers_built(), 27);
  autograd::NoGradGuard no_grad;
  const Tensor got = flux2_klein_prompt_embeds(tokenizer(), *encoder, prompts());
  const Tensor want = cases().get("klein.embeds");
  ASSERT_EQ(got.shape(), want.shape());
  const double err = relative_to_max(got, want);
  EXPECT_LE(err, kTolerance);
  std::printf("  klein [4, 512, 48]: rel err %.2e\n", err);
  // The padding rows are part of the context (they attend to the real tokens): check them on their own.
  const std::vector<int64_t> mask = cases().get("klein.mask").to_vector<int64_t>();
  const int64_t n_real = std::count(mask.begin(), mask.begin() + 512, int64_t{1});
  ASSERT_LT(n_real, 512);
  EXPECT_LE(relative_to_max(got.select(0, 0).slice(0, n_real, 512).contiguous(),
                            want.select(0, 0).slice(0, n_real, 512).contiguous()),
            kTolerance);
}

TEST(LlmPromptsTest, ZImageRowsDoNotDependOnTheBatch) {
  auto encoder = load_qwen3(zimage_text_output());
  autograd::NoGradGuard no_grad;
  const std::vector<Tensor> alone = zimage_prompt_embeds(tokenizer(), *encoder, {"A cat"});
  EXPECT_LE(relative_to_max(alone[0], cases().get("zimage.0")), kTolerance);
  // A shorter max_length truncates the template too, as the tokenizer call does.
  const std::vector<Tensor> cut = zimage_prompt_embeds(tokenizer(), *encoder, {"A cat"}, 4);
  ASSERT_EQ(cut[0].shape()[0], 4);
  EXPECT_LE(relative_to_max(cut[0], cases().get("zimage.0").slice(0, 0, 4).contiguous()), kTolerance);
}

TEST(LlmPromptsTest, Flux2DevMatchesDiffusersEncodePrompt) {
  auto encoder = load_encoder("mistral", flux2_dev_text_output());
  EXPECT_EQ(encoder->n_layers_built(), 30);  // layer 31 and the final norm are in the file, never read
  EXPECT_FALSE(encoder->has_final_norm());
  autograd::NoGradGuard no_grad;
  const bpe::TekkenTokenizer tekken =
      bpe::TekkenTokenizer::from_file(wick::testing::test_data_dir() + "/bpe/tekken.json");
  const Tensor want = cases().get("dev.embeds");
  const int64_t length = want.shape()[1];  // 128: the pipeline's max_sequence_length of the fixture
  const Tensor got = flux2_dev_prompt_embeds(tekken, *encoder, prompts(), length);
  ASSERT_EQ(got.shape(), want.shape());
  const double err = relative_to_max(got, want);
  EXPECT_LE(err, kTolerance);
  std::printf("  dev [4, %lld, 48]: rel err %.2e\n", static_cast<long long>(length), err);
  // Left padding: prompt 0's padding rows come first and are compared on their own.
  const std::vector<int64_t> mask = cases().get("dev.mask").to_vector<int64_t>();
  const int64_t n_pad = std::count(mask.begin(), mask.begin() + length, int64_t{0});
  ASSERT_GT(n_pad, 0);
  ASSERT_EQ(mask[0], 0);
  EXPECT_LE(relative_to_max(got.select(0, 0).slice(0, 0, n_pad).contiguous(),
                            want.select(0, 0).slice(0, 0, n_pad).contiguous()),
            kTolerance);
}

TEST(LlmPromptsTest, QwenImageMatchesDiffusersEncodePrompt) {
  auto encoder = load_encoder("qwen2vl", qwen_image_text_output());
  EXPECT_TRUE(encoder->has_final_norm());
  autograd::NoGradGuard no_grad;
  const bpe::TempDir folder = bpe::qwen_image_folder();
  const bpe::QwenTokenizer qwen25 = bpe::QwenTokenizer::from_folder(folder.path());
  const QwenImagePromptEmbeds got = qwen_image_prompt_embeds(qwen25, *encoder, prompts());
  const Tensor want = cases().get("qwenimage.embeds");
  ASSERT_EQ(got.embeds.shape(), want.shape());
  const double err = relative_to_max(got.embeds, want);
  EXPECT_LE(err, kTolerance);
  EXPECT_EQ(got.mask.to_vector<int64_t>(), cases().get("qwenimage.mask").to_vector<int64_t>());
  std::printf("  qwenimage [4, %lld, 16]: rel err %.2e\n", static_cast<long long>(want.shape()[1]), err);
  // Without the long prompt the batch pads to the longest of the rest (46 rows), with zeros after each prompt.
  const std::vector<std::string> all = prompts();
  const std::vector<std::string> short_ones(all.begin(), all.begin() + 3);
  const QwenImagePromptEmbeds part = qwen_image_prompt_embeds(qwen25, *encoder, short_ones);
  const std::vector<int64_t> m = cases().get("qwenimage.mask").to_vector<int64_t>();
  const int64_t longest = std::count(m.begin() + 2 * 512, m.begin() + 3 * 512, int64_t{1});
  ASSERT_EQ(part.embeds.shape(), (Shape{3, longest, 16}));
  EXPECT_LE(relative_to_max(part.embeds, want.slice(0, 0, 3).slice(1, 0, longest).contiguous()), kTolerance);
  EXPECT_THAT(error_of([&] { qwen_image_prompt_embeds(qwen25, *encoder, {"x"}, 1025); }), HasSubstr("1024"));
}

TEST(LlmPromptsTest, RefusesBadRequests) {
  auto encoder = load_qwen3(zimage_text_output());
  autograd::NoGradGuard no_grad;
  EXPECT_THAT(error_of([&] { zimage_prompt_embeds(tokenizer(), *encoder, {}); }), HasSubstr("no prompts"));
  EXPECT_THAT(error_of([&] { flux2_klein_prompt_embeds(tokenizer(), *encoder, {"x"}, 0); }), HasSubstr("max_length"));
  // klein needs layer 27; the Z-Image encoder has it, but an encoder cut shorter does not.
  auto short_encoder = load_qwen3(LlmOutput::hidden_state(9));
  EXPECT_THROW(flux2_klein_prompt_embeds(tokenizer(), *short_encoder, {"x"}), WickError);
  auto mistral = LlmEncoder::load(wick::testing::test_data_dir() + "/llm/mistral",
                                  {.output = LlmOutput::hidden_state(1), .dtype = DType::F32});
  try {
    zimage_prompt_embeds(tokenizer(), *mistral, {"x"});
    ADD_FAILURE() << "no error";
  } catch (const WickError& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Data);
    EXPECT_THAT(error.what(), HasSubstr("mistral"));
  }
}

}  // namespace
}  // namespace wick::llm
