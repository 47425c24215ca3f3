// What each model takes from its text encoders (models/flux/flux_text.h, models/sd3/sd3_text.h,
// models/sdxl/sdxl_text.h) against diffusers 0.42.1's encode_prompt on the committed tiny encoders
// (tests/data/prompts, made by tests/reference/make_prompt_fixtures.py; its README lists every tensor):
// FluxPipeline at max_sequence_length 512 and 256, StableDiffusion3Pipeline at 256 (CLIP 16 + 16 padded to
// T5's 48), StableDiffusionXLPipeline with force_zeros_for_empty_prompt; four prompts (a short one, "", one
// over 77 CLIP and 256 T5 tokens, a Unicode one with "wow!!!"). Metric per tensor: max |wick - ref| / max |ref|.
//
// The test writes diffusers pipeline folders from the committed pieces: tokenizer/ and tokenizer_2/ (vocab.json
// and merges.txt from open_clip's gz vocabulary, pad "<|endoftext|>" and "!"), the encoders as links, and SD3's
// text_encoder/ (clip_l plus the committed text_projection). Qwen-Image's rows are checked against
// QwenImagePipeline.encode_prompt with the tiny Qwen2.5-VL of tests/data/qwenimage_sample/from_prompts.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/flux/flux_text.h"
#include "models/qwenimage/qwenimage_text.h"
#include "models/registry.h"
#include "models/sd3/sd3_text.h"
#include "models/sdxl/sdxl_text.h"
#include "models/weights/weight_source.h"
#include "models/zimage/zimage_text.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/join.h"
#include "runtime/safetensors.h"
#include "tests/error_of.h"
#include "tests/llm_fixture.h"
#include "tests/models/weights_test_util.h"
#include "tests/test_data.h"

namespace wick {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using wick::testing::error_of;
using wick::testing::scratch_dir;

constexpr double kF32Tolerance = 1e-5;   // f32 against diffusers' f32
// T5 over 512 tokens: measured 9.98e-6 against diffusers (8.2e-6 against a float64 run of the same T5,
// transformers' own f32 3.2e-6): the CPU attention sums 512 keys in f32 in order, and the order of
// OpenBLAS's kernels may differ between CPUs, so the bound is 2x the measurement, not 1e-5.
constexpr double kF32LongTolerance = 2e-5;
constexpr double kBf16Tolerance = 5e-2;  // bf16 against diffusers' f32 (T5's own bf16 is ~2e-2 off)

std::string data(const std::string& name) { return wick::testing::test_data_dir() + "/" + name; }

const SafetensorsFile& cases() {
  static const SafetensorsFile file = SafetensorsFile::open(data("prompts/encode_prompt_cases.safetensors"));
  return file;
}
Tensor expected(const std::string& name) { return cases().get(name); }

std::vector<std::string> prompts() {
  static const std::vector<std::string> list = nlohmann::json::parse(cases().metadata().at("prompts"));
  return list;
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

bool all_zero(const Tensor& t) {
  for (double v : t.to_vector<double>())
    if (v != 0) return false;
  return true;
}

std::vector<int64_t> values(const Tensor& t) { return t.to_vector<int64_t>(); }

Tensor token(const text::PromptEmbeddings& e, const std::string& name) {
  for (const auto& [key, tensor] : e.tokens)
    if (key == name) return tensor;
  ADD_FAILURE() << "no token tensor " << name;
  return Tensor();
}

// The kind of the WickError fn throws.
template <typename Fn>
ErrorKind kind_of(Fn&& fn) {
  try {
    fn();
  } catch (const WickError& error) {
    return error.kind();
  }
  ADD_FAILURE() << "no WickError thrown";
  return ErrorKind::Usage;
}

// ---- fixture folders ----

// tokenizer/ (CLIP-L) and tokenizer_2/ (bigG) as diffusers' folders hold them.
void write_tokenizer(const fs::path& dir, const std::string& pad) {
  fs::create_directories(dir);
  const std::string gz = data("clip_tokenizer/bpe_simple_vocab_16e6.txt.gz");
  clip::ClipTokenizer tokenizer = clip::ClipTokenizer::from_open_clip_bpe(gz);
  nlohmann::json vocab = nlohmann::json::object();
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) vocab[tokenizer.token(id)] = id;
  std::ofstream(dir / "vocab.json") << vocab.dump();
  gzFile in = gzopen(gz.c_str(), "rb");
  std::string text;
  char buffer[1 << 16];
  for (int n; (n = gzread(in, buffer, sizeof buffer)) > 0;) text.append(buffer, static_cast<size_t>(n));
  gzclose(in);
  std::ofstream merges(dir / "merges.txt");
  merges << "#version: 0.2\n";
  size_t begin = text.find('\n') + 1;
  for (int i = 0; i < 48894; ++i) {
    const size_t end = text.find('\n', begin);
    merges << text.substr(begin, end - begin) << "\n";
    begin = end + 1;
  }
  std::ofstream(dir / "tokenizer_config.json") << nlohmann::json{{"model_max_length", 77}, {"pad_token", pad}}.dump();
}

void link(const fs::path& target, const fs::path& name) { fs::create_directory_symlink(fs::absolute(target), name); }

// safetensors of `path` (file or folder) plus `extra`, written to dir/model.safetensors; `edit` may change them.
void write_weights(const fs::path& dir, const std::string& path,
                   const std::function<void(std::vector<std::pair<std::string, Tensor>>&)>& edit) {
  fs::create_directories(dir);
  WeightSource source = WeightSource::open(path);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& name : source.names()) tensors.emplace_back(name, source.get(name));
  edit(tensors);
  save_safetensors((dir / "model.safetensors").string(), tensors, {{"format", "pt"}});
}

