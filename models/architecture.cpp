#include "models/architecture.h"

#include "engine/autograd/node.h"
#include "models/registry.h"
#include "models/vae/image_vae.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"

namespace wick {

void DiffusionModel::set_block_swapper(std::shared_ptr<BlockSwapper> swapper) {
  WICK_CHECK_KIND(Config, swapper == nullptr, "train.blocks_to_swap: arch ", arch_name(),
                  " does not stream its blocks (", pretrained_architecture_names(), " do)");
}

std::vector<std::string> Architecture::targets(const std::vector<std::string>& configured) const {
  const std::map<std::string, std::vector<std::string>> presets = target_presets();
  if (configured.empty()) return presets.at(default_preset());
  std::vector<std::string> patterns;
  for (const std::string& entry : configured) {
    auto preset = presets.find(entry);
    if (preset != presets.end()) {
      patterns.insert(patterns.end(), preset->second.begin(), preset->second.end());
      continue;
    }
    // A bare word (no '.', no wildcard) that is not a preset is almost surely a misspelled preset.
    if (entry.find_first_of(".*?") == std::string::npos) {
      std::string names;
      for (const auto& [name, list] : presets) names += (names.empty() ? "" : ", ") + name;
      WICK_FAIL(Config, "network.target: '", entry, "' is neither a preset of arch ", name(), " (", names,
                ") nor a module pattern (patterns name module paths such as 'double_blocks.*.img_attn.qkv')");
    }
    patterns.push_back(entry);
  }
  return patterns;
}

std::filesystem::path Architecture::export_model(const DiffusionModel& model, const std::filesystem::path& directory,
                                                const std::string& name, DType dtype,
                                                const std::map<std::string, std::string>& metadata) const {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [param, tensor] : model.named_parameters())
    tensors.emplace_back(param, autograd::detach(tensor).to(dtype));
  WICK_CHECK(!tensors.empty(), "export_model: the model has no parameters");
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  const std::filesystem::path file = directory / (name + ".safetensors");
  save_safetensors(file.string(), tensors, metadata);
  return file;
}

std::unique_ptr<text::PromptEncoder> Architecture::make_prompt_encoder(const text::PromptEncoderRequest&) const {
  WICK_FAIL(Config, "model ", name(), " has no text encoders (it trains on datasets made by `wick dataset pack`)");
}

std::unique_ptr<vae::ImageVae> Architecture::open_dataset_vae(const std::string& path,
                                                              const vae::ImageVaeOptions& options) const {
  vae::ImageVaeOptions kl = options;
  const std::optional<DatasetSpec> spec = dataset_spec();
  if (!kl.normalization && spec) kl.normalization = vae::ModelNormalization{spec->normalization, name()};
  return vae::open_kl_image_vae(path, kl);
}

}  // namespace wick
