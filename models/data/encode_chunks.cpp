#include "models/data/encode_chunks.h"

#include <cstdio>
#include <filesystem>
#include <utility>

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/safetensors.h"

namespace wick::encode {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string dump(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

json placement_json(const BucketPlacement& p) {
  return {{"bucket", {p.bucket.height, p.bucket.width}},
          {"original", {p.original_height, p.original_width}},
          {"resized", {p.resized_height, p.resized_width}},
          {"crop", {p.crop_top, p.crop_left}},
          {"flipped", p.flipped}};
}

BucketPlacement placement_from(const json& j) {
  BucketPlacement p;
  p.bucket = {j.at("bucket").at(0).get<int64_t>(), j.at("bucket").at(1).get<int64_t>()};
  p.original_height = j.at("original").at(0).get<int64_t>();
  p.original_width = j.at("original").at(1).get<int64_t>();
  p.resized_height = j.at("resized").at(0).get<int64_t>();
  p.resized_width = j.at("resized").at(1).get<int64_t>();
  p.crop_top = j.at("crop").at(0).get<int64_t>();
  p.crop_left = j.at("crop").at(1).get<int64_t>();
  p.flipped = j.at("flipped").get<bool>();
  return p;
}

// Opens a committed file; nullopt (with a warning) when it exists but does not read back.
std::optional<SafetensorsFile> open_committed(const std::string& path, std::string* warning) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  try {
    return SafetensorsFile::open(path);
  } catch (const WickError& error) {
    if (warning) *warning = std::string(error.what()) + " (it is encoded again)";
    return std::nullopt;
  }
}

const std::string& metadata_of(const SafetensorsFile& file, const std::string& key) {
  auto it = file.metadata().find(key);
  WICK_CHECK_KIND(Data, it != file.metadata().end(), file.path(), ": no metadata '", key, "'");
  return it->second;
}

std::string chunk_name(int64_t chunk, const char* kind) {
  char name[64];
  std::snprintf(name, sizeof(name), "chunk_%06lld.%s.safetensors", static_cast<long long>(chunk), kind);
  return name;
}

}  // namespace

EncodeWorkDir::EncodeWorkDir(std::string path) : path_(std::move(path)) {}

bool EncodeWorkDir::exists() const {
  std::error_code ec;
  return fs::is_directory(path_, ec);
}

void EncodeWorkDir::create() const {
  std::error_code ec;
  fs::create_directories(path_, ec);
  WICK_CHECK_KIND(Config, !ec && fs::is_directory(path_), path_, ": cannot create the work folder (",
                  ec ? ec.message() : "not a folder", ")");
}

