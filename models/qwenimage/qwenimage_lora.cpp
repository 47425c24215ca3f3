#include "models/qwenimage/qwenimage_lora.h"

namespace wick::qwenimage {

std::map<std::string, std::vector<std::string>> lora_target_presets() {
  const std::vector<std::string> attention = {"transformer_blocks.*.attn.to_q", "transformer_blocks.*.attn.to_k",
                                              "transformer_blocks.*.attn.to_v", "transformer_blocks.*.attn.to_out.*"};
  std::vector<std::string> joint = attention;
  for (const char* layer : {"add_q_proj", "add_k_proj", "add_v_proj", "to_add_out"})
    joint.push_back(std::string("transformer_blocks.*.attn.") + layer);
  return {{"all", {"transformer_blocks.*"}},
          {"no_modulation",
           {"transformer_blocks.*.attn.*", "transformer_blocks.*.img_mlp.*", "transformer_blocks.*.txt_mlp.*"}},
          {"attention", attention},
          {"attention_joint", joint}};
}

LoraNaming lora_naming() {
  return {.metadata = {{"ss_base_model_version", "qwen_image"},
                       {"modelspec.architecture", "qwen-image/lora"},
                       {"modelspec.implementation", "https://github.com/QwenLM/Qwen-Image"}},
          .peft_layout = std::nullopt};
}

}  // namespace wick::qwenimage