struct Folders {
  fs::path clip_l_tokenizer, clip_g_tokenizer, flux, sd3, sdxl, sd3_clip_l, zimage, qwenimage;
};

const Folders& folders() {
  static const Folders f = [] {
    Folders out;
    const fs::path root = scratch_dir("prompt_pipelines");
    out.clip_l_tokenizer = root / "vocab_l";
    out.clip_g_tokenizer = root / "vocab_g";
    write_tokenizer(out.clip_l_tokenizer, "<|endoftext|>");
    write_tokenizer(out.clip_g_tokenizer, "!");
    // SD3's CLIP-L: a CLIPTextModelWithProjection (clip_l plus its text_projection).
    out.sd3_clip_l = root / "sd3_clip_l";
    write_weights(out.sd3_clip_l, data("clip_text/clip_l"), [](auto& tensors) {
      SafetensorsFile projection = SafetensorsFile::open(data("prompts/sd3_clip_l_projection.safetensors"));
      tensors.emplace_back("text_projection.weight", projection.get("text_projection.weight"));
    });
    fs::copy_file(data("clip_text/clip_l/config.json"), out.sd3_clip_l / "config.json");

    out.flux = root / "flux";
    fs::create_directories(out.flux / "tokenizer_2");
    link(out.clip_l_tokenizer, out.flux / "tokenizer");
    fs::copy_file(data("t5/spiece.model"), out.flux / "tokenizer_2" / "spiece.model");
    link(data("clip_text/clip_l"), out.flux / "text_encoder");
    link(data("t5/pipeline/text_encoder_3"), out.flux / "text_encoder_2");

    out.sd3 = root / "sd3";
    fs::create_directories(out.sd3 / "tokenizer_3");
    link(out.clip_l_tokenizer, out.sd3 / "tokenizer");
    link(out.clip_g_tokenizer, out.sd3 / "tokenizer_2");
    fs::copy_file(data("t5/spiece.model"), out.sd3 / "tokenizer_3" / "spiece.model");
    link(out.sd3_clip_l, out.sd3 / "text_encoder");
    link(data("clip_text/clip_g"), out.sd3 / "text_encoder_2");
    link(data("prompts/sd3_t5"), out.sd3 / "text_encoder_3");

    out.sdxl = root / "sdxl";
    fs::create_directories(out.sdxl);
    link(out.clip_l_tokenizer, out.sdxl / "tokenizer");
    link(out.clip_g_tokenizer, out.sdxl / "tokenizer_2");
    link(data("clip_text/clip_l"), out.sdxl / "text_encoder");
    link(data("clip_text/clip_g"), out.sdxl / "text_encoder_2");
    std::ofstream(out.sdxl / "model_index.json")
        << R"({"_class_name": "StableDiffusionXLPipeline", "force_zeros_for_empty_prompt": false})";

    // Z-Image: the tiny Qwen3 of tests/data/zimage_sample (its compact embedding expanded) and Qwen3's tokenizer.
    out.zimage = root / "zimage";
    fs::create_directories(out.zimage / "text_encoder");
    wick::testing::write_full_llm_file(data("zimage_sample/qwen3.safetensors"),
                                       (out.zimage / "text_encoder" / "model.safetensors").string());
    link(data("bpe/qwen3"), out.zimage / "tokenizer");

    // Qwen-Image: the tiny Qwen2.5-VL of tests/data/qwenimage_sample/from_prompts with its config.json (the head
    // width), and Qwen-Image's tokenizer files with Qwen's truncated vocabulary.
    out.qwenimage = root / "qwenimage";
    fs::create_directories(out.qwenimage / "text_encoder");
    fs::create_directories(out.qwenimage / "tokenizer");
    wick::testing::write_full_llm_file(data("qwenimage_sample/from_prompts/qwen25vl.safetensors"),
                                       (out.qwenimage / "text_encoder" / "model.safetensors").string());
    fs::copy_file(data("qwenimage_sample/from_prompts/qwen25vl_config.json"),
                  out.qwenimage / "text_encoder" / "config.json");
    for (const auto& entry : fs::directory_iterator(data("bpe/qwen_image")))
      fs::copy_file(entry.path(), out.qwenimage / "tokenizer" / entry.path().filename());
    for (const char* name : {"vocab.json", "merges.txt"})
      fs::copy_file(data("bpe/qwen3/") + name, out.qwenimage / "tokenizer" / name);
    return out;
  }();
  return f;
}

// ComfyUI's layout: encoder files, open_clip's vocabulary, spiece.model.
text::TextEncoderFiles comfy_files(const std::string& t5) {
  return {.clip_l = data("clip_text/clip_l/model.safetensors"),
          .clip_g = data("clip_text/clip_g/model.safetensors"),
          .t5 = t5,
          .clip_vocab = data("clip_tokenizer/bpe_simple_vocab_16e6.txt.gz"),
          .t5_tokenizer = data("t5/spiece.model")};
}

// ---- Flux ----

