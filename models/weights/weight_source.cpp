#include "models/weights/weight_source.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/checkpoint/latest_pointer.h"

namespace fs = std::filesystem;

namespace wick {
namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

const char* const kIndexSuffix = ".safetensors.index.json";
const char* const kFileSuffix = ".safetensors";

// The regular files of `folder` whose names end with `suffix`, sorted.
std::vector<fs::path> files_ending_with(const fs::path& folder, const std::string& suffix) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder, ec))
    if (entry.is_regular_file(ec) && ends_with(entry.path().filename().string(), suffix)) out.push_back(entry.path());
  std::sort(out.begin(), out.end());
  return out;
}

std::string list_names(const std::vector<fs::path>& paths) {
  std::string out;
  for (const fs::path& p : paths) out += (out.empty() ? "" : ", ") + p.filename().string();
  return out;
}

// The index's weight_map: tensor name -> shard file name. Throws naming the index when it cannot be
// read or is not {"weight_map": {name: "file", ...}}.
std::map<std::string, std::string> read_weight_map(const fs::path& index) {
  std::ifstream in(index);
  WICK_CHECK_KIND(Data, in.good(), "weights: index ", index.string(), " cannot be read");
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    WICK_FAIL(Data, "weights: index ", index.string(), " is not valid JSON: ", e.what());
  }
  WICK_CHECK_KIND(Data, json.is_object() && json.contains("weight_map") && json["weight_map"].is_object(),
                  "weights: index ", index.string(), " has no \"weight_map\" object (not a safetensors index?)");
  std::map<std::string, std::string> map;
  for (auto it = json["weight_map"].begin(); it != json["weight_map"].end(); ++it) {
    WICK_CHECK_KIND(Data, it.value().is_string(), "weights: index ", index.string(), ": weight_map entry \"", it.key(),
                    "\" is not a file name but ", it.value().type_name());
    map[it.key()] = it.value().get<std::string>();
  }
  WICK_CHECK_KIND(Data, !map.empty(), "weights: index ", index.string(), " lists no tensors");
  return map;
}

}  // namespace

WeightSource WeightSource::from_file(SafetensorsFile file) {
  WeightSource source;
  source.path_ = file.path();
  source.files_.push_back(std::make_shared<SafetensorsFile>(std::move(file)));
  for (const std::string& name : source.files_[0]->names()) source.owner_[name] = 0;
  for (const auto& [name, _] : source.owner_) source.names_.push_back(name);
  return source;
}

WeightSource WeightSource::open(const std::string& path, const std::string& subfolder_hint) {
  std::error_code ec;
  const fs::path given = resolve_checkpoint_path(path);  // <run>/checkpoints/latest: the step it names
  WICK_CHECK_KIND(Data, fs::exists(given, ec), "weights: ", path,
                  " does not exist (a .safetensors file, a folder with one, or a sharded folder with a "
                  "*.safetensors.index.json)");
  fs::path index;
  if (fs::is_directory(given, ec)) {
    std::vector<fs::path> indexes = files_ending_with(given, kIndexSuffix);
    std::vector<fs::path> files = files_ending_with(given, kFileSuffix);
    WICK_CHECK_KIND(Data, indexes.size() <= 1, "weights: ", path, " holds ", indexes.size(), " safetensors indexes (",
                    list_names(indexes), "); pass the one to load");
    if (indexes.size() == 1) {
      index = indexes[0];
    } else if (files.size() == 1) {
      return from_file(SafetensorsFile::open(files[0].string()));
    } else {
      WICK_CHECK_KIND(Data, files.empty(), "weights: ", path, " holds ", files.size(), " .safetensors files (",
                      list_names(files), ") and no *.safetensors.index.json naming their tensors; pass one file");
      if (!subfolder_hint.empty() && fs::is_directory(given / subfolder_hint, ec))
        return open((given / subfolder_hint).string(), "");
      WICK_FAIL(Data, "weights: ", path, " holds no .safetensors file and no *.safetensors.index.json",
                subfolder_hint.empty() ? std::string() : " (nor does a subfolder '" + subfolder_hint + "')");
    }
  } else if (ends_with(given.filename().string(), kIndexSuffix)) {
    index = given;
  } else {
    return from_file(SafetensorsFile::open(path));
  }

  // A sharded folder: open every shard the index names, then check the index against the shards.
  const std::map<std::string, std::string> weight_map = read_weight_map(index);
  const fs::path folder = index.parent_path();
  std::map<std::string, size_t> shard_of_file;  // shard file name -> index into files_
  std::set<std::string> shard_names;
  for (const auto& [tensor, shard] : weight_map) shard_names.insert(shard);
  WeightSource source;
  source.path_ = index.string();
  for (const std::string& shard : shard_names) {
    const fs::path shard_path = folder / shard;
    if (!fs::is_regular_file(shard_path, ec)) {
      std::string tensor;
      for (const auto& [name, file] : weight_map)
        if (file == shard) {
          tensor = name;
          break;
        }
      WICK_FAIL(Data, "weights: index ", index.string(), " names shard ", shard, " (for tensor '", tensor,
                "' and others) but ", shard_path.string(), " does not exist");
    }
    shard_of_file[shard] = source.files_.size();
    source.files_.push_back(std::make_shared<SafetensorsFile>(SafetensorsFile::open(shard_path.string())));
  }
  for (const auto& [tensor, shard] : weight_map) {
    const SafetensorsFile& file = *source.files_[shard_of_file.at(shard)];
    WICK_CHECK_KIND(Data, file.contains(tensor), "weights: index ", index.string(), " lists tensor '", tensor,
                    "' in shard ", file.path(), ", which does not hold it");
    source.owner_[tensor] = shard_of_file.at(shard);
  }
  for (size_t i = 0; i < source.files_.size(); ++i)
    for (const std::string& tensor : source.files_[i]->names()) {
      auto owner = source.owner_.find(tensor);
      WICK_CHECK_KIND(Data, owner != source.owner_.end(), "weights: shard ", source.files_[i]->path(),
                      " holds tensor '", tensor, "', which index ", index.string(), " does not list");
      WICK_CHECK_KIND(Data, owner->second == i, "weights: tensor '", tensor, "' is in two shards, ",
                      source.files_[owner->second]->path(), " (where index ", index.string(), " puts it) and ",
                      source.files_[i]->path());
    }
  for (const auto& [name, _] : source.owner_) source.names_.push_back(name);
  return source;
}

std::vector<std::string> WeightSource::files() const {
  std::vector<std::string> out;
  for (const auto& file : files_) out.push_back(file->path());
  return out;
}

size_t WeightSource::index_of(const std::string& name) const {
  auto it = owner_.find(name);
  WICK_CHECK_KIND(Data, it != owner_.end(), "weights: ", path_, " has no tensor '", name, "'");
  return it->second;
}

const SafetensorsInfo& WeightSource::info(const std::string& name) const { return files_[index_of(name)]->info(name); }

Tensor WeightSource::get(const std::string& name) const { return files_[index_of(name)]->get(name); }

const SafetensorsFile& WeightSource::file_of(const std::string& name) const { return *files_[index_of(name)]; }

}  // namespace wick
