#include "models/zimage/zimage_lora.h"

namespace wick::zimage {

std::map<std::string, std::vector<std::string>> lora_target_presets() {
  const std::vector<std::string> attention = {"layers.*.attention.to_q", "layers.*.attention.to_k",
                                              "layers.*.attention.to_v", "layers.*.attention.to_out.*"};
  std::vector<std::string> attention_mlp = attention;
  attention_mlp.push_back("layers.*.feed_forward.*");
  std::vector<std::string> attention_refiners = attention;
  for (const char* list : {"noise_refiner", "context_refiner"})
    for (const char* layer : {"to_q", "to_k", "to_v", "to_out.*"})
      attention_refiners.push_back(std::string(list) + ".*.attention." + layer);
  return {{"attention", attention},
          {"attention_mlp", attention_mlp},
          {"all", {"layers.*"}},
          {"attention_refiners", attention_refiners},
          {"all_refiners", {"layers.*", "noise_refiner.*", "context_refiner.*"}}};
}

LoraNaming lora_naming() {
  return {.metadata = {{"ss_base_model_version", "zimage"},
                       {"modelspec.architecture", "z-image/lora"},
                       {"modelspec.implementation", "https://github.com/Tongyi-MAI/Z-Image"}},
          .peft_layout = std::nullopt};
}

}  // namespace wick::zimage
