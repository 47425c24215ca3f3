#include "engine/train/model_factory.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/autograd/node.h"
#include "engine/init.h"
#include "models/nn/adapters.h"
#include "models/nn/lora.h"
#include "runtime/safetensors.h"

namespace fs = std::filesystem;

namespace wick {
namespace {

std::string shape_text(const Shape& shape) {
  std::ostringstream out;
  out << shape;
  return out.str();
}

// The default adapter targets of the DiT: every attention and MLP Linear of the blocks.
const std::vector<std::string> kDefaultTargets = {"blocks.*.attn.*", "blocks.*.mlp.*"};

// Checks every parameter of `model` against the weights file before loading, so that a model
// configured differently from the weights gets a Config error naming the keys to change.
void check_base_weights(const Module& model, const SafetensorsFile& file) {
  std::vector<std::string> missing;
  std::set<std::string> expected;
  for (const auto& [name, tensor] : model.named_parameters()) {
    expected.insert(name);
    if (!file.contains(name)) {
      missing.push_back(name);
      continue;
    }
    const Shape& stored = file.info(name).shape;
    WICK_CHECK_KIND(Config, stored == tensor.shape(), "model.name_or_path ", file.path(), ": tensor '", name,
                    "' has shape ", shape_text(stored), " but the configured model expects ", shape_text(tensor.shape()),
                    " (check model.hidden_size, depth, num_heads, mlp_ratio, patch_size against the base model)");
  }
  if (!missing.empty())
    WICK_FAIL(Config, "model.name_or_path ", file.path(), ": ", missing.size(), " parameters of the configured model are ",
              "not in the file, first '", missing[0], "' (is it a full model? a LoRA run's checkpoint holds only ",
              "adapters; check model.depth)");
  for (const std::string& name : file.names())
    WICK_CHECK_KIND(Config, expected.count(name) != 0, "model.name_or_path ", file.path(), ": tensor '", name,
                    "' is not a parameter of the configured model (check model.depth and the architecture)");
}

std::string format_number(double value) {
  std::ostringstream out;
  out.precision(17);
  out << value;
  return out.str();
}

}  // namespace

ModelGeometry dataset_geometry(const LatentDataset& data) {
  const std::vector<BucketInfo>& buckets = data.buckets();
  WICK_CHECK_KIND(Data, !buckets.empty(), data.path(), ": the dataset has no buckets");
  for (const BucketInfo& bucket : buckets) {
    WICK_CHECK_KIND(Config, bucket.height == bucket.width, data.path(), ": bucket ", bucket.name,
                    " is not square; the DiT takes square latents of one size");
    WICK_CHECK_KIND(Config, bucket.height == buckets[0].height, data.path(), ": buckets ", buckets[0].name, " and ",
                    bucket.name, " differ in size; the DiT takes latents of one size (one bucket)");
  }
  return {.latent_channels = data.attributes().latent_channels,
          .latent_size = buckets[0].height,
          .text_dim = data.text_dim(),
          .pooled_dim = data.pooled_dim()};
}

ModelGeometry weights_geometry(const std::string& weights_file, int64_t patch_size) {
  SafetensorsFile file = SafetensorsFile::open(weights_file);
  for (const char* name : {"pos_embed", "x_embedder.proj.weight", "context_embedder.weight"})
    WICK_CHECK_KIND(Config, file.contains(name), weights_file, ": no tensor '", name,
                    "', so the latent and text sizes cannot be read from it (not a wick DiT model file?)");
  const Shape pos = file.info("pos_embed").shape;
  const Shape x_embed = file.info("x_embedder.proj.weight").shape;
  const Shape context = file.info("context_embedder.weight").shape;
  WICK_CHECK_KIND(Config, pos.size() == 3 && x_embed.size() == 2 && context.size() == 2, weights_file,
                  ": unexpected ranks of pos_embed / x_embedder / context_embedder");
  const auto grid = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(pos[1]))));
  WICK_CHECK_KIND(Config, grid * grid == pos[1], weights_file, ": pos_embed has ", pos[1], " tokens, not a square grid");
  WICK_CHECK_KIND(Config, x_embed[1] % (patch_size * patch_size) == 0, weights_file, ": x_embedder takes ", x_embed[1],
                  " features, not a multiple of patch_size² = ", patch_size * patch_size, " (check model.patch_size)");
  ModelGeometry g{.latent_channels = x_embed[1] / (patch_size * patch_size),
                  .latent_size = grid * patch_size,
                  .text_dim = context[1],
                  .pooled_dim = 0};
  if (file.contains("y_embedder.linear_1.weight")) g.pooled_dim = file.info("y_embedder.linear_1.weight").shape.at(1);
  return g;
}

