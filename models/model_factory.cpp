#include "models/model_factory.h"

#include <filesystem>
#include <map>

#include "engine/autograd/node.h"
#include "models/lora_files.h"
#include "models/nn/adapters.h"
#include "models/nn/conv.h"
#include "models/registry.h"
#include "models/weights/float8_weights.h"
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

namespace {

// model.quantize: float8: the frozen Linears of the model's blocks (DiffusionModel::block_paths)
// become e4m3 codes with f32 scales, before adapters wrap them.
void quantize_base(DiffusionModel& model, const ModelConfig& config, const NetworkConfig& network) {
  const std::vector<std::string> blocks = model.block_paths();
  WICK_CHECK_KIND(Config, !blocks.empty(), "model.quantize: float8: arch ", config.arch,
                  " has no blocks to quantize (", pretrained_architecture_names(), " have)");
  WICK_CHECK_KIND(Config, network.type != NetworkType::Full,
                  "model.quantize: float8 stores the frozen base as e4m3: network.type full trains the base "
                  "itself (use lora or dora, or model.quantize: none)");
  std::vector<std::string> patterns;
  for (const std::string& block : blocks) patterns.push_back(block + ".*");
  const Float8Scaling scaling =
      config.quantize_scale == QuantizeScale::PerRow ? Float8Scaling::PerRow : Float8Scaling::PerTensor;
  const Float8Report report = quantize_linears(model, patterns, scaling);
  WICK_CHECK_KIND(Config, !report.quantized.empty() || report.n_already > 0,
                  "model.quantize: float8 found no frozen Linear in the blocks of arch ", config.arch);
}

}  // namespace

std::shared_ptr<BlockSwapper> attach_block_swapper(DiffusionModel& model, int64_t n_blocks, Device device) {
  if (n_blocks <= 0) {
    model.set_block_swapper(nullptr);
    return nullptr;
  }
  const std::vector<std::string> blocks = model.block_paths();
  WICK_CHECK_KIND(Config, !blocks.empty(), "train.blocks_to_swap: ", n_blocks,
                  ": this architecture has no blocks to stream (", pretrained_architecture_names(), " have)");
  WICK_CHECK_KIND(Config, n_blocks <= static_cast<int64_t>(blocks.size()), "train.blocks_to_swap: ", n_blocks,
                  " is more than the model's ", blocks.size(), " blocks");
  std::map<std::string, std::shared_ptr<Module>> modules;
  for (const auto& [path, module] : model.named_modules()) modules[path] = module;
  auto swapper = std::make_shared<BlockSwapper>(device);
  for (size_t k = blocks.size() - static_cast<size_t>(n_blocks); k < blocks.size(); ++k) {
    auto it = modules.find(blocks[k]);
    WICK_CHECK(it != modules.end(), "attach_block_swapper: the model has no module ", blocks[k]);
    swapper->add_block(blocks[k], *it->second);
  }
  model.set_block_swapper(swapper);
  return swapper;
}

std::shared_ptr<BlockSwapper> attach_weight_shards(DiffusionModel& model, std::shared_ptr<comm::ProcessGroup> group,
                                                   Device device, int64_t n_host_blocks) {
  const std::vector<std::string> blocks = model.block_paths();
  WICK_CHECK_KIND(Config, !blocks.empty(), "distributed.shard: weights shards the weights of a model's blocks; arch ",
                  model.arch_name(), " has none (", pretrained_architecture_names(), " have)");
  WICK_CHECK_KIND(Config, n_host_blocks <= static_cast<int64_t>(blocks.size()), "train.blocks_to_swap: ", n_host_blocks,
                  " is more than the model's ", blocks.size(), " blocks");
  const size_t first_host = blocks.size() - static_cast<size_t>(std::max<int64_t>(0, n_host_blocks));
  std::map<std::string, std::shared_ptr<Module>> modules;
  for (const auto& [path, module] : model.named_modules()) modules[path] = module;
  auto swapper = std::make_shared<BlockSwapper>(device, std::move(group));
  for (size_t k = 0; k < blocks.size(); ++k) {
    auto it = modules.find(blocks[k]);
    WICK_CHECK(it != modules.end(), "attach_weight_shards: the model has no module ", blocks[k]);
    swapper->add_block(blocks[k], *it->second, /*shard_in_host_memory=*/k >= first_host);
  }
  model.set_block_swapper(swapper);
  return swapper;
}

