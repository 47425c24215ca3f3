// Internal to engine/config: the parsers of the config's sections that config_parse.cpp calls
// (config_sections.cpp holds every section's key table).
//
//   parse_top(ctx, root, config, YAML::Node(YAML::NodeType::Undefined));   // wick's own shape
//   parse_dataset(ctx, node, "datasets[1]", config.datasets[1]);          // one --set dataset key
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

#include "engine/config/config_reader.h"
#include "engine/config/train_config.h"

namespace wick::config_detail {

// One dataset mapping at `path` ("dataset", "datasets[2]") into d.
void parse_dataset(ConfigContext& ctx, const YAML::Node& node, const std::string& path, DatasetConfig& d);
// The top level (wick's shape, or the body of ai-toolkit's first process entry) into c; `wrapper_name`
// is ai-toolkit's `config.name` when unwrapping (undefined otherwise).
void parse_top(ConfigContext& ctx, const YAML::Node& node, TrainConfig& c, const YAML::Node& wrapper_name);

}  // namespace wick::config_detail