std::string resolve_weights_file(const std::string& name_or_path) {
  std::error_code ec;
  fs::path path(name_or_path);
  WICK_CHECK_KIND(Config, fs::exists(path, ec), "model.name_or_path: ", name_or_path,
                  " does not exist (a .safetensors file, or a checkpoint directory such as "
                  "output/<run>/checkpoints/latest)");
  if (fs::is_directory(path, ec)) {
    fs::path file = path / "model.safetensors";
    WICK_CHECK_KIND(Config, fs::is_regular_file(file, ec), "model.name_or_path: ", name_or_path,
                    " is a directory without model.safetensors");
    return file.string();
  }
  return path.string();
}

DType compute_dtype(const TrainConfig& config) {
  switch (config.train.mixed_precision) {
    case MixedPrecision::BF16: return DType::BF16;
    case MixedPrecision::FP16: return DType::F16;
    case MixedPrecision::No: break;
  }
  return config.model.dtype;
}

DiTConfig make_dit_config(const TrainConfig& config, const ModelGeometry& geometry, Device device) {
  const ModelConfig& m = config.model;
  WICK_CHECK_KIND(Config, m.arch == Arch::Dit, "model.arch ", arch_name(m.arch),
                  ": wick builds only the small DiT (arch dit) so far; flux, sd3 and sdxl are not implemented");
  if (config.train.mixed_precision != MixedPrecision::No && m.dtype != DType::F32)
    WICK_CHECK_KIND(Config, m.dtype == compute_dtype(config), "model.dtype ", dtype_name(m.dtype),
                    " and train.mixed_precision ", mixed_precision_name(config.train.mixed_precision),
                    " disagree: the base is stored in the compute dtype (set one of them)");
  WICK_CHECK_KIND(Config, m.in_channels == 0 || m.in_channels == geometry.latent_channels, "model.in_channels is ",
                  m.in_channels, " but the latents have ", geometry.latent_channels,
                  " channels (leave it 0 to take it from the dataset)");
  WICK_CHECK_KIND(Config, m.text_dim == 0 || m.text_dim == geometry.text_dim, "model.text_dim is ", m.text_dim,
                  " but the text embeddings are ", geometry.text_dim, " wide (leave it 0 to take it from the dataset)");
  WICK_CHECK_KIND(Config, geometry.latent_size > 0 && geometry.latent_size % m.patch_size == 0, "model.patch_size ",
                  m.patch_size, " does not divide the latent size ", geometry.latent_size);
  WICK_CHECK_KIND(Config, m.hidden_size % 4 == 0, "model.hidden_size ", m.hidden_size,
                  " must be divisible by 4 (the 2-d sin-cos position table)");
  WICK_CHECK_KIND(Config, geometry.latent_channels > 0 && geometry.text_dim > 0, "the dataset has ",
                  geometry.latent_channels, " latent channels and text width ", geometry.text_dim,
                  "; the DiT needs both > 0");
  return DiTConfig{.in_channels = geometry.latent_channels,
                   .input_size = geometry.latent_size,
                   .patch_size = m.patch_size,
                   .hidden_size = m.hidden_size,
                   .depth = m.depth,
                   .num_heads = m.num_heads,
                   .mlp_ratio = m.mlp_ratio,
                   .text_dim = geometry.text_dim,
                   .pooled_dim = geometry.pooled_dim,
                   .gradient_checkpointing = config.train.gradient_checkpointing,
                   .dtype = compute_dtype(config),
                   .device = device};
}

