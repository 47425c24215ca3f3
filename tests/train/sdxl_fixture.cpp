// Files for the SDXL LoRA command-line test (tests/train/sdxl_train_test.sh):
//
//   sdxl_fixture data DIR
//     DIR/sdxl_tiny.safetensors  a random SDXL-like UNet laid out as sd_xl_base_1.0.safetensors: sgm's names under
//                                "model.diffusion_model.", a VAE tensor under "first_stage_model." beside it; SDXL's
//                                rules (32 GroupNorm groups, 256-wide size sinusoids, linear projections) at tiny
//                                sizes: 4-channel latents, model_channels 32, 2 levels 32/64 (attention at level 1,
//                                depth 1; middle depth 1), heads of 32, context 64, pooled 32 (label_emb 32 + 6 x 256);
//                                f32
//     DIR/sdxl.h5                cached latents for it (model_family sdxl, SDXL's VAE scaling 0.13025) with
//                                original_size and crop per sample: 18 samples, 6 in each of the buckets 16x16, 16x24,
//                                24x16; 8 text tokens of 64, pooled 32
//     DIR/sdxl_no_sizes.h5       the same samples without original_size and crop
//
// Content (tests/train/caption_dataset.h): three captions with their own text embeddings and latent patterns.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/init.h"
#include "models/sdxl/sdxl_unet.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"
#include "tests/train/caption_dataset.h"

namespace wick {
namespace {

constexpr double kSdxlVaeScaling = 0.13025;

void write_tiny_sdxl(const std::string& path) {
  set_init_seed(17);
  sdxl::UnetConfig c{.model_channels = 32, .channel_mult = {1, 2}, .transformer_depth = {0, 1},
                     .transformer_depth_middle = 1, .time_embed_dim = 128, .head_dim = 32, .context_dim = 64,
                     .adm_in_channels = 32 + 6 * 256, .dtype = DType::F32};
  sdxl::Unet model(c);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, tensor] : model.named_parameters())
    tensors.emplace_back("model.diffusion_model." + name, tensor);
  tensors.emplace_back("first_stage_model.decoder.conv_in.bias", Tensor::from_vector<float>({0.5f, -0.5f}, {2}));
  save_safetensors(path, tensors, {{"format", "pt"}, {"generator", "tests/train/sdxl_fixture.cpp"}});
}

int write_data(const std::string& dir) {
  std::filesystem::create_directories(dir);
  write_tiny_sdxl(dir + "/sdxl_tiny.safetensors");
  testing::CaptionDatasetOptions sdxl{.model_family = "sdxl", .vae_scaling = kSdxlVaeScaling};
  sdxl.channels = 4, sdxl.text_length = 8, sdxl.text_dim = 64, sdxl.pooled_dim = 32;
  sdxl.buckets = {{16, 16}, {16, 24}, {24, 16}}, sdxl.per_bucket = 6;
  testing::CaptionDatasetOptions no_sizes = sdxl;
  sdxl.sizes = true;
  testing::write_caption_dataset(dir + "/sdxl.h5", sdxl);
  testing::write_caption_dataset(dir + "/sdxl_no_sizes.h5", no_sizes);
  return 0;
}

}  // namespace
}  // namespace wick

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "data" && argc == 3) return wick::write_data(argv[2]);
  } catch (const wick::WickError& error) {
    std::fprintf(stderr, "sdxl_fixture: %s\n", error.what());
    return 1;
  }
  std::fprintf(stderr, "usage: %s data DIR\n", argv[0]);
  return 2;
}
