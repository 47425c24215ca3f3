#include "models/qwenimage/qwenimage_weights.h"

#include <fstream>
#include <iterator>
#include <utility>

#include "engine/autograd/node.h"
#include "runtime/atomic_file.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"

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
  out.model->set_weight_origin({.layout = out.format.format.name, .prefix = out.format.prefix, .path = source.path()});
  return out;
}

std::filesystem::path export_transformer(const QwenImageTransformer& model, const std::filesystem::path& directory,
                                         const std::string& name, DType dtype,
                                         const std::map<std::string, std::string>& metadata) {
  for (const auto& [parameter, tensor] : model.named_parameters())
    WICK_CHECK_KIND(Config, is_floating(tensor.dtype()), "export_transformer: ", parameter, " is ",
                    dtype_name(tensor.dtype()), "; a full fine-tune exports a model without float8");
  const QwenImageWeightOrigin& origin = model.weight_origin();
  const bool comfyui = origin.layout == "comfyui";
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [parameter, tensor] : model.named_parameters())
    tensors.emplace_back((comfyui ? origin.prefix : "") + parameter, autograd::detach(tensor).to(dtype));
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (comfyui) {
    const WeightSource base = WeightSource::open(origin.path);
    const std::string marker = origin.prefix + kTimestepZeroMarker;
    if (base.contains(marker)) tensors.emplace_back(marker, base.get(marker));
    const std::filesystem::path file = directory / (name + ".safetensors");
    save_safetensors(file.string(), tensors, metadata);
    return file;
  }
  const std::filesystem::path folder = directory / name;
  std::filesystem::create_directories(folder, ec);
  if (!origin.path.empty()) {
    const std::filesystem::path config = std::filesystem::path(origin.path).parent_path() / "config.json";
    if (std::ifstream in{config}; in)
      write_file_atomically(folder / "config.json",
                            std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
  }
  save_safetensors((folder / "diffusion_pytorch_model.safetensors").string(), tensors, metadata);
  return folder;
}

}  // namespace wick::qwenimage
