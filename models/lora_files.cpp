#include "models/lora_files.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/autograd/node.h"
#include "models/nn/adapters.h"
#include "models/nn/lora.h"
#include "models/registry.h"
#include "runtime/ops/elementwise.h"
#include "runtime/safetensors.h"

namespace fs = std::filesystem;

namespace wick {
namespace {

std::string shape_text(const Shape& shape) {
  std::ostringstream out;
  out << shape;
  return out.str();
}

std::string format_number(double value) {
  std::ostringstream out;
  out.precision(17);
  out << value;
  return out.str();
}

// The architecture's naming when `model` is one of its models; plain defaults otherwise.
LoraNaming naming_of(const Module& model) {
  if (const auto* diffusion = dynamic_cast<const DiffusionModel*>(&model))
    return find_architecture(diffusion->arch_name()).lora_naming(*diffusion);
  return {};
}

// One PEFT module per adapter path (architectures without fused layers).
LoraLayout identity_layout(const std::vector<std::pair<std::string, std::shared_ptr<nn::Adapter>>>& adapters) {
  LoraLayout layout;
  for (const auto& [path, adapter] : adapters) layout.modules.push_back({path, {{.peft_module = path}}});
  return layout;
}

std::shared_ptr<nn::DoRALinear> as_dora(const std::shared_ptr<nn::Adapter>& adapter) {
  return std::dynamic_pointer_cast<nn::DoRALinear>(adapter);
}

// diffusers' lora_adapter_metadata for a file whose scale is baked in (lora_alpha = r: scale 1).
std::string peft_metadata(int64_t rank, bool dora, const std::vector<std::string>& modules,
                          const std::string& prefix) {
  std::string component = prefix.empty() ? "" : prefix.substr(0, prefix.size() - 1) + ".";
  nlohmann::json json = {{component + "r", rank},
                         {component + "lora_alpha", static_cast<double>(rank)},
                         {component + "use_dora", dora},
                         {component + "use_rslora", false},
                         {component + "lora_dropout", 0.0},
                         {component + "bias", "none"},
                         {component + "fan_in_fan_out", false},
                         {component + "init_lora_weights", true},
                         {component + "peft_type", "LORA"},
                         {component + "target_modules", modules},
                         {component + "rank_pattern", nlohmann::json::object()},
                         {component + "alpha_pattern", nlohmann::json::object()}};
  return json.dump(2);
}

}  // namespace

nn::DoraAxis dora_axis_for(LoraFormat format) {
  return format == LoraFormat::Peft ? nn::DoraAxis::Output : nn::DoraAxis::Input;
}

void save_lora(const Module& model, const TrainConfig& config, const std::string& path, int64_t step,
               const std::string& base_model_hash) {
  save_lora(model, naming_of(model), config, path, step, base_model_hash);
}

void save_lora(const Module& model, const LoraNaming& naming, const TrainConfig& config, const std::string& path,
               int64_t step, const std::string& base_model_hash) {
  auto adapters = nn::find_adapters(model);
  WICK_CHECK(!adapters.empty(), "save_lora: the model has no LoRA/DoRA adapters (network.type full?)");
  const LoraFormat format = config.save.format;
  const DType dtype = config.save.dtype;
  LoraSet set;
  bool dora = false;
  for (const auto& [module_path, adapter] : adapters) {
    LoraTensors lora{.down = autograd::detach(adapter->down_weight()), .up = autograd::detach(adapter->up_weight()),
                     .alpha = adapter->options().alpha};
    if (auto d = as_dora(adapter)) {
      WICK_CHECK(d->axis() == dora_axis_for(format), "save_lora: '", module_path, "' is a DoRA with the ",
                 d->axis() == nn::DoraAxis::Output ? "output-axis magnitude [out] (PEFT's)" : "input-axis dora_scale",
                 ", which a ", lora_format_name(format), " file cannot carry (save.format decides the orientation)");
      lora.dora_scale = autograd::detach(d->magnitude());
      dora = true;
    }
    set[module_path] = lora;
  }
  // kohya's metadata: ss_network_dim / ss_network_alpha are the Linear adapters' rank and alpha; LoCon's convolution
  // rank and alpha go into ss_network_args as conv_dim / conv_alpha (strings, as kohya's --network_args give them).
  const nn::Adapter* linear = nullptr;
  const nn::Adapter* conv = nullptr;
  for (const auto& [module_path, adapter] : adapters) {
    const nn::Adapter*& first = adapter->down_weight().dim() == 2 ? linear : conv;
    if (!first) first = adapter.get();
  }
  const nn::Adapter& named = linear ? *linear : *conv;
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {"ss_network_dim", std::to_string(named.options().rank)},
      {"ss_network_alpha", format_number(named.options().alpha)},
      {"ss_network_module", dora ? "lycoris.kohya" : "networks.lora"},
      {"ss_base_model_hash", base_model_hash},
      {"ss_steps", std::to_string(step)},
      {"ss_output_name", config.name},
      {"modelspec.sai_model_spec", "1.0.1"},
      {"modelspec.title", config.name},
      {"wick_network_type", dora ? "dora" : "lora"},
      {"wick_lora_format", lora_format_name(format)},
      {"wick_config", to_yaml(config)},
  };
  if (dora) metadata["ss_network_args"] = R"({"algo": "lora", "dora_wd": "True"})";
  if (conv && linear)
    metadata["ss_network_args"] = "{\"conv_dim\": \"" + std::to_string(conv->options().rank) +
                                  "\", \"conv_alpha\": \"" + format_number(conv->options().alpha) + "\"}";
  for (const auto& [key, value] : naming.metadata) metadata[key] = value;
  if (format == LoraFormat::Kohya) {
    tensors = to_kohya(set);
  } else {
    const LoraLayout layout = naming.peft_layout ? *naming.peft_layout : identity_layout(adapters);
    for (const auto& [module_path, adapter] : adapters)
      WICK_CHECK_KIND(Config, adapter->down_weight().dim() == 2, "save.format peft: '", module_path,
                      "' is a convolution LoRA, which PEFT files of wick do not carry (use save.format kohya)");
    tensors = to_peft(set, layout);
    std::vector<std::string> modules;
    for (const auto& [name, tensor] : tensors)
      if (name.size() > 14 && name.compare(name.size() - 14, 14, ".lora_A.weight") == 0)
        modules.push_back(name.substr(layout.peft_prefix.size(), name.size() - 14 - layout.peft_prefix.size()));
    metadata["lora_adapter_metadata"] =
        peft_metadata(adapters.front().second->options().rank, dora, modules, layout.peft_prefix);
  }
  for (auto& [name, tensor] : tensors) tensor = tensor.to(dtype);
  std::error_code ec;
  fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  save_safetensors(path, tensors, metadata);
}

