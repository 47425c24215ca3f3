// The architectures wick trains, registered by one line each in models/registry.cpp.
//
//   const Architecture& arch = find_architecture(config.model.arch);   // "dit", "flux" (or an alias)
//   TrainConfig config = parse_config_file("cfg.yaml", config_schema());
//   for (const Architecture* a : architectures()) std::puts(a->name().c_str());
//   const Architecture& flux = find_encodable_architecture("flux", "--model");   // has a DatasetSpec
#pragma once

#include <string>
#include <vector>

#include "engine/config/train_config.h"
#include "models/architecture.h"

namespace wick {

// Every registered architecture, in registration order.
const std::vector<const Architecture*>& architectures();
// By canonical name or alias (case-insensitive); an unknown name is a Config error listing the
// registered ones.
const Architecture& find_architecture(const std::string& name);
// The config schema of every registered architecture (for parse_config_file / parse_config_string);
// the first registered one is the default model.arch.
const ConfigSchema& config_schema();
// The canonical names of the registered architectures of pretrained models (schema().needs_base_weights: those with
// blocks to quantize and stream), "flux, sd3, sdxl, zimage", for messages.
std::string pretrained_architecture_names();
// The architectures a folder of images can be encoded for (Architecture::dataset_spec), in registration order.
std::vector<const Architecture*> encodable_architectures();
// Their canonical names ("flux, sd3, sdxl, zimage"), for messages and --help.
std::string encodable_architecture_names();
// The encodable architecture named `name` (or an alias); a Config error "<who>: ..." listing them otherwise.
const Architecture& find_encodable_architecture(const std::string& name, const std::string& who);

}  // namespace wick
