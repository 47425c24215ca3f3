// What only Flux's weight formats have (models/flux/flux_weights.h), against the fixtures of tests/data/flux (written
// by diffusers 0.42.1; see its README): schnell has no guidance embedder in either format, and a diffusers tensor of
// another width is named with the tensors it is built from. What every architecture's formats show (the diffusers
// folder loads to exactly the BFL tensors, detection, single files, LoRA layout and files) is Flux's row of
// arch_weights_test.cpp.
#include "models/flux/flux_weights.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "runtime/safetensors.h"
#include "tests/error_of.h"
#include "tests/models/arch_test_util.h"
#include "tests/models/weights_test_util.h"
#include "tests/test_data.h"

namespace wick {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::file_shapes;
using ::testing::HasSubstr;
using testing::same_bits;
using testing::scratch_dir;
using testing::TensorTree;

std::string flux_data(const std::string& name) { return testing::test_data_dir() + "/flux/" + name; }

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

TEST(FluxWeights, WrongSizesAreNamedWithTheirSources) {
  WeightSource diffusers = WeightSource::open(flux_data("dev_diffusers"));
  std::map<std::string, Shape> shapes = file_shapes(WeightSource::open(flux_data("dev_bfl.safetensors")));
  shapes["double_blocks.0.img_attn.qkv.weight"] = {3 * 48, 32};  // a model of another width
  auto model = TensorTree::with_shapes(shapes, DType::F32);
  EXPECT_THAT(error_of([&] { load_mapped(*model, diffusers, flux::detect_weight_format(diffusers)); }),
              HasSubstr("double_blocks.0.img_attn.qkv.weight: the model expects [144, 32], the source has [96, 32] "
                        "(transformer_blocks.0.attn.to_q.weight [32, 32] + transformer_blocks.0.attn.to_k.weight "
                        "[32, 32] + transformer_blocks.0.attn.to_v.weight [32, 32])"));
}

}  // namespace
}  // namespace wick
