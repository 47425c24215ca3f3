// The architectures wick trains, registered by one line each in models/registry.cpp.
//
//   const Architecture& arch = find_architecture(config.model.arch);   // "dit", "flux" (or an alias)
//   TrainConfig config = parse_config_file("cfg.yaml", config_schema());
//   for (const Architecture* a : architectures()) std::puts(a->name().c_str());
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

}  // namespace wick
