// SD3's weight formats and LoRA files against the fixtures of tests/data/sd3 (written by diffusers 0.42.1 and
// PEFT 0.21.2; see its README): the sharded diffusers folder loads to exactly the SAI tensors (both half swaps
// included), both formats are detected (also under SAI's "model.diffusion_model." beside a VAE, and in a pipeline
// folder's transformer/), and the PEFT and kohya LoRA files convert into each other.
#include "models/sd3/sd3_weights.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "models/sd3/sd3_config.h"
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

std::string sd3_data(const std::string& name) { return testing::test_data_dir() + "/sd3/" + name; }

std::map<std::string, Shape> file_shapes(const WeightSource& source) {
  std::map<std::string, Shape> out;
  for (const std::string& name : source.names()) out[name] = source.info(name).shape;
  return out;
}

bool in_mapping(const Tensor& t, const SafetensorsFile& file) {
  auto* data = static_cast<const uint8_t*>(t.data());
  return data >= file.mapped_data() && data < file.mapped_data() + file.mapped_bytes();
}

// The SAI targets the diffusers map builds by concat or swap (the rest are renames).
bool fused_target(const std::string& name) {
  return name.find(".qkv.") != std::string::npos || name.rfind("final_layer.adaLN_modulation.1.", 0) == 0 ||
         name.rfind("joint_blocks.2.context_block.adaLN_modulation.1.", 0) == 0;
}

TEST(Sd3Weights, DiffusersFolderLoadsToExactlyTheSaiTensors) {
  WeightSource sai = WeightSource::open(sd3_data("medium_sai.safetensors"));
  WeightSource diffusers = WeightSource::open(sd3_data("medium_diffusers"));
  EXPECT_EQ(diffusers.files().size(), 3u);
  DetectedFormat sai_format = sd3::detect_weight_format(sai);
  DetectedFormat diffusers_format = sd3::detect_weight_format(diffusers);
  EXPECT_EQ(sai_format.format.name, "sai");
  EXPECT_EQ(diffusers_format.format.name, "diffusers");
  EXPECT_EQ(diffusers_format.prefix, "");

  const std::map<std::string, Shape> shapes = file_shapes(sai);
  EXPECT_EQ(shapes.size(), 95u);
  EXPECT_EQ(mapped_shapes(diffusers, diffusers_format), shapes);
  EXPECT_EQ(mapped_shapes(sai, sai_format), shapes);

  auto model = TensorTree::with_shapes(shapes, DType::F32);
  LoadMappedReport report = load_mapped(*model, diffusers, diffusers_format);
  // Fused: 3 blocks x (x, context) qkv + 2 attn2 qkv, x (weight, bias) = 16; swapped: the final adaLN and the last
  // block's context adaLN x 2 = 4.
  EXPECT_EQ(report.n_materialized, 20);
  EXPECT_EQ(report.n_zero_copy, 75);
  std::set<const SafetensorsFile*> shards;
  for (const std::string& name : diffusers.names()) shards.insert(&diffusers.file_of(name));
  for (const auto& [name, tensor] : model->named_parameters()) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(same_bits(tensor, sai.get(name)));
    bool in_a_shard = false;
    for (const SafetensorsFile* shard : shards) in_a_shard = in_a_shard || in_mapping(tensor, *shard);
    EXPECT_EQ(in_a_shard, !fused_target(name));
  }
  // The two half swaps, explicitly: SAI (shift, scale) = diffusers (scale, shift) swapped.
  for (const auto& [target, source] : {std::pair<std::string, std::string>{"final_layer.adaLN_modulation.1.weight",
                                                                           "norm_out.linear.weight"},
                                       {"joint_blocks.2.context_block.adaLN_modulation.1.weight",
                                        "transformer_blocks.2.norm1_context.linear.weight"}}) {
    const Tensor d = diffusers.get(source);
    EXPECT_TRUE(same_bits(sai.get(target), concat({d.narrow(0, 32, 32), d.narrow(0, 0, 32)}, 0))) << target;
  }
  // Not swapped in the other blocks (AdaLayerNormZero has SAI's order).
  EXPECT_TRUE(same_bits(sai.get("joint_blocks.1.context_block.adaLN_modulation.1.weight"),
                        diffusers.get("transformer_blocks.1.norm1_context.linear.weight")));
}

