// Checks an architecture's make_sampler runs on the files its config names (Flux, SD3, SDXL samplers), before
// anything is loaded.
//
//   check_files_exist({{"vae_path", &files.vae}, {"clip_l_path", &files.clip_l}});   // "" = not given: skipped
//   vae::VaeConfig sizes = sampler_vae_config(files.vae);                            // header only
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "models/vae/vae_config.h"

namespace wick {

// Each given path (non-empty) exists, else a Config error "model.<key>: <path>: no such file or folder".
void check_files_exist(const std::vector<std::pair<const char*, const std::string*>>& keyed);

// The VAE's sizes from its header; errors name model.vae_path and the file.
vae::VaeConfig sampler_vae_config(const std::string& vae_path);

}  // namespace wick
