// Files for the Flux LoRA command-line and interop tests (tests/train/flux_train_test.sh,
// tests/train/flux_lora_diffusers_test.sh):
//
//   flux_fixture data DIR
//     DIR/flux_tiny.safetensors  a random Flux.1-dev in Black Forest Labs' names at real widths but tiny
//                                depth: 16-channel latents (img_in 64), hidden 128, one head of 128
//                                (axes 16 + 56 + 56), 2 double + 2 single blocks, T5 width 4096,
//                                CLIP pooled 768, guidance_in (dev); f32, 2,536,512 parameters
//     DIR/flux.h5                cached latents for it (model_family flux, VAE scaling 0.3611, shift
//                                0.1159): 18 samples, 6 in each of the buckets 16x24, 24x16, 16x16;
//                                16 text tokens; stored as a VAE distribution (latents = mean,
//                                latents_logvar about -4: a std of 0.05 in the model's units), so every
//                                run samples its training latents (dataset.latent_sampling: sample)
//     DIR/flux_dev_sized.h5      cached latents the size of tests/data/flux/dev_bfl (4 channels, 7 tokens
//                                of 32, pooled 24): 8 samples in buckets 6x10 and 8x8
//   flux_fixture sample-data DIR
//     DIR/flux_sample_tiny.safetensors  a random Flux.1-dev in BFL names whose widths fit the committed tiny
//                                       sampling parts: img_in 64 (tests/data/vae/flux_tiny: 16 latent
//                                       channels, x2), txt_in 32 (tests/data/t5: T5 width 32), vector_in 16
//                                       (tests/data/clip_text/clip_l: pooled 16); hidden 32, 2 heads of 16
//                                       (axes 4 + 6 + 6: model.axes_dim [4, 6, 6]), 2 double + 2 single blocks
//     DIR/flux_sample.h5                cached latents for it: 8 samples in buckets 8x12 and 12x8 (16 x 24 and
//                                       24 x 16 pixels through the x2 VAE), 8 text tokens of 32, pooled 16; its
//                                       text attributes say T5 length 8 (text_embeds_encoder t5-xxl), so a
//                                       sampler uses 8 T5 tokens (the embeddings themselves are random)
//   flux_fixture lora-case LORA CASE OUT [WEIGHTS]
//     Rebuilds the model LORA was trained on (its wick_config metadata; base WEIGHTS when given), in
//     f32, loads LORA, merges it into the weights and writes OUT with CASE's latents, context,
//     pooled, timestep, guidance and the merged model's output as expected_output.
//
// Content (tests/train/caption_dataset.h): three captions, each with its own deterministic text
// embeddings and its own latent pattern, plus a little per-sample noise (Philox), so a LoRA can learn
// caption -> pattern and the loss falls.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/init.h"
#include "models/flux/flux.h"
#include "models/lora_files.h"
#include "models/model_factory.h"
#include "models/nn/adapters.h"
#include "models/registry.h"
#include "models/weights/lora_format.h"
#include "runtime/error.h"
#include "runtime/philox.h"
#include "runtime/safetensors.h"
#include "tests/train/caption_dataset.h"

