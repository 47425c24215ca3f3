// What every architecture's weight formats (models/<arch>/<arch>_weights.h over models/weights/key_map.h) must
// show, one row per architecture, against its fixtures (tests/data/<arch>, written by diffusers 0.42.1 and PEFT
// 0.21.2 with tests/reference/make_<arch>_fixtures.py; see each README): the sharded diffusers folder loads to exactly
// the original file's tensors (renames as views of the shards, the fused and half-swapped ones built once), both
// formats are detected (also in a pipeline folder's transformer/ and under the single files' "model.diffusion_model."
// beside other parts), other files are named with what each format looks for, the LoRA layout splits and swaps the
// fused modules like the weights, and the PEFT and kohya LoRA files convert into each other. What only one
// architecture has (Flux's schnell, its size mismatch message) is in <arch>_weights_test.cpp; SDXL's two formats are
// checked by its row of arch_parity_test.cpp (ArchParity.ForwardMatchesDiffusersInF32 loads both). A new
// architecture adds its row to kRows.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "models/flux/flux_weights.h"
#include "models/registry.h"
#include "models/sd3/sd3_weights.h"
#include "models/weights/key_map.h"
#include "models/weights/lora_format.h"
#include "models/weights/weight_source.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/join.h"
#include "runtime/ops/matmul.h"
#include "runtime/safetensors.h"
#include "tests/error_of.h"
#include "tests/models/arch_test_util.h"
#include "tests/models/tiny_arch.h"
#include "tests/models/weights_test_util.h"

