#include "models/registry.h"

#include "models/dit/dit_architecture.h"
#include "models/flux/flux_architecture.h"
#include "models/qwenimage/qwenimage_architecture.h"
#include "models/sd3/sd3_architecture.h"
#include "models/sdxl/sdxl_architecture.h"
#include "models/zimage/zimage_architecture.h"
#include "runtime/error.h"

namespace wick {

const std::vector<const Architecture*>& architectures() {
  // One line per architecture. The first is the default model.arch.
  static const std::vector<const Architecture*> registered = {
      &dit_architecture(),
      &flux_architecture(),
      &sd3_architecture(),
      &sdxl_architecture(),
      &zimage_architecture(),
      &qwenimage_architecture(),
  };
  return registered;
}

const ConfigSchema& config_schema() {
  static const ConfigSchema schema = [] {
    ConfigSchema s;
    for (const Architecture* arch : architectures()) s.archs.push_back(arch->schema());
    s.default_arch = architectures().front()->name();
    return s;
  }();
  return schema;
}

const Architecture& find_architecture(const std::string& name) {
  const ArchSchema* schema = config_schema().find(name);
  WICK_CHECK_KIND(Config, schema != nullptr, "model.arch: unknown architecture '", name,
                  "'; registered: ", config_schema().names());
  for (const Architecture* arch : architectures())
    if (arch->name() == schema->name) return *arch;
  WICK_FAIL(Config, "model.arch: unknown architecture '", name, "'");
}

std::string pretrained_architecture_names() {
  std::string names;
  for (const Architecture* arch : architectures())
    if (arch->schema().needs_base_weights) names += (names.empty() ? "" : ", ") + arch->name();
  return names;
}

std::vector<const Architecture*> encodable_architectures() {
  std::vector<const Architecture*> out;
  for (const Architecture* arch : architectures())
    if (arch->dataset_spec()) out.push_back(arch);
  return out;
}

std::string encodable_architecture_names() {
  std::string names;
  for (const Architecture* arch : encodable_architectures()) names += (names.empty() ? "" : ", ") + arch->name();
  return names;
}

const Architecture& find_encodable_architecture(const std::string& name, const std::string& who) {
  const ArchSchema* schema = config_schema().find(name);
  for (const Architecture* arch : encodable_architectures())
    if (schema != nullptr && arch->name() == schema->name) return *arch;
  WICK_FAIL(Config, who, ": '", name, "' is not a model whose datasets are encoded from images (",
            encodable_architecture_names(), ")");
}

}  // namespace wick
