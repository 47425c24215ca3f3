#include "models/nn/adapter_registry.h"

#include "models/nn/conv.h"
#include "models/nn/linear.h"
#include "models/nn/lora.h"
#include "models/nn/lora_conv.h"

namespace wick::nn {
namespace {

// A kind for base layers of class Base wrapped by adapter class Wrapper(shared_ptr<Base>, options).
template <typename Base, typename Wrapper>
AdapterKind kind(const char* module_kind) {
  return {.module_kind = module_kind,
          .accepts = [](const Module& module) { return dynamic_cast<const Base*>(&module) != nullptr; },
          .wrap = [](const std::shared_ptr<Module>& module, const AdapterOptions& options) -> std::shared_ptr<Adapter> {
            return std::make_shared<Wrapper>(std::dynamic_pointer_cast<Base>(module), options);
          }};
}

}  // namespace

const std::vector<AdapterType>& adapter_types() {
  static const std::vector<AdapterType> types = {
      {.name = "lora", .kinds = {kind<Linear, LoRALinear>("Linear"), kind<Conv2d, LoRAConv2d>("Conv2d")}},
      {.name = "dora", .kinds = {kind<Linear, DoRALinear>("Linear")}},
  };
  return types;
}

const AdapterKind* AdapterType::kind_for(const Module& module) const {
  for (const AdapterKind& k : kinds)
    if (k.accepts(module)) return &k;
  return nullptr;
}

std::string AdapterType::kind_names() const {
  std::string out;
  for (const AdapterKind& k : kinds) out += (out.empty() ? "" : ", ") + k.module_kind;
  return out;
}

const AdapterType& adapter_type(const std::string& name) {
  for (const AdapterType& type : adapter_types())
    if (type.name == name) return type;
  WICK_FAIL(Config, "network.type '", name, "' is not an adapter type (registered: ", adapter_type_names(),
            "; full trains the base itself)");
}

std::string adapter_type_names() {
  std::string out;
  for (const AdapterType& type : adapter_types()) out += (out.empty() ? "" : ", ") + type.name;
  return out;
}

std::string adaptable_kind(const Module& module) {
  for (const AdapterType& type : adapter_types())
    if (const AdapterKind* k = type.kind_for(module)) return k->module_kind;
  return "";
}

}  // namespace wick::nn