std::shared_ptr<DiT> build_model(const TrainConfig& config, const ModelGeometry& geometry, Device device) {
  DiTConfig dit_config = make_dit_config(config, geometry, device);
  set_init_seed(static_cast<uint64_t>(config.train.seed));
  auto model = std::make_shared<DiT>(dit_config);
  if (!config.model.name_or_path.empty()) {
    SafetensorsFile file = SafetensorsFile::open(resolve_weights_file(config.model.name_or_path));
    check_base_weights(*model, file);
    load_parameters(*model, file, /*strict=*/true, /*trainable=*/false);
  }
  if (config.network.type == NetworkType::Full) {
    model->set_all_trainable(true);
    return model;
  }
  nn::AdapterConfig adapters{
      .type = network_type_name(config.network.type),
      .patterns = config.network.target.empty() ? kDefaultTargets : config.network.target,
      .options = {.rank = config.network.linear, .alpha = config.network.linear_alpha,
                  .dropout = config.network.dropout}};
  nn::apply_adapters(*model, adapters);
  return model;
}

std::shared_ptr<DiT> build_model(const TrainConfig& config, const LatentDataset& data, Device device) {
  return build_model(config, dataset_geometry(data), device);
}

std::shared_ptr<DiT> build_model(const TrainConfig& config, const LatentDatasetAttributes& data, Device device) {
  WICK_CHECK_KIND(Config, !config.model.name_or_path.empty(),
                  "build_model: the dataset attributes do not give the latent size or the text widths; set "
                  "model.name_or_path (base weights or a checkpoint) or build from the LatentDataset");
  ModelGeometry g = weights_geometry(resolve_weights_file(config.model.name_or_path), config.model.patch_size);
  WICK_CHECK_KIND(Config, data.latent_channels == 0 || data.latent_channels == g.latent_channels, "model.name_or_path ",
                  config.model.name_or_path, " takes ", g.latent_channels, "-channel latents but the dataset has ",
                  data.latent_channels);
  return build_model(config, g, device);
}

std::string kohya_lora_name(const std::string& module_path) {
  std::string name = "lora_unet_" + module_path;
  std::replace(name.begin(), name.end(), '.', '_');
  return name;
}

void save_lora(const Module& model, const TrainConfig& config, const std::string& path, int64_t step,
               const std::string& base_model_hash) {
  auto adapters = nn::find_adapters(model);
  WICK_CHECK(!adapters.empty(), "save_lora: the model has no LoRA/DoRA adapters (network.type full?)");
  const DType dtype = config.save.dtype;
  std::vector<std::pair<std::string, Tensor>> tensors;
  bool dora = false;
  for (const auto& [module_path, adapter] : adapters) {
    const std::string name = kohya_lora_name(module_path);
    tensors.emplace_back(name + ".lora_down.weight", autograd::detach(adapter->down_weight()).to(dtype));
    tensors.emplace_back(name + ".lora_up.weight", autograd::detach(adapter->up_weight()).to(dtype));
    tensors.emplace_back(name + ".alpha", Tensor::scalar(adapter->options().alpha, dtype));
    if (auto d = std::dynamic_pointer_cast<nn::DoRALinear>(adapter)) {
      WICK_CHECK(d->axis() == nn::DoraAxis::Input, "save_lora: '", module_path,
                 "' is a DoRA with the output-axis magnitude [out] (PEFT's), which kohya's .dora_scale [1, in] "
                 "cannot carry; use DoraAxis::Input for kohya/ComfyUI files");
      dora = true;
      tensors.emplace_back(name + ".dora_scale", autograd::detach(d->dora_scale_).to(dtype));
    }
  }
  std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {"ss_network_dim", std::to_string(adapters.front().second->options().rank)},
      {"ss_network_alpha", format_number(adapters.front().second->options().alpha)},
      {"ss_network_module", dora ? "lycoris.kohya" : "networks.lora"},
      {"ss_base_model_hash", base_model_hash},
      {"ss_steps", std::to_string(step)},
      {"wick_network_type", dora ? "dora" : "lora"},
      {"wick_config", to_yaml(config)},
  };
  if (dora) metadata["ss_network_args"] = R"({"algo": "lora", "dora_wd": "True"})";
  std::error_code ec;
  fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  save_safetensors(path, tensors, metadata);
}