void expect_flux(const text::PromptEmbeddings& e, const std::string& name, int64_t length, double tolerance) {
  EXPECT_EQ(values(token(e, "clip_l_ids")), values(expected("clip_l.ids")));
  EXPECT_EQ(values(token(e, "t5_ids")), values(expected("t5.ids." + std::to_string(length))));
  std::vector<int64_t> mask = values(token(e, "t5_ids"));
  for (int64_t& m : mask) m = m != 0;  // T5 pieces are never the pad id 0
  EXPECT_EQ(values(e.mask), mask);
  EXPECT_EQ(values(token(e, "t5_mask")), mask);
  EXPECT_LE(relative_to_max(e.context, expected(name + ".prompt_embeds")), tolerance);
  EXPECT_LE(relative_to_max(e.pooled, expected(name + ".pooled_prompt_embeds")), tolerance);
}

TEST(PromptEncoding, FluxDevMatchesDiffusersFromPipelineFolder) {
  auto encoders = flux::FluxTextEncoders::from_pipeline(folders().flux.string());
  text::PromptEmbeddings e = flux::encode_flux_prompts(encoders, prompts(), {.t5_length = 512});
  EXPECT_EQ(e.context.shape(), (Shape{4, 512, 32}));
  EXPECT_EQ(e.context.dtype(), DType::F32);  // the CPU's default
  expect_flux(e, "flux_dev", 512, kF32LongTolerance);
  std::printf("flux dev (512) vs diffusers: context %.2e, pooled %.2e\n",
              relative_to_max(e.context, expected("flux_dev.prompt_embeds")),
              relative_to_max(e.pooled, expected("flux_dev.pooled_prompt_embeds")));
  EXPECT_EQ(e.info.model, "flux");
  EXPECT_EQ(e.info.embeds_encoder, "t5-xxl");
  EXPECT_EQ(e.info.pooled_encoder, "clip-l");
  EXPECT_EQ(e.info.max_length, 512);
  EXPECT_EQ(e.info.clip_l_pad_id, 49407);
  EXPECT_EQ(e.info.t5_pad_id, 0);
  EXPECT_FALSE(encoders.clip_l.loaded());  // freed after use
  EXPECT_FALSE(encoders.t5.loaded());
}

TEST(PromptEncoding, FluxSchnellMatchesDiffusersFromFiles) {
  auto encoders = flux::FluxTextEncoders::from_files(comfy_files(data("t5/t5xxl_comfy.safetensors")));
  text::PromptEmbeddings e = flux::encode_flux_prompts(encoders, prompts(), {.t5_length = 256, .batch_size = 3});
  EXPECT_EQ(e.context.shape(), (Shape{4, 256, 32}));
  expect_flux(e, "flux_schnell", 256, kF32Tolerance);
  std::printf("flux schnell (256) vs diffusers: context %.2e, pooled %.2e\n",
              relative_to_max(e.context, expected("flux_schnell.prompt_embeds")),
              relative_to_max(e.pooled, expected("flux_schnell.pooled_prompt_embeds")));
  const std::map<std::string, std::string> m = e.info.metadata();
  EXPECT_EQ(m.at("model"), "flux");
  EXPECT_EQ(m.at("max_length"), "256");
  EXPECT_EQ(m.at("t5_length"), "256");
  EXPECT_EQ(m.at("clip_l_pad_id"), "49407");
  EXPECT_EQ(m.at("t5_mask_applied"), "false");
  EXPECT_EQ(m.at("dtype"), "f32");
  EXPECT_THAT(m.at("t5_file"), HasSubstr("t5xxl_comfy.safetensors"));
  EXPECT_EQ(m.count("clip_g_pad_id"), 0u);
}

TEST(PromptEncoding, FluxBf16IsCloseAndKeepLoadedKeepsTheEncoders) {
  auto encoders = flux::FluxTextEncoders::from_pipeline(folders().flux.string(),
                                                        {.dtype = DType::BF16, .keep_loaded = true});
  text::PromptEmbeddings e = flux::encode_flux_prompts(encoders, prompts(), {.t5_length = 256});
  EXPECT_EQ(e.context.dtype(), DType::BF16);
  EXPECT_EQ(e.pooled.dtype(), DType::BF16);
  const double context = relative_to_max(e.context, expected("flux_schnell.prompt_embeds"));
  const double pooled = relative_to_max(e.pooled, expected("flux_schnell.pooled_prompt_embeds"));
  std::printf("flux schnell bf16 vs diffusers f32: context %.2e, pooled %.2e\n", context, pooled);
  EXPECT_LE(context, kBf16Tolerance);
  EXPECT_LE(pooled, kBf16Tolerance);
  EXPECT_TRUE(encoders.clip_l.loaded());
  EXPECT_TRUE(encoders.t5.loaded());
  // A second call reuses them (no load time) and gives the same values.
  text::PromptEmbeddings again = flux::encode_flux_prompts(encoders, {prompts()[2]}, {.t5_length = 256});
  EXPECT_LE(relative_to_max(again.context, e.context.narrow(0, 2, 1)), 1e-6);
  EXPECT_EQ(again.timings.at(0).first, "clip_l load");
  EXPECT_LT(again.timings.at(0).second, 1e-3);
  encoders.t5.unload();
  EXPECT_FALSE(encoders.t5.loaded());
}

// ---- SD3 ----

