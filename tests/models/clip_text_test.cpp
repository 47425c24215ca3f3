// CLIP text encoders (models/clip) against transformers 5.24 on the tiny random models of
// tests/data/clip_text (tests/reference/make_clip_text_fixtures.py; its README lists every tensor):
// clip_l (CLIPTextModel: width 16, 3 layers of 4 heads, MLP 37, quick_gelu, eos_token_id 2: argmax
// pooling) and clip_g (CLIPTextModelWithProjection: 16 wide, 2 layers of 2 heads, MLP 37, gelu,
// projection 32, eos_token_id 49407: first-EOS pooling), vocab 49408 and 77 positions, float16 files;
// ids [3, 77] of real CLIP token ids. The OpenCLIP-named SDXL file was checked by the script against
// open_clip's own model (bit-identical), so matching transformers from it is matching open_clip.
//
// Every weight format loads to the same outputs: the committed folders and OpenCLIP file, and files
// this test writes from them by renaming only (SDXL and SD3 single files, ComfyUI's clip_l / clip_g,
// transformers >= 5.6's flat names). Metric per tensor: max_i |wick_i - ref_i| / max_i |ref_i|.
#include "models/clip/clip_text.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "engine/autograd/node.h"
#include "models/clip/clip_weights.h"
#include "models/nn/basic.h"
#include "runtime/safetensors.h"
#include "tests/error_of.h"
#include "tests/models/weights_test_util.h"
#include "tests/test_data.h"

