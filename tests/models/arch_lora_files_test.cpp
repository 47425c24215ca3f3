// LoRA files of each architecture's tiny model (tests/models/tiny_arch.h), one row per architecture: the model
// `wick train` builds (build_model through the registry, f32, lora_case's adapters: LoRA rank 4, alpha 8 on the
// default preset, and LoCon where the case has it) carries the reference's adapters and gives PEFT's output; the
// files other tools wrote load into it; the files wick writes are the ones other tools write (kohya's / ComfyUI's
// naming, and diffusers' PEFT naming with its key list), and load back; PEFT's output-axis DoRA matches and
// round-trips, the kohya orientation too; the diffusers folder builds the same model as the single file; save.format
// defaults to the architecture's naming. Against the fixtures of tests/data/<arch> (diffusers 0.42.1, PEFT 0.21.2;
// see each README).
//
// Metric, per tensor: max_i |wick_i - ref_i| / max_i |ref_i|.
//
// A new architecture adds a row to kRows (and its TinyArch and fixtures).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <ostream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "engine/autograd/backward.h"
#include "engine/autograd/ops_loss.h"
#include "models/lora_files.h"
#include "models/sdxl/sdxl_weights.h"
#include "models/weights/lora_format.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/matmul.h"
#include "tests/error_of.h"
#include "tests/models/tiny_arch.h"
#include "tests/models/weights_test_util.h"

