// Flux's weight formats and LoRA files against the fixtures of tests/data/flux (written by diffusers
// 0.42.1 and PEFT 0.21.2; see its README): the sharded diffusers folder loads to exactly the BFL
// tensors, both formats are detected (also under ComfyUI's prefix), schnell has no guidance, and the
// PEFT and kohya LoRA files convert into each other.
#include "models/flux/flux_weights.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "runtime/ops/elementwise.h"
#include "runtime/ops/join.h"
#include "runtime/ops/matmul.h"
#include "runtime/safetensors.h"
#include "tests/error_of.h"
#include "tests/models/weights_test_util.h"
#include "tests/test_data.h"

namespace wick {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using ::testing::HasSubstr;
using testing::same_bits;
using testing::scratch_dir;
using testing::TensorTree;

std::string flux_data(const std::string& name) { return testing::test_data_dir() + "/flux/" + name; }

std::map<std::string, Shape> file_shapes(const WeightSource& source) {
  std::map<std::string, Shape> out;
  for (const std::string& name : source.names()) out[name] = source.info(name).shape;
  return out;
}

bool in_mapping(const Tensor& t, const SafetensorsFile& file) {
  auto* data = static_cast<const uint8_t*>(t.data());
  return data >= file.mapped_data() && data < file.mapped_data() + file.mapped_bytes();
}

// The BFL targets the diffusers map builds by concat or swap (the rest are renames).
bool fused_target(const std::string& name) {
  return name.find(".qkv.") != std::string::npos || name.find(".linear1.") != std::string::npos ||
         name.rfind("final_layer.adaLN_modulation.1.", 0) == 0;
}

TEST(FluxWeights, DiffusersFolderLoadsToExactlyTheBflTensors) {
  WeightSource bfl = WeightSource::open(flux_data("dev_bfl.safetensors"));
  WeightSource diffusers = WeightSource::open(flux_data("dev_diffusers"));
  EXPECT_EQ(diffusers.files().size(), 3u);
  DetectedFormat bfl_format = flux::detect_weight_format(bfl);
  DetectedFormat diffusers_format = flux::detect_weight_format(diffusers);
  EXPECT_EQ(bfl_format.format.name, "bfl");
  EXPECT_EQ(diffusers_format.format.name, "diffusers");
  EXPECT_EQ(diffusers_format.prefix, "");

  const std::map<std::string, Shape> shapes = file_shapes(bfl);
  EXPECT_EQ(shapes.size(), 84u);
  EXPECT_EQ(mapped_shapes(diffusers, diffusers_format), shapes);
  EXPECT_EQ(mapped_shapes(bfl, bfl_format), shapes);

  auto model = TensorTree::with_shapes(shapes, DType::F32);
  LoadMappedReport report = load_mapped(*model, diffusers, diffusers_format);
  // Fused: 2 double blocks × (img, txt) qkv × (weight, bias), 2 single linear1 × 2, the final adaLN × 2.
  EXPECT_EQ(report.n_materialized, 14);
  EXPECT_EQ(report.n_zero_copy, 70);
  std::set<const SafetensorsFile*> shards;
  for (const std::string& name : diffusers.names()) shards.insert(&diffusers.file_of(name));
  EXPECT_EQ(shards.size(), 3u);
  for (const auto& [name, tensor] : model->named_parameters()) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(same_bits(tensor, bfl.get(name)));
    // Renames view the shard that holds their source; fused targets are new memory.
    bool in_a_shard = false;
    for (const SafetensorsFile* shard : shards) in_a_shard = in_a_shard || in_mapping(tensor, *shard);
    EXPECT_EQ(in_a_shard, !fused_target(name));
  }
  EXPECT_TRUE(in_mapping(model->parameter("img_in.weight"), diffusers.file_of("x_embedder.weight")));
  EXPECT_TRUE(in_mapping(model->parameter("double_blocks.1.txt_attn.norm.key_norm.scale"),
                         diffusers.file_of("transformer_blocks.1.attn.norm_added_k.weight")));
}

TEST(FluxWeights, PipelineFolderWithTransformerSubfolder) {
  fs::path pipeline = scratch_dir("flux_pipeline");
  fs::create_directory_symlink(fs::absolute(flux_data("dev_diffusers")), pipeline / "transformer");
  WeightSource source = WeightSource::open(pipeline.string(), "transformer");
  EXPECT_EQ(flux::detect_weight_format(source).format.name, "diffusers");
  EXPECT_EQ(source.names().size(), WeightSource::open(flux_data("dev_diffusers")).names().size());
}