namespace wick::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A target tensor of the original format and the diffusers tensor it comes from: the same values (a rename, loaded
// as a view of the diffusers shard), or its two halves swapped ((shift, scale) vs (scale, shift)).
struct Correspondence {
  std::string target, source;
  bool swapped = false;
};

// What the LoRA layout says of a module's part `part` (fields left empty or negative are not checked).
struct LayoutPart {
  std::string module;
  size_t part = 0;
  std::string peft_module;
  std::optional<size_t> n_parts;
  int64_t row_begin = -1, row_end = -1;
  std::optional<bool> swap_halves;
};

// A LoRA (rank 4, dyadic values) for to_peft beside the swapped module, and the PEFT key it must give.
struct ExtraLora {
  std::string module;
  Shape down, up;
  double alpha = 0;
  std::string peft_key;
};

struct WeightsArch {
  std::string name;  // the registry's name
  // The tiny model in its original format (one file) and diffusers' (a folder of n_shards shards).
  std::string original, original_format, diffusers;
  size_t n_shards = 0, n_tensors = 0;
  int64_t n_materialized = 0, n_zero_copy = 0;  // loading the diffusers folder
  std::function<bool(const std::string&)> fused_target;  // the original targets built by concat or swap
  std::vector<Correspondence> correspondences;
  std::vector<std::string> beside_in_single_file;  // other parts' tensors of the single file, outside the prefix
  // Files no format reads: the PEFT LoRA file (named with what each format looks for) and other architectures'.
  std::vector<std::string> looks_for;
  std::vector<std::string> foreign_files;
  // The LoRA layout of the tiny model: its sizes, what it says of some parts, the error for no shapes.
  std::map<std::string, int64_t> layout_sizes;
  std::vector<LayoutPart> layout_parts;
  std::string no_shapes_error;
  // A LoRA on a module whose diffusers weight has its halves swapped (down [4, in], up [2·half, 4], alpha 8), with
  // its diffusers module, and other LoRAs converted beside it.
  std::string swapped_module, swapped_diffusers;
  Shape swapped_down, swapped_up;
  std::vector<ExtraLora> extra_loras;
  // The committed LoRA files (rank 4, alpha 8): PEFT (diffusers' names, lora_alpha in the metadata) and kohya.
  std::string lora_peft, lora_kohya;
  size_t n_lora_modules = 0, n_peft_keys = 0;

  std::function<DetectedFormat(const WeightSource&)> detect;
  std::function<std::map<std::string, int64_t>(const std::map<std::string, Shape>&)> sizes_of;
  std::function<LoraLayout(const std::map<std::string, Shape>&)> layout_of;
};

// ---- the rows ----

WeightsArch flux_row() {
  return {
      .name = "flux",
      .original = "flux/dev_bfl.safetensors",
      .original_format = "bfl",
      .diffusers = "flux/dev_diffusers",
      .n_shards = 3,
      .n_tensors = 84,
      // Fused: 2 double blocks × (img, txt) qkv × (weight, bias), 2 single linear1 × 2, the final adaLN × 2.
      .n_materialized = 14,
      .n_zero_copy = 70,
      .fused_target =
          [](const std::string& name) {
            return name.find(".qkv.") != std::string::npos || name.find(".linear1.") != std::string::npos ||
                   name.rfind("final_layer.adaLN_modulation.1.", 0) == 0;
          },
      .correspondences = {{"img_in.weight", "x_embedder.weight"},
                          {"double_blocks.1.txt_attn.norm.key_norm.scale",
                           "transformer_blocks.1.attn.norm_added_k.weight"}},
      .beside_in_single_file = {"first_stage_model.decoder.conv_in.weight"},  // a ComfyUI checkpoint
      .looks_for = {"'bfl' looks for 'double_blocks.0.img_attn.norm.key_norm.scale'",
                    "'diffusers' looks for 'transformer_blocks.0.attn.norm_added_k.weight'"},
      .foreign_files = {},
      .layout_sizes = {{"hidden", 32}, {"mlp_hidden", 128}, {"n_double", 2}, {"n_single", 2}},
      .layout_parts = {{.module = "single_blocks.1.linear1",
                        .part = 3,
                        .peft_module = "single_transformer_blocks.1.proj_mlp",
                        .n_parts = 4,
                        .row_begin = 96,
                        .row_end = 224},
                       {.module = "final_layer.adaLN_modulation.1", .part = 0, .swap_halves = true},
                       {.module = "double_blocks.0.txt_attn.proj",
                        .part = 0,
                        .peft_module = "transformer_blocks.0.attn.to_add_out"}},
      .no_shapes_error = "no img_in.weight",
      .swapped_module = "final_layer.adaLN_modulation.1",
      .swapped_diffusers = "norm_out.linear",
      .swapped_down = {4, 32},
      .swapped_up = {64, 4},
      .extra_loras = {{"img_in", {4, 16}, {32, 4}, 4.0, "transformer.x_embedder.lora_A.weight"}},
      .lora_peft = "flux/dev_lora_peft.safetensors",
      .lora_kohya = "flux/dev_lora_kohya.safetensors",
      .n_lora_modules = 26,
      .n_peft_keys = 80,  // 40 diffusers Linears × (lora_A, lora_B)
      .detect = [](const WeightSource& source) { return flux::detect_weight_format(source); },
      .sizes_of =
          [](const std::map<std::string, Shape>& shapes) -> std::map<std::string, int64_t> {
            const flux::LayoutSizes s = flux::layout_sizes(shapes);
            return {{"hidden", s.hidden}, {"mlp_hidden", s.mlp_hidden}, {"n_double", s.n_double},
                    {"n_single", s.n_single}};
          },
      .layout_of = [](const std::map<std::string, Shape>& shapes) {
        return flux::lora_layout(flux::layout_sizes(shapes));
      },
  };
}

WeightsArch sd3_row() {
  return {
      .name = "sd3",
      .original = "sd3/medium_sai.safetensors",
      .original_format = "sai",
      .diffusers = "sd3/medium_diffusers",
      .n_shards = 3,
      .n_tensors = 95,
      // Fused: 3 blocks x (x, context) qkv + 2 attn2 qkv, x (weight, bias) = 16; swapped: the final adaLN and the
      // last block's context adaLN x 2 = 4.
      .n_materialized = 20,
      .n_zero_copy = 75,
      .fused_target =
          [](const std::string& name) {
            return name.find(".qkv.") != std::string::npos ||
                   name.rfind("final_layer.adaLN_modulation.1.", 0) == 0 ||
                   name.rfind("joint_blocks.2.context_block.adaLN_modulation.1.", 0) == 0;
          },
      // The two half swaps: SAI (shift, scale) = diffusers (scale, shift) swapped; not swapped in the other blocks
      // (AdaLayerNormZero has SAI's order).
      .correspondences = {{"final_layer.adaLN_modulation.1.weight", "norm_out.linear.weight", true},
                          {"joint_blocks.2.context_block.adaLN_modulation.1.weight",
                           "transformer_blocks.2.norm1_context.linear.weight", true},
                          {"joint_blocks.1.context_block.adaLN_modulation.1.weight",
                           "transformer_blocks.1.norm1_context.linear.weight"}},
      // SAI's single files: the VAE and the text encoders beside the MMDiT.
      .beside_in_single_file = {"first_stage_model.decoder.conv_in.weight",
                                "text_encoders.clip_l.transformer.text_model.final_layer_norm.weight"},
      .looks_for = {"'sai' looks for 'x_embedder.proj.weight'", "'diffusers' looks for 'pos_embed.proj.weight'"},
      .foreign_files = {"flux/dev_diffusers"},
      .layout_sizes = {{"hidden", 32}, {"n_blocks", 3}},
      .layout_parts = {{.module = "joint_blocks.1.x_block.attn2.qkv",
                        .part = 2,
                        .peft_module = "transformer_blocks.1.attn2.to_v",
                        .n_parts = 3,
                        .row_begin = 64,
                        .row_end = 96},
                       {.module = "joint_blocks.0.context_block.attn.qkv",
                        .part = 1,
                        .peft_module = "transformer_blocks.0.attn.add_k_proj"},
                       {.module = "final_layer.adaLN_modulation.1", .part = 0, .swap_halves = true},
                       {.module = "joint_blocks.2.context_block.adaLN_modulation.1", .part = 0, .swap_halves = true},
                       {.module = "joint_blocks.1.context_block.adaLN_modulation.1", .part = 0, .swap_halves = false},
                       {.module = "joint_blocks.0.context_block.attn.proj",
                        .part = 0,
                        .peft_module = "transformer_blocks.0.attn.to_add_out"},
                       {.module = "joint_blocks.0.x_block.mlp.fc1",
                        .part = 0,
                        .peft_module = "transformer_blocks.0.ff.net.0.proj"},
                       {.module = "y_embedder.mlp.2",
                        .part = 0,
                        .peft_module = "time_text_embed.text_embedder.linear_2"}},
      .no_shapes_error = "no x_embedder.proj.weight",
      .swapped_module = "joint_blocks.2.context_block.adaLN_modulation.1",
      .swapped_diffusers = "transformer_blocks.2.norm1_context.linear",
      .swapped_down = {4, 32},
      .swapped_up = {64, 4},
      .extra_loras = {},
      .lora_peft = "sd3/medium_lora_peft.safetensors",
      .lora_kohya = "sd3/medium_lora_kohya.safetensors",
      .n_lora_modules = 31,
      .n_peft_keys = 94,  // 47 diffusers Linears x (lora_A, lora_B)
      .detect = [](const WeightSource& source) { return sd3::detect_weight_format(source); },
      .sizes_of =
          [](const std::map<std::string, Shape>& shapes) -> std::map<std::string, int64_t> {
            const sd3::LayoutSizes s = sd3::layout_sizes(shapes);
            return {{"hidden", s.hidden}, {"n_blocks", s.n_blocks}};
          },
      .layout_of = [](const std::map<std::string, Shape>& shapes) {
        return sd3::lora_layout(sd3::layout_sizes(shapes));
      },
  };
}

// One row per architecture with an original and a diffusers format; a new one adds its line.
const std::vector<std::pair<std::string, WeightsArch (*)()>> kRows = {
    {"flux", flux_row},
    {"sd3", sd3_row},
};
// Encodable architectures whose formats are checked elsewhere, and where.
const std::map<std::string, std::string> kCheckedElsewhere = {
    {"sdxl", "arch_parity_test.cpp: ArchParity.ForwardMatchesDiffusersInF32/sdxl loads tiny_ldm.safetensors and "
             "tiny_diffusers"},
    // The model's names are diffusers' (no original format mapped from diffusers' folder) and no layer is fused (no
    // LoRA layout: its PEFT and kohya files name the same modules).
    {"zimage", "arch_parity_test.cpp: ArchParity.ForwardMatchesDiffusersInF32/zimage loads the diffusers folder and "
               "comfyui_bf16.safetensors; zimage_weights_test.cpp: the scaled-fp8 file, both layouts' detection, "
               "missing and foreign tensors"},
    // Its ComfyUI names are diffusers' under a prefix (no renames, no fused layer, no LoRA layout).
    {"qwenimage",
     "arch_parity_test.cpp: ArchParity.ForwardMatchesDiffusersInF32/qwenimage loads transformer/ and "
     "comfyui_bf16.safetensors; qwenimage_test.cpp: both layouts' detection, Edit-2511's marker, "
     "missing, mis-shaped and extra tensors; ArchBadWeights below through the registry"},
};

const WeightsArch& weights_arch(const std::string& name) {
  static std::map<std::string, WeightsArch> made;
  auto it = made.find(name);
  if (it != made.end()) return it->second;
  for (const auto& [row_name, make_row] : kRows)
    if (row_name == name) return made.emplace(name, make_row()).first->second;
  throw std::runtime_error("arch_weights_test.cpp has no row for " + name);
}

// ---- the tests every row runs ----

class ArchWeights : public ::testing::TestWithParam<std::string> {
 protected:
  const WeightsArch& row() const { return weights_arch(GetParam()); }
  std::map<std::string, Shape> original_shapes() const {
    const WeightSource original = WeightSource::open(data_path(row().original));
    return mapped_shapes(original, row().detect(original));
  }
};

TEST(ArchWeights, EveryEncodableArchitectureHasARow) {
  for (const Architecture* arch : encodable_architectures()) {
    bool has_row = kCheckedElsewhere.count(arch->name()) > 0;
    for (const auto& [name, make_row] : kRows) has_row = has_row || name == arch->name();
    EXPECT_TRUE(has_row) << arch->name() << ": add its row to kRows in tests/models/arch_weights_test.cpp";
  }
}

TEST_P(ArchWeights, DiffusersFolderLoadsToExactlyTheOriginalTensors) {
  const WeightsArch& a = row();
  WeightSource original = WeightSource::open(data_path(a.original));
  WeightSource diffusers = WeightSource::open(data_path(a.diffusers));
  EXPECT_EQ(diffusers.files().size(), a.n_shards);
  DetectedFormat original_format = a.detect(original);
  DetectedFormat diffusers_format = a.detect(diffusers);
  EXPECT_EQ(original_format.format.name, a.original_format);
  EXPECT_EQ(diffusers_format.format.name, "diffusers");
  EXPECT_EQ(diffusers_format.prefix, "");

  const std::map<std::string, Shape> shapes = file_shapes(original);
  EXPECT_EQ(shapes.size(), a.n_tensors);
  EXPECT_EQ(mapped_shapes(diffusers, diffusers_format), shapes);
  EXPECT_EQ(mapped_shapes(original, original_format), shapes);

  auto model = TensorTree::with_shapes(shapes, DType::F32);
  LoadMappedReport report = load_mapped(*model, diffusers, diffusers_format);
  EXPECT_EQ(report.n_materialized, a.n_materialized);
  EXPECT_EQ(report.n_zero_copy, a.n_zero_copy);
  std::set<const SafetensorsFile*> shards;
  for (const std::string& name : diffusers.names()) shards.insert(&diffusers.file_of(name));
  EXPECT_EQ(shards.size(), a.n_shards);
  for (const auto& [name, tensor] : model->named_parameters()) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(same_bits(tensor, original.get(name)));
    // Renames view the shard that holds their source; fused targets are new memory.
    bool in_a_shard = false;
    for (const SafetensorsFile* shard : shards) in_a_shard = in_a_shard || in_mapping(tensor, *shard);
    EXPECT_EQ(in_a_shard, !a.fused_target(name));
  }
  for (const Correspondence& c : a.correspondences) {
    SCOPED_TRACE(c.target + " <- " + c.source);
    const Tensor d = diffusers.get(c.source);
    if (c.swapped) {
      const int64_t half = d.size(0) / 2;
      EXPECT_TRUE(same_bits(original.get(c.target), concat({d.narrow(0, half, half), d.narrow(0, 0, half)}, 0)));
    } else {
      EXPECT_TRUE(same_bits(original.get(c.target), d));
      EXPECT_TRUE(in_mapping(model->parameter(c.target), diffusers.file_of(c.source)));
    }
  }
}

