#include "models/qwenimage/qwenimage_weights.h"

#include "runtime/error.h"

namespace wick::qwenimage {
namespace {

const char* const kDetectKeys[] = {"txt_norm.weight", "transformer_blocks.0.attn.add_q_proj.weight"};
const char* const kTimestepZeroMarker = "__index_timestep_zero__";  // ComfyUI's Edit-2511 files

}  // namespace

const WeightFormat& diffusers_format() {
  static const WeightFormat format{.name = "diffusers",
                                   .detect_keys = {kDetectKeys[0], kDetectKeys[1]},
                                   .prefixes = {""},
                                   .rules = {},
                                   .blocks = {},
                                   .ignored = {kTimestepZeroMarker}};
  return format;
}

const WeightFormat& comfyui_format() {
  static const WeightFormat format{.name = "comfyui",
                                   .detect_keys = {kDetectKeys[0], kDetectKeys[1]},
                                   .prefixes = {"model.diffusion_model.", "diffusion_model."},
                                   .rules = {},
                                   .blocks = {},
                                   .ignored = {kTimestepZeroMarker}};
  return format;
}

const std::vector<WeightFormat>& weight_formats() {
  static const std::vector<WeightFormat> formats = {diffusers_format(), comfyui_format()};
  return formats;
}

DetectedFormat detect_weight_format(const WeightSource& source) { return detect_format(source, weight_formats()); }

LoadedQwenImage load_transformer(const WeightSource& source, const LoadOptions& options) {
  LoadedQwenImage out;
  out.format = detect_weight_format(source);
  QwenImageJson json = options.json ? *options.json : config_json_of(source.path());
  if (source.contains(out.format.prefix + kTimestepZeroMarker)) json.zero_cond_t = true;
  QwenImageConfig config = config_from_shapes(mapped_shapes(source, out.format), json);
  config.dtype = options.dtype;
  config.device = options.device;
  config.initialize = false;
  out.model = std::make_shared<QwenImageTransformer>(config);
  out.report = load_mapped(*out.model, source, out.format, LoadMappedOptions{.trainable = false});
  return out;
}

}  // namespace wick::qwenimage
