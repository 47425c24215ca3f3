// Where a model's parts are when the user names one thing: the diffusers pipeline folder a path is or lies in,
// and which parts a single-file checkpoint (SD3.5's, SDXL's) carries beside its denoiser.
//
//   std::optional<std::string> root = pipeline_folder("FLUX.1-dev/transformer");    // "FLUX.1-dev"
//   std::string vae = pipeline_part(*root, {"vae", "ae.safetensors"});              // the first that exists
//   bool has_vae = file_has_prefix("sd3.5_large.safetensors", "first_stage_model.");  // header only
//   std::optional<double> shift = pipeline_shift("stable-diffusion-3.5-large", "SD3.5's");  // 3.0
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace wick {

// The diffusers pipeline folder `name_or_path` is or lies in: the folder itself when it holds model_index.json or a
// transformer/ folder; else its parent when that holds model_index.json (FLUX.1-dev/transformer,
// FLUX.1-dev/flux1-dev.safetensors). nullopt otherwise.
std::optional<std::string> pipeline_folder(const std::string& name_or_path);

// root/name for the first of `names` that exists under `root`, else "".
std::string pipeline_part(const std::string& root, const std::vector<std::string>& names);

// Whether `path` is a safetensors file (or index) with a tensor whose name starts with `prefix`; false for a folder,
// a missing file or anything that is not safetensors. Reads the header only.
bool file_has_prefix(const std::string& path, const std::string& prefix);
// The constant "shift" of a pipeline folder's scheduler/scheduler_config.json (a FlowMatchEulerDiscreteScheduler's),
// nullopt when `pipeline` is "" or has none. WickError (Data) for a file that is not a JSON object or a shift that is
// not a positive number; (Config) when use_dynamic_shifting is on (`model` names the architecture: "SD3.5's").
std::optional<double> pipeline_shift(const std::string& pipeline, const std::string& model);

}  // namespace wick