TEST_P(ArchWeights, PipelineFolderWithTransformerSubfolder) {
  const WeightsArch& a = row();
  fs::path pipeline = scratch_dir(a.name + "_pipeline");
  fs::create_directory_symlink(fs::absolute(data_path(a.diffusers)), pipeline / "transformer");
  WeightSource source = WeightSource::open(pipeline.string(), "transformer");
  EXPECT_EQ(a.detect(source).format.name, "diffusers");
  EXPECT_EQ(source.names().size(), WeightSource::open(data_path(a.diffusers)).names().size());
}

// The original file loads zero-copy, also as a single file: the model under "model.diffusion_model." beside other
// parts (ComfyUI's checkpoints, SAI's single files), which are not read.
TEST_P(ArchWeights, OriginalLoadsZeroCopyAlsoInASingleFile) {
  const WeightsArch& a = row();
  WeightSource original = WeightSource::open(data_path(a.original));
  const std::map<std::string, Shape> shapes = file_shapes(original);
  auto model = TensorTree::with_shapes(shapes, DType::F32);
  LoadMappedReport report = load_mapped(*model, original, a.detect(original));
  EXPECT_EQ(report.n_zero_copy, static_cast<int64_t>(a.n_tensors));
  for (const auto& [name, tensor] : model->named_parameters())
    EXPECT_TRUE(in_mapping(tensor, original.file_of(name))) << name;

  std::vector<std::pair<std::string, Tensor>> repack;
  for (const std::string& name : original.names())
    repack.emplace_back("model.diffusion_model." + name, original.get(name));
  for (const std::string& name : a.beside_in_single_file) repack.emplace_back(name, Tensor::scalar(1.0));
  const fs::path file = scratch_dir(a.name + "_single_file") / "single.safetensors";
  save_safetensors(file.string(), repack);
  WeightSource single = WeightSource::open(file.string());
  DetectedFormat format = a.detect(single);
  EXPECT_EQ(format.format.name, a.original_format);
  EXPECT_EQ(format.prefix, "model.diffusion_model.");
  EXPECT_EQ(mapped_shapes(single, format), shapes);
  auto single_model = TensorTree::with_shapes(shapes, DType::F32);
  report = load_mapped(*single_model, single, format);
  EXPECT_EQ(report.n_zero_copy, static_cast<int64_t>(a.n_tensors));
  EXPECT_EQ(report.n_outside_prefix, static_cast<int64_t>(a.beside_in_single_file.size()));
  for (const auto& [name, tensor] : single_model->named_parameters())
    EXPECT_TRUE(same_bits(tensor, original.get(name))) << name;
}

