// Adapter types by name (network.type): one list in adapter_registry.cpp, each type a factory per
// module kind it can wrap.
//
//   const nn::AdapterType& type = nn::adapter_type("lora");   // unknown name: Config error listing them
//   if (const nn::AdapterKind* kind = type.kind_for(*module))
//     std::shared_ptr<nn::Adapter> adapter = kind->wrap(module, options);
//
// Registered: lora (Linear -> LoRALinear, Conv2d -> LoRAConv2d), dora (Linear -> DoRALinear).
// Adding a type or a kind is one entry in that list.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/module.h"
#include "models/nn/adapter.h"

namespace wick::nn {

struct AdapterKind {
  std::string module_kind;                                     // "Linear", "Conv2d" (for messages)
  std::function<bool(const Module&)> accepts;                  // is `module` of this kind?
  std::function<std::shared_ptr<Adapter>(const std::shared_ptr<Module>&, const AdapterOptions&)> wrap;
};

struct AdapterType {
  std::string name;                // "lora"
  std::vector<AdapterKind> kinds;  // the module kinds it wraps, in order of preference
  // The kind that wraps `module`, or nullptr when this type does not support it.
  const AdapterKind* kind_for(const Module& module) const;
  std::string kind_names() const;  // "Linear, Conv2d"
};

// Every registered type, in registration order.
const std::vector<AdapterType>& adapter_types();
// The type registered as `name`; otherwise WickError (Config) listing the registered names.
const AdapterType& adapter_type(const std::string& name);
// "lora, dora": the registered names, for messages.
std::string adapter_type_names();
// The kind of `module` that some registered type wraps ("Conv2d"), or "" when none does.
std::string adaptable_kind(const Module& module);

}  // namespace wick::nn