namespace wick::clip {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using wick::testing::error_of;
using wick::testing::scratch_dir;

// f32 parity: every output of every format within this of transformers (relative to the max).
constexpr double kF32Tolerance = 1e-5;

std::string data(const std::string& name) { return wick::testing::test_data_dir() + "/clip_text/" + name; }

const SafetensorsFile& cases() {
  static const SafetensorsFile file = SafetensorsFile::open(data("cases.safetensors"));
  return file;
}
Tensor expected(const std::string& name) { return cases().get(name); }
Tensor ids() { return expected("ids"); }

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

// The tensors of a safetensors file or folder, renamed by `rename` (empty result: dropped).
std::vector<std::pair<std::string, Tensor>> renamed(const std::string& path,
                                                    const std::function<std::string(const std::string&)>& rename) {
  WeightSource source = WeightSource::open(path);
  std::vector<std::pair<std::string, Tensor>> out;
  for (const std::string& name : source.names()) {
    std::string to = rename(name);
    if (!to.empty()) out.emplace_back(to, source.get(name));
  }
  return out;
}
std::function<std::string(const std::string&)> add_prefix(const std::string& prefix) {
  return [prefix](const std::string& name) { return prefix + name; };
}
std::string same(const std::string& name) { return name; }

std::string write(const std::string& folder, const std::string& file,
                  const std::vector<std::vector<std::pair<std::string, Tensor>>>& parts) {
  fs::path dir = scratch_dir(folder);
  std::vector<std::pair<std::string, Tensor>> all;
  for (const auto& part : parts) all.insert(all.end(), part.begin(), part.end());
  save_safetensors((dir / file).string(), all, {{"format", "pt"}});
  return (dir / file).string();
}

// Single files holding both encoders (and other components), written once.
struct Written {
  std::string pipeline, sdxl, sd3, comfy_l, comfy_g, flat_l, clip_l_f32, openclip_g_f32;
};
const Written& written() {
  static const Written files = [] {
    Written w;
    // A diffusers pipeline folder: text_encoder/ (L) and text_encoder_2/ (G) beside each other.
    fs::path pipeline = scratch_dir("clip_pipeline");
    fs::create_directory_symlink(fs::absolute(data("clip_l")), pipeline / "text_encoder");
    fs::create_directory_symlink(fs::absolute(data("clip_g")), pipeline / "text_encoder_2");
    w.pipeline = pipeline.string();
    const auto l = renamed(data("clip_l"), same), g = renamed(data("clip_g"), same);
    const auto g_openclip = renamed(data("sdxl_clip_g_openclip.safetensors"), same);
    const std::vector<std::pair<std::string, Tensor>> unet = {
        {"model.diffusion_model.input_blocks.0.0.weight", wick::testing::dyadic({4, 4}, 1)}};
    // SDXL: CLIP-L (HF names) under embedders.0, bigG (OpenCLIP names) under embedders.1, a UNet.
    w.sdxl = write("clip_sdxl", "sd_xl_tiny.safetensors",
                   {renamed(data("clip_l"), add_prefix("conditioner.embedders.0.transformer.")), g_openclip, unet});
    // SD3: both in HF names under text_encoders.*, beside a T5 and the MMDiT.
    w.sd3 = write("clip_sd3", "sd3_tiny.safetensors",
                  {renamed(data("clip_l"), add_prefix("text_encoders.clip_l.transformer.")),
                   renamed(data("clip_g"), add_prefix("text_encoders.clip_g.transformer.")),
                   {{"text_encoders.t5xxl.transformer.shared.weight", wick::testing::dyadic({8, 4}, 2)}},
                   unet});
    // ComfyUI's text encoder files: the HF names, no config.json; clip_l with a position_ids buffer.
    std::vector<std::pair<std::string, Tensor>> l_buffers = l;
    l_buffers.emplace_back("text_model.embeddings.position_ids",
                           Tensor::from_vector<int64_t>(std::vector<int64_t>(77, 0), {1, 77}));
    w.comfy_l = write("clip_comfy_l", "clip_l.safetensors", {l_buffers});
    w.comfy_g = write("clip_comfy_g", "clip_g.safetensors", {g});
    // transformers >= 5.6 saves CLIPTextModel without "text_model.": a folder with its config.json.
    w.flat_l = write("clip_flat_l", "model.safetensors", {renamed(data("clip_l"), [](const std::string& name) {
                       return name.rfind("text_model.", 0) == 0 ? name.substr(11) : name;
                     })});
    fs::copy_file(data("clip_l/config.json"), fs::path(w.flat_l).parent_path() / "config.json");
    // f32 copies (same names and values) for the zero-copy checks.
    auto as_f32 = [](std::vector<std::pair<std::string, Tensor>> tensors) {
      for (auto& [name, t] : tensors) t = t.to(DType::F32);
      return tensors;
    };
    w.clip_l_f32 = write("clip_l_f32", "model.safetensors", {as_f32(l)});
    fs::copy_file(data("clip_l/config.json"), fs::path(w.clip_l_f32).parent_path() / "config.json");
    w.openclip_g_f32 = write("clip_openclip_f32", "sd_xl_g.safetensors", {as_f32(g_openclip)});
    return w;
  }();
  return files;
}

// One way to get a model: where from, as which kind, what must be detected. Sources without a
// config.json give the head count (the tiny widths are not 64k) and pool by argmax (the default).
struct Source {
  std::string name;
  std::function<std::string()> path;
  ClipKind kind;
  std::string format, prefix;
  bool uses_config_json;

