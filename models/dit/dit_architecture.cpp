#include "models/dit/dit_architecture.h"

#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>

#include "engine/checkpoint/latest_pointer.h"
#include "engine/init.h"
#include "models/diffusion/generate.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"

namespace fs = std::filesystem;

namespace wick {
namespace {

std::string shape_text(const Shape& shape) {
  std::ostringstream out;
  out << shape;
  return out.str();
}

// Checks every parameter of `model` against the weights file before loading, so that a model
// configured differently from the weights gets an error naming the keys to change.
void check_base_weights(const Module& model, const SafetensorsFile& file) {
  std::vector<std::string> missing;
  std::set<std::string> expected;
  for (const auto& [name, tensor] : model.named_parameters()) {
    expected.insert(name);
    if (!file.contains(name)) {
      missing.push_back(name);
      continue;
    }
    const Shape& stored = file.info(name).shape;
    WICK_CHECK_KIND(Config, stored == tensor.shape(), "model.name_or_path ", file.path(), ": tensor '", name,
                    "' has shape ", shape_text(stored), " but the configured model expects ", shape_text(tensor.shape()),
                    " (check model.hidden_size, depth, num_heads, mlp_ratio, patch_size against the base model)");
  }
  if (!missing.empty())
    WICK_FAIL(Config, "model.name_or_path ", file.path(), ": ", missing.size(), " parameters of the configured model are ",
              "not in the file, first '", missing[0], "' (is it a full model? a LoRA run's checkpoint holds only ",
              "adapters; check model.depth)");
  for (const std::string& name : file.names())
    WICK_CHECK_KIND(Config, expected.count(name) != 0, "model.name_or_path ", file.path(), ": tensor '", name,
                    "' is not a parameter of the configured model (check model.depth and the architecture)");
}

// The one latent size of a dataset's buckets (the DiT's position table has a fixed size).
int64_t single_latent_size(const DataGeometry& data) {
  const auto& sizes = data.latent_sizes;
  for (const auto& [h, w] : sizes) {
    WICK_CHECK_KIND(Config, h == w, "the dataset has a ", h, "x", w,
                    " bucket; the DiT takes square latents of one size");
    WICK_CHECK_KIND(Config, h == sizes[0].first, "the dataset has buckets of ", sizes[0].first, "x", sizes[0].second,
                    " and ", h, "x", w, " latents; the DiT takes latents of one size (one bucket)");
  }
  return sizes.empty() ? 0 : sizes[0].first;
}

DiTConfig make_dit_config(const ModelRequest& request) {
  const ModelOptions& o = request.model.options;
  const int64_t patch = o.get_int("patch_size");
  DataGeometry g = request.data;
  int64_t latent_size = single_latent_size(g);
  if (!request.model.name_or_path.empty()) {
    DataGeometry w = dit_weights_geometry(resolve_weights_file(request.model.name_or_path), patch);
    WICK_CHECK_KIND(Config, g.latent_channels == 0 || g.latent_channels == w.latent_channels, "model.name_or_path ",
                    request.model.name_or_path, " takes ", w.latent_channels, "-channel latents but the dataset has ",
                    g.latent_channels);
    if (g.latent_sizes.empty()) {  // no dataset at hand: every size from the weights
      g = w;
      latent_size = w.latent_sizes.at(0).first;
    }
  }
  const int64_t in_channels = o.get_int("in_channels"), text_dim = o.get_int("text_dim");
  WICK_CHECK_KIND(Config, in_channels == 0 || in_channels == g.latent_channels, "model.in_channels is ", in_channels,
                  " but the latents have ", g.latent_channels, " channels (leave it 0 to take it from the dataset)");
  WICK_CHECK_KIND(Config, text_dim == 0 || text_dim == g.text_dim, "model.text_dim is ", text_dim,
                  " but the text embeddings are ", g.text_dim, " wide (leave it 0 to take it from the dataset)");
  WICK_CHECK_KIND(Config, latent_size > 0 && latent_size % patch == 0, "model.patch_size ", patch,
                  " does not divide the latent size ", latent_size);
  WICK_CHECK_KIND(Config, o.get_int("hidden_size") % 4 == 0, "model.hidden_size ", o.get_int("hidden_size"),
                  " must be divisible by 4 (the 2-d sin-cos position table)");
  WICK_CHECK_KIND(Config, g.latent_channels > 0 && g.text_dim > 0, "the dataset has ", g.latent_channels,
                  " latent channels and text width ", g.text_dim, "; the DiT needs both > 0");
  return DiTConfig{.in_channels = g.latent_channels,
                   .input_size = latent_size,
                   .patch_size = patch,
                   .hidden_size = o.get_int("hidden_size"),
                   .depth = o.get_int("depth"),
                   .num_heads = o.get_int("num_heads"),
                   .mlp_ratio = o.get_float("mlp_ratio"),
                   .text_dim = g.text_dim,
                   .pooled_dim = g.pooled_dim,
                   .gradient_checkpointing = request.gradient_checkpointing,
                   .dtype = request.dtype,
                   .device = request.device};
}

class DitArchitecture : public Architecture {
 public:
  DitArchitecture() {
    schema_.name = "dit";
    schema_.keys = {
        {.name = "in_channels", .type = OptionType::Int, .default_value = int64_t{0},
         .range = ConfigRange::at_least(0), .help = "latent channels; 0 = from the dataset"},
        {.name = "patch_size", .type = OptionType::Int, .default_value = int64_t{2}, .range = ConfigRange::above(0),
         .help = "latent pixels per token side"},
        {.name = "hidden_size", .type = OptionType::Int, .default_value = int64_t{128},
         .range = ConfigRange::above(0), .help = "transformer width"},
        {.name = "depth", .type = OptionType::Int, .default_value = int64_t{4}, .range = ConfigRange::above(0),
         .help = "blocks"},
        {.name = "num_heads", .type = OptionType::Int, .default_value = int64_t{4}, .range = ConfigRange::above(0),
         .help = "attention heads"},
        {.name = "mlp_ratio", .type = OptionType::Float, .default_value = 4.0, .range = ConfigRange::above(0),
         .help = "MLP width / hidden_size"},
        {.name = "text_dim", .type = OptionType::Int, .default_value = int64_t{0}, .range = ConfigRange::at_least(0),
         .help = "text embedding width; 0 = from the dataset"},
    };
    // EriDiffusion's text encoder paths: the DiT's captions are cached embeddings.
    schema_.ignored = {"text_encoder_path", "text_encoder_2_path"};
    schema_.check = [](const ModelOptions& o) -> std::optional<std::pair<std::string, std::string>> {
      if (o.get_int("hidden_size") % o.get_int("num_heads") != 0)
        return std::pair<std::string, std::string>{
            "num_heads", "model.hidden_size (" + std::to_string(o.get_int("hidden_size")) +
                             ") must be divisible by model.num_heads (" + std::to_string(o.get_int("num_heads")) + ")"};
      return std::nullopt;
    };
  }