std::shared_ptr<DiffusionModel> build_model(const ModelConfig& model, const NetworkConfig& network,
                                            const TrainSection& train, LoraFormat lora_format,
                                            const DataGeometry& data, Device device) {
  const Architecture& arch = find_architecture(model.arch);
  std::shared_ptr<DiffusionModel> built =
      arch.build({.model = model, .data = data, .dtype = compute_dtype(model, train), .device = device,
                  .seed = static_cast<uint64_t>(train.seed), .gradient_checkpointing = train.gradient_checkpointing});
  for (const auto& [h, w] : data.latent_sizes) built->check_latent_size(h, w);
  if (model.quantize == QuantizeMode::Float8) quantize_base(*built, model, network);
  if (network.type == NetworkType::Full) {
    WICK_CHECK_KIND(Config, train.blocks_to_swap <= 0, "train.blocks_to_swap streams frozen block weights; "
                    "network.type full trains them all (use lora or dora, or train.blocks_to_swap: 0)");
    WICK_CHECK_KIND(Config, !has_float8_layers(*built), "network.type full trains every weight, but ",
                    model.name_or_path, " stores some as float8 (train lora or dora on a float8 base)");
    built->set_all_trainable(true);
    return built;
  }
  nn::AdapterConfig adapters{.type = network_type_name(network.type),
                             .patterns = arch.targets(network.target),
                             .options = {.rank = network.linear, .alpha = network.linear_alpha,
                                         .dropout = network.dropout, .dora_axis = dora_axis_for(lora_format)}};
  if (network.conv == 0) {
    nn::apply_adapters(*built, adapters);
  } else {
    const std::vector<std::string> conv_targets = arch.conv_targets();
    WICK_CHECK_KIND(Config, !conv_targets.empty(), "network.conv ", network.conv, ": model.arch ", arch.name(),
                    " has no convolutions for LoCon adapters (set network.conv to 0)");
    // kohya's conv_dim: the blocks' k x k convolutions at the conv rank, their Linear and 1x1 layers at the
    // linear rank.
    auto spatial = [](const Module& m) {
      const auto* conv = dynamic_cast<const nn::Conv2d*>(&m);
      return conv != nullptr && conv->kernel_size() > 1;
    };
    adapters.patterns.insert(adapters.patterns.end(), conv_targets.begin(), conv_targets.end());
    adapters.accepts = [spatial](const Module& m) { return !spatial(m); };
    nn::apply_adapters(*built, adapters);
    nn::AdapterConfig convs{.type = network_type_name(network.type),
                            .patterns = conv_targets,
                            .options = {.rank = network.conv,
                                        .alpha = network.conv_alpha,
                                        .dropout = network.dropout,
                                        .dora_axis = dora_axis_for(lora_format)},
                            .accepts = spatial};
    nn::apply_adapters(*built, convs);
  }
  if (train.blocks_to_swap > 0) {
    WICK_CHECK_KIND(Config, train.gradient_checkpointing, "train.blocks_to_swap: ", train.blocks_to_swap,
                    " needs train.gradient_checkpointing: true (without it backward keeps every streamed block's "
                    "weights alive, so swapping saves nothing)");
    attach_block_swapper(*built, train.blocks_to_swap, device);
  }
  return built;
}

std::shared_ptr<DiffusionModel> build_model(const TrainConfig& config, const DataGeometry& data, Device device) {
  if (config.distributed.shard_weights) {  // the shards keep the swapped blocks in host memory (attach_weight_shards)
    TrainSection train = config.train;
    train.blocks_to_swap = 0;
    return build_model(config.model, config.network, train, config.save.format, data, device);
  }
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
