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
// Content: three captions, each with its own deterministic text embeddings and its own latent
// pattern (cosine stripes whose frequency and direction depend on the caption and the channel),
// plus a little per-sample noise (Philox), so a LoRA can learn caption -> pattern and the loss falls.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/data/latent_dataset.h"
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

namespace wick {
namespace {

constexpr double kFluxVaeScaling = 0.3611, kFluxVaeShift = 0.1159;
const std::vector<std::string> kCaptions = {"wide red stripes", "narrow blue stripes", "fine green checks"};

struct DatasetShape {
  int64_t channels, text_length, text_dim, pooled_dim;
  std::vector<std::pair<int64_t, int64_t>> buckets;  // latent (H, W)
  int64_t per_bucket;
  bool logvar = false;  // store the latents as a VAE distribution: mean (the pattern) and latents_logvar
  bool t5_attributes = false;  // record text_embeds_encoder t5-xxl, text_pooled_encoder clip-l, length L
};

// Caption k's text: its first 3 + k tokens real (mask 1), N(0, 1)/2 entries; the rest padding (zero).
void caption_text(int64_t k, const DatasetShape& s, float* embeds, uint8_t* mask, float* pooled) {
  RngStream text = derive_stream(7, static_cast<uint64_t>(k), 1, RngPurpose::Test);
  const int64_t real = std::min<int64_t>(3 + k, s.text_length);
  for (int64_t t = 0; t < s.text_length; ++t) {
    mask[t] = t < real ? 1 : 0;
    for (int64_t d = 0; d < s.text_dim; ++d)
      embeds[t * s.text_dim + d] =
          t < real ? 0.5f * stream_normal(text, static_cast<uint64_t>(t * s.text_dim + d)) : 0.0f;
  }
  RngStream pool = derive_stream(7, static_cast<uint64_t>(k), 2, RngPurpose::Test);
  for (int64_t p = 0; p < s.pooled_dim; ++p) pooled[p] = 0.5f * stream_normal(pool, static_cast<uint64_t>(p));
}

void write_dataset(const std::string& path, const DatasetShape& s) {
  LatentDatasetAttributes attributes{.model_family = "flux", .latent_channels = s.channels,
                                     .vae_scaling_factor = kFluxVaeScaling, .vae_shift_factor = kFluxVaeShift,
                                     .text_encoder = "wick-test-random"};
  if (s.t5_attributes) {
    attributes.text_embeds_encoder = "t5-xxl";
    attributes.text_pooled_encoder = "clip-l";
    attributes.text_max_length = s.text_length;
  }
  LatentDatasetWriter writer(path, attributes);
  int64_t sample = 0;
  for (const auto& [h, w] : s.buckets) {
    const int64_t n = s.per_bucket, c = s.channels;
    std::vector<float> latents(static_cast<size_t>(n * c * h * w)), logvar(s.logvar ? latents.size() : 0);
    std::vector<float> embeds(static_cast<size_t>(n * s.text_length * s.text_dim));
    std::vector<float> pooled(static_cast<size_t>(n * s.pooled_dim));
    std::vector<uint8_t> mask(static_cast<size_t>(n * s.text_length));
    std::vector<std::string> captions;
    for (int64_t i = 0; i < n; ++i, ++sample) {
      const int64_t k = sample % static_cast<int64_t>(kCaptions.size());
      captions.push_back(kCaptions[static_cast<size_t>(k)]);
      caption_text(k, s, &embeds[static_cast<size_t>(i * s.text_length * s.text_dim)],
                   &mask[static_cast<size_t>(i * s.text_length)], &pooled[static_cast<size_t>(i * s.pooled_dim)]);
      RngStream noise = derive_stream(7, static_cast<uint64_t>(sample), 0, RngPurpose::Test);
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t y = 0; y < h; ++y)
          for (int64_t x = 0; x < w; ++x) {
            const int64_t e = ((i * c + ch) * h + y) * w + x;
            const int64_t along = (ch + k) % 2 == 0 ? x : (k == 2 ? x + y : y);
            const double phase =
                3.14159265358979 * static_cast<double>((k + 1) * along) / 4.0 + 0.4 * static_cast<double>(ch);
            const double model_value = 0.9 * std::cos(phase) + 0.1 * stream_normal(noise, static_cast<uint64_t>(e));
            // Stored as the VAE writes it: the model sees (latent - shift) * scaling = model_value.
            latents[static_cast<size_t>(e)] = static_cast<float>(model_value / kFluxVaeScaling + kFluxVaeShift);
            // A standard deviation of about 0.05 in the model's units (0.05 / 0.3611 stored), varying a little.
            if (s.logvar) logvar[static_cast<size_t>(e)] = static_cast<float>(-3.96 + 0.25 * std::sin(phase));
          }
    }
    writer.append({.latents = Tensor::from_vector<float>(latents, {n, c, h, w}),
                   .latents_logvar = s.logvar ? Tensor::from_vector<float>(logvar, {n, c, h, w}) : Tensor(),
                   .text_embeds = Tensor::from_vector<float>(embeds, {n, s.text_length, s.text_dim}),
                   .text_pooled = Tensor::from_vector<float>(pooled, {n, s.pooled_dim}),
                   .text_mask = Tensor::from_vector<uint8_t>(mask, {n, s.text_length}),
                   .captions = captions});
  }
  writer.close();
}

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
  write_dataset(dir + "/flux_sample.h5", {.channels = 16, .text_length = 8, .text_dim = 32, .pooled_dim = 16,
                                          .buckets = {{8, 12}, {12, 8}}, .per_bucket = 4, .t5_attributes = true});
  return 0;
}

int write_data(const std::string& dir) {
  std::filesystem::create_directories(dir);
  write_tiny_flux(dir + "/flux_tiny.safetensors");
  write_dataset(dir + "/flux.h5", {.channels = 16, .text_length = 16, .text_dim = 4096, .pooled_dim = 768,
                                   .buckets = {{16, 24}, {24, 16}, {16, 16}}, .per_bucket = 6, .logvar = true});
  write_dataset(dir + "/flux_dev_sized.h5", {.channels = 4, .text_length = 7, .text_dim = 32, .pooled_dim = 24,
                                             .buckets = {{6, 10}, {8, 8}}, .per_bucket = 4});
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
