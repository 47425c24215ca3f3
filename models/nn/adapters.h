// Wrapping a model's layers with adapters (LoRA, DoRA) by name pattern.
//
//   AdapterReport r = apply_adapters(*model, {.type = "lora", .patterns = {"*attn*"}, .options = {.rank = 16}});
//   // every module whose dotted path matches a pattern and whose kind the type wraps (lora: Linear,
//   // Conv2d; dora: Linear) is replaced in place by its adapter; the whole base model is frozen,
//   // only the adapters train (those of an earlier call too: LoCon wraps in two calls).
//   for (auto& [path, adapter] : find_adapters(*model)) adapter->merge();
//
// The types come from the registry (models/nn/adapter_registry.h). Errors, all WickError (Config):
// an unknown type (listing the registered ones); a pattern that matches only layers of kinds the
// type does not wrap (e.g. dora on a Conv2d), naming them; patterns that match no layer the type
// wraps, with a hint listing some of the model's.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/module.h"
#include "models/nn/adapter.h"
#include "models/nn/adapter_registry.h"
#include "models/nn/lora.h"
#include "models/nn/lora_conv.h"

namespace wick::nn {

struct AdapterConfig {
  std::string type = "lora";            // a registered adapter type: lora | dora
  std::vector<std::string> patterns;    // glob patterns over module paths ("blocks.*.attn.qkv")
  AdapterOptions options;
  // Only layers for which this holds are considered (LoCon's two passes: k x k convolutions, the rest); empty: all.
  std::function<bool(const Module&)> accepts = {};
};

struct AdapterReport {
  std::vector<std::string> wrapped;  // module paths now carrying adapters, in model order
  int64_t n_trainable = 0;           // adapter parameters
};

AdapterReport apply_adapters(Module& model, const AdapterConfig& config);
// The adapter modules of a model (LoRALinear, DoRALinear, LoRAConv2d) with their paths, in model order.
std::vector<std::pair<std::string, std::shared_ptr<Adapter>>> find_adapters(const Module& model);

}  // namespace wick::nn