TEST(Sd3Weights, SingleFileWithVaeAndPipelineFolder) {
  // SAI's single files: the MMDiT under "model.diffusion_model.", the VAE under "first_stage_model." beside it.
  WeightSource sai = WeightSource::open(sd3_data("medium_sai.safetensors"));
  std::vector<std::pair<std::string, Tensor>> repack;
  for (const std::string& name : sai.names()) repack.emplace_back("model.diffusion_model." + name, sai.get(name));
  repack.emplace_back("first_stage_model.decoder.conv_in.weight", Tensor::scalar(1.0));
  repack.emplace_back("text_encoders.clip_l.transformer.text_model.final_layer_norm.weight", Tensor::scalar(1.0));
  fs::path dir = scratch_dir("sd3_single_file");
  save_safetensors((dir / "sd3.5_medium.safetensors").string(), repack);
  WeightSource single = WeightSource::open((dir / "sd3.5_medium.safetensors").string());
  DetectedFormat format = sd3::detect_weight_format(single);
  EXPECT_EQ(format.format.name, "sai");
  EXPECT_EQ(format.prefix, "model.diffusion_model.");
  EXPECT_EQ(mapped_shapes(single, format), file_shapes(sai));
  auto model = TensorTree::with_shapes(file_shapes(sai), DType::F32);
  LoadMappedReport report = load_mapped(*model, single, format);
  EXPECT_EQ(report.n_zero_copy, 95);
  EXPECT_EQ(report.n_outside_prefix, 2);
  for (const auto& [name, tensor] : model->named_parameters()) EXPECT_TRUE(same_bits(tensor, sai.get(name))) << name;

  // A diffusers pipeline folder: the transformer/ subfolder is found.
  fs::path pipeline = scratch_dir("sd3_pipeline");
  fs::create_directory_symlink(fs::absolute(sd3_data("medium_diffusers")), pipeline / "transformer");
  WeightSource source = WeightSource::open(pipeline.string(), "transformer");
  EXPECT_EQ(sd3::detect_weight_format(source).format.name, "diffusers");
}

TEST(Sd3Weights, OtherFilesAreNamed) {
  // A Flux file is neither format; the message names the keys each looked for.
  WeightSource lora = WeightSource::open(sd3_data("medium_lora_peft.safetensors"));
  const std::string message = error_of([&] { sd3::detect_weight_format(lora); });
  EXPECT_THAT(message, HasSubstr("medium_lora_peft.safetensors is in none of the known formats"));
  EXPECT_THAT(message, HasSubstr("'sai' looks for 'x_embedder.proj.weight'"));
  EXPECT_THAT(message, HasSubstr("'diffusers' looks for 'pos_embed.proj.weight'"));
  WeightSource flux = WeightSource::open(testing::test_data_dir() + "/flux/dev_diffusers");
  EXPECT_THAT(error_of([&] { sd3::detect_weight_format(flux); }), HasSubstr("none of the known formats"));
}

sd3::LayoutSizes medium_sizes() {
  WeightSource sai = WeightSource::open(sd3_data("medium_sai.safetensors"));
  return sd3::layout_sizes(mapped_shapes(sai, sd3::detect_weight_format(sai)));
}

TEST(Sd3Weights, LayoutSizesFromShapes) {
  sd3::LayoutSizes sizes = medium_sizes();
  EXPECT_EQ(sizes.hidden, 32);
  EXPECT_EQ(sizes.n_blocks, 3);
  LoraLayout layout = sd3::lora_layout(sizes);
  const LoraModuleLayout* qkv2 = layout.find("joint_blocks.1.x_block.attn2.qkv");
  ASSERT_NE(qkv2, nullptr);
  ASSERT_EQ(qkv2->parts.size(), 3u);
  EXPECT_EQ(qkv2->parts[2].peft_module, "transformer_blocks.1.attn2.to_v");
  EXPECT_EQ(qkv2->parts[2].row_begin, 64);
  EXPECT_EQ(qkv2->parts[2].row_end, 96);
  EXPECT_EQ(layout.find("joint_blocks.0.context_block.attn.qkv")->parts[1].peft_module,
            "transformer_blocks.0.attn.add_k_proj");
  EXPECT_TRUE(layout.find("final_layer.adaLN_modulation.1")->parts[0].swap_halves);
  EXPECT_TRUE(layout.find("joint_blocks.2.context_block.adaLN_modulation.1")->parts[0].swap_halves);
  EXPECT_FALSE(layout.find("joint_blocks.1.context_block.adaLN_modulation.1")->parts[0].swap_halves);
  EXPECT_EQ(layout.find("joint_blocks.0.context_block.attn.proj")->parts[0].peft_module,
            "transformer_blocks.0.attn.to_add_out");
  EXPECT_EQ(layout.find("joint_blocks.0.x_block.mlp.fc1")->parts[0].peft_module, "transformer_blocks.0.ff.net.0.proj");
  EXPECT_EQ(layout.find("y_embedder.mlp.2")->parts[0].peft_module, "time_text_embed.text_embedder.linear_2");
  EXPECT_THAT(error_of([] { sd3::layout_sizes({}); }), HasSubstr("no x_embedder.proj.weight"));
}