  ClipLoadOptions options() const {
    ClipLoadOptions o;
    o.kind = kind;
    if (!uses_config_json) o.num_heads = kind == ClipKind::L ? 4 : 2;
    return o;
  }
};

std::vector<Source> sources() {
  using K = ClipKind;
  std::vector<Source> out;
  auto add = [&](const char* name, std::function<std::string()> path, K kind, const char* format, const char* prefix,
                 bool config) {
    out.push_back(Source{name, std::move(path), kind, format, prefix, config});
  };
  add(
      "l_folder", [] { return data("clip_l"); }, K::L, "transformers", "", true);
  add(
      "l_pipeline_folder", [] { return written().pipeline; }, K::L, "transformers", "", true);
  add(
      "l_flat_names", [] { return written().flat_l; }, K::L, "transformers_flat", "", true);
  add(
      "l_sdxl_single_file", [] { return written().sdxl; }, K::L, "transformers", "conditioner.embedders.0.transformer.",
      false);
  add(
      "l_sd3_single_file", [] { return written().sd3; }, K::L, "transformers", "text_encoders.clip_l.transformer.",
      false);
  add(
      "l_comfyui_file", [] { return written().comfy_l; }, K::L, "transformers", "", false);
  add(
      "g_folder", [] { return data("clip_g"); }, K::G, "transformers", "", true);
  add(
      "g_pipeline_folder", [] { return written().pipeline; }, K::G, "transformers", "", true);
  add(
      "g_sdxl_openclip_committed", [] { return data("sdxl_clip_g_openclip.safetensors"); }, K::G, "openclip",
      "conditioner.embedders.1.model.", false);
  add(
      "g_sdxl_single_file", [] { return written().sdxl; }, K::G, "openclip", "conditioner.embedders.1.model.", false);
  add(
      "g_sd3_single_file", [] { return written().sd3; }, K::G, "transformers", "text_encoders.clip_g.transformer.",
      false);
  add(
      "g_comfyui_file", [] { return written().comfy_g; }, K::G, "transformers", "", false);
  return out;
}

// The reference pooled / text_embeds of a model under `rule`.
std::string rule_suffix(ClipPooling rule) { return rule == ClipPooling::Argmax ? "argmax" : "first_eos"; }

// Worst relative error of every output against transformers' f32 outputs.
double worst_error(ClipTextModel& model, const std::string& key, std::vector<std::string>* report = nullptr) {
  ClipTextOutput out = model.encode(ids(), {.output_hidden_states = true});
  const int64_t n_layers = model.config().num_layers;
  std::vector<std::pair<std::string, double>> errors;
  errors.emplace_back("last_hidden_state",
                      relative_to_max(out.last_hidden_state, expected(key + ".last_hidden_state")));
  EXPECT_EQ(static_cast<int64_t>(out.hidden_states.size()), n_layers + 1);
  for (int64_t k = 0; k <= n_layers && k < static_cast<int64_t>(out.hidden_states.size()); ++k)
    errors.emplace_back("hidden_states." + std::to_string(k),
                        relative_to_max(out.hidden_states[k], expected(key + ".hidden_states." + std::to_string(k))));
  errors.emplace_back("penultimate", relative_to_max(out.penultimate,
                                                     expected(key + ".hidden_states." + std::to_string(n_layers - 1))));
  const std::string rule = rule_suffix(model.config().pooling);
  errors.emplace_back("pooled", relative_to_max(out.pooled, expected(key + ".pooled_" + rule)));
  if (key == "g") {
    EXPECT_TRUE(out.text_embeds.defined());
    if (out.text_embeds.defined())
      errors.emplace_back("text_embeds", relative_to_max(out.text_embeds, expected("g.text_embeds_" + rule)));
  } else {
    EXPECT_FALSE(out.text_embeds.defined());
  }
  double worst = 0;
  for (const auto& [name, e] : errors) {
    EXPECT_LE(e, kF32Tolerance) << key << " " << name;
    worst = std::max(worst, e);
    if (report) report->push_back(name + " " + std::to_string(e));
  }
  return worst;
}

TEST(ClipTextWeights, EveryFormatLoadsAndMatchesTransformersInF32) {
  for (const Source& s : sources()) {
    SCOPED_TRACE(s.name);
    LoadedClipText loaded = load_clip_text(s.path(), s.options());
    EXPECT_EQ(loaded.format.format.name, s.format);
    EXPECT_EQ(loaded.format.prefix, s.prefix);
    EXPECT_EQ(loaded.config_json.empty(), !s.uses_config_json);
    const bool is_l = s.kind == ClipKind::L;
    const ClipTextConfig& c = loaded.model->config();
    EXPECT_EQ(c.hidden_size, 16);
    EXPECT_EQ(c.num_layers, is_l ? 3 : 2);
    EXPECT_EQ(c.num_heads, is_l ? 4 : 2);
    EXPECT_EQ(c.intermediate_size, 37);
    EXPECT_EQ(c.vocab_size, 49408);
    EXPECT_EQ(c.max_position_embeddings, 77);
    EXPECT_EQ(c.projection_dim, is_l ? 0 : 32);
    EXPECT_EQ(c.activation, is_l ? "quick_gelu" : "gelu");
    // The folders' config.json: eos_token_id 2 (L) -> argmax, 49407 (G) -> first EOS; no config: argmax.
    EXPECT_EQ(c.pooling, s.uses_config_json && !is_l ? ClipPooling::FirstEos : ClipPooling::Argmax);
    EXPECT_EQ(loaded.report.n_loaded, is_l ? 52 : 37);
    for (const auto& [name, tensor] : loaded.model->named_parameters()) {
      EXPECT_EQ(tensor.dtype(), DType::F32) << name;
      EXPECT_FALSE(autograd::requires_grad(tensor)) << name;
    }
    std::vector<std::string> report;
    const double worst = worst_error(*loaded.model, is_l ? "l" : "g", &report);
    std::printf("  [clip %-26s] format %-17s worst output error vs transformers %.2e\n", s.name.c_str(),
                s.format.c_str(), worst);
  }
}

TEST(ClipTextWeights, SingleFilesHoldBothEncodersAndOtherComponents) {
  LoadedClipText l = load_clip_text(written().sdxl, {.kind = ClipKind::L, .num_heads = 4});
  LoadedClipText g = load_clip_text(written().sdxl, {.kind = ClipKind::G, .num_heads = 2});
  EXPECT_EQ(l.report.n_outside_prefix, 29 + 1 + 1);  // bigG's 29 OpenCLIP tensors, logit_scale, the UNet tensor
  EXPECT_EQ(g.report.n_outside_prefix, 52 + 1);
  EXPECT_EQ(g.report.n_ignored, 1);  // logit_scale
  LoadedClipText comfy = load_clip_text(written().comfy_l, {.kind = ClipKind::L, .num_heads = 4});
  EXPECT_EQ(comfy.report.n_ignored, 1);  // text_model.embeddings.position_ids
  // The OpenCLIP in_proj rows are q, k, v thirds; text_projection is the transpose of OpenCLIP's.
  WeightSource openclip = WeightSource::open(data("sdxl_clip_g_openclip.safetensors"));
  const std::string p = "conditioner.embedders.1.model.";
  Tensor in_proj = openclip.get(p + "transformer.resblocks.1.attn.in_proj_weight").to(DType::F32);
  EXPECT_EQ(g.model->parameter("text_model.encoder.layers.1.self_attn.k_proj.weight").to_vector<float>(),
            in_proj.narrow(0, 16, 16).contiguous().to_vector<float>());
  EXPECT_EQ(g.model->parameter("text_projection.weight").shape(), (Shape{32, 16}));
  EXPECT_EQ(g.model->parameter("text_projection.weight").to_vector<float>(),
            openclip.get(p + "text_projection").to(DType::F32).transpose(0, 1).contiguous().to_vector<float>());
}

TEST(ClipTextWeights, SameDtypeLoadsViewTheFile) {
  LoadedClipText l = load_clip_text(written().clip_l_f32, {.kind = ClipKind::L});
  EXPECT_EQ(l.report.n_zero_copy, 52);
  EXPECT_EQ(l.report.n_materialized, 0);
  // OpenCLIP: the q, k, v row blocks of in_proj are views too; only the transposed projection is copied.
  LoadedClipText g = load_clip_text(written().openclip_g_f32, {.kind = ClipKind::G, .num_heads = 2});
  EXPECT_EQ(g.report.n_zero_copy, 36);
  EXPECT_EQ(g.report.n_materialized, 1);
  EXPECT_LE(worst_error(*g.model, "g"), kF32Tolerance);
  // A float16 file into f32 slots is cast once per tensor.
  LoadedClipText cast = load_clip_text(data("clip_l"), {.kind = ClipKind::L});
  EXPECT_EQ(cast.report.n_zero_copy, 0);
  EXPECT_EQ(cast.report.n_materialized, 52);
}

// bf16: the weights cast once (float16 -> bfloat16, round to nearest even, as torch's .to), all maths
// in bf16 with f32 statistics and accumulation. Compared with transformers' bf16 model on the same
// ids and with the f32 references (bf16 transformers itself is 4e-3 .. 1.9e-2 from f32).
constexpr double kBf16Tolerance = 3e-2;

TEST(ClipTextForward, Bf16WithinToleranceOfTransformersBf16) {
  for (const char* key : {"l", "g"}) {
    SCOPED_TRACE(key);
    const bool is_l = std::string(key) == "l";
    LoadedClipText loaded = load_clip_text(data(is_l ? "clip_l" : "clip_g"),
                                           {.kind = is_l ? ClipKind::L : ClipKind::G, .dtype = DType::BF16});
    EXPECT_EQ(loaded.model->parameter("text_model.encoder.layers.0.mlp.fc1.weight").dtype(), DType::BF16);
    ClipTextOutput out = loaded.model->encode(ids());
    EXPECT_EQ(out.last_hidden_state.dtype(), DType::BF16);
    const std::string k = key, rule = rule_suffix(loaded.model->config().pooling);
    const int64_t n_layers = loaded.model->config().num_layers;
    std::vector<std::tuple<std::string, Tensor, Tensor, Tensor>> outputs = {
        {"last_hidden_state", out.last_hidden_state, expected(k + ".bf16.last_hidden_state"),
         expected(k + ".last_hidden_state")},
        {"penultimate", out.penultimate, expected(k + ".bf16.penultimate"),
         expected(k + ".hidden_states." + std::to_string(n_layers - 1))},
        {"pooled", out.pooled, expected(k + ".bf16.pooled"), expected(k + ".pooled_" + rule)}};
    if (!is_l)
      outputs.emplace_back("text_embeds", out.text_embeds, expected("g.bf16.text_embeds"),
                           expected("g.text_embeds_" + rule));
    for (const auto& [name, got, want_bf16, want_f32] : outputs) {
      const double vs_bf16 = relative_to_max(got.to(DType::F32), want_bf16);
      const double vs_f32 = relative_to_max(got.to(DType::F32), want_f32);
      EXPECT_LE(vs_bf16, kBf16Tolerance) << name;
      EXPECT_LE(vs_f32, kBf16Tolerance) << name;
      std::printf("  [clip %s bf16 %-17s] vs transformers bf16 %.2e, vs f32 %.2e (transformers bf16 vs f32 %.2e)\n",
                  key, name.c_str(), vs_bf16, vs_f32, relative_to_max(want_bf16, want_f32));
    }
  }
}

TEST(ClipTextForward, PoolingRules) {
  // Row 0: EOS at 6, padded with EOS; row 1: EOS at 7, padded with 0; row 2: neither BOS nor EOS.
  const std::vector<int64_t> argmax = pooling_positions(ids(), ClipPooling::Argmax, 49407);
  const std::vector<int64_t> first_eos = pooling_positions(ids(), ClipPooling::FirstEos, 49407);
  EXPECT_EQ(argmax[0], 6);
  EXPECT_EQ(argmax[1], 7);
  EXPECT_EQ(first_eos, (std::vector<int64_t>{6, 7, 0}));
  EXPECT_NE(argmax[2], 0);
  const std::vector<int64_t> row2 = ids().narrow(0, 2, 1).to_vector<int64_t>();
  EXPECT_EQ(argmax[2], std::max_element(row2.begin(), row2.end()) - row2.begin());
  // Ties go to the first position; I32 ids work; another eos id.
  Tensor small = Tensor::from_vector<int32_t>({5, 9, 9, 3, 7, 3}, {2, 3});
  EXPECT_EQ(pooling_positions(small, ClipPooling::Argmax, 0), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(pooling_positions(small, ClipPooling::FirstEos, 9), (std::vector<int64_t>{1, 0}));  // row 1: none

  // Both rules on both models, chosen by an option over the folder's config.json.
  for (const char* key : {"l", "g"}) {
    for (ClipPooling rule : {ClipPooling::Argmax, ClipPooling::FirstEos}) {
      const bool is_l = std::string(key) == "l";
      LoadedClipText loaded =
          load_clip_text(data(is_l ? "clip_l" : "clip_g"), {.kind = is_l ? ClipKind::L : ClipKind::G, .pooling = rule});
      ClipTextOutput out = loaded.model->encode(ids());
      EXPECT_EQ(out.pooled_positions, rule == ClipPooling::Argmax ? argmax : first_eos);
      EXPECT_LE(relative_to_max(out.pooled, expected(std::string(key) + ".pooled_" + rule_suffix(rule))),
                kF32Tolerance);
      if (!is_l) {
        EXPECT_LE(relative_to_max(out.text_embeds, expected("g.text_embeds_" + rule_suffix(rule))), kF32Tolerance);
      }
    }
  }
}

TEST(ClipTextForward, ShorterSequencesAreTheCausalPrefix) {
  LoadedClipText loaded = load_clip_text(data("clip_l"), {.kind = ClipKind::L});
  Tensor prefix = ids().narrow(1, 0, 9).contiguous();  // rows 0 and 1 keep their EOS (at 6 and 7)
  ClipTextOutput out = loaded.model->encode(prefix);
  EXPECT_EQ(out.last_hidden_state.shape(), (Shape{3, 9, 16}));
  EXPECT_LE(relative_to_max(out.last_hidden_state, expected("l.last_hidden_state").narrow(1, 0, 9).contiguous()),
            kF32Tolerance);
  EXPECT_LE(relative_to_max(out.pooled.narrow(0, 0, 2), expected("l.pooled_argmax").narrow(0, 0, 2)), kF32Tolerance);
}

TEST(ClipTextForward, TheActivationMatters) {
  // The tests above tell quick_gelu from gelu: the other one is far outside the tolerance.
  for (const auto& [folder, wrong] : {std::pair{"clip_l", "gelu"}, std::pair{"clip_g", "quick_gelu"}}) {
    const bool is_l = std::string(folder) == "clip_l";
    LoadedClipText loaded =
        load_clip_text(data(folder), {.kind = is_l ? ClipKind::L : ClipKind::G, .activation = wrong});
    ClipTextOutput out = loaded.model->encode(ids());
    EXPECT_GT(relative_to_max(out.last_hidden_state, expected(std::string(is_l ? "l" : "g") + ".last_hidden_state")),
              1e-3)
        << folder;
  }
  nn::Activation quick("quick_gelu");
  Tensor x = Tensor::from_vector<float>({-3.0f, -0.5f, 0.0f, 0.25f, 2.0f}, {5});
  std::vector<float> y = quick.forward(x).to_vector<float>();
  for (size_t i = 0; i < y.size(); ++i) {
    const float v = x.to_vector<float>()[i];
    EXPECT_FLOAT_EQ(y[i], v * (1.0f / (1.0f + std::exp(-1.702f * v))));
  }
}

TEST(ClipTextConfig, RealSizesAndParameterCounts) {
  auto count = [](const ClipTextConfig& c) {
    int64_t n = 0;
    for (const auto& [name, shape] : parameter_shapes(c)) n += numel(shape);
    return n;
  };
  // transformers' CLIPTextModel of openai/clip-vit-large-patch14, and SDXL's text_encoder_2
  // (CLIPTextModelWithProjection of laion/CLIP-ViT-bigG-14).
  EXPECT_EQ(count(clip_l_config()), 123060480);
  EXPECT_EQ(count(clip_g_config()), 694659840);
  EXPECT_EQ(clip_l_config().head_dim(), 64);
  EXPECT_EQ(clip_g_config().head_dim(), 64);
  EXPECT_EQ(known_kind(clip_l_config()), ClipKind::L);
  EXPECT_EQ(known_kind(clip_g_config()), ClipKind::G);
  EXPECT_FALSE(known_kind(ClipTextConfig{.hidden_size = 16, .num_layers = 3}).has_value());
  // Heads from the width when no config.json gives them: 64 wide.
  EXPECT_EQ(config_from_shapes(parameter_shapes(clip_l_config())).num_heads, 12);
  EXPECT_EQ(config_from_shapes(parameter_shapes(clip_g_config())).num_heads, 20);
  EXPECT_EQ(config_from_shapes(parameter_shapes(clip_g_config())).projection_dim, 1280);
  EXPECT_EQ(config_from_shapes(parameter_shapes(clip_g_config())).num_layers, 32);
  // A model holds exactly parameter_shapes.
  ClipTextConfig tiny{.vocab_size = 50,
                      .hidden_size = 8,
                      .intermediate_size = 12,
                      .num_layers = 2,
                      .num_heads = 2,
                      .max_position_embeddings = 10,
                      .projection_dim = 6,
                      .initialize = true};
  ClipTextModel model(tiny);
  std::map<std::string, Shape> shapes;
  for (const auto& [name, t] : model.named_parameters()) {
    shapes[name] = t.shape();
    EXPECT_FALSE(autograd::requires_grad(t)) << name;
  }
  EXPECT_EQ(shapes, parameter_shapes(tiny));
  EXPECT_THAT(error_of([] { ClipTextModel bad(ClipTextConfig{.hidden_size = 30, .num_heads = 4}); }),
              HasSubstr("hidden_size 30 is not a multiple of num_heads 4"));
  EXPECT_THAT(error_of([] { ClipTextModel bad(ClipTextConfig{.activation = "relu"}); }),
              HasSubstr("activation 'relu' is not one of quick_gelu (OpenAI CLIP), gelu (OpenCLIP)"));
}

std::optional<ErrorKind> kind_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const WickError& e) {
    return e.kind();
  }
  return std::nullopt;
}