void load_lora(Module& model, const std::string& path) {
  const auto* diffusion = dynamic_cast<const DiffusionModel*>(&model);
  load_lora(model, diffusion ? naming_of(model) : LoraNaming{}, path);
}

void load_lora(Module& model, const LoraNaming& naming, const std::string& path) {
  auto adapters = nn::find_adapters(model);
  WICK_CHECK(!adapters.empty(), "load_lora: the model has no adapters to load ", path, " into (apply them first)");
  LoraFile file = read_lora_file(path);
  std::vector<std::string> paths;
  for (const auto& [module_path, adapter] : adapters) paths.push_back(module_path);
  std::vector<std::string> unused;
  LoraSet set;
  const bool peft = file.format == LoraFileFormat::Peft;
  if (peft) {
    const LoraLayout layout = naming.peft_layout ? *naming.peft_layout : identity_layout(adapters);
    set = from_peft(file.tensors, layout, peft_scales(file.metadata), &unused);
  } else {
    set = from_kohya(file.tensors, paths, &unused);
  }
  // Both namings refuse a file with adapters the model lacks: loading the rest would drop part of the LoRA's effect.
  // (A PEFT file is read against the architecture's whole layout, so its extra modules come back in `set`.)
  for (const auto& [module_path, lora] : set) {
    const bool in_model = std::any_of(adapters.begin(), adapters.end(),
                                      [&](const auto& adapter) { return adapter.first == module_path; });
    if (!in_model) unused.push_back(peft ? module_path : kohya_module_name(module_path));
  }
  if (!unused.empty())
    WICK_FAIL(Data, path, ": '", unused.front(), "' belongs to no adapter of the model (", unused.size(),
              " such; the file was trained with other network.target, conv or depth?)");
  for (const auto& [module_path, adapter] : adapters) {
    auto found = set.find(module_path);
    const std::string name = peft ? module_path : kohya_module_name(module_path);
    WICK_CHECK_KIND(Data, found != set.end(), path, ": no tensors for '", name, "' (an adapter of the model)");
    const LoraTensors& lora = found->second;
    auto dora = as_dora(adapter);
    const bool file_dora = lora.dora_scale.defined();
    WICK_CHECK_KIND(Data, file_dora == (dora != nullptr), path, ": '", name, "' is ", file_dora ? "DoRA" : "LoRA",
                    " in the file but the model's adapter is ", dora ? "DoRA" : "LoRA", " (network.type)");
    Tensor& down = adapter->down_weight();
    Tensor& up = adapter->up_weight();
    WICK_CHECK_KIND(Data, lora.down.shape() == down.shape() && lora.up.shape() == up.shape(), path, ": '", name,
                    "' has lora_down ", shape_text(lora.down.shape()), " and lora_up ", shape_text(lora.up.shape()),
                    " but the model's adapter has ", shape_text(down.shape()), " and ", shape_text(up.shape()),
                    " (another rank or base model?)");
    const double alpha = adapter->options().alpha;
    Tensor up_values = lora.up;
    if (peft) {  // the file's scale is baked into up: divide the adapter's own scale out again
      up_values = mul(lora.up.to(DType::F32), lora.scale() / adapter->scale());
    } else {
      WICK_CHECK_KIND(Data, std::fabs(lora.alpha - alpha) <= 1e-3 * std::fabs(alpha), path, ": '", name,
                      ".alpha' is ", lora.alpha, " but the model's adapter has alpha ", alpha,
                      " (network.linear_alpha)");
    }
    if (dora) {
      Tensor& magnitude = dora->magnitude();
      WICK_CHECK_KIND(Data, lora.dora_scale.numel() == magnitude.numel(), path, ": '", name, "' has a DoRA magnitude ",
                      shape_text(lora.dora_scale.shape()), " but the model's adapter has ",
                      shape_text(magnitude.shape()), " (", peft ? "PEFT files carry the output-axis [out]" :
                                                                  "kohya files carry the input-axis [1, in]",
                      "; the model's orientation follows save.format)");
      autograd::detach(magnitude).copy_from(lora.dora_scale.reshape(magnitude.shape()));
    }
    autograd::detach(down).copy_from(lora.down);
    autograd::detach(up).copy_from(up_values);
  }
}

}  // namespace wick