TEST_P(ArchWeights, OtherFilesAreNamed) {
  const WeightsArch& a = row();
  // The PEFT LoRA file is neither format; the message names the keys each looked for.
  WeightSource lora = WeightSource::open(data_path(a.lora_peft));
  const std::string message = error_of([&] { a.detect(lora); });
  EXPECT_THAT(message, HasSubstr(fs::path(a.lora_peft).filename().string() + " is in none of the known formats"));
  for (const std::string& looks_for : a.looks_for) EXPECT_THAT(message, HasSubstr(looks_for));
  for (const std::string& path : a.foreign_files) {
    WeightSource foreign = WeightSource::open(data_path(path));
    EXPECT_THAT(error_of([&] { a.detect(foreign); }), HasSubstr("none of the known formats")) << path;
  }
}

TEST_P(ArchWeights, LoraLayoutFromShapes) {
  const WeightsArch& a = row();
  EXPECT_EQ(a.sizes_of(original_shapes()), a.layout_sizes);
  const LoraLayout layout = a.layout_of(original_shapes());
  for (const LayoutPart& p : a.layout_parts) {
    SCOPED_TRACE(p.module);
    const LoraModuleLayout* module = layout.find(p.module);
    ASSERT_NE(module, nullptr);
    if (p.n_parts) {
      EXPECT_EQ(module->parts.size(), *p.n_parts);
    }
    ASSERT_LT(p.part, module->parts.size());
    const auto& part = module->parts[p.part];
    if (!p.peft_module.empty()) {
      EXPECT_EQ(part.peft_module, p.peft_module);
    }
    if (p.row_begin >= 0) {
      EXPECT_EQ(part.row_begin, p.row_begin);
    }
    if (p.row_end >= 0) {
      EXPECT_EQ(part.row_end, p.row_end);
    }
    if (p.swap_halves) {
      EXPECT_EQ(part.swap_halves, *p.swap_halves);
    }
  }
  EXPECT_THAT(error_of([&] { a.sizes_of({}); }), HasSubstr(a.no_shapes_error));
}