TEST(ClipTextWeights, WrongWeightsAreDataErrorsNamingFileAndTensors) {
  const auto l = renamed(data("clip_l"), same);
  auto without = [&](const std::string& drop) {
    std::vector<std::pair<std::string, Tensor>> out;
    for (const auto& entry : l)
      if (entry.first != drop) out.push_back(entry);
    return out;
  };
  // kind and num_heads of the load (0 heads: from config.json or the width).
  struct Case {
    std::string name;
    std::function<std::string()> path;
    ClipKind load_as;
    int64_t num_heads;
    std::vector<std::string> says;
    ErrorKind kind = ErrorKind::Data;
  };
  const ClipKind L = ClipKind::L;
  const std::vector<Case> table = {
      {"a missing tensor",
       [&] {
         return write("clip_bad_missing", "clip_l.safetensors", {without("text_model.encoder.layers.1.mlp.fc2.bias")});
       },
       L,
       4,
       {"clip_l.safetensors read as format 'transformers'", "1 parameters missing",
        "text_model.encoder.layers.1.mlp.fc2.bias"}},
      {"a stray tensor",
       [&] {
         return write("clip_bad_stray", "clip_l.safetensors",
                      {l, {{"text_model.encoder.layers.0.extra.weight", wick::testing::dyadic({2}, 3)}}});
       },
       L,
       4,
       {"1 source tensors unused", "text_model.encoder.layers.0.extra.weight"}},
      {"a wrong shape",
       [&] {
         auto bad = without("text_model.encoder.layers.2.self_attn.v_proj.weight");
         bad.emplace_back("text_model.encoder.layers.2.self_attn.v_proj.weight", wick::testing::dyadic({16, 15}, 4));
         return write("clip_bad_shape", "clip_l.safetensors", {bad});
       },
       L,
       4,
       {"text_model.encoder.layers.2.self_attn.v_proj.weight: the model expects [16, 16], the source has [16, 15]"}},
      {"no token embedding",
       [&] {
         return write("clip_bad_embedding", "clip_l.safetensors",
                      {without("text_model.embeddings.token_embedding.weight")});
       },
       L,
       4,
       {"clip_bad_embedding/clip_l.safetensors: 'text_model.embeddings.token_embedding.weight' is missing"}},
      {"config.json contradicting the shapes",
       [&] {
         const std::string file = write("clip_bad_config", "model.safetensors", {l});
         std::ifstream in(data("clip_l/config.json"));
         std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
         text.replace(text.find("\"intermediate_size\": 37"), 23, "\"intermediate_size\": 64");
         std::ofstream(fs::path(file).parent_path() / "config.json") << text;
         return file;
       },
       L,
       0,
       {"config.json says intermediate_size = 64 but the weights have 37 (layer 0's mlp.fc1 rows)"}},
      {"an OpenCLIP in_proj that is not three blocks",
       [&] {
         auto g = renamed(data("sdxl_clip_g_openclip.safetensors"), same);
         for (auto& [name, t] : g)
           if (name == "conditioner.embedders.1.model.transformer.resblocks.0.attn.in_proj_weight")
             t = t.narrow(0, 0, 47);
         return write("clip_bad_in_proj", "sd_xl.safetensors", {g});
       },
       ClipKind::G,
       2,
       {"rows of conditioner.embedders.1.model.transformer.resblocks.0.attn.in_proj_weight [47, 16] do not split into "
        "3 "
        "equal blocks"}},
      {"bigG asked for as CLIP-L",
       [] { return data("sdxl_clip_g_openclip.safetensors"); },
       L,
       4,
       {"sdxl_clip_g_openclip.safetensors holds CLIP-G (bigG) (format 'openclip' under the prefix "
        "'conditioner.embedders.1.model.'), not CLIP-L: load it as CLIP-G (bigG)",
        "is in none of the known formats", "'transformers' looks for 'text_model.encoder.layers.0.mlp.fc1.weight'"}},
      {"not a CLIP file",
       [] { return wick::testing::test_data_dir() + "/flux/dev_bfl.safetensors"; },
       L,
       4,
       {"dev_bfl.safetensors is in none of the known formats"}},
      {"no heads for a width that is not 64k",
       [] { return written().comfy_l; },
       L,
       0,
       {"clip_comfy_l/clip_l.safetensors: the width 16 is not a multiple of 64", "give num_heads"},
       ErrorKind::Config},
  };
  for (const Case& c : table) {
    SCOPED_TRACE(c.name);
    const std::string path = c.path();
    ClipLoadOptions options;
    options.kind = c.load_as;
    options.num_heads = c.num_heads;
    const std::string message = error_of([&] { load_clip_text(path, options); });
    for (const std::string& text : c.says) EXPECT_THAT(message, HasSubstr(text));
    EXPECT_EQ(kind_of([&] { load_clip_text(path, options); }), c.kind);
  }

  LoadedClipText loaded = load_clip_text(data("clip_l"), {.kind = ClipKind::L});
  EXPECT_THAT(error_of([&] {
                loaded.model->encode(Tensor::from_vector<int64_t>({49406, 49408}, {1, 2}));
              }),
              HasSubstr("token id 49408 is outside the vocabulary [0, 49408)"));
  EXPECT_THAT(error_of([&] {
                loaded.model->encode(Tensor::from_vector<int64_t>(std::vector<int64_t>(78, 1), {1, 78}));
              }),
              HasSubstr("must hold 1 to 77 tokens per sequence"));
}

}  // namespace
}  // namespace wick::clip