TEST(PromptEncoding, Sd3MatchesDiffusersFromPipelineFolder) {
  auto encoders = sd3::Sd3TextEncoders::from_pipeline(folders().sd3.string());
  text::PromptEmbeddings e = sd3::encode_sd3_prompts(encoders, prompts());
  EXPECT_EQ(e.context.shape(), (Shape{4, 77 + 256, 48}));
  EXPECT_EQ(e.pooled.shape(), (Shape{4, 16 + 32}));
  EXPECT_EQ(values(token(e, "clip_l_ids")), values(expected("clip_l.ids")));
  EXPECT_EQ(values(token(e, "clip_g_ids")), values(expected("clip_g.ids")));
  EXPECT_EQ(values(token(e, "t5_ids")), values(expected("t5.ids.256")));
  const double context = relative_to_max(e.context, expected("sd3.prompt_embeds"));
  const double pooled = relative_to_max(e.pooled, expected("sd3.pooled_prompt_embeds"));
  std::printf("sd3 (77 + 256) vs diffusers: context %.2e, pooled %.2e\n", context, pooled);
  EXPECT_LE(context, kF32Tolerance);
  EXPECT_LE(pooled, kF32Tolerance);
  // The CLIP tokens are padded from 32 to T5's 48 features with zeros.
  EXPECT_TRUE(all_zero(e.context.narrow(1, 0, 77).narrow(2, 32, 16).contiguous()));
  // The mask: CLIP-L's or bigG's window (bigG splits "wow!!!" into more tokens), then T5's.
  const std::vector<int64_t> mask = values(e.mask), l = values(expected("clip_l.ids")),
                             g = values(expected("clip_g.ids")), t5 = values(expected("t5.ids.256"));
  for (int64_t row = 0; row < 4; ++row) {
    const auto count_l = std::find(l.begin() + row * 77, l.begin() + (row + 1) * 77, 49407) - (l.begin() + row * 77);
    const auto count_g = std::find(g.begin() + row * 77, g.begin() + (row + 1) * 77, 49407) - (g.begin() + row * 77);
    for (int64_t p = 0; p < 77; ++p)
      EXPECT_EQ(mask[static_cast<size_t>(row * 333 + p)], p <= std::max(count_l, count_g) ? 1 : 0) << row << " " << p;
    for (int64_t p = 0; p < 256; ++p)
      EXPECT_EQ(mask[static_cast<size_t>(row * 333 + 77 + p)], t5[static_cast<size_t>(row * 256 + p)] != 0 ? 1 : 0);
  }
  EXPECT_EQ(e.info.clip_l_pooled, "projected");
  EXPECT_EQ(e.info.max_length, 256);
  EXPECT_EQ(e.info.clip_g_pad_id, 0);
  EXPECT_EQ(e.info.pooled_encoder, "clip-l projected+clip-g projected");
}

TEST(PromptEncoding, Sd3UnprojectedPooledIsSaisAndComfyUisFromFiles) {
  text::TextEncoderFiles files = comfy_files(data("prompts/sd3_t5/model.safetensors"));
  auto plain = sd3::Sd3TextEncoders::from_files(files);  // ComfyUI's clip_l: no text_projection
  EXPECT_THAT(error_of([&] { sd3::encode_sd3_prompts(plain, prompts()); }),
              AllOf(HasSubstr("clip_l/model.safetensors has no text_projection.weight"), HasSubstr("unprojected")));
  text::PromptEmbeddings e =
      sd3::encode_sd3_prompts(plain, prompts(), {.clip_l_pooled = sd3::ClipLPooled::Unprojected, .batch_size = 2});
  EXPECT_LE(relative_to_max(e.context, expected("sd3.prompt_embeds")), kF32Tolerance);
  EXPECT_LE(relative_to_max(e.pooled, expected("sd3.pooled_unprojected")), kF32Tolerance);
  EXPECT_EQ(e.info.clip_l_pooled, "unprojected");
  EXPECT_EQ(e.info.metadata().at("clip_l_pooled"), "unprojected");
  // With the projection the file choice is free: the same file gives both.
  files.clip_l = (folders().sd3_clip_l / "model.safetensors").string();
  auto projected = sd3::Sd3TextEncoders::from_files(files);
  text::PromptEmbeddings u =
      sd3::encode_sd3_prompts(projected, prompts(), {.clip_l_pooled = sd3::ClipLPooled::Unprojected});
  EXPECT_LE(relative_to_max(u.pooled, expected("sd3.pooled_unprojected")), kF32Tolerance);
  EXPECT_GT(relative_to_max(expected("sd3.pooled_prompt_embeds"), expected("sd3.pooled_unprojected")), 1e-2);
  EXPECT_EQ(sd3::parse_clip_l_pooled("unprojected"), sd3::ClipLPooled::Unprojected);
  EXPECT_THAT(error_of([] { sd3::parse_clip_l_pooled("sai"); }), HasSubstr("projected (diffusers, kohya)"));
}

// ---- SDXL ----