// A LoRA on a module whose diffusers weight has its halves swapped, applied in the original names, equals its PEFT
// export applied to the diffusers weight (the halves swapped back): the LoRA layout and the weight map agree; and
// the export reads back to the same product.
TEST_P(ArchWeights, SwappedModuleLoraSwapsLikeTheWeights) {
  const WeightsArch& a = row();
  WeightSource original = WeightSource::open(data_path(a.original));
  WeightSource diffusers = WeightSource::open(data_path(a.diffusers));
  const LoraLayout layout = a.layout_of(original_shapes());
  LoraSet set = {{a.swapped_module, {.down = dyadic(a.swapped_down, 1), .up = dyadic(a.swapped_up, 2), .alpha = 8.0}}};
  uint64_t seed = 3;
  for (const ExtraLora& extra : a.extra_loras) {
    set[extra.module] = {.down = dyadic(extra.down, seed), .up = dyadic(extra.up, seed + 1), .alpha = extra.alpha};
    seed += 2;
  }
  std::map<std::string, Tensor> peft;
  for (auto& [name, t] : to_peft(set, layout)) peft[name] = t;
  EXPECT_EQ(peft.size(), 2u * set.size());
  const LoraTensors& lora = set.at(a.swapped_module);
  const Tensor original_adapted =
      add(original.get(a.swapped_module + ".weight"), mul(matmul(lora.up, lora.down), lora.scale()));
  const std::string d = "transformer." + a.swapped_diffusers;
  const Tensor diffusers_adapted = add(diffusers.get(a.swapped_diffusers + ".weight"),
                                       matmul(peft.at(d + ".lora_B.weight"), peft.at(d + ".lora_A.weight")));
  const int64_t half = diffusers_adapted.size(0) / 2;
  EXPECT_TRUE(same_bits(concat({diffusers_adapted.narrow(0, half, half), diffusers_adapted.narrow(0, 0, half)}, 0),
                        original_adapted));
  for (const ExtraLora& extra : a.extra_loras) EXPECT_TRUE(peft.count(extra.peft_key)) << extra.peft_key;
  LoraSet back = from_peft(peft, layout);
  const LoraTensors& regrouped = back.at(a.swapped_module);
  EXPECT_EQ(regrouped.scale(), 1.0);
  EXPECT_TRUE(same_bits(matmul(regrouped.up, regrouped.down), mul(matmul(lora.up, lora.down), lora.scale())));
}

