// Files for the SD3.5 LoRA command-line and interop tests (tests/train/sd3_train_test.sh,
// tests/train/sd3_lora_diffusers_test.sh):
//
//   sd3_fixture data DIR
//     DIR/sd3.5_tiny.safetensors  a random SD3.5-Medium-like MMDiT laid out as SAI's single files: Stability AI's
//                                 names under "model.diffusion_model.", a VAE tensor under "first_stage_model."
//                                 beside it; real widths but tiny depth and width: 16-channel latents in 2x2
//                                 patches, hidden 128 = 64 x 2 blocks in heads of 64 (SAI's rule, which ComfyUI's
//                                 key map also assumes), attn2 and QK norm, the last block pre-only, context 4096,
//                                 pooled 2048, a 16x16 position table; f32, 2,067,776 parameters
//     DIR/sd3.h5                  cached latents for it (model_family sd3, SD3's VAE scaling 1.5305, shift 0.0609):
//                                 18 samples, 6 in each of the buckets 16x24, 24x16, 16x16; 16 text tokens
//     DIR/sd3_medium_sized.h5     cached latents the size of tests/data/sd3/medium (16 channels, 7 tokens of 32,
//                                 pooled 64): 8 samples in buckets 8x8 and 6x10 (inside its 6x6 patch table)
//   sd3_fixture lora-case LORA CASE OUT [WEIGHTS]
//     Rebuilds the model LORA was trained on (its wick_config metadata; base WEIGHTS when given), in f32, loads
//     LORA, merges it into the weights and writes OUT with CASE's latents_square (as latents), context, pooled and
//     sigma, and the merged model's output as expected_output.
//
// Content (tests/train/caption_dataset.h): three captions with their own text embeddings and latent patterns.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/init.h"
#include "models/lora_files.h"
#include "models/model_factory.h"
#include "models/nn/adapters.h"
#include "models/registry.h"
#include "models/sd3/sd3.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"
#include "tests/train/caption_dataset.h"

namespace wick {
namespace {

constexpr double kSd3VaeScaling = 1.5305, kSd3VaeShift = 0.0609;

void write_tiny_sd3(const std::string& path) {
  set_init_seed(13);
  sd3::Sd3Config c{.hidden_size = 128, .num_heads = 2, .depth = 2, .context_dim = 4096, .pooled_dim = 2048,
                   .pos_embed_max_size = 16, .qk_norm = true, .dual_attention_layers = {0}, .dtype = DType::F32};
  sd3::MMDiT model(c);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, tensor] : model.named_parameters())
    tensors.emplace_back("model.diffusion_model." + name, tensor);
  tensors.emplace_back("first_stage_model.decoder.conv_in.bias", Tensor::from_vector<float>({0.5f, -0.5f}, {2}));
  save_safetensors(path, tensors, {{"format", "pt"}, {"generator", "tests/train/sd3_fixture.cpp"}});
}

int write_data(const std::string& dir) {
  std::filesystem::create_directories(dir);
  write_tiny_sd3(dir + "/sd3.5_tiny.safetensors");
  const testing::CaptionDatasetOptions sd3{.model_family = "sd3", .vae_scaling = kSd3VaeScaling,
                                           .vae_shift = kSd3VaeShift};
  testing::CaptionDatasetOptions big = sd3, medium_sized = sd3;
  big.channels = 16, big.text_length = 16, big.text_dim = 4096, big.pooled_dim = 2048;
  big.buckets = {{16, 24}, {24, 16}, {16, 16}}, big.per_bucket = 6;
  medium_sized.channels = 16, medium_sized.text_length = 7, medium_sized.text_dim = 32, medium_sized.pooled_dim = 64;
  medium_sized.buckets = {{8, 8}, {6, 10}}, medium_sized.per_bucket = 4;
  testing::write_caption_dataset(dir + "/sd3.h5", big);
  testing::write_caption_dataset(dir + "/sd3_medium_sized.h5", medium_sized);
  return 0;
}

double max_relative(const Tensor& a, const Tensor& b) {
  std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  double worst = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(x[i]) - y[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(y[i])));
  }
  return scale > 0 ? worst / scale : worst;
}

int write_lora_case(const std::string& lora, const std::string& case_path, const std::string& out,
                    const std::string& weights) {
  LoraFile file = read_lora_file(lora);
  auto yaml = file.metadata.find("wick_config");
  WICK_CHECK_KIND(Data, yaml != file.metadata.end(), lora, ": no wick_config metadata (not written by wick train?)");
  TrainConfig config = parse_config_string(yaml->second, lora + " (wick_config)", config_schema());
  if (!weights.empty()) config.model.name_or_path = weights;
  config.model.dtype = DType::F32;
  config.train.mixed_precision = MixedPrecision::No;
  config.train.gradient_checkpointing = false;
  SafetensorsFile inputs = SafetensorsFile::open(case_path);
  Tensor latents = inputs.get("latents_square").to(DType::F32), context = inputs.get("context").to(DType::F32);
  Tensor pooled = inputs.get("pooled").to(DType::F32), sigma = inputs.get("sigma").to(DType::F32);
  DataGeometry geometry{.latent_channels = latents.size(1),
                        .latent_sizes = {{latents.size(2), latents.size(3)}},
                        .text_length = context.size(1),
                        .text_dim = context.size(2),
                        .pooled_dim = pooled.size(1)};
  std::shared_ptr<DiffusionModel> model = build_model(config, geometry, Device::cpu());
  auto* mmdit = dynamic_cast<sd3::MMDiT*>(model.get());
  WICK_CHECK_KIND(Config, mmdit != nullptr, lora, ": trained on model.arch ", config.model.arch, ", not sd3");
  load_lora(*model, lora);
  Tensor adapted = mmdit->forward(latents, sigma, context, pooled);
  for (auto& [path, adapter] : nn::find_adapters(*model)) adapter->merge();
  Tensor merged = mmdit->forward(latents, sigma, context, pooled);
  save_safetensors(out,
                   {{"latents", latents}, {"context", context}, {"pooled", pooled}, {"sigma", sigma},
                    {"expected_output", merged}},
                   {{"lora", lora}, {"generator", "tests/train/sd3_fixture.cpp lora-case"}});
  std::printf("sd3_fixture: %s: %zu adapters (%s, rank %lld) merged; output %s, max |merged - adapters| / max = %.2e\n",
              out.c_str(), nn::find_adapters(*model).size(), network_type_name(config.network.type),
              static_cast<long long>(config.network.linear), merged.describe().c_str(), max_relative(merged, adapted));
  return 0;
}

}  // namespace
}  // namespace wick

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "data" && argc == 3) return wick::write_data(argv[2]);
    if (mode == "lora-case" && (argc == 5 || argc == 6))
      return wick::write_lora_case(argv[2], argv[3], argv[4], argc == 6 ? argv[5] : "");
  } catch (const wick::WickError& error) {
    std::fprintf(stderr, "sd3_fixture: %s\n", error.what());
    return 1;
  }
  std::fprintf(stderr, "usage: %s data DIR | lora-case LORA CASE OUT [WEIGHTS]\n", argv[0]);
  return 2;
}