TEST(PromptEncoding, SdxlMatchesDiffusersFromPipelineFolder) {
  auto encoders = sdxl::SdxlTextEncoders::from_pipeline(folders().sdxl.string());
  EXPECT_FALSE(encoders.force_zeros_for_empty_prompt);  // the folder's model_index.json says false
  text::PromptEmbeddings e = sdxl::encode_sdxl_prompts(encoders, prompts());
  EXPECT_EQ(e.context.shape(), (Shape{4, 77, 32}));
  EXPECT_EQ(e.pooled.shape(), (Shape{4, 32}));
  const double context = relative_to_max(e.context, expected("sdxl.prompt_embeds"));
  const double pooled = relative_to_max(e.pooled, expected("sdxl.pooled_prompt_embeds"));
  std::printf("sdxl (77) vs diffusers: context %.2e, pooled %.2e\n", context, pooled);
  EXPECT_LE(context, kF32Tolerance);
  EXPECT_LE(pooled, kF32Tolerance);
  EXPECT_FALSE(all_zero(e.context.select(0, 1).contiguous()));  // "" is encoded unless asked
  EXPECT_EQ(e.info.max_length, 77);
  EXPECT_EQ(e.info.pooled_encoder, "clip-g projected");
  EXPECT_EQ(e.info.metadata().at("zeros_for_empty_prompt"), "false");
}

TEST(PromptEncoding, SdxlZerosForEmptyPrompt) {
  auto encoders = sdxl::SdxlTextEncoders::from_files(comfy_files(""), {.keep_loaded = true});
  EXPECT_TRUE(encoders.force_zeros_for_empty_prompt);  // diffusers' default without model_index.json
  text::PromptEmbeddings e = sdxl::encode_sdxl_prompts(encoders, prompts(), {.zeros_for_empty_prompt = true});
  EXPECT_TRUE(all_zero(e.context.select(0, 1).contiguous()));
  EXPECT_TRUE(all_zero(e.pooled.select(0, 1).contiguous()));
  // What diffusers makes for a missing negative prompt with force_zeros_for_empty_prompt.
  EXPECT_EQ(relative_to_max(e.context.narrow(0, 1, 1), expected("sdxl.negative_prompt_embeds").narrow(0, 1, 1)), 0.0);
  for (int64_t row : {0, 2, 3}) {
    EXPECT_LE(relative_to_max(e.context.select(0, row), expected("sdxl.prompt_embeds").select(0, row)), kF32Tolerance);
    EXPECT_LE(relative_to_max(e.pooled.select(0, row), expected("sdxl.pooled_prompt_embeds").select(0, row)),
              kF32Tolerance);
  }
  EXPECT_EQ(e.info.metadata().at("zeros_for_empty_prompt"), "true");
  // Only empty prompts: zeros of the right shape without loading any encoder.
  encoders.clip_l.unload();
  encoders.clip_g.unload();
  text::PromptEmbeddings negative = sdxl::encode_sdxl_prompts(encoders, {"", ""}, {.zeros_for_empty_prompt = true});
  EXPECT_EQ(negative.context.shape(), (Shape{2, 77, 32}));
  EXPECT_EQ(negative.pooled.shape(), (Shape{2, 32}));
  EXPECT_TRUE(all_zero(negative.context) && all_zero(negative.pooled));
  EXPECT_FALSE(encoders.clip_l.loaded() || encoders.clip_g.loaded());
  EXPECT_TRUE(negative.timings.empty());
}

// ---- Qwen-Image ----

// QwenImagePipeline.encode_prompt's rows (tests/data/qwenimage_sample/from_prompts: the two prompts, padded to the
// longer, and each negative prompt) through the registry's prompt encoder, as `wick dataset encode` stores them: the
// same rows, then zero rows with a zero mask up to max_length.
TEST(PromptEncoding, QwenImageMatchesDiffusersThroughTheRegistry) {
  const SafetensorsFile fixture = SafetensorsFile::open(data("qwenimage_sample/from_prompts/case.safetensors"));
  std::vector<std::string> texts = nlohmann::json::parse(fixture.metadata().at("prompts"));
  texts.push_back("");
  texts.push_back("blurry, low quality");
  texts.push_back(" ");  // the model card's negative prompt: one token more than ""
  const Architecture& arch = find_encodable_architecture("qwenimage", "test");
  const text::PromptSpec spec = arch.dataset_spec()->prompts;
  const text::PromptEmbeddings e = arch.make_prompt_encoder({.pipeline = folders().qwenimage.string(),
                                                             .options = text::prompt_options(spec, {}, arch.name())})
                                       ->encode(texts);
  EXPECT_EQ(e.context.shape(), (Shape{5, 512, 32}));
  EXPECT_EQ(e.mask.shape(), (Shape{5, 512}));
  EXPECT_EQ(e.pooled.shape(), (Shape{5, 0}));
  EXPECT_EQ(e.info.model, "qwenimage");
  EXPECT_EQ(e.info.max_length, 512);
  EXPECT_EQ(e.info.embeds_encoder, qwenimage::kTextEmbedsEncoder);

  // Each text's rows, its mask, and nothing after them.
  auto expect_rows = [&](int64_t row, const Tensor& want, const Tensor& want_mask, const std::string& what) {
    const int64_t n = want.size(0);
    const double error = relative_to_max(e.context.select(0, row).narrow(0, 0, n).contiguous(), want);
    std::printf("qwenimage prompt rows vs diffusers QwenImagePipeline.encode_prompt, %s (%lld rows): %.2e\n",
                what.c_str(), static_cast<long long>(n), error);
    EXPECT_LE(error, kF32Tolerance) << what;
    std::vector<int64_t> mask = values(e.mask.select(0, row).contiguous());
    const std::vector<int64_t> first(mask.begin(), mask.begin() + n);
    EXPECT_EQ(first, values(want_mask)) << what;
    const int64_t real = std::count(first.begin(), first.end(), 1);
    EXPECT_EQ(std::count(mask.begin(), mask.end(), 1), real) << what;
    EXPECT_TRUE(all_zero(e.context.select(0, row).narrow(0, real, 512 - real).contiguous())) << what;
  };
  const Tensor embeds = fixture.get("prompt_embeds"), mask = fixture.get("prompt_mask");
  for (int64_t i = 0; i < 2; ++i)
    expect_rows(i, embeds.select(0, i).contiguous(), mask.select(0, i).contiguous(), texts[static_cast<size_t>(i)]);
  for (const auto& [row, name] :
       std::vector<std::pair<int64_t, std::string>>{{2, "cfg"}, {3, "cfg_negative"}, {4, "cfg_space"}}) {
    const Tensor negative = fixture.get(name + ".negative_embeds").select(0, 0).contiguous();
    expect_rows(row, negative, ones({negative.size(0)}, DType::I64), "\"" + texts[static_cast<size_t>(row)] + "\"");
  }
}

