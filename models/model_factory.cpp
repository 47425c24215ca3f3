#include "models/model_factory.h"

#include <filesystem>

#include "engine/autograd/node.h"
#include "models/lora_files.h"
#include "models/nn/adapters.h"
#include "models/nn/conv.h"
#include "models/registry.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"

namespace fs = std::filesystem;

namespace wick {

DataGeometry dataset_geometry(const LatentDataset& data) {
  WICK_CHECK_KIND(Data, !data.buckets().empty(), data.path(), ": the dataset has no buckets");
  DataGeometry g{.model_family = data.attributes().model_family,
                 .latent_channels = data.attributes().latent_channels,
                 .text_length = data.text_length(),
                 .text_dim = data.text_dim(),
                 .pooled_dim = data.pooled_dim()};
  for (const BucketInfo& bucket : data.buckets()) g.latent_sizes.emplace_back(bucket.height, bucket.width);
  return g;
}

DType compute_dtype(const ModelConfig& model, const TrainSection& train) {
  DType compute = model.dtype;
  if (train.mixed_precision == MixedPrecision::BF16) compute = DType::BF16;
  if (train.mixed_precision == MixedPrecision::FP16) compute = DType::F16;
  if (train.mixed_precision != MixedPrecision::No && model.dtype != DType::F32)
    WICK_CHECK_KIND(Config, model.dtype == compute, "model.dtype ", dtype_name(model.dtype),
                    " and train.mixed_precision ", mixed_precision_name(train.mixed_precision),
                    " disagree: the base is stored in the compute dtype (set one of them)");
  return compute;
}

std::shared_ptr<DiffusionModel> build_model(const ModelConfig& model, const NetworkConfig& network,
                                            const TrainSection& train, LoraFormat lora_format,
                                            const DataGeometry& data, Device device) {
  const Architecture& arch = find_architecture(model.arch);
  std::shared_ptr<DiffusionModel> built =
      arch.build({.model = model, .data = data, .dtype = compute_dtype(model, train), .device = device,
                  .seed = static_cast<uint64_t>(train.seed), .gradient_checkpointing = train.gradient_checkpointing});
  for (const auto& [h, w] : data.latent_sizes) built->check_latent_size(h, w);
  if (network.type == NetworkType::Full) {
    built->set_all_trainable(true);
    return built;
  }
  nn::AdapterConfig adapters{.type = network_type_name(network.type),
                             .patterns = arch.targets(network.target),
                             .options = {.rank = network.linear, .alpha = network.linear_alpha,
                                         .dropout = network.dropout, .dora_axis = dora_axis_for(lora_format)}};
  if (network.conv == 0) {
    nn::apply_adapters(*built, adapters);
    return built;
  }
  const std::vector<std::string> conv_targets = arch.conv_targets();
  WICK_CHECK_KIND(Config, !conv_targets.empty(), "network.conv ", network.conv, ": model.arch ", arch.name(),
                  " has no convolutions for LoCon adapters (set network.conv to 0)");
  // kohya's conv_dim: the blocks' k x k convolutions at the conv rank, their Linear and 1x1 layers at the linear rank.
  auto spatial = [](const Module& m) {
    const auto* conv = dynamic_cast<const nn::Conv2d*>(&m);
    return conv != nullptr && conv->kernel_size() > 1;
  };
  adapters.patterns.insert(adapters.patterns.end(), conv_targets.begin(), conv_targets.end());
  adapters.accepts = [spatial](const Module& m) { return !spatial(m); };
  nn::apply_adapters(*built, adapters);
  nn::AdapterConfig convs{.type = network_type_name(network.type),
                          .patterns = conv_targets,
                          .options = {.rank = network.conv, .alpha = network.conv_alpha, .dropout = network.dropout,
                                      .dora_axis = dora_axis_for(lora_format)},
                          .accepts = spatial};
  nn::apply_adapters(*built, convs);
  return built;
}

std::shared_ptr<DiffusionModel> build_model(const TrainConfig& config, const DataGeometry& data, Device device) {
  return build_model(config.model, config.network, config.train, config.save.format, data, device);
}

fs::path save_model_weights(const DiffusionModel& model, const TrainConfig& config, const fs::path& directory,
                            int64_t step) {
  return find_architecture(model.arch_name())
      .export_model(model, directory, config.name, config.save.dtype,
                    {{"format", "pt"},
                     {"wick_network_type", network_type_name(config.network.type)},
                     {"wick_step", std::to_string(step)},
                     {"wick_config", to_yaml(config)}});
}

}  // namespace wick
