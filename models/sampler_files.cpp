#include "models/sampler_files.h"

#include <filesystem>

#include "models/vae/vae_weights.h"
#include "runtime/error.h"

namespace wick {

void check_files_exist(const std::vector<std::pair<const char*, const std::string*>>& keyed) {
  std::error_code ec;
  for (const auto& [key, path] : keyed)
    WICK_CHECK_KIND(Config, path->empty() || std::filesystem::exists(*path, ec), "model.", key, ": ", *path,
                    ": no such file or folder");
}

vae::VaeConfig sampler_vae_config(const std::string& vae_path) {
  try {
    return vae::read_vae_header(vae_path).config;
  } catch (const WickError& error) {
    throw WickError(error.kind(), "model.vae_path " + vae_path + ": " + message_of(error));
  }
}

}  // namespace wick
