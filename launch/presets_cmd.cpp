// `wick presets ARCH|CONFIG.yaml`: the LoRA target presets of an architecture (network.target's words), the module
// patterns each stands for, the default, and the LoCon convolution targets. Given a training config, the model it
// describes is built (its base weights read as `wick train` reads them) and each preset's matched layers are listed.
//
//   wick presets flux                   # presets and patterns
//   wick presets configs/flux_lora.yaml # and, for that model, the layers each preset wraps
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/config/train_config.h"
#include "engine/data/latent_dataset.h"
#include "launch/commands.h"
#include "models/model_factory.h"
#include "models/nn/adapters.h"
#include "models/registry.h"
#include "runtime/error.h"

namespace wick::launch {
namespace {

std::string joined(const std::vector<std::string>& items) {
  std::string text;
  for (const std::string& item : items) text += (text.empty() ? "" : ", ") + item;
  return text;
}

// Paths listed as "first, second, ... last (N layers)" when there are many.
std::string layer_list(const std::vector<std::string>& paths) {
  if (paths.size() <= 6) return joined(paths);
  return paths[0] + ", " + paths[1] + ", " + paths[2] + ", ... " + paths.back() + " (" + std::to_string(paths.size()) +
         " layers)";
}

bool is_config_file(const std::string& argument) {
  const std::string extension = std::filesystem::path(argument).extension().string();
  return extension == ".yaml" || extension == ".yml";
}

void print_presets(const Architecture& arch) {
  std::printf("%s: LoRA target presets (network.target; default %s)\n", arch.name().c_str(),
              arch.default_preset().c_str());
  for (const auto& [name, patterns] : arch.target_presets())
    std::printf("  %-16s %s\n", name.c_str(), joined(patterns).c_str());
  const std::vector<std::string> conv = arch.conv_targets();
  std::printf("LoCon (network.conv > 0): %s\n",
              conv.empty() ? "no convolutions larger than 1x1 to adapt" : ("the k x k convolutions of " + joined(conv)).c_str());
}

// The layers each preset wraps in the model `config` describes: a LoRA of rank 1 on each preset in turn.
void print_matches(const TrainConfig& config) {
  const Architecture& arch = find_architecture(config.model.arch);
  DataGeometry geometry;
  std::error_code ec;
  if (!config.datasets.empty() && std::filesystem::exists(config.datasets[0].path, ec))
    geometry = dataset_geometry(*LatentDataset::open(config.datasets[0].path));
  std::printf("\nlayers of the model %s describes (%s%s):\n", config.name.c_str(), arch.name().c_str(),
              config.model.name_or_path.empty() ? ", initialized" : (", " + config.model.name_or_path).c_str());
  for (const auto& [name, patterns] : arch.target_presets()) {
    NetworkConfig network = config.network;
    network.type = NetworkType::Lora;
    network.linear = 1;
    network.linear_alpha = 1;
    network.conv = 0;
    network.target = {name};
    const auto model = build_model(config.model, network, config.train, config.save.format, geometry, Device::cpu());
    std::vector<std::string> paths;
    for (const auto& [path, adapter] : nn::find_adapters(*model)) paths.push_back(path);
    std::printf("  %-16s %s\n", name.c_str(), layer_list(paths).c_str());
  }
}

}  // namespace

void add_presets_command(CLI::App& app) {
  auto argument = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("presets", "The LoRA target presets of an architecture, or of a config's model "
                                                "with the layers each matches");
  cmd->add_option("arch_or_config", *argument, "an architecture name (flux, sd3, ...) or a training config (.yaml)")
      ->required();
  cmd->callback([argument] {
    report_errors([&] {
      if (!is_config_file(*argument)) {
        print_presets(find_architecture(*argument));
        return;
      }
      const TrainConfig config = parse_config_file(*argument, config_schema(), {}, nullptr, nullptr);
      print_presets(find_architecture(config.model.arch));
      print_matches(config);
    });
  });
}

}  // namespace wick::launch