void save_model_weights(const Module& model, const TrainConfig& config, const std::string& path, int64_t step) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, tensor] : model.named_parameters())
    tensors.emplace_back(name, autograd::detach(tensor).to(config.save.dtype));
  WICK_CHECK(!tensors.empty(), "save_model_weights: the model has no parameters");
  std::error_code ec;
  fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  save_safetensors(path, tensors,
                   {{"format", "pt"},
                    {"wick_network_type", network_type_name(config.network.type)},
                    {"wick_step", std::to_string(step)},
                    {"wick_config", to_yaml(config)}});
}

void load_lora(Module& model, const std::string& path) {
  SafetensorsFile file = SafetensorsFile::open(path);
  auto adapters = nn::find_adapters(model);
  WICK_CHECK(!adapters.empty(), "load_lora: the model has no adapters to load ", path, " into (apply them first)");
  std::set<std::string> used;
  auto fetch = [&](const std::string& key, const Shape& shape) {
    WICK_CHECK_KIND(Data, file.contains(key), path, ": no tensor '", key, "' for the model's adapter");
    Tensor t = file.get(key);
    WICK_CHECK_KIND(Data, t.shape() == shape, path, ": tensor '", key, "' has shape ", shape_text(t.shape()),
                    " but the model's adapter expects ", shape_text(shape), " (another rank or base model?)");
    used.insert(key);
    return t;
  };
  for (const auto& [module_path, adapter] : adapters) {
    const std::string name = kohya_lora_name(module_path);
    auto dora = std::dynamic_pointer_cast<nn::DoRALinear>(adapter);
    WICK_CHECK(!dora || dora->axis() == nn::DoraAxis::Input, "load_lora: '", module_path,
               "' is a DoRA with the output-axis magnitude (PEFT's); kohya files carry the input-axis .dora_scale");
    const bool file_dora = file.contains(name + ".dora_scale");
    WICK_CHECK_KIND(Data, file_dora == (dora != nullptr), path, ": '", name, "' is ", file_dora ? "DoRA" : "LoRA",
                    " in the file but the model's adapter is ", dora ? "DoRA" : "LoRA", " (network.type)");
    Tensor down = fetch(name + ".lora_down.weight", adapter->down_weight().shape());
    Tensor up = fetch(name + ".lora_up.weight", adapter->up_weight().shape());
    if (file.contains(name + ".alpha")) {
      double alpha = fetch(name + ".alpha", {}).item();
      WICK_CHECK_KIND(Data, std::fabs(alpha - adapter->options().alpha) <= 1e-3 * std::fabs(adapter->options().alpha),
                      path, ": '", name, ".alpha' is ", alpha, " but the model's adapter has alpha ",
                      adapter->options().alpha, " (network.linear_alpha)");
    }
    autograd::detach(adapter->down_weight()).copy_from(down);
    autograd::detach(adapter->up_weight()).copy_from(up);
    if (dora) autograd::detach(dora->dora_scale_).copy_from(fetch(name + ".dora_scale", dora->dora_scale_.shape()));
  }
  for (const std::string& key : file.names())
    WICK_CHECK_KIND(Data, used.count(key) != 0, path, ": tensor '", key,
                    "' belongs to no adapter of the model (other network.target or depth?)");
}

}  // namespace wick