namespace wick {
namespace {

using ::testing::HasSubstr;
using testing::relative_to_max;
using testing::same_bits;
using testing::TinyArch;
using testing::tiny_arch;

struct LoraFilesRow {
  const TinyArch* arch;
  size_t n_adapters;          // lora_case's adapters
  LoraFormat default_format;  // save.format when the config names none
  // The architecture's metadata, in every LoRA file it writes.
  std::map<std::string, std::string> metadata;
  // lora_case's LoRA as other tools save it: kohya's (ComfyUI's) file and diffusers' PEFT file ("" = none committed).
  std::string kohya_file, peft_file;
  size_t n_peft_keys;  // the PEFT file's lora_A / lora_B: two per diffusers Linear
  std::string kohya_key;  // a key of the kohya file, naming a module as users know it
  // diffusers' SDXL loader's conversion of the kohya file wick writes: kohya key -> PEFT key ("" = none committed),
  // and the diffusers module an adapter path is.
  std::string kohya_diffusers_keys;
  std::string (*diffusers_module)(const DiffusionModel& model, const std::string& path);
  double reload_tolerance;  // a written file loaded into a fresh model: its output vs the writer's
  size_t n_dora_peft_keys;  // the PEFT tensors of dora_case (0: it holds none)
};

void PrintTo(const LoraFilesRow& row, std::ostream* os) { *os << row.arch->name; }

std::string sdxl_diffusers_module(const DiffusionModel& model, const std::string& path) {
  const auto& unet = dynamic_cast<const sdxl::Unet&>(model);
  return sdxl::ldm_to_diffusers(path, sdxl::module_renames(sdxl::layout_of(unet.config())));
}

const LoraFilesRow kRows[] = {
    {.arch = &tiny_arch("flux"), .n_adapters = 26, .default_format = LoraFormat::Kohya,
     .metadata = {{"modelspec.architecture", "flux-1-dev/lora"}, {"ss_network_dim", "4"}, {"ss_network_alpha", "8"}},
     .kohya_file = "dev_lora_kohya.safetensors", .peft_file = "dev_lora_peft.safetensors", .n_peft_keys = 80,
     .kohya_key = "lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight", .kohya_diffusers_keys = "",
     .diffusers_module = nullptr, .reload_tolerance = 1e-6, .n_dora_peft_keys = 120},
    {.arch = &tiny_arch("sd3"), .n_adapters = 31, .default_format = LoraFormat::Peft,
     .metadata = {{"modelspec.architecture", "stable-diffusion-3-5-medium/lora"}, {"ss_base_model_version", "sd3"},
                  {"ss_network_dim", "4"}, {"ss_network_alpha", "8"}},
     .kohya_file = "medium_lora_kohya.safetensors", .peft_file = "medium_lora_peft.safetensors", .n_peft_keys = 94,
     .kohya_key = "lora_unet_joint_blocks_1_x_block_attn2_qkv.lora_down.weight", .kohya_diffusers_keys = "",
     .diffusers_module = nullptr, .reload_tolerance = 1e-6, .n_dora_peft_keys = 141},
    // With LoCon, as kohya: the Linears' rank and alpha 4 / 8 and the convolutions' 2 / 1 in ss_network_args.
    {.arch = &tiny_arch("sdxl"), .n_adapters = 257, .default_format = LoraFormat::Kohya,
     .metadata = {{"modelspec.architecture", "stable-diffusion-xl-v1-base/lora"},
                  {"ss_base_model_version", "sdxl_base_v1-0"}, {"ss_network_dim", "4"}, {"ss_network_alpha", "8"},
                  {"ss_network_args", R"({"conv_dim": "2", "conv_alpha": "1"})"}},
     .kohya_file = "", .peft_file = "", .n_peft_keys = 0,
     .kohya_key = "lora_unet_input_blocks_1_0_in_layers_2.lora_down.weight",
     .kohya_diffusers_keys = "lora_kohya_diffusers_keys.json", .diffusers_module = sdxl_diffusers_module,
     .reload_tolerance = 0.0, .n_dora_peft_keys = 0},
    // The case's adapters are the attention and SwiGLU Linears of the main layers (the attention_mlp preset); the
    // PEFT file is diffusers' save_lora_weights of them. No layer is fused: the kohya names are musubi-tuner's.
    {.arch = &tiny_arch("zimage"), .n_adapters = 14, .default_format = LoraFormat::Peft,
     .metadata = {{"ss_base_model_version", "zimage"}, {"ss_network_dim", "4"}, {"ss_network_alpha", "8"}},
     .kohya_file = "", .peft_file = "lora_peft.safetensors", .n_peft_keys = 28,
     .kohya_key = "lora_unet_layers_1_feed_forward_w2.lora_down.weight", .kohya_diffusers_keys = "",
     .diffusers_module = nullptr, .reload_tolerance = 0.0, .n_dora_peft_keys = 0},
    // The case's adapters are the default preset's 28 Linears (every Linear of the 2 blocks, img_mod.1 and txt_mod.1
    // included, as musubi-tuner trains them: MODELS2 trap 27); the PEFT file is diffusers' save_lora_weights of them.
    // No layer is fused: the kohya names are musubi-tuner's. The last block's text-only Linears (add_q_proj,
    // to_add_out, txt_mlp) get no gradient: only the image stream is output.
    {.arch = &tiny_arch("qwenimage"), .n_adapters = 28, .default_format = LoraFormat::Peft,
     .metadata = {{"ss_base_model_version", "qwen_image"}, {"modelspec.architecture", "qwen-image/lora"},
                  {"ss_network_dim", "4"}, {"ss_network_alpha", "8"}},
     .kohya_file = "", .peft_file = "lora_peft.safetensors", .n_peft_keys = 56,
     .kohya_key = "lora_unet_transformer_blocks_0_attn_to_q.lora_down.weight", .kohya_diffusers_keys = "",
     .diffusers_module = nullptr, .reload_tolerance = 0.0, .n_dora_peft_keys = 84},
};

class ArchLoraFiles : public ::testing::TestWithParam<LoraFilesRow> {};

// The config that writes the model's adapters in `format`, f32.
TrainConfig save_config(const TinyArch& arch, LoraFormat format) {
  TrainConfig config = arch.config("", arch.lora_network());
  config.save.dtype = DType::F32;
  config.save.format = format;
  return config;
}

std::set<std::string> key_set(const std::map<std::string, Tensor>& tensors) {
  std::set<std::string> keys;
  for (const auto& [name, tensor] : tensors) keys.insert(name);
  return keys;
}

std::string stem(const std::string& file) { return std::filesystem::path(file).stem().string(); }

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string kohya_name(std::string path) {
  std::replace(path.begin(), path.end(), '.', '_');
  return "lora_unet_" + path;
}

TEST_P(ArchLoraFiles, CaseAdaptersAndFilesOtherToolsWroteGivePeftsOutput) {
  const LoraFilesRow& row = GetParam();
  const TinyArch& arch = *row.arch;
  SafetensorsFile lora_case = SafetensorsFile::open(arch.data(arch.cases + "lora_case.safetensors"));
  const Tensor want = lora_case.get("output");
  // The registry model's adapters are the case's modules with its ranks and alphas (LoCon: rank 2, alpha 1).
  std::shared_ptr<DiffusionModel> model = arch.build("", arch.lora_network());
  const std::string prefix = arch.factors + ".";
  std::set<std::string> case_modules, ours;
  for (const std::string& name : lora_case.names())
    if (name.rfind(prefix, 0) == 0 && ends_with(name, ".lora_down"))
      case_modules.insert(name.substr(prefix.size(), name.size() - prefix.size() - 10));
  for (auto& [path, adapter] : nn::find_adapters(*model)) {
    ours.insert(path);
    SCOPED_TRACE(path);
    const Tensor down = lora_case.get(prefix + path + ".lora_down");
    EXPECT_EQ(adapter->options().rank, down.size(0));
    EXPECT_EQ(adapter->options().alpha, down.dim() == 4 && down.size(2) == 3 ? 1.0 : 8.0);
  }
  EXPECT_EQ(ours, case_modules);
  EXPECT_EQ(ours.size(), row.n_adapters);
  testing::copy_case_factors(arch, *model, lora_case);
  const double factors_error = relative_to_max(arch.forward(*model, lora_case), want);
  EXPECT_LE(factors_error, 1e-5);
  // The files other tools wrote load onto the same adapters (diffusers' PEFT file: alpha 8 / r 4 in its metadata).
  std::string from_files;
  for (const std::string& file : {row.kohya_file, row.peft_file}) {
    if (file.empty()) continue;
    std::shared_ptr<DiffusionModel> loaded = arch.build("", arch.lora_network());
    load_lora(*loaded, arch.data(file));
    const double error = relative_to_max(arch.forward(*loaded, lora_case), want);
    EXPECT_LE(error, 1e-5) << file;
    char part[160];
    std::snprintf(part, sizeof part, ", + %s: %.3g", stem(file).c_str(), error);
    from_files += part;
  }
  const double base_change = relative_to_max(arch.forward(*arch.build_base(), lora_case), want);
  std::printf("[%s LoRA files] registry model + the case's factors: %.3g%s vs PEFT's output (the base alone is %.3g "
              "from it)\n",
              arch.name.c_str(), factors_error, from_files.c_str(), base_change);
  EXPECT_GT(base_change, 1e-2) << "the LoRA must change the output for the comparison to mean anything";
}

// A file with adapters the model lacks (trained on the default preset, loaded into an attention-only model) is a
// Data error in every naming, never a silent partial load.
TEST_P(ArchLoraFiles, AFileWithAdaptersTheModelLacksIsRefusedInEveryNaming) {
  const LoraFilesRow& row = GetParam();
  const TinyArch& arch = *row.arch;
  std::shared_ptr<DiffusionModel> model = arch.build("", arch.lora_network());
  const std::filesystem::path dir = testing::scratch_dir(arch.name + "_lora_strict");
  const std::string attention_only = "network: {type: lora, linear: 4, linear_alpha: 8, target: [attention]}\n";
  for (const LoraFormat format : {LoraFormat::Kohya, LoraFormat::Peft}) {
    SCOPED_TRACE(lora_format_name(format));
    if (format == LoraFormat::Peft && row.peft_file.empty()) continue;  // no PEFT naming for this architecture
    const std::string path = (dir / (std::string(lora_format_name(format)) + ".safetensors")).string();
    save_lora(*model, save_config(arch, format), path, 1, "");
    std::shared_ptr<DiffusionModel> fewer = arch.build("", attention_only);
    ASSERT_LT(nn::find_adapters(*fewer).size(), nn::find_adapters(*model).size());
    try {
      load_lora(*fewer, path);
      ADD_FAILURE() << "a file with more adapters than the model loaded";
    } catch (const WickError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Data);
      EXPECT_THAT(e.what(), ::testing::HasSubstr("belongs to no adapter of the model"));
    }
  }
}

TEST_P(ArchLoraFiles, SavedFilesHaveTheKeysOtherToolsWriteAndRead) {
  const LoraFilesRow& row = GetParam();
  const TinyArch& arch = *row.arch;
  SafetensorsFile lora_case = SafetensorsFile::open(arch.data(arch.cases + "lora_case.safetensors"));
  // The model with lora_case's adapters: read from the kohya file where there is one, else the case's factors.
  std::shared_ptr<DiffusionModel> model = arch.build("", arch.lora_network());
  if (!row.kohya_file.empty())
    load_lora(*model, arch.data(row.kohya_file));
  else
    testing::copy_case_factors(arch, *model, lora_case);
  const std::filesystem::path dir = testing::scratch_dir(arch.name + "_lora_files");
  std::vector<std::string> written;

  // PEFT: exactly diffusers' keys; each part's B·A is the file's scaled by its lora_alpha / r = 2.
  if (!row.peft_file.empty()) {
    const std::string peft_path = (dir / "peft.safetensors").string();
    save_lora(*model, save_config(arch, LoraFormat::Peft), peft_path, 7, "");
    LoraFile ours = read_lora_file(peft_path), theirs = read_lora_file(arch.data(row.peft_file));
    EXPECT_EQ(ours.format, LoraFileFormat::Peft);
    const std::set<std::string> our_keys = key_set(ours.tensors), their_keys = key_set(theirs.tensors);
    std::vector<std::string> missing, unexpected;
    std::set_difference(their_keys.begin(), their_keys.end(), our_keys.begin(), our_keys.end(),
                        std::back_inserter(missing));
    std::set_difference(our_keys.begin(), our_keys.end(), their_keys.begin(), their_keys.end(),
                        std::back_inserter(unexpected));
    EXPECT_EQ(our_keys.size(), row.n_peft_keys);
    EXPECT_THAT(missing, ::testing::IsEmpty());
    EXPECT_THAT(unexpected, ::testing::IsEmpty());
    size_t n_parts = 0;
    for (const auto& [name, a] : theirs.tensors) {
      if (name.find(".lora_A.") == std::string::npos) continue;
      SCOPED_TRACE(name);
      const std::string b = name.substr(0, name.size() - std::string("lora_A.weight").size()) + "lora_B.weight";
      EXPECT_TRUE(
          same_bits(matmul(ours.tensors.at(b), ours.tensors.at(name)), mul(matmul(theirs.tensors.at(b), a), 2.0)));
      ++n_parts;
    }
    EXPECT_EQ(n_parts, row.n_peft_keys / 2);
    const nlohmann::json adapter = nlohmann::json::parse(ours.metadata.at("lora_adapter_metadata"));
    EXPECT_EQ(adapter.at("transformer.r"), 4);
    EXPECT_EQ(adapter.at("transformer.lora_alpha"), 4.0);  // the scale is baked into lora_B
    for (const auto& [key, value] : row.metadata) EXPECT_EQ(ours.metadata[key], value) << key;
    written.push_back(peft_path);
  }

  // kohya: exactly the keys of the kohya file (the same tensors), or of diffusers' conversion of it, each naming the
  // module diffusers names; one alpha per adapter.
  const std::string kohya_path = (dir / "kohya.safetensors").string();
  save_lora(*model, save_config(arch, LoraFormat::Kohya), kohya_path, 7, "");
  LoraFile kohya = read_lora_file(kohya_path);
  EXPECT_EQ(kohya.format, LoraFileFormat::Kohya);
  if (!row.kohya_file.empty()) {
    LoraFile kohya_fixture = read_lora_file(arch.data(row.kohya_file));
    EXPECT_EQ(key_set(kohya.tensors), key_set(kohya_fixture.tensors));
    for (const auto& [name, tensor] : kohya_fixture.tensors)
      EXPECT_TRUE(same_bits(kohya.tensors.at(name), tensor)) << name;
  }
  std::set<std::string> factor_keys;
  size_t n_alpha = 0;
  for (const auto& [key, tensor] : kohya.tensors) {
    if (ends_with(key, ".alpha"))
      ++n_alpha;
    else
      factor_keys.insert(key);
  }
  EXPECT_EQ(n_alpha, row.n_adapters);
  EXPECT_EQ(kohya.tensors.count(row.kohya_key), 1u);
  int64_t n_named = 0;
  if (!row.kohya_diffusers_keys.empty()) {
    std::ifstream json_in(arch.data(row.kohya_diffusers_keys));
    const nlohmann::json diffusers_keys = nlohmann::json::parse(json_in);
    std::set<std::string> listed;
    for (const auto& [key, value] : diffusers_keys.items()) listed.insert(key);
    EXPECT_EQ(factor_keys, listed);
    for (auto& [module, adapter] : nn::find_adapters(*model)) {
      const std::string name = kohya_name(module), diffusers = row.diffusers_module(*model, module);
      ASSERT_TRUE(diffusers_keys.contains(name + ".lora_down.weight")) << name;
      EXPECT_EQ(diffusers_keys[name + ".lora_down.weight"], diffusers + ".lora_A.weight");
      EXPECT_EQ(diffusers_keys[name + ".lora_up.weight"], diffusers + ".lora_B.weight");
      ++n_named;
    }
  }
  for (const auto& [key, value] : row.metadata) EXPECT_EQ(kohya.metadata[key], value) << key;
  written.push_back(kohya_path);

  // Each loads back into a freshly built model: the same output.
  const Tensor output = arch.forward(*model, lora_case);
  for (const std::string& path : written) {
    std::shared_ptr<DiffusionModel> again = arch.build("", arch.lora_network());
    load_lora(*again, path);
    const double reload = relative_to_max(arch.forward(*again, lora_case), output);
    const LoraFile file = read_lora_file(path);
    const bool kohya_file = file.format == LoraFileFormat::Kohya;
    const std::string named = kohya_file && n_named > 0 ? " = diffusers' converted set, " + std::to_string(n_named) +
                                                              " modules named as diffusers names them"
                                                        : "";
    std::printf("[%s LoRA files] %s file: %zu keys%s; loaded back: %.3g\n", arch.name.c_str(),
                kohya_file ? "kohya" : "PEFT", file.tensors.size(), named.c_str(), reload);
    EXPECT_LE(reload, row.reload_tolerance) << path;
  }
}

// PEFT's DoRA (output axis, magnitude [out]) on the model's fused layers equals PEFT's per-module DoRAs of diffusers'
// Linears: forward, loss, gradients of lora_down, lora_up and the magnitude; a PEFT file saved from it carries PEFT's
// tensors and loads back. The kohya orientation (dora_scale [1, in], ComfyUI's) round-trips through a kohya file.
TEST_P(ArchLoraFiles, OutputAxisDoraMatchesPeftAndBothOrientationsRoundTrip) {
  const LoraFilesRow& row = GetParam();
  const TinyArch& arch = *row.arch;
  if (row.n_dora_peft_keys == 0)
    GTEST_SKIP() << arch.name << "'s " << arch.cases << "dora_case holds no PEFT (diffusers-named) tensors";
  SafetensorsFile dora_case = SafetensorsFile::open(arch.data(arch.cases + "dora_case.safetensors"));
  std::shared_ptr<DiffusionModel> model = arch.build("", arch.lora_network("dora", "peft"));
  auto adapters = nn::find_adapters(*model);
  ASSERT_EQ(adapters.size(), row.n_adapters);
  for (auto& [path, adapter] : adapters) ASSERT_NE(std::dynamic_pointer_cast<nn::DoRALinear>(adapter), nullptr) << path;
  testing::copy_case_factors(arch, *model, dora_case);
  const Tensor output = arch.forward(*model, dora_case);
  const double output_error = relative_to_max(output, dora_case.get("output"));
  Tensor loss = autograd::mse_loss(arch.as_target(output), dora_case.get("target"));
  const double loss_error = std::fabs(loss.item() - dora_case.get("loss").item()) / dora_case.get("loss").item();
  autograd::GradientStore grads = autograd::backward(loss);
  double worst = 0;
  std::string worst_name;
  int n_grads = 0;
  for (auto& [path, adapter] : adapters) {
    auto dora = std::dynamic_pointer_cast<nn::DoRALinear>(adapter);
    for (const auto& [suffix, slot] : {std::pair<std::string, Tensor>{"lora_down", adapter->down_weight()},
                                       {"lora_up", adapter->up_weight()}, {"magnitude", dora->magnitude()}}) {
      const std::string name = path + "." + suffix;
      const double error = testing::gradient_error(testing::gradient_or_zeros(grads, slot), dora_case,
                                                   "grad." + arch.factors + "." + name);
      EXPECT_LE(error, 1e-4) << name;
      if (error > worst) worst = error, worst_name = name;
      ++n_grads;
    }
  }
  std::printf("[%s DoRA, output axis] vs PEFT: output %.3g, loss %.3g, worst of %d gradients %.3g (%s)\n",
              arch.name.c_str(), output_error, loss_error, n_grads, worst, worst_name.c_str());
  EXPECT_LE(output_error, 1e-5);
  EXPECT_LE(loss_error, 1e-5);

  // Saved as PEFT: diffusers' module names, PEFT's magnitudes as they are, lora_B with alpha / r = 2.
  const std::string path = (testing::scratch_dir(arch.name + "_dora_files") / "dora_peft.safetensors").string();
  save_lora(*model, save_config(arch, LoraFormat::Peft), path, 1, "");
  LoraFile saved = read_lora_file(path);
  std::set<std::string> expected;
  for (const std::string& name : dora_case.names()) {
    if (name.rfind("peft.", 0) != 0) continue;
    const size_t dot = name.rfind('.');
    const std::string module = name.substr(5, dot - 5), kind = name.substr(dot + 1);
    const std::string key = "transformer." + module + "." + kind + (kind == "lora_magnitude_vector" ? "" : ".weight");
    expected.insert(key);
    SCOPED_TRACE(key);
    ASSERT_EQ(saved.tensors.count(key), 1u);
    const Tensor theirs = dora_case.get(name);
    if (kind == "lora_B")
      EXPECT_TRUE(same_bits(saved.tensors.at(key), mul(theirs, 2.0)));
    else
      EXPECT_TRUE(same_bits(saved.tensors.at(key), theirs));
  }
  EXPECT_EQ(expected.size(), row.n_dora_peft_keys);  // diffusers' Linears x (lora_A, lora_B, lora_magnitude_vector)
  EXPECT_EQ(key_set(saved.tensors), expected);
  EXPECT_EQ(nlohmann::json::parse(saved.metadata.at("lora_adapter_metadata")).at("transformer.use_dora"), true);
  std::shared_ptr<DiffusionModel> again = arch.build("", arch.lora_network("dora", "peft"));
  load_lora(*again, path);
  EXPECT_LE(relative_to_max(arch.forward(*again, dora_case), output), 1e-6);
  // The input-axis DoRA (kohya orientation) cannot read it, and says why.
  std::shared_ptr<DiffusionModel> input_axis = arch.build("", arch.lora_network("dora", "kohya"));
  EXPECT_THAT(testing::error_of([&] { load_lora(*input_axis, path); }),
              HasSubstr("PEFT files carry the output-axis [out]"));

  // The kohya orientation: dora_scale [1, in] per module; saved and loaded back.
  std::shared_ptr<DiffusionModel> kohya_dora = arch.build("", arch.lora_network("dora", "kohya"));
  for (auto& [module, adapter] : nn::find_adapters(*kohya_dora)) {
    testing::copy_factor(adapter->down_weight(), dora_case.get(arch.factors + "." + module + ".lora_down"));
    testing::copy_factor(adapter->up_weight(), dora_case.get(arch.factors + "." + module + ".lora_up"));
  }
  const std::string kohya_path = (testing::scratch_dir(arch.name + "_dora_kohya") / "dora_kohya.safetensors").string();
  save_lora(*kohya_dora, save_config(arch, LoraFormat::Kohya), kohya_path, 1, "");
  LoraFile kohya = read_lora_file(kohya_path);
  for (auto& [module, adapter] : nn::find_adapters(*kohya_dora)) {
    const std::string key = kohya_name(module) + ".dora_scale";
    ASSERT_EQ(kohya.tensors.count(key), 1u) << key;
    EXPECT_EQ(kohya.tensors.at(key).shape(), (Shape{1, adapter->down_weight().size(1)})) << key;
  }
  std::shared_ptr<DiffusionModel> kohya_again = arch.build("", arch.lora_network("dora", "kohya"));
  load_lora(*kohya_again, kohya_path);
  EXPECT_LE(relative_to_max(arch.forward(*kohya_again, dora_case), arch.forward(*kohya_dora, dora_case)), 1e-6);
}

TEST_P(ArchLoraFiles, DiffusersFolderBuildsTheSameModelAsTheSingleFile) {
  const TinyArch& arch = *GetParam().arch;
  SafetensorsFile inputs = SafetensorsFile::open(arch.data(arch.cases + "case.safetensors"));
  std::shared_ptr<DiffusionModel> single = arch.build_base();
  std::shared_ptr<DiffusionModel> diffusers = arch.build_base(arch.data(arch.diffusers));
  const Tensor single_out = arch.forward(*single, inputs), diffusers_out = arch.forward(*diffusers, inputs);
  EXPECT_TRUE(same_bits(single_out, diffusers_out));
  const double error = relative_to_max(single_out, inputs.get(arch.output));
  std::printf("[%s registry] %s and %s: bitwise %s; vs diffusers' output %.3g\n", arch.name.c_str(),
              stem(arch.base).c_str(), arch.diffusers.c_str(),
              same_bits(single_out, diffusers_out) ? "equal" : "DIFFERENT", error);
  EXPECT_LE(error, 1e-5);
}

TEST_P(ArchLoraFiles, SaveFormatDefaultsToTheArchitecturesNaming) {
  const LoraFilesRow& row = GetParam();
  EXPECT_EQ(row.arch->config("", "network: {type: lora}\n").save.format, row.default_format);
}

INSTANTIATE_TEST_SUITE_P(Arch, ArchLoraFiles, ::testing::ValuesIn(kRows), testing::RowName());

// The BFL file does not record the RoPE axes: without model.axes_dim they are Flux.1's, which do not fit the
// fixture's head width of 16, and the error says which key to set.
TEST(FluxLoraFiles, BflFileWithoutAxesDimSaysWhichKeyToSet) {
  const TinyArch& flux = tiny_arch("flux");
  const Architecture& arch = find_architecture("flux");
  const ModelConfig no_axes{.arch = arch.name(), .name_or_path = flux.data(flux.base), .dtype = DType::F32,
                            .options = ModelOptions::defaults(arch.schema().keys)};
  EXPECT_THAT(testing::error_of([&] { arch.build({.model = no_axes, .dtype = DType::F32}); }),
              HasSubstr("axes_dim [16, 56, 56] sums to 128 but the head width is 16"));
}

// The sd3.0-like file has no ln_q: its head width comes from model.head_dim (SAI's 64 otherwise). The dataset must
// be SD3's: family, channels and the two text widths are checked before loading.
TEST(Sd3LoraFiles, HeadWidthFromTheModelKeyAndTheDatasetChecked) {
  const TinyArch& sd3 = tiny_arch("sd3");
  const Architecture& arch = find_architecture("sd3");
  ModelConfig no_norm{.arch = "sd3", .name_or_path = sd3.data("sd3_sai.safetensors"), .dtype = DType::F32,
                      .options = ModelOptions::defaults(arch.schema().keys)};
  EXPECT_THAT(testing::error_of([&] { arch.build({.model = no_norm, .dtype = DType::F32}); }),
              HasSubstr("not a multiple of the head width 64"));
  no_norm.options.set("head_dim", int64_t{8});
  auto model = arch.build({.model = no_norm, .dtype = DType::F32});
  SafetensorsFile sd3_case = SafetensorsFile::open(sd3.data("sd3_case.safetensors"));
  EXPECT_LE(relative_to_max(sd3.forward(*model, sd3_case), sd3_case.get("output_square")), 1e-5);
  const ModelConfig medium{.arch = "sd3", .name_or_path = sd3.data(sd3.base), .dtype = DType::F32,
                           .options = ModelOptions::defaults(arch.schema().keys)};
  auto build_with = [&](DataGeometry data) {
    return testing::error_of([&] { arch.build({.model = medium, .data = data, .dtype = DType::F32}); });
  };
  EXPECT_THAT(build_with({.model_family = "flux"}), HasSubstr("model_family 'flux'"));
  EXPECT_THAT(build_with({.latent_channels = 4}), HasSubstr("4-channel latents"));
  EXPECT_THAT(build_with({.text_dim = 4096}), HasSubstr("text embeddings are 4096 wide"));
  EXPECT_THAT(build_with({.pooled_dim = 2048}), HasSubstr("pooled embeddings are 2048 wide"));
}

// sd3's default PEFT (diffusers and ComfyUI load it) under its alias and ai-toolkit's is_v3 flag; a config that
// names a format keeps it, also through the resolved YAML; a full fine-tune writes the model, not a LoRA file.
TEST(Sd3LoraFiles, SaveFormatIsPeftUnlessTheConfigNamesOne) {
  const std::string weights = tiny_arch("sd3").data("medium_sai.safetensors");
  auto parse = [&](const std::string& yaml) { return parse_config_string(yaml, "<test>", config_schema()); };
  const std::string common = "name: t\ndataset: {path: d.h5}\nnetwork: {type: lora}\n";
  TrainConfig sd3 = parse(common + "model: {arch: sd3.5, name_or_path: " + weights + "}\n");
  EXPECT_EQ(sd3.model.arch, "sd3");
  EXPECT_EQ(sd3.save.format, LoraFormat::Peft);
  TrainConfig kohya = parse(common + "model: {arch: sd3, name_or_path: " + weights + "}\nsave: {format: kohya}\n");
  EXPECT_EQ(kohya.save.format, LoraFormat::Kohya);
  TrainConfig ai_toolkit = parse("job: extension\nconfig:\n  name: t\n  process:\n    - type: sd_trainer\n"
                                 "      network: {type: lora}\n      datasets: [{folder_path: d.h5}]\n"
                                 "      model: {name_or_path: " + weights + ", is_v3: true}\n");
  EXPECT_EQ(ai_toolkit.model.arch, "sd3");
  EXPECT_EQ(ai_toolkit.save.format, LoraFormat::Peft);
  EXPECT_EQ(parse(to_yaml(sd3)), sd3);  // the resolved config keeps the format
  // A full fine-tune writes the model, not a LoRA file: no LoRA format is imposed on it.
  TrainConfig full = parse("name: t\ndataset: {path: d.h5}\nnetwork: {type: full}\nmodel: {arch: sd3, name_or_path: " +
                           weights + "}\n");
  EXPECT_EQ(full.save.format, LoraFormat::Kohya);
}

}  // namespace
}  // namespace wick
