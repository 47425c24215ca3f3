#include "models/lora_files.h"

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
#include "models/nn/adapters.h"
#include "models/nn/lora.h"
#include "models/registry.h"
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

LoraNaming naming_of(const DiffusionModel& model) { return find_architecture(model.arch_name()).lora_naming(model); }

}  // namespace

std::string kohya_lora_name(const std::string& module_path, const std::string& prefix) {
  std::string name = prefix + module_path;
  std::replace(name.begin(), name.end(), '.', '_');
  return name;
}

void save_lora(const DiffusionModel& model, const TrainConfig& config, const std::string& path, int64_t step,
               const std::string& base_model_hash) {
  WICK_CHECK_KIND(Config, config.save.format == LoraFormat::Kohya, "save.format ", lora_format_name(config.save.format),
                  ": only kohya LoRA files can be written so far");
  const LoraNaming naming = naming_of(model);
  auto adapters = nn::find_adapters(model);
  WICK_CHECK(!adapters.empty(), "save_lora: the model has no LoRA/DoRA adapters (network.type full?)");
  const DType dtype = config.save.dtype;
  std::vector<std::pair<std::string, Tensor>> tensors;
  bool dora = false;
  for (const auto& [module_path, adapter] : adapters) {
    const std::string name = kohya_lora_name(module_path, naming.kohya_prefix);
    tensors.emplace_back(name + ".lora_down.weight", autograd::detach(adapter->down_weight()).to(dtype));
    tensors.emplace_back(name + ".lora_up.weight", autograd::detach(adapter->up_weight()).to(dtype));
    tensors.emplace_back(name + ".alpha", Tensor::scalar(adapter->options().alpha, dtype));
    if (auto d = std::dynamic_pointer_cast<nn::DoRALinear>(adapter)) {
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
  for (const auto& [key, value] : naming.metadata) metadata[key] = value;
  std::error_code ec;
  fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  save_safetensors(path, tensors, metadata);
}

void load_lora(DiffusionModel& model, const std::string& path) {
  const LoraNaming naming = naming_of(model);
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
    const std::string name = kohya_lora_name(module_path, naming.kohya_prefix);
    auto dora = std::dynamic_pointer_cast<nn::DoRALinear>(adapter);
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