TEST(FluxWeights, BflLoadsZeroCopyAlsoUnderComfyUiPrefix) {
  WeightSource bfl = WeightSource::open(flux_data("dev_bfl.safetensors"));
  auto model = TensorTree::with_shapes(file_shapes(bfl), DType::F32);
  LoadMappedReport report = load_mapped(*model, bfl, flux::detect_weight_format(bfl));
  EXPECT_EQ(report.n_zero_copy, 84);
  EXPECT_TRUE(in_mapping(model->parameter("single_blocks.1.linear1.weight"), bfl.file_of("img_in.weight")));

  // A ComfyUI checkpoint: the model under "model.diffusion_model.", beside other components.
  std::vector<std::pair<std::string, Tensor>> repack;
  for (const std::string& name : bfl.names()) repack.emplace_back("model.diffusion_model." + name, bfl.get(name));
  repack.emplace_back("first_stage_model.decoder.conv_in.weight", Tensor::scalar(1.0));
  fs::path dir = scratch_dir("flux_comfy");
  save_safetensors((dir / "flux1-dev-comfy.safetensors").string(), repack);
  WeightSource comfy = WeightSource::open((dir / "flux1-dev-comfy.safetensors").string());
  DetectedFormat format = flux::detect_weight_format(comfy);
  EXPECT_EQ(format.format.name, "bfl");
  EXPECT_EQ(format.prefix, "model.diffusion_model.");
  EXPECT_EQ(mapped_shapes(comfy, format), file_shapes(bfl));
  auto comfy_model = TensorTree::with_shapes(file_shapes(bfl), DType::F32);
  report = load_mapped(*comfy_model, comfy, format);
  EXPECT_EQ(report.n_zero_copy, 84);
  EXPECT_EQ(report.n_outside_prefix, 1);
  for (const auto& [name, tensor] : comfy_model->named_parameters())
    EXPECT_TRUE(same_bits(tensor, bfl.get(name))) << name;
}

TEST(FluxWeights, SchnellHasNoGuidanceInEitherFormat) {
  WeightSource schnell = WeightSource::open(flux_data("schnell_bfl.safetensors"));
  DetectedFormat format = flux::detect_weight_format(schnell);
  EXPECT_EQ(format.format.name, "bfl");
  std::map<std::string, Shape> shapes = mapped_shapes(schnell, format);
  EXPECT_EQ(shapes.size(), 80u);
  EXPECT_EQ(shapes.count("guidance_in.in_layer.weight"), 0u);

  // The dev diffusers folder without its guidance embedder is a schnell-shaped diffusers source.
  WeightSource dev = WeightSource::open(flux_data("dev_diffusers"));
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const std::string& name : dev.names())
    if (name.find("guidance_embedder") == std::string::npos) tensors.emplace_back(name, dev.get(name));
  fs::path dir = scratch_dir("flux_schnell_diffusers");
  save_safetensors((dir / "diffusion_pytorch_model.safetensors").string(), tensors);
  WeightSource no_guidance = WeightSource::open(dir.string());
  DetectedFormat diffusers = flux::detect_weight_format(no_guidance);
  EXPECT_EQ(mapped_shapes(no_guidance, diffusers), shapes);  // same architecture sizes as schnell
  auto model = TensorTree::with_shapes(shapes, DType::F32);
  load_mapped(*model, no_guidance, diffusers);
  WeightSource dev_bfl = WeightSource::open(flux_data("dev_bfl.safetensors"));
  for (const auto& [name, tensor] : model->named_parameters())
    EXPECT_TRUE(same_bits(tensor, dev_bfl.get(name))) << name;

  // The dev folder into the schnell-shaped model: the guidance embedder is left over, and named.
  const std::string message = error_of([&] { load_mapped(*model, dev, flux::detect_weight_format(dev)); });
  EXPECT_THAT(message, HasSubstr("read as format 'diffusers'"));
  EXPECT_THAT(message, HasSubstr("0 parameters missing, 4 source tensors unused, 0 shape mismatches"));
  EXPECT_THAT(message, HasSubstr("time_text_embed.guidance_embedder.linear_1.weight"));
}