namespace wick {
namespace {

constexpr double kFluxVaeScaling = 0.3611, kFluxVaeShift = 0.1159;

void write_tiny_flux(const std::string& path) {
  set_init_seed(11);
  flux::FluxConfig c{.in_channels = 64, .hidden_size = 128, .num_heads = 1, .depth = 2, .depth_single = 2,
                     .context_dim = 4096, .vec_dim = 768, .guidance_embed = true, .initialize = true,
                     .dtype = DType::F32};
  flux::FluxTransformer model(c);
  save_safetensors(path, model.named_parameters(), {{"format", "pt"}, {"generator", "tests/train/flux_fixture.cpp"}});
}

int write_sample_data(const std::string& dir) {
  std::filesystem::create_directories(dir);
  set_init_seed(13);
  flux::FluxConfig c{.in_channels = 64, .hidden_size = 32, .num_heads = 2, .depth = 2, .depth_single = 2,
                     .context_dim = 32, .vec_dim = 16, .axes_dim = {4, 6, 6}, .guidance_embed = true,
                     .initialize = true, .dtype = DType::F32};
  flux::FluxTransformer model(c);
  save_safetensors(dir + "/flux_sample_tiny.safetensors", model.named_parameters(),
                   {{"format", "pt"}, {"generator", "tests/train/flux_fixture.cpp sample-data"}});
  testing::write_caption_dataset(dir + "/flux_sample.h5",
                                 {.model_family = "flux", .vae_scaling = kFluxVaeScaling, .vae_shift = kFluxVaeShift,
                                  .channels = 16, .text_length = 8, .text_dim = 32, .pooled_dim = 16,
                                  .buckets = {{8, 12}, {12, 8}}, .per_bucket = 4, .t5_attributes = true});
  return 0;
}

int write_data(const std::string& dir) {
  std::filesystem::create_directories(dir);
  write_tiny_flux(dir + "/flux_tiny.safetensors");
  const testing::CaptionDatasetOptions flux{.model_family = "flux", .vae_scaling = kFluxVaeScaling,
                                            .vae_shift = kFluxVaeShift};
  testing::CaptionDatasetOptions big = flux, dev_sized = flux;
  big.channels = 16, big.text_length = 16, big.text_dim = 4096, big.pooled_dim = 768;
  big.buckets = {{16, 24}, {24, 16}, {16, 16}}, big.per_bucket = 6, big.logvar = true;
  dev_sized.channels = 4, dev_sized.text_length = 7, dev_sized.text_dim = 32, dev_sized.pooled_dim = 24;
  dev_sized.buckets = {{6, 10}, {8, 8}}, dev_sized.per_bucket = 4;
  testing::write_caption_dataset(dir + "/flux.h5", big);
  testing::write_caption_dataset(dir + "/flux_dev_sized.h5", dev_sized);
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
  Tensor latents = inputs.get("latents").to(DType::F32), context = inputs.get("context").to(DType::F32);
  Tensor pooled = inputs.get("pooled").to(DType::F32), timestep = inputs.get("timestep").to(DType::F32);
  Tensor guidance = inputs.contains("guidance") ? inputs.get("guidance").to(DType::F32) : Tensor();
  DataGeometry geometry{.latent_channels = latents.size(1),
                        .latent_sizes = {{latents.size(2), latents.size(3)}},
                        .text_length = context.size(1),
                        .text_dim = context.size(2),
                        .pooled_dim = pooled.size(1)};
  std::shared_ptr<DiffusionModel> model = build_model(config, geometry, Device::cpu());
  auto* flux = dynamic_cast<flux::FluxTransformer*>(model.get());
  WICK_CHECK_KIND(Config, flux != nullptr, lora, ": trained on model.arch ", config.model.arch, ", not flux");
  load_lora(*model, lora);
  Tensor adapted = flux->forward(latents, timestep, context, pooled, guidance);
  for (auto& [path, adapter] : nn::find_adapters(*model)) adapter->merge();
  Tensor merged = flux->forward(latents, timestep, context, pooled, guidance);
  std::vector<std::pair<std::string, Tensor>> tensors = {
      {"latents", latents}, {"context", context}, {"pooled", pooled}, {"timestep", timestep}};
  if (guidance.defined()) tensors.emplace_back("guidance", guidance);
  tensors.emplace_back("expected_output", merged);
  save_safetensors(out, tensors, {{"lora", lora}, {"generator", "tests/train/flux_fixture.cpp lora-case"}});
  std::printf("flux_fixture: %s: %zu adapters (%s, rank %lld) merged; output %s, "
              "max |merged - adapters| / max = %.2e\n",
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
    if (mode == "sample-data" && argc == 3) return wick::write_sample_data(argv[2]);
    if (mode == "lora-case" && (argc == 5 || argc == 6))
      return wick::write_lora_case(argv[2], argv[3], argv[4], argc == 6 ? argv[5] : "");
  } catch (const wick::WickError& error) {
    std::fprintf(stderr, "flux_fixture: %s\n", error.what());
    return 1;
  }
  std::fprintf(stderr, "usage: %s data DIR | sample-data DIR | lora-case LORA CASE OUT [WEIGHTS]\n", argv[0]);
  return 2;
}
