#include "models/weights/pipeline_folder.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/weights/weight_source.h"
#include "runtime/error.h"

namespace fs = std::filesystem;

namespace wick {

std::optional<std::string> pipeline_folder(const std::string& name_or_path) {
  if (name_or_path.empty()) return std::nullopt;
  std::error_code ec;
  fs::path path = fs::path(name_or_path).lexically_normal();
  if (!path.has_filename()) path = path.parent_path();
  if (fs::is_directory(path, ec) &&
      (fs::is_regular_file(path / "model_index.json", ec) || fs::is_directory(path / "transformer", ec)))
    return path.string();
  fs::path parent = path.parent_path();
  if (parent.empty()) parent = ".";
  if (fs::is_regular_file(parent / "model_index.json", ec)) return parent.string();
  return std::nullopt;
}

std::string pipeline_part(const std::string& root, const std::vector<std::string>& names) {
  std::error_code ec;
  for (const std::string& name : names) {
    const fs::path candidate = fs::path(root) / name;
    if (fs::exists(candidate, ec)) return candidate.string();
  }
  return "";
}

bool file_has_prefix(const std::string& path, const std::string& prefix) {
  std::error_code ec;
  if (path.empty() || !fs::is_regular_file(path, ec)) return false;
  try {
    const WeightSource source = WeightSource::open(path);
    const std::vector<std::string>& names = source.names();  // sorted: the first name >= prefix decides
    auto at = std::lower_bound(names.begin(), names.end(), prefix);
    return at != names.end() && at->compare(0, prefix.size(), prefix) == 0;
  } catch (const WickError&) {
    return false;  // not safetensors: the loaders that open it name the problem
  }
}

std::optional<double> pipeline_shift(const std::string& pipeline, const std::string& model) {
  if (pipeline.empty()) return std::nullopt;
  const std::filesystem::path path = std::filesystem::path(pipeline) / "scheduler" / "scheduler_config.json";
  std::ifstream in(path);
  if (!in) return std::nullopt;
  nlohmann::json json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  WICK_CHECK_KIND(Data, !json.is_discarded() && json.is_object(), path.string(), " is not a JSON object");
  if (!json.contains("shift")) return std::nullopt;
  WICK_CHECK_KIND(Data, json["shift"].is_number() && json["shift"].get<double>() > 0, path.string(),
                  ": shift is not a positive number");
  WICK_CHECK_KIND(Config, !json.value("use_dynamic_shifting", false), path.string(), ": use_dynamic_shifting is on, "
                  "which ", model, " scheduler does not use (set model.sample_shift to sample with a constant shift)");
  return json["shift"].get<double>();
}

}  // namespace wick