TEST(FluxWeights, WrongSizesAndUnknownFilesAreNamed) {
  WeightSource diffusers = WeightSource::open(flux_data("dev_diffusers"));
  std::map<std::string, Shape> shapes = file_shapes(WeightSource::open(flux_data("dev_bfl.safetensors")));
  shapes["double_blocks.0.img_attn.qkv.weight"] = {3 * 48, 32};  // a model of another width
  auto model = TensorTree::with_shapes(shapes, DType::F32);
  EXPECT_THAT(error_of([&] { load_mapped(*model, diffusers, flux::detect_weight_format(diffusers)); }),
              HasSubstr("double_blocks.0.img_attn.qkv.weight: the model expects [144, 32], the source has [96, 32] "
                        "(transformer_blocks.0.attn.to_q.weight [32, 32] + transformer_blocks.0.attn.to_k.weight "
                        "[32, 32] + transformer_blocks.0.attn.to_v.weight [32, 32])"));
  WeightSource lora = WeightSource::open(flux_data("dev_lora_peft.safetensors"));
  const std::string message = error_of([&] { flux::detect_weight_format(lora); });
  EXPECT_THAT(message, HasSubstr("dev_lora_peft.safetensors is in none of the known formats"));
  EXPECT_THAT(message, HasSubstr("'bfl' looks for 'double_blocks.0.img_attn.norm.key_norm.scale'"));
  EXPECT_THAT(message, HasSubstr("'diffusers' looks for 'transformer_blocks.0.attn.norm_added_k.weight'"));
}

flux::LayoutSizes dev_sizes() {
  WeightSource bfl = WeightSource::open(flux_data("dev_bfl.safetensors"));
  return flux::layout_sizes(mapped_shapes(bfl, flux::detect_weight_format(bfl)));
}

TEST(FluxWeights, LayoutSizesFromShapes) {
  flux::LayoutSizes sizes = dev_sizes();
  EXPECT_EQ(sizes.hidden, 32);
  EXPECT_EQ(sizes.mlp_hidden, 128);
  EXPECT_EQ(sizes.n_double, 2);
  EXPECT_EQ(sizes.n_single, 2);
  LoraLayout layout = flux::lora_layout(sizes);
  const LoraModuleLayout* linear1 = layout.find("single_blocks.1.linear1");
  ASSERT_NE(linear1, nullptr);
  ASSERT_EQ(linear1->parts.size(), 4u);
  EXPECT_EQ(linear1->parts[3].peft_module, "single_transformer_blocks.1.proj_mlp");
  EXPECT_EQ(linear1->parts[3].row_begin, 96);
  EXPECT_EQ(linear1->parts[3].row_end, 224);
  EXPECT_TRUE(layout.find("final_layer.adaLN_modulation.1")->parts[0].swap_halves);
  EXPECT_EQ(layout.find("double_blocks.0.txt_attn.proj")->parts[0].peft_module, "transformer_blocks.0.attn.to_add_out");
  EXPECT_THAT(error_of([] { flux::layout_sizes({}); }), HasSubstr("no img_in.weight"));
}

// A LoRA on the final adaLN, applied in BFL names, equals its PEFT export applied to diffusers'
// norm_out.linear (whose rows are the halves swapped): the LoRA layout and the weight map agree.
TEST(FluxWeights, FinalLayerLoraSwapsLikeTheWeights) {
  WeightSource bfl = WeightSource::open(flux_data("dev_bfl.safetensors"));
  WeightSource diffusers = WeightSource::open(flux_data("dev_diffusers"));
  LoraLayout layout = flux::lora_layout(dev_sizes());
  LoraSet set = {{"final_layer.adaLN_modulation.1",
                  {.down = testing::dyadic({4, 32}, 1), .up = testing::dyadic({64, 4}, 2), .alpha = 8.0}},
                 {"img_in", {.down = testing::dyadic({4, 16}, 3), .up = testing::dyadic({32, 4}, 4), .alpha = 4.0}}};
  std::map<std::string, Tensor> peft;
  for (auto& [name, t] : to_peft(set, layout)) peft[name] = t;
  EXPECT_EQ(peft.size(), 4u);
  const LoraTensors& lora = set.at("final_layer.adaLN_modulation.1");
  Tensor bfl_adapted =
      add(bfl.get("final_layer.adaLN_modulation.1.weight"), mul(matmul(lora.up, lora.down), lora.scale()));
  Tensor diffusers_adapted =
      add(diffusers.get("norm_out.linear.weight"), matmul(peft.at("transformer.norm_out.linear.lora_B.weight"),
                                                          peft.at("transformer.norm_out.linear.lora_A.weight")));
  EXPECT_TRUE(
      same_bits(concat({diffusers_adapted.narrow(0, 32, 32), diffusers_adapted.narrow(0, 0, 32)}, 0), bfl_adapted));
  EXPECT_TRUE(peft.count("transformer.x_embedder.lora_A.weight"));
  LoraSet back = from_peft(peft, layout);
  const LoraTensors& regrouped = back.at("final_layer.adaLN_modulation.1");
  EXPECT_EQ(regrouped.scale(), 1.0);
  EXPECT_TRUE(same_bits(matmul(regrouped.up, regrouped.down), mul(matmul(lora.up, lora.down), lora.scale())));
}