  const ArchSchema& schema() const override { return schema_; }

  std::shared_ptr<DiffusionModel> build(const ModelRequest& request) const override {
    DiTConfig dit = make_dit_config(request);
    set_init_seed(request.seed);
    auto model = std::make_shared<DiT>(dit);
    if (!request.model.name_or_path.empty()) {
      SafetensorsFile file = SafetensorsFile::open(resolve_weights_file(request.model.name_or_path));
      check_base_weights(*model, file);
      load_parameters(*model, file, /*strict=*/true, /*trainable=*/false);
    }
    return model;
  }

  std::map<std::string, std::vector<std::string>> target_presets() const override {
    return {{"attention", {"blocks.*.attn.*"}},
            {"attention_mlp", {"blocks.*.attn.*", "blocks.*.mlp.*"}},
            {"all", {"blocks.*"}}};
  }
  std::string default_preset() const override { return "attention_mlp"; }

  LoraNaming lora_naming(const DiffusionModel&) const override { return {}; }

  std::unique_ptr<ImageSampler> make_sampler(const SamplerRequest& request) const override {
    return make_hashed_text_sampler(request.config, request.dataset);
  }

 private:
  ArchSchema schema_;
};

}  // namespace

const Architecture& dit_architecture() {
  static const DitArchitecture arch;
  return arch;
}

DataGeometry dit_weights_geometry(const std::string& weights_file, int64_t patch_size) {
  SafetensorsFile file = SafetensorsFile::open(weights_file);
  for (const char* name : {"pos_embed", "x_embedder.proj.weight", "context_embedder.weight"})
    WICK_CHECK_KIND(Config, file.contains(name), weights_file, ": no tensor '", name,
                    "', so the latent and text sizes cannot be read from it (not a wick DiT model file?)");
  const Shape pos = file.info("pos_embed").shape;
  const Shape x_embed = file.info("x_embedder.proj.weight").shape;
  const Shape context = file.info("context_embedder.weight").shape;
  WICK_CHECK_KIND(Config, pos.size() == 3 && x_embed.size() == 2 && context.size() == 2, weights_file,
                  ": unexpected ranks of pos_embed / x_embedder / context_embedder");
  const auto grid = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(pos[1]))));
  WICK_CHECK_KIND(Config, grid * grid == pos[1], weights_file, ": pos_embed has ", pos[1], " tokens, not a square grid");
  WICK_CHECK_KIND(Config, x_embed[1] % (patch_size * patch_size) == 0, weights_file, ": x_embedder takes ", x_embed[1],
                  " features, not a multiple of patch_size² = ", patch_size * patch_size, " (check model.patch_size)");
  DataGeometry g{.latent_channels = x_embed[1] / (patch_size * patch_size),
                 .latent_sizes = {{grid * patch_size, grid * patch_size}},
                 .text_dim = context[1],
                 .pooled_dim = 0};
  if (file.contains("y_embedder.linear_1.weight")) g.pooled_dim = file.info("y_embedder.linear_1.weight").shape.at(1);
  return g;
}

std::string resolve_weights_file(const std::string& name_or_path) {
  std::error_code ec;
  fs::path path(name_or_path);
  // .../checkpoints/latest (a text file, an old symlink, or a copy tool's directory): the step it names.
  if (path.filename() == kLatestName && fs::exists(fs::symlink_status(path, ec))) {
    try {
      path = resolve_checkpoint_path(path);
    } catch (const WickError& error) {
      WICK_FAIL(Config, "model.name_or_path: ", error.what());
    }
  }
  WICK_CHECK_KIND(Config, fs::exists(path, ec), "model.name_or_path: ", name_or_path,
                  " does not exist (a .safetensors file, or a checkpoint directory such as "
                  "output/<run>/checkpoints/latest)");
  if (fs::is_directory(path, ec)) {
    fs::path file = path / "model.safetensors";
    WICK_CHECK_KIND(Config, fs::is_regular_file(file, ec), "model.name_or_path: ", name_or_path,
                    " is a directory without model.safetensors");
    return file.string();
  }
  return path.string();
}

}  // namespace wick