TEST_P(ArchWeights, PeftAndKohyaFilesConvertIntoEachOther) {
  const WeightsArch& a = row();
  const LoraLayout layout = a.layout_of(original_shapes());
  LoraFile peft = read_lora_file(data_path(a.lora_peft));
  LoraFile kohya = read_lora_file(data_path(a.lora_kohya));
  ASSERT_EQ(peft.format, LoraFileFormat::Peft);
  ASSERT_EQ(kohya.format, LoraFileFormat::Kohya);
  LoraSet from_peft_file = from_peft(peft.tensors, layout, peft_scales(peft.metadata));
  LoraSet from_kohya_file = from_kohya(kohya.tensors, layout.module_paths());
  ASSERT_EQ(from_peft_file.size(), a.n_lora_modules);
  ASSERT_EQ(from_kohya_file.size(), a.n_lora_modules);
  // Without the metadata the scale would be 1 (diffusers' rule): the files then disagree by 2.
  LoraSet unscaled = from_peft(peft.tensors, layout);
  for (const auto& [module, k] : from_kohya_file) {
    SCOPED_TRACE(module);
    ASSERT_EQ(from_peft_file.count(module), 1u);
    const LoraTensors& p = from_peft_file.at(module);
    EXPECT_EQ(k.alpha, 8.0);
    EXPECT_EQ(p.rank(), 4);  // the fused groups share lora_A: no block-diagonal growth
    EXPECT_EQ(p.scale(), 1.0);
    EXPECT_TRUE(same_bits(p.down, k.down));
    EXPECT_TRUE(same_bits(p.up, mul(k.up, k.scale())));  // the scale 8 / 4 baked into up (exact: x2)
    EXPECT_TRUE(same_bits(unscaled.at(module).up, k.up));
  }
  // And back: the kohya file split by the layout has exactly diffusers' keys, with the same products.
  std::vector<std::pair<std::string, Tensor>> written = to_peft(from_kohya_file, layout);
  std::map<std::string, Tensor> ours(written.begin(), written.end());
  std::set<std::string> their_keys, our_keys;
  for (const auto& [name, t] : peft.tensors) their_keys.insert(name);
  for (const auto& [name, t] : ours) our_keys.insert(name);
  EXPECT_EQ(our_keys, their_keys);
  EXPECT_EQ(our_keys.size(), a.n_peft_keys);
  const double file_scale = 8.0 / 4.0;  // the PEFT file's lora_alpha / r (metadata)
  for (const auto& [name, lora_a] : peft.tensors) {
    if (name.find(".lora_A.") == std::string::npos) continue;
    SCOPED_TRACE(name);
    const std::string b_name = name.substr(0, name.size() - std::string("lora_A.weight").size()) + "lora_B.weight";
    // The scale is baked into our lora_B.
    EXPECT_TRUE(same_bits(matmul(ours.at(b_name), ours.at(name)),
                          mul(matmul(peft.tensors.at(b_name), lora_a), file_scale)));
  }
}

