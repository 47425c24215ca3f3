// Wrapping a model's Linear layers with LoRA or DoRA adapters by name pattern.
//
//   AdapterReport r = apply_adapters(*model, {.type = "lora", .patterns = {"*attn*"}, .options = {.rank = 16}});
//   // every Linear whose dotted path matches a pattern is replaced in place by a LoRALinear;
//   // the whole base model is frozen, only the adapters train.
//
// An unknown type, or patterns that match no Linear, throw WickError (Config) with a hint listing
// some of the model's Linear paths.
#pragma once

#include <string>
#include <vector>

#include "engine/module.h"
#include "models/nn/lora.h"

namespace wick::nn {

struct AdapterConfig {
  std::string type = "lora";            // lora | dora
  std::vector<std::string> patterns;    // glob patterns over module paths ("blocks.*.attn.qkv")
  AdapterOptions options;
};

struct AdapterReport {
  std::vector<std::string> wrapped;  // module paths now carrying adapters, in model order
  int64_t n_trainable = 0;           // adapter parameters
};

AdapterReport apply_adapters(Module& model, const AdapterConfig& config);
// The adapter modules of a model (LoRALinear or DoRALinear) with their paths.
std::vector<std::pair<std::string, std::shared_ptr<LoRALinear>>> find_adapters(const Module& model);

}  // namespace wick::nn
