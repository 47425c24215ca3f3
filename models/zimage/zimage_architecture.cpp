#include "models/zimage/zimage_architecture.h"

#include "models/zimage/zimage.h"
#include "models/zimage/zimage_lora.h"
#include "models/zimage/zimage_sampler.h"
#include "models/zimage/zimage_text.h"
#include "models/zimage/zimage_weights.h"
#include "runtime/error.h"

namespace wick {
namespace {

// The checks of a dataset against the model its weights describe (Config errors naming both sides).
void check_data(const zimage::ZImageConfig& c, const DataGeometry& data, const std::string& weights) {
  WICK_CHECK_KIND(Config, data.model_family.empty() || data.model_family == "zimage",
                  "the dataset's latents are of model_family '", data.model_family, "', but Z-Image trains on "
                  "its own (model_family 'zimage': the Flux VAE's latents with Qwen3's caption features; `wick "
                  "dataset encode --model zimage` makes them)");
  WICK_CHECK_KIND(Config, data.latent_channels == 0 || data.latent_channels == c.in_channels, "the dataset has ",
                  data.latent_channels, "-channel latents but the Z-Image weights ", weights, " take ",
                  c.in_channels, " (all_x_embedder.2-1 has ", c.patch_features(), " inputs = channels x 2 x 2)");
  WICK_CHECK_KIND(Config, data.text_dim == 0 || data.text_dim == c.cap_feat_dim, "the dataset's text embeddings are ",
                  data.text_dim, " wide but the Z-Image weights ", weights, " take ", c.cap_feat_dim,
                  " (cap_embedder: Qwen3's hidden states)");
}

class ZImageArchitecture : public Architecture {
 public:
  ZImageArchitecture() {
    schema_.name = "zimage";
    schema_.aliases = {"z-image", "z_image", "zimage-turbo", "z-image-turbo", "zimage-base", "z-image-base"};
    schema_.flag = "is_zimage";
    schema_.flag_aliases = {"is_z_image"};
    // What sample images need (zimage_sampler.h); aliases: musubi-tuner's arguments and ai-toolkit's keys. "" = the
    // pipeline folder's part when name_or_path gives one.
    schema_.keys = {{.name = "vae_path", .aliases = {"vae", "ae", "pretrained_vae_model_name_or_path"},
                     .type = OptionType::String, .default_value = std::string(),
                     .help = "the Flux VAE for sample images: ae.safetensors, a diffusers vae/ folder or a pipeline "
                             "folder"},
                    {.name = "text_encoder_path", .aliases = {"text_encoder", "qwen3", "qwen3_path"},
                     .type = OptionType::String, .default_value = std::string(),
                     .help = "Qwen3-4B for sample prompts: qwen_3_4b.safetensors or a text_encoder/ folder"},
                    {.name = "tokenizer_path", .type = OptionType::String, .default_value = std::string(),
                     .help = "Qwen3's tokenizer: a tokenizer/ folder or its tokenizer.json"},
                    {.name = "max_length", .aliases = {"max_sequence_length"}, .type = OptionType::Int,
                     .default_value = int64_t{512}, .range = ConfigRange::between(1, 4096),
                     .help = "Qwen3 tokens of a sample prompt's template when the dataset records none (512)"},
                    {.name = "sample_shift", .aliases = {"discrete_flow_shift"}, .type = OptionType::Float,
                     .default_value = 0.0, .range = ConfigRange::at_least(0),
                     .help = "the sampling schedule's shift; 0 = a pipeline folder's scheduler_config.json shift, "
                             "else 3.0 (Z-Image-Turbo's)"},
                    {.name = "keep_encoders_loaded", .type = OptionType::Bool, .default_value = false,
                     .help = "keep Qwen3 and the VAE in memory between sample grids"},
                    {.name = "axes_dims", .aliases = {"axes_dim"}, .type = OptionType::IntList,
                     .default_value = std::vector<int64_t>{}, .range = ConfigRange::above(0),
                     .help = "RoPE widths of the (caption, row, column) position axes, summing to the head width; "
                             "empty = a diffusers folder's config.json axes_dims, else the released [32, 48, 48]"}};
    schema_.needs_base_weights = true;
    schema_.sample_size = true;
    schema_.default_sample_guidance = 1.0;  // Turbo: no classifier-free guidance (Base: set 4 to 5)
    // PEFT's names (diffusers' to_q, to_k, to_v, ...): what diffusers' ZImagePipeline and ComfyUI both load (ComfyUI
    // maps them onto slices of its fused qkv); save.format kohya writes musubi-tuner's names, which ComfyUI does not map.
    schema_.default_lora_format = LoraFormat::Peft;
  }

  const ArchSchema& schema() const override { return schema_; }

  std::shared_ptr<DiffusionModel> build(const ModelRequest& request) const override {
    const std::string& path = request.model.name_or_path;
    WICK_CHECK_KIND(Config, !path.empty(), "model.arch zimage needs model.name_or_path (the base weights)");
    WeightSource source = WeightSource::open(path, "transformer");
    // The RoPE layout no tensor gives: config.json beside the weights, else the released model's; model.axes_dims
    // replaces its widths (a single file of another layout).
    zimage::ZImageRope rope = zimage::rope_from_config_json(source.path());
    const std::vector<int64_t>& axes = request.model.options.get_int_list("axes_dims");
    if (!axes.empty()) rope.axes_dims = axes;
    zimage::LoadedZImage loaded =
        zimage::load_transformer(source, {.dtype = request.dtype, .device = request.device, .rope = rope});
    check_data(loaded.model->config(), request.data, path);
    loaded.model->set_gradient_checkpointing(request.gradient_checkpointing);
    return loaded.model;
  }

  std::map<std::string, std::vector<std::string>> target_presets() const override {
    return zimage::lora_target_presets();
  }
  std::string default_preset() const override { return zimage::kDefaultLoraPreset; }

  LoraNaming lora_naming(const DiffusionModel&) const override { return zimage::lora_naming(); }

  std::unique_ptr<ImageSampler> make_sampler(const SamplerRequest& request) const override {
    return zimage::make_zimage_sampler(request);
  }

  std::optional<DatasetSpec> dataset_spec() const override {
    return DatasetSpec{.latent_channels = 16,
                       .normalization = zimage::kVaeNormalization,
                       .patch = 2,
                       .negative = StoredNegative::Always,
                       .prompts = zimage::zimage_prompt_spec()};
  }

  std::unique_ptr<text::PromptEncoder> make_prompt_encoder(const text::PromptEncoderRequest& request) const override {
    return zimage::make_zimage_prompt_encoder(request);
  }

  std::filesystem::path export_model(const DiffusionModel& model, const std::filesystem::path& directory,
                                     const std::string& name, DType dtype,
                                     const std::map<std::string, std::string>& metadata) const override {
    return zimage::export_transformer(dynamic_cast<const zimage::ZImageTransformer&>(model), directory, name, dtype,
                                      metadata);
  }

 private:
  ArchSchema schema_;
};

}  // namespace

const Architecture& zimage_architecture() {
  static const ZImageArchitecture arch;
  return arch;
}

}  // namespace wick