// ---- bad files through the registry ----

// Weights `wick train` must refuse before training, each a Data error (exit status 3) naming what is wrong, through
// Architecture::build as `wick train` calls it (tests/models/tiny_arch.h). One row per architecture: a single file of
// its tiny base to edit, and another family's file. A new architecture adds a row.
struct BadWeightsRow {
  const TinyArch* arch;
  std::string file;               // a single file of the base, under tests/data/<arch>/
  std::string prefix;             // its names' prefix
  std::string missing;            // a tensor left out (without the prefix)
  std::string misshaped;          // a 1-D tensor cut to half its length (without the prefix)
  std::string foreign;            // another family's weights, under tests/data
  std::string foreign_looks_for;  // what the message says the architecture's formats look for
};

void PrintTo(const BadWeightsRow& row, std::ostream* os) { *os << row.arch->name; }

const BadWeightsRow kBadWeightsRows[] = {
    {.arch = &tiny_arch("zimage"),
     .file = "comfyui_bf16.safetensors",
     .prefix = "model.diffusion_model.",
     .missing = "layers.1.feed_forward.w2.weight",
     .misshaped = "layers.0.attention_norm1.weight",
     .foreign = "qwenimage/comfyui_bf16.safetensors",
     .foreign_looks_for = "none of the known formats"},
    {.arch = &tiny_arch("qwenimage"),
     .file = "comfyui_bf16.safetensors",
     .prefix = "model.diffusion_model.",
     .missing = "transformer_blocks.1.txt_mod.1.bias",
     .misshaped = "transformer_blocks.0.attn.norm_added_q.weight",
     .foreign = "zimage/comfyui_bf16.safetensors",
     .foreign_looks_for = "txt_norm.weight"},
};

class ArchBadWeights : public ::testing::TestWithParam<BadWeightsRow> {};

// The Data error Architecture::build throws for `weights` (a failure if it throws none, or another kind).
std::string data_error(const TinyArch& arch, const std::string& weights) {
  try {
    arch.build_base(weights);
  } catch (const WickError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Data) << e.what();
    return e.what();
  }
  ADD_FAILURE() << arch.name << ": " << weights << " was loaded";
  return "";
}