void EncodeWorkDir::remove() const {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

int64_t EncodeWorkDir::n_committed_chunk_files() const {
  int64_t n = 0;
  std::error_code ec;
  for (fs::directory_iterator it(path_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("chunk_", 0) == 0 && name.size() > 12 && name.substr(name.size() - 12) == ".safetensors") ++n;
  }
  return n;
}

void EncodeWorkDir::write_plan(const std::string& plan) const {
  save_safetensors((fs::path(path_) / "plan.safetensors").string(), {}, {{"wick_encode_plan", plan}});
}

std::optional<std::string> EncodeWorkDir::read_plan() const {
  const std::string path = (fs::path(path_) / "plan.safetensors").string();
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  return metadata_of(SafetensorsFile::open(path), "wick_encode_plan");
}

std::string EncodeWorkDir::latents_file(int64_t chunk) const {
  return (fs::path(path_) / chunk_name(chunk, "latents")).string();
}
std::string EncodeWorkDir::text_file(int64_t chunk) const {
  return (fs::path(path_) / chunk_name(chunk, "text")).string();
}
std::string EncodeWorkDir::prompts_file() const { return (fs::path(path_) / "sample_prompts.safetensors").string(); }
std::string EncodeWorkDir::merged_file() const { return (fs::path(path_) / "merged.h5").string(); }

void EncodeWorkDir::write_latents(int64_t chunk, const LatentChunk& c) const {
  WICK_CHECK(c.mean.size() == c.samples.size() && (c.logvar.empty() || c.logvar.size() == c.samples.size()),
             "write_latents: ", c.mean.size(), " means and ", c.logvar.size(), " logvars for ", c.samples.size(),
             " samples");
  json samples = json::array();
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (size_t k = 0; k < c.samples.size(); ++k) {
    const ChunkSample& s = c.samples[k];
    samples.push_back({{"image", s.image}, {"source", s.source}, {"caption", s.caption},
                       {"placement", placement_json(s.placement)}});
    tensors.emplace_back("mean." + std::to_string(k), c.mean[k]);
    if (!c.logvar.empty()) tensors.emplace_back("logvar." + std::to_string(k), c.logvar[k]);
  }
  json record = {{"samples", samples},
                 {"skipped", c.skipped},
                 {"latent_channels", c.latent_channels},
                 {"scaling_factor", c.scaling_factor},
                 {"shift_factor", c.shift_factor},
                 {"logvar", !c.logvar.empty()}};
  if (!c.channel_mean.empty() || !c.channel_std.empty()) {  // absent otherwise: the same file as before they existed
    record["channel_mean"] = c.channel_mean;
    record["channel_std"] = c.channel_std;
  }
  save_safetensors(latents_file(chunk), tensors, {{"wick_encode_latents", dump(record)}});
}

std::optional<LatentChunk> EncodeWorkDir::read_latents(int64_t chunk, std::string* warning) const {
  std::optional<SafetensorsFile> file = open_committed(latents_file(chunk), warning);
  if (!file) return std::nullopt;
  try {
    const json record = json::parse(metadata_of(*file, "wick_encode_latents"));
    LatentChunk c;
    c.latent_channels = record.at("latent_channels").get<int64_t>();
    c.scaling_factor = record.at("scaling_factor").get<double>();
    c.shift_factor = record.at("shift_factor").get<double>();
    if (record.contains("channel_mean")) c.channel_mean = record.at("channel_mean").get<std::vector<double>>();
    if (record.contains("channel_std")) c.channel_std = record.at("channel_std").get<std::vector<double>>();
    c.skipped = record.at("skipped").get<std::vector<std::string>>();
    const bool logvar = record.at("logvar").get<bool>();
    for (const json& s : record.at("samples")) {
      const size_t k = c.samples.size();
      c.samples.push_back({.image = s.at("image").get<int64_t>(),
                           .source = s.at("source").get<std::string>(),
                           .caption = s.at("caption").get<std::string>(),
                           .placement = placement_from(s.at("placement"))});
      c.mean.push_back(file->get("mean." + std::to_string(k)));
      if (logvar) c.logvar.push_back(file->get("logvar." + std::to_string(k)));
    }
    return c;
  } catch (const std::exception& error) {  // json's own exceptions, or WickError
    if (warning) *warning = file->path() + ": " + error.what() + " (it is encoded again)";
    return std::nullopt;
  }
}

void EncodeWorkDir::write_text(int64_t chunk, const TextChunk& t) const {
  std::vector<std::pair<std::string, Tensor>> tensors;
  if (t.embeds.defined()) tensors = {{"embeds", t.embeds}, {"pooled", t.pooled}, {"mask", t.mask}};
  const json record = {{"row_of", t.row_of},
                       {"embeds_encoder", t.embeds_encoder},
                       {"pooled_encoder", t.pooled_encoder},
                       {"max_length", t.max_length}};
  save_safetensors(text_file(chunk), tensors, {{"wick_encode_text", dump(record)}});
}

std::optional<TextChunk> EncodeWorkDir::read_text(int64_t chunk, std::string* warning) const {
  std::optional<SafetensorsFile> file = open_committed(text_file(chunk), warning);
  if (!file) return std::nullopt;
  try {
    const json record = json::parse(metadata_of(*file, "wick_encode_text"));
    TextChunk t;
    t.row_of = record.at("row_of").get<std::vector<int64_t>>();
    t.embeds_encoder = record.at("embeds_encoder").get<std::string>();
    t.pooled_encoder = record.at("pooled_encoder").get<std::string>();
    t.max_length = record.at("max_length").get<int64_t>();
    if (!t.row_of.empty()) {
      t.embeds = file->get("embeds");
      t.pooled = file->get("pooled");
      t.mask = file->get("mask");
      for (int64_t row : t.row_of)
        WICK_CHECK_KIND(Data, row >= 0 && row < t.embeds.size(0), file->path(), ": row ", row, " of ",
                        t.embeds.size(0));
    }
    return t;
  } catch (const std::exception& error) {
    if (warning) *warning = file->path() + ": " + error.what() + " (it is encoded again)";
    return std::nullopt;
  }
}

void EncodeWorkDir::write_prompts(const PromptChunk& p) const {
  save_safetensors(prompts_file(), {{"embeds", p.embeds}, {"pooled", p.pooled}, {"mask", p.mask}},
                   {{"wick_encode_prompts", dump(json(p.captions))}});
}

std::optional<PromptChunk> EncodeWorkDir::read_prompts(std::string* warning) const {
  std::optional<SafetensorsFile> file = open_committed(prompts_file(), warning);
  if (!file) return std::nullopt;
  try {
    PromptChunk p;
    p.captions = json::parse(metadata_of(*file, "wick_encode_prompts")).get<std::vector<std::string>>();
    p.embeds = file->get("embeds");
    p.pooled = file->get("pooled");
    p.mask = file->get("mask");
    return p;
  } catch (const std::exception& error) {
    if (warning) *warning = file->path() + ": " + error.what() + " (it is encoded again)";
    return std::nullopt;
  }
}

}  // namespace wick::encode