TEST(FluxWeights, PeftFileRegroupsToTheKohyaFile) {
  LoraLayout layout = flux::lora_layout(dev_sizes());
  LoraFile peft = read_lora_file(flux_data("dev_lora_peft.safetensors"));
  LoraFile kohya = read_lora_file(flux_data("dev_lora_kohya.safetensors"));
  ASSERT_EQ(peft.format, LoraFileFormat::Peft);
  ASSERT_EQ(kohya.format, LoraFileFormat::Kohya);
  LoraSet from_peft_file = from_peft(peft.tensors, layout, peft_scales(peft.metadata));
  LoraSet from_kohya_file = from_kohya(kohya.tensors, layout.module_paths());
  ASSERT_EQ(from_peft_file.size(), 26u);
  ASSERT_EQ(from_kohya_file.size(), 26u);
  for (const auto& [module, k] : from_kohya_file) {
    SCOPED_TRACE(module);
    ASSERT_EQ(from_peft_file.count(module), 1u);
    const LoraTensors& p = from_peft_file.at(module);
    EXPECT_EQ(k.alpha, 8.0);
    EXPECT_EQ(p.rank(), 4);  // the fused groups share lora_A: no block-diagonal growth
    EXPECT_EQ(p.scale(), 1.0);
    EXPECT_TRUE(same_bits(p.down, k.down));
    EXPECT_TRUE(same_bits(p.up, mul(k.up, k.scale())));  // the scale 8 / 4 baked into up (exact: ×2)
  }
  // Without the metadata the scale would be 1 (diffusers' rule): the files then disagree by 2.
  LoraSet unscaled = from_peft(peft.tensors, layout);
  EXPECT_TRUE(same_bits(unscaled.at("single_blocks.0.linear1").up, from_kohya_file.at("single_blocks.0.linear1").up));
}

TEST(FluxWeights, KohyaFileSplitsToThePeftFile) {
  LoraLayout layout = flux::lora_layout(dev_sizes());
  LoraFile peft = read_lora_file(flux_data("dev_lora_peft.safetensors"));
  LoraFile kohya = read_lora_file(flux_data("dev_lora_kohya.safetensors"));
  std::vector<std::pair<std::string, Tensor>> written =
      to_peft(from_kohya(kohya.tensors, layout.module_paths()), layout);
  std::map<std::string, Tensor> ours(written.begin(), written.end());
  std::set<std::string> their_keys, our_keys;
  for (const auto& [name, t] : peft.tensors) their_keys.insert(name);
  for (const auto& [name, t] : ours) our_keys.insert(name);
  EXPECT_EQ(our_keys, their_keys);      // 40 diffusers Linears × (lora_A, lora_B)
  const double file_scale = 8.0 / 4.0;  // the PEFT file's lora_alpha / r (metadata)
  for (const auto& [name, a] : peft.tensors) {
    if (name.find(".lora_A.") == std::string::npos) continue;
    SCOPED_TRACE(name);
    const std::string b_name = name.substr(0, name.size() - std::string("lora_A.weight").size()) + "lora_B.weight";
    Tensor theirs = mul(matmul(peft.tensors.at(b_name), a), file_scale);
    Tensor mine = matmul(ours.at(b_name), ours.at(name));  // scale baked into our lora_B
    EXPECT_TRUE(same_bits(mine, theirs));
  }
}

}  // namespace
}  // namespace wick
