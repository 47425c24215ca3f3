#include "models/flux2/flux2_lora.h"

#include "models/flux2/flux2.h"
#include "models/flux2/flux2_weights.h"

namespace wick::flux2 {

std::map<std::string, std::vector<std::string>> lora_target_presets() {
  const std::vector<std::string> attention = {
      "double_blocks.*.img_attn.qkv", "double_blocks.*.img_attn.proj", "double_blocks.*.txt_attn.qkv",
      "double_blocks.*.txt_attn.proj", "single_blocks.*.linear1",      "single_blocks.*.linear2"};
  return {{"all", {"double_blocks.*", "single_blocks.*"}},
          {"attention", attention},
          {"image_attention",
           {"double_blocks.*.img_attn.qkv", "double_blocks.*.img_attn.proj", "single_blocks.*.linear1"}}};
}

LoraNaming lora_naming(const Flux2Transformer& model) {
  const Flux2Config& c = model.config();
  std::string variant = "Flux.2-dev";
  if (!c.guidance_embed)
    variant = c.hidden_size == klein_9b_config().hidden_size ? "Flux.2-klein-9b" : "Flux.2-klein-4b";
  std::map<std::string, Shape> shapes;
  for (const auto& [name, tensor] : model.named_parameters()) shapes[name] = tensor.shape();
  return {.metadata = {{"ss_base_model_version", c.guidance_embed ? "flux2_dev" : "flux2_klein"},
                       {"modelspec.architecture", variant + "/lora"},
                       {"modelspec.implementation", "https://github.com/black-forest-labs/flux2"}},
          .peft_layout = lora_layout(layout_sizes(shapes))};
}

}  // namespace wick::flux2