// A LoRA on the last block's context modulation, applied in SAI names, equals its PEFT export applied to diffusers'
// norm1_context.linear (whose rows are the halves swapped): the LoRA layout and the weight map agree.
TEST(Sd3Weights, PreOnlyModulationLoraSwapsLikeTheWeights) {
  WeightSource sai = WeightSource::open(sd3_data("medium_sai.safetensors"));
  WeightSource diffusers = WeightSource::open(sd3_data("medium_diffusers"));
  LoraLayout layout = sd3::lora_layout(medium_sizes());
  const std::string module = "joint_blocks.2.context_block.adaLN_modulation.1";
  LoraSet set = {{module, {.down = testing::dyadic({4, 32}, 1), .up = testing::dyadic({64, 4}, 2), .alpha = 8.0}}};
  std::map<std::string, Tensor> peft;
  for (auto& [name, t] : to_peft(set, layout)) peft[name] = t;
  EXPECT_EQ(peft.size(), 2u);
  const LoraTensors& lora = set.at(module);
  Tensor sai_adapted = add(sai.get(module + ".weight"), mul(matmul(lora.up, lora.down), lora.scale()));
  const std::string d = "transformer.transformer_blocks.2.norm1_context.linear";
  Tensor diffusers_adapted = add(diffusers.get("transformer_blocks.2.norm1_context.linear.weight"),
                                 matmul(peft.at(d + ".lora_B.weight"), peft.at(d + ".lora_A.weight")));
  EXPECT_TRUE(
      same_bits(concat({diffusers_adapted.narrow(0, 32, 32), diffusers_adapted.narrow(0, 0, 32)}, 0), sai_adapted));
}

TEST(Sd3Weights, PeftAndKohyaFilesConvertIntoEachOther) {
  LoraLayout layout = sd3::lora_layout(medium_sizes());
  LoraFile peft = read_lora_file(sd3_data("medium_lora_peft.safetensors"));
  LoraFile kohya = read_lora_file(sd3_data("medium_lora_kohya.safetensors"));
  ASSERT_EQ(peft.format, LoraFileFormat::Peft);
  ASSERT_EQ(kohya.format, LoraFileFormat::Kohya);
  LoraSet from_peft_file = from_peft(peft.tensors, layout, peft_scales(peft.metadata));
  LoraSet from_kohya_file = from_kohya(kohya.tensors, layout.module_paths());
  ASSERT_EQ(from_peft_file.size(), 31u);
  ASSERT_EQ(from_kohya_file.size(), 31u);
  for (const auto& [module, k] : from_kohya_file) {
    SCOPED_TRACE(module);
    ASSERT_EQ(from_peft_file.count(module), 1u);
    const LoraTensors& p = from_peft_file.at(module);
    EXPECT_EQ(k.alpha, 8.0);
    EXPECT_EQ(p.rank(), 4);  // the fused groups share lora_A: no block-diagonal growth
    EXPECT_TRUE(same_bits(p.down, k.down));
    EXPECT_TRUE(same_bits(p.up, mul(k.up, k.scale())));  // the scale 8 / 4 baked into up (exact: x2)
  }
  // And back: the kohya file split by the layout has exactly diffusers' keys, with the same products.
  std::vector<std::pair<std::string, Tensor>> written = to_peft(from_kohya_file, layout);
  std::map<std::string, Tensor> ours(written.begin(), written.end());
  std::set<std::string> their_keys, our_keys;
  for (const auto& [name, t] : peft.tensors) their_keys.insert(name);
  for (const auto& [name, t] : ours) our_keys.insert(name);
  EXPECT_EQ(our_keys, their_keys);  // 47 diffusers Linears x (lora_A, lora_B)
  EXPECT_EQ(our_keys.size(), 94u);
  for (const auto& [name, a] : peft.tensors) {
    if (name.find(".lora_A.") == std::string::npos) continue;
    SCOPED_TRACE(name);
    const std::string b_name = name.substr(0, name.size() - std::string("lora_A.weight").size()) + "lora_B.weight";
    EXPECT_TRUE(same_bits(matmul(ours.at(b_name), ours.at(name)), mul(matmul(peft.tensors.at(b_name), a), 2.0)));
  }
}

}  // namespace
}  // namespace wick