// ---- bad input ----

TEST(PromptEncoding, MissingTokenizerFilesAreDataErrorsNamingTheFile) {
  const fs::path root = scratch_dir("prompt_missing");
  fs::copy(folders().flux, root / "flux", fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  fs::remove(root / "flux" / "tokenizer_2" / "spiece.model");
  auto missing_spiece = [&] { flux::FluxTextEncoders::from_pipeline((root / "flux").string()); };
  EXPECT_EQ(kind_of(missing_spiece), ErrorKind::Data);
  EXPECT_THAT(error_of(missing_spiece), HasSubstr("tokenizer_2"));

  // An SD3 folder whose tokenizer_2/ lacks merges.txt.
  fs::create_directories(root / "sd3");
  for (const char* name : {"tokenizer", "tokenizer_3", "text_encoder", "text_encoder_2", "text_encoder_3"})
    fs::copy(folders().sd3 / name, root / "sd3" / name, fs::copy_options::copy_symlinks | fs::copy_options::recursive);
  fs::create_directories(root / "sd3" / "tokenizer_2");
  fs::copy_file(folders().clip_g_tokenizer / "vocab.json", root / "sd3" / "tokenizer_2" / "vocab.json");
  auto missing_merges = [&] { sd3::Sd3TextEncoders::from_pipeline((root / "sd3").string()); };
  EXPECT_EQ(kind_of(missing_merges), ErrorKind::Data);
  EXPECT_THAT(error_of(missing_merges), HasSubstr("tokenizer_2/merges.txt: no such file"));

  text::TextEncoderFiles files = comfy_files(data("t5/t5xxl_comfy.safetensors"));
  files.clip_vocab = (root / "bpe_simple_vocab_16e6.txt.gz").string();
  auto missing_gz = [&] { flux::FluxTextEncoders::from_files(files); };
  EXPECT_EQ(kind_of(missing_gz), ErrorKind::Data);
  EXPECT_THAT(error_of(missing_gz), HasSubstr(files.clip_vocab));

  files.clip_vocab.clear();
  auto not_given = [&] { flux::FluxTextEncoders::from_files(files); };
  EXPECT_EQ(kind_of(not_given), ErrorKind::Config);
  EXPECT_THAT(error_of(not_given), HasSubstr("the CLIP vocabulary (clip_vocab) is not given"));
  EXPECT_THAT(error_of([] { flux::FluxTextEncoders::from_pipeline("/nonexistent/flux"); }),
              HasSubstr("/nonexistent/flux is not a folder"));
}

TEST(PromptEncoding, VocabularyLargerThanTheEmbeddingIsADataError) {
  const fs::path root = scratch_dir("prompt_vocab");
  // A CLIP-L whose token embedding has 1,000 rows (diffusers' tiny test config) with the real 49,408 vocabulary.
  write_weights(root / "clip_1000", data("clip_text/clip_l"), [](auto& tensors) {
    for (auto& [name, tensor] : tensors)
      if (name == "text_model.embeddings.token_embedding.weight") tensor = tensor.narrow(0, 0, 1000).contiguous();
  });
  nlohmann::json config = nlohmann::json::parse(std::ifstream(data("clip_text/clip_l/config.json")));
  config["vocab_size"] = 1000;
  std::ofstream(root / "clip_1000" / "config.json") << config.dump();
  // A T5 whose embedding has 500 rows for the 1,000-piece spiece.model.
  write_weights(root / "t5_500", data("t5/t5xxl_comfy.safetensors"), [](auto& tensors) {
    for (auto& [name, tensor] : tensors)
      if (name == "shared.weight") tensor = tensor.narrow(0, 0, 500).contiguous();
  });
  text::TextEncoderFiles files = comfy_files(data("t5/t5xxl_comfy.safetensors"));
  files.clip_l = (root / "clip_1000" / "model.safetensors").string();
  auto clip = [&] { flux::FluxTextEncoders::from_files(files); };
  EXPECT_EQ(kind_of(clip), ErrorKind::Data);
  EXPECT_THAT(error_of(clip), AllOf(HasSubstr("bpe_simple_vocab_16e6.txt.gz: the CLIP vocabulary has 49408 tokens"),
                                    HasSubstr("clip_1000/model.safetensors has a token embedding of 1000 rows")));
  files = comfy_files((root / "t5_500" / "model.safetensors").string());
  auto t5 = [&] { sd3::Sd3TextEncoders::from_files(files); };
  EXPECT_EQ(kind_of(t5), ErrorKind::Data);
  EXPECT_THAT(error_of(t5), AllOf(HasSubstr("spiece.model: the SentencePiece model has 1000 pieces"),
                                  HasSubstr("t5_500/model.safetensors has an embedding of 500 rows")));
}

TEST(PromptEncoding, AnEncoderOfAnotherModelIsADataErrorNamingTheFile) {
  const std::string t5_file = data("t5/t5xxl_comfy.safetensors");
  const std::string clip_l_file = data("clip_text/clip_l/model.safetensors");
  text::TextEncoderFiles files = comfy_files(t5_file);
  files.clip_l = t5_file;  // T5 given as CLIP-L
  auto t5_as_clip = [&] { flux::FluxTextEncoders::from_files(files); };
  EXPECT_EQ(kind_of(t5_as_clip), ErrorKind::Data);
  EXPECT_THAT(error_of(t5_as_clip), HasSubstr(t5_file));
  files = comfy_files(clip_l_file);  // CLIP-L given as T5
  auto clip_as_t5 = [&] { flux::FluxTextEncoders::from_files(files); };
  EXPECT_EQ(kind_of(clip_as_t5), ErrorKind::Data);
  EXPECT_THAT(error_of(clip_as_t5), HasSubstr(clip_l_file));
  files = comfy_files("");
  files.clip_g = clip_l_file;  // CLIP-L given as bigG: no projection to pool with
  auto l_as_g = [&] { sdxl::SdxlTextEncoders::from_files(files); };
  EXPECT_EQ(kind_of(l_as_g), ErrorKind::Data);
  EXPECT_THAT(error_of(l_as_g), AllOf(HasSubstr(clip_l_file), HasSubstr("has no text_projection.weight")));
  // SD3's CLIP widths 16 + 16 fit Flux's 32-wide T5 exactly, not a 24-wide one.
  files = comfy_files(data("t5/t5xxl_comfy.safetensors"));
  EXPECT_NO_THROW(sd3::Sd3TextEncoders::from_files(files));
  const fs::path root = scratch_dir("prompt_narrow_t5");
  write_weights(root, data("prompts/sd3_t5/model.safetensors"), [](auto& tensors) {
    for (auto& [name, tensor] : tensors)
      if (name == "shared.weight") tensor = tensor.narrow(1, 0, 24).contiguous();
  });
  files.t5 = (root / "model.safetensors").string();
  EXPECT_THAT(error_of([&] { sd3::Sd3TextEncoders::from_files(files); }), HasSubstr("exceed the T5 width 24"));
}

TEST(PromptEncoding, UsageErrors) {
  auto encoders = flux::FluxTextEncoders::from_pipeline(folders().flux.string());
  EXPECT_THAT(error_of([&] { flux::encode_flux_prompts(encoders, {}); }), HasSubstr("no prompts to encode"));
  EXPECT_THAT(error_of([&] { flux::encode_flux_prompts(encoders, {"a"}, {.t5_length = 0}); }),
              HasSubstr("t5_length must be at least 1"));
  EXPECT_THAT(error_of([&] { flux::encode_flux_prompts(encoders, {"a"}, {.batch_size = 0}); }),
              HasSubstr("batch_size must be at least 1"));
  auto f16 = [&] { flux::FluxTextEncoders::from_pipeline(folders().flux.string(), {.dtype = DType::F16}); };
  EXPECT_EQ(kind_of(f16), ErrorKind::Config);
  EXPECT_THAT(error_of(f16), HasSubstr("use f32 or bf16"));
}

// ---- through the registry (what `wick encode-prompt` and `wick dataset encode` run) ----

// Each architecture's text::PromptEncoder gives, bit for bit, what its own encode_*_prompts gives with the same
// choices; the spec's options reach it; parts and options of other models are refused naming them.
TEST(PromptEncoding, EveryEncodableArchitectureThroughTheRegistry) {
  std::vector<std::string> names;
  for (const Architecture* arch : encodable_architectures()) names.push_back(arch->name());
  EXPECT_EQ(names, (std::vector<std::string>{"flux", "sd3", "sdxl", "zimage", "qwenimage"}));
  EXPECT_EQ(encodable_architecture_names(), "flux, sd3, sdxl, zimage, qwenimage");
  EXPECT_THAT(error_of([] { find_encodable_architecture("dit", "--model"); }),
              HasSubstr("--model: 'dit' is not a model whose datasets are encoded from images (flux, sd3, sdxl, "
                        "zimage, qwenimage)"));
  const std::vector<std::string> two = {prompts()[0], prompts()[3]};
  auto through_registry = [&](const std::string& model, const fs::path& pipeline,
                              const std::map<std::string, std::string>& options) {
    const Architecture& arch = find_encodable_architecture(model, "test");
    const text::PromptSpec spec = arch.dataset_spec()->prompts;
    return arch.make_prompt_encoder({.pipeline = pipeline.string(),
                                     .options = text::prompt_options(spec, options, arch.name())})
        ->encode(two);
  };
  auto same = [](const text::PromptEmbeddings& a, const text::PromptEmbeddings& b) {
    EXPECT_TRUE(wick::testing::same_bits(a.context, b.context));
    EXPECT_TRUE(wick::testing::same_bits(a.pooled, b.pooled));
    EXPECT_TRUE(wick::testing::same_bits(a.mask, b.mask));
    EXPECT_EQ(a.info.metadata(), b.info.metadata());
  };
  auto flux_direct = flux::FluxTextEncoders::from_pipeline(folders().flux.string());
  same(through_registry("flux", folders().flux, {{"t5_length", "24"}}),
       flux::encode_flux_prompts(flux_direct, two, {.t5_length = 24}));
  EXPECT_EQ(through_registry("flux1", folders().flux, {}).context.size(1), 512);  // an alias; the default length
  auto sd3_direct = sd3::Sd3TextEncoders::from_pipeline(folders().sd3.string());
  same(through_registry("sd3", folders().sd3, {{"t5_length", "16"}, {"clip_l_pooled", "unprojected"}}),
       sd3::encode_sd3_prompts(sd3_direct, two, {.t5_length = 16, .clip_l_pooled = sd3::ClipLPooled::Unprojected}));
  auto sdxl_direct = sdxl::SdxlTextEncoders::from_pipeline(folders().sdxl.string());
  const text::PromptEmbeddings zeroed = through_registry("sdxl", folders().sdxl, {{"zeros_for_empty_prompt", "true"}});
  same(zeroed, sdxl::encode_sdxl_prompts(sdxl_direct, two, {.zeros_for_empty_prompt = true}));
  EXPECT_EQ(zeroed.info.metadata().at("zeros_for_empty_prompt"), "true");
  EXPECT_EQ(flux::encode_flux_prompts(flux_direct, two).info.metadata().count("zeros_for_empty_prompt"), 0u);
  auto zimage_direct = zimage::ZImageTextEncoder::from_pipeline(folders().zimage.string());
  same(through_registry("zimage", folders().zimage, {{"max_length", "48"}}),
       zimage::encode_zimage_prompts(zimage_direct, two, {.max_length = 48}));
  EXPECT_EQ(through_registry("z-image", folders().zimage, {}).context.size(1), 512);  // an alias; the default length
  auto qwenimage_direct = qwenimage::QwenImageTextEncoder::from_pipeline(folders().qwenimage.string());
  same(through_registry("qwenimage", folders().qwenimage, {{"max_length", "48"}}),
       qwenimage::encode_qwenimage_prompts(qwenimage_direct, two, {.max_length = 48}));
  EXPECT_EQ(through_registry("qwen-image", folders().qwenimage, {}).context.size(1), 512);  // an alias; the default

  const text::PromptSpec sdxl_spec = find_encodable_architecture("sdxl", "test").dataset_spec()->prompts;
  EXPECT_THAT(error_of([&] { text::prompt_options(sdxl_spec, {{"t5_length", "77"}}, "sdxl"); }),
              HasSubstr("sdxl takes no --t5-length (its prompt options: --zeros-for-empty-prompt)"));
  EXPECT_THAT(error_of([&] { text::check_prompt_files(sdxl_spec, {.files = {{"t5", "t5.safetensors"}}}, "sdxl"); }),
              HasSubstr("sdxl's text encoders take no --t5 (they take --clip-l, --clip-g, --clip-vocab, "
                        "--clip-g-vocab)"));
  EXPECT_THAT(error_of([&] { text::check_prompt_files(sdxl_spec, {}, "sdxl"); }),
              HasSubstr("sdxl text encoders: give a diffusers pipeline folder (--path) or the encoder files"));
  const text::PromptSpec zimage_spec = find_encodable_architecture("zimage", "test").dataset_spec()->prompts;
  EXPECT_THAT(error_of([&] { text::prompt_options(zimage_spec, {{"t5_length", "77"}}, "zimage"); }),
              HasSubstr("zimage takes no --t5-length (its prompt options: --max-length)"));
  EXPECT_THAT(error_of([&] { text::check_prompt_files(zimage_spec, {.files = {{"clip_l", "clip_l.safetensors"}}},
                                                      "zimage"); }),
              HasSubstr("zimage's text encoders take no --clip-l"));
  const text::PromptSpec qwenimage_spec = find_encodable_architecture("qwenimage", "test").dataset_spec()->prompts;
  EXPECT_THAT(error_of([&] {
                text::prompt_options(qwenimage_spec, {{"t5_length", "77"}}, "qwenimage");
              }),
              HasSubstr("qwenimage takes no --t5-length (its prompt options: --max-length)"));
  EXPECT_THAT(error_of([&] {
                text::prompt_options(qwenimage_spec, {{"max_length", "1025"}}, "qwenimage");
              }),
              HasSubstr("--max-length: 1025 is not in [1, 1024]"));
  const text::PromptSpec sd3_spec = find_encodable_architecture("sd3", "test").dataset_spec()->prompts;
  EXPECT_EQ(kind_of([&] { text::prompt_options(sd3_spec, {{"clip_l_pooled", "sideways"}}, "sd3"); }),
            ErrorKind::Config);
  EXPECT_THAT(error_of([&] { text::prompt_options(sd3_spec, {{"t5_length", "0"}}, "sd3"); }),
              HasSubstr("--t5-length: 0 is not in [1, 4096]"));
  EXPECT_THAT(error_of([&] { text::prompt_options(sd3_spec, {{"t5_length", "12x"}}, "sd3"); }),
              HasSubstr("--t5-length: '12x' is not an integer"));
}

}  // namespace
}  // namespace wick