// A copy of the row's file with `edit` applied to its tensors.
std::string edited_copy(const BadWeightsRow& row, const std::string& name,
                        const std::function<void(std::vector<std::pair<std::string, Tensor>>&)>& edit) {
  SafetensorsFile file = SafetensorsFile::open(row.arch->data(row.file));
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& tensor : file.names()) tensors.emplace_back(tensor, file.get(tensor));
  edit(tensors);
  const fs::path path = scratch_dir(row.arch->name + "_bad_" + name) / "model.safetensors";
  save_safetensors(path.string(), tensors, file.metadata());
  return path.string();
}

TEST_P(ArchBadWeights, MissingAndMisshapedTensorsAreNamed) {
  const BadWeightsRow& row = GetParam();
  const TinyArch& arch = *row.arch;
  ASSERT_NE(arch.build_base(arch.data(row.file)), nullptr);  // the unedited file loads
  const std::string missing = edited_copy(row, "missing", [&](auto& tensors) {
    const size_t before = tensors.size();
    std::erase_if(tensors, [&](const auto& t) { return t.first == row.prefix + row.missing; });
    ASSERT_EQ(tensors.size(), before - 1) << row.missing;
  });
  EXPECT_THAT(data_error(arch, missing), HasSubstr(row.missing));
  const std::string misshaped = edited_copy(row, "misshaped", [&](auto& tensors) {
    for (auto& [name, t] : tensors)
      if (name == row.prefix + row.misshaped) t = t.narrow(0, 0, t.size(0) / 2).contiguous();
  });
  EXPECT_THAT(data_error(arch, misshaped), HasSubstr(row.misshaped));
}

TEST_P(ArchBadWeights, AnotherFamilysFileIsNamed) {
  const BadWeightsRow& row = GetParam();
  const std::string message = data_error(*row.arch, data_path(row.foreign));
  EXPECT_THAT(message, HasSubstr(fs::path(row.foreign).filename().string()));
  EXPECT_THAT(message, HasSubstr(row.foreign_looks_for));
}

TEST_P(ArchBadWeights, TruncatedFileIsNamed) {
  const BadWeightsRow& row = GetParam();
  const fs::path path = scratch_dir(row.arch->name + "_bad_truncated") / "model.safetensors";
  fs::copy_file(row.arch->data(row.file), path);
  fs::resize_file(path, fs::file_size(path) / 2);
  EXPECT_THAT(data_error(*row.arch, path.string()), HasSubstr(path.string()));
}

// A diffusers folder whose index names a shard that is not there (a download cut short).
TEST_P(ArchBadWeights, IndexNamingAMissingShardIsNamed) {
  const BadWeightsRow& row = GetParam();
  SafetensorsFile file = SafetensorsFile::open(row.arch->data(row.file));
  const fs::path folder = scratch_dir(row.arch->name + "_bad_index");
  const std::string there = "diffusion_pytorch_model-00001-of-00002.safetensors";
  const std::string absent = "diffusion_pytorch_model-00002-of-00002.safetensors";
  std::vector<std::pair<std::string, Tensor>> first;
  nlohmann::json map = nlohmann::json::object();
  for (const std::string& name : file.names()) {
    const std::string unprefixed = name.substr(row.prefix.size());
    const bool in_first = first.size() < file.names().size() / 2;
    if (in_first) first.emplace_back(unprefixed, file.get(name));
    map[unprefixed] = in_first ? there : absent;
  }
  save_safetensors((folder / there).string(), first, {{"format", "pt"}});
  std::ofstream((folder / "diffusion_pytorch_model.safetensors.index.json").string())
      << nlohmann::json{{"metadata", nlohmann::json::object()}, {"weight_map", map}}.dump();
  const std::string message = data_error(*row.arch, folder.string());
  EXPECT_THAT(message, HasSubstr(absent));
  EXPECT_THAT(message, HasSubstr("diffusion_pytorch_model.safetensors.index.json"));
}

INSTANTIATE_TEST_SUITE_P(Registry, ArchBadWeights, ::testing::ValuesIn(kBadWeightsRows), RowName());

std::vector<std::string> row_names() {
  std::vector<std::string> names;
  for (const auto& [name, make_row] : kRows) names.push_back(name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Registry, ArchWeights, ::testing::ValuesIn(row_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace wick::testing
