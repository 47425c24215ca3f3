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
//     DIR/sdxl_tiny_sized.h5     cached latents the size of tests/data/sdxl's tiny UNet (4 channels, 7 tokens of 32,
//                                pooled 16) with original_size and crop: 8 samples in buckets 16x16 and 8x12
//   sdxl_fixture lora-case LORA CASE OUT
//     Rebuilds the model LORA was trained on (its wick_config metadata) in f32, loads LORA, merges it into the
//     weights and writes OUT with CASE's latents_square (as latents), timesteps, context, pooled and time_ids, and
//     the merged model's output as expected_output.
//   sdxl_fixture model-case WEIGHTS CASE OUT
//     Builds the UNet of WEIGHTS (a file or diffusers folder; head width, groups and sinusoid width from its
//     config.json, else tests/data/sdxl's 8, 4, 8) in f32 and writes OUT as lora-case does, its output as
//     expected_output.
//
// Content (tests/train/caption_dataset.h): three captions with their own text embeddings and latent patterns.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/init.h"
#include "models/lora_files.h"
#include "models/model_factory.h"
#include "models/nn/adapters.h"
#include "models/registry.h"
#include "models/sdxl/sdxl_unet.h"
#include "models/sdxl/sdxl_weights.h"
#include "models/weights/key_map.h"
#include "models/weights/weight_source.h"
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
  testing::CaptionDatasetOptions tiny_sized = sdxl;
  tiny_sized.text_length = 7, tiny_sized.text_dim = 32, tiny_sized.pooled_dim = 16;
  tiny_sized.buckets = {{16, 16}, {8, 12}}, tiny_sized.per_bucket = 4;
  testing::write_caption_dataset(dir + "/sdxl_tiny_sized.h5", tiny_sized);
  return 0;
}

void write_case(sdxl::Unet& unet, const SafetensorsFile& inputs, const std::string& out, const std::string& from) {
  const Tensor latents = inputs.get("latents_square"), timesteps = inputs.get("timesteps");
  const Tensor context = inputs.get("context"), pooled = inputs.get("pooled"), time_ids = inputs.get("time_ids");
  Tensor output = unet.forward(latents, timesteps, context, pooled, time_ids);
  save_safetensors(out,
                   {{"latents", latents}, {"timesteps", timesteps}, {"context", context}, {"pooled", pooled},
                    {"time_ids", time_ids}, {"expected_output", output}},
                   {{"from", from}, {"generator", "tests/train/sdxl_fixture.cpp"}});
  std::printf("sdxl_fixture: %s: output %s of %s\n", out.c_str(), output.describe().c_str(), from.c_str());
}

int write_model_case(const std::string& weights, const std::string& case_path, const std::string& out) {
  WeightSource source = WeightSource::open(weights, "unet");
  DetectedFormat format = sdxl::detect_weight_format(source);
  sdxl::ConfigHints hints = sdxl::diffusers_config_hints(source);
  if (hints.head_dim == 0 && hints.num_heads == 0) hints.head_dim = 8;
  if (hints.norm_groups == 0) hints.norm_groups = 4;
  if (hints.size_embed_dim == 0) hints.size_embed_dim = 8;
  sdxl::UnetConfig c = sdxl::config_from_shapes(mapped_shapes(source, format), hints);
  c.dtype = DType::F32;
  c.initialize = false;
  sdxl::Unet unet(c);
  load_mapped(unet, source, format);
  write_case(unet, SafetensorsFile::open(case_path), out, weights + " (" + format.format.name + ")");
  return 0;
}

int write_lora_case(const std::string& lora, const std::string& case_path, const std::string& out) {
  LoraFile file = read_lora_file(lora);
  auto yaml = file.metadata.find("wick_config");
  WICK_CHECK_KIND(Data, yaml != file.metadata.end(), lora, ": no wick_config metadata (not written by wick train?)");
  TrainConfig config = parse_config_string(yaml->second, lora + " (wick_config)", config_schema());
  config.model.dtype = DType::F32;
  config.train.mixed_precision = MixedPrecision::No;
  config.train.gradient_checkpointing = false;
  SafetensorsFile inputs = SafetensorsFile::open(case_path);
  const Tensor latents = inputs.get("latents_square"), context = inputs.get("context"), pooled = inputs.get("pooled");
  DataGeometry geometry{.model_family = "sdxl", .latent_channels = latents.size(1),
                        .latent_sizes = {{latents.size(2), latents.size(3)}}, .text_length = context.size(1),
                        .text_dim = context.size(2), .pooled_dim = pooled.size(1)};
  std::shared_ptr<DiffusionModel> model = build_model(config, geometry, Device::cpu());
  auto* unet = dynamic_cast<sdxl::Unet*>(model.get());
  WICK_CHECK_KIND(Config, unet != nullptr, lora, ": trained on model.arch ", config.model.arch, ", not sdxl");
  load_lora(*model, lora);
  for (auto& [path, adapter] : nn::find_adapters(*model)) adapter->merge();
  std::printf("sdxl_fixture: %zu adapters (%s, rank %lld, conv rank %lld) merged\n", nn::find_adapters(*model).size(),
              network_type_name(config.network.type), static_cast<long long>(config.network.linear),
              static_cast<long long>(config.network.conv));
  write_case(*unet, inputs, out, lora);
  return 0;
}

}  // namespace
}  // namespace wick

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "data" && argc == 3) return wick::write_data(argv[2]);
    if (mode == "lora-case" && argc == 5) return wick::write_lora_case(argv[2], argv[3], argv[4]);
    if (mode == "model-case" && argc == 5) return wick::write_model_case(argv[2], argv[3], argv[4]);
  } catch (const wick::WickError& error) {
    std::fprintf(stderr, "sdxl_fixture: %s\n", error.what());
    return 1;
  }
  std::fprintf(stderr, "usage: %s data DIR | lora-case LORA CASE OUT | model-case WEIGHTS CASE OUT\n", argv[0]);
  return 2;
}
