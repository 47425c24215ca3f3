#include "models/qwenimage/qwenimage_architecture.h"

#include "models/qwenimage/qwenimage.h"
#include "models/qwenimage/qwenimage_lora.h"
#include "models/qwenimage/qwenimage_image_sampler.h"
#include "models/qwenimage/qwenimage_text.h"
#include "models/qwenimage/qwenimage_weights.h"
#include "models/vae/image_vae.h"
#include "runtime/error.h"

namespace wick {
namespace {

// The checks of a dataset against the model its weights describe (Config errors naming both sides).
void check_data(const qwenimage::QwenImageConfig& c, const DataGeometry& data, const std::string& weights) {
  WICK_CHECK_KIND(Config, data.model_family.empty() || data.model_family == "qwenimage",
                  "the dataset's latents are of model_family '", data.model_family, "', but Qwen-Image trains on its "
                  "own (model_family 'qwenimage': the Qwen-Image VAE's latents with Qwen2.5-VL's caption rows; `wick "
                  "dataset encode --model qwenimage` makes them)");
  WICK_CHECK_KIND(Config, data.latent_channels == 0 || data.latent_channels == c.out_channels, "the dataset has ",
                  data.latent_channels, "-channel latents but the Qwen-Image weights ", weights, " take ",
                  c.out_channels, " (img_in has ", c.in_channels, " inputs = channels x ", c.patch_size, " x ",
                  c.patch_size, ")");
  WICK_CHECK_KIND(Config, data.text_dim == 0 || data.text_dim == c.text_dim, "the dataset's text embeddings are ",
                  data.text_dim, " wide but the Qwen-Image weights ", weights, " take ", c.text_dim,
                  " (txt_in: Qwen2.5-VL's hidden states)");
}

class QwenImageArchitecture : public Architecture {
 public:
  QwenImageArchitecture() {
    schema_.name = "qwenimage";
    schema_.aliases = {"qwen-image", "qwen_image", "qwenimage-edit", "qwen-image-edit", "qwen_image_edit"};
    schema_.flag = "is_qwen_image";
    schema_.flag_aliases = {"is_qwenimage"};
    // What sample images need; aliases: musubi-tuner's arguments and ai-toolkit's keys. "" = the pipeline folder's part
    // when name_or_path gives one.
    schema_.keys = {{.name = "vae_path", .aliases = {"vae", "pretrained_vae_model_name_or_path"},
                     .type = OptionType::String, .default_value = std::string(),
                     .help = "the Qwen-Image VAE for sample images: qwen_image_vae.safetensors, a diffusers vae/ "
                             "folder or a pipeline folder"},
                    {.name = "text_encoder_path", .aliases = {"text_encoder", "qwen2_5_vl", "qwen_vl"},
                     .type = OptionType::String, .default_value = std::string(),
                     .help = "Qwen2.5-VL-7B for sample prompts: qwen_2.5_vl_7b.safetensors or a text_encoder/ folder"},
                    {.name = "tokenizer_path", .type = OptionType::String, .default_value = std::string(),
                     .help = "Qwen2.5-VL's tokenizer: a tokenizer/ folder or its tokenizer.json"},
                    {.name = "max_length", .aliases = {"max_sequence_length"}, .type = OptionType::Int,
                     .default_value = int64_t{512}, .range = ConfigRange::between(1, 1024),
                     .help = "caption rows of a sample prompt when the dataset records none (512)"},
                    {.name = "keep_encoders_loaded", .type = OptionType::Bool, .default_value = false,
                     .help = "keep Qwen2.5-VL and the VAE in memory between sample grids"},
                    {.name = "axes_dims", .aliases = {"axes_dims_rope"}, .type = OptionType::IntList,
                     .default_value = std::vector<int64_t>{}, .range = ConfigRange::above(0),
                     .help = "RoPE widths of the (frame, row, column) position axes, summing to the head width; "
                             "empty = a diffusers folder's config.json axes_dims_rope, else the released [16, 56, 56] "
                             "(a ComfyUI single file records none)"}};
    schema_.needs_base_weights = true;
    schema_.sample_size = true;
    schema_.default_sample_guidance = 4.0;  // the pipeline's true_cfg_scale
    // PEFT's names (diffusers' module names): what QwenImagePipeline.load_lora_weights and ComfyUI both load;
    // save.format kohya writes musubi-tuner's names, which ComfyUI loads too.
    schema_.default_lora_format = LoraFormat::Peft;
  }

  const ArchSchema& schema() const override { return schema_; }

  std::shared_ptr<DiffusionModel> build(const ModelRequest& request) const override {
    const std::string& path = request.model.name_or_path;
    WICK_CHECK_KIND(Config, !path.empty(), "model.arch qwenimage needs model.name_or_path (the base weights)");
    WeightSource source = WeightSource::open(path, "transformer");
    // What no tensor gives: config.json beside the weights, else the released model's; model.axes_dims replaces the
    // RoPE widths (a single file of another layout).
    qwenimage::QwenImageJson json = qwenimage::config_json_of(source.path());
    const std::vector<int64_t>& axes = request.model.options.get_int_list("axes_dims");
    if (!axes.empty()) json.axes_dims = axes;
    qwenimage::LoadedQwenImage loaded =
        qwenimage::load_transformer(source, {.dtype = request.dtype, .device = request.device, .json = json});
    check_data(loaded.model->config(), request.data, path);
    loaded.model->set_gradient_checkpointing(request.gradient_checkpointing);
    return loaded.model;
  }

  std::map<std::string, std::vector<std::string>> target_presets() const override {
    return qwenimage::lora_target_presets();
  }
  std::string default_preset() const override { return qwenimage::kDefaultLoraPreset; }

  LoraNaming lora_naming(const DiffusionModel&) const override { return qwenimage::lora_naming(); }

  std::unique_ptr<ImageSampler> make_sampler(const SamplerRequest& request) const override {
    return qwenimage::make_qwenimage_sampler(request);
  }

  std::optional<DatasetSpec> dataset_spec() const override {
    // The latents are normalized per channel by the VAE's latents_mean / latents_std (open_dataset_vae records them
    // in the dataset); no scalar factor on top.
    return DatasetSpec{.latent_channels = 16,
                       .normalization = {.scaling_factor = 1.0, .shift_factor = 0.0},
                       .patch = 2,
                       .negative = StoredNegative::Always,
                       .prompts = qwenimage::qwenimage_prompt_spec()};
  }

  std::unique_ptr<text::PromptEncoder> make_prompt_encoder(const text::PromptEncoderRequest& request) const override {
    return qwenimage::make_qwenimage_prompt_encoder(request);
  }

  // The Qwen-Image VAE (Wan 2.1's causal 3-D network, single frames): its per-channel latents_mean / latents_std go
  // into the dataset (vae_latents_mean / vae_latents_std).
  std::unique_ptr<vae::ImageVae> open_dataset_vae(const std::string& path,
                                                  const vae::ImageVaeOptions& options) const override {
    return vae::open_wan_image_vae(path, options);
  }

  std::filesystem::path export_model(const DiffusionModel& model, const std::filesystem::path& directory,
                                     const std::string& name, DType dtype,
                                     const std::map<std::string, std::string>& metadata) const override {
    return qwenimage::export_transformer(dynamic_cast<const qwenimage::QwenImageTransformer&>(model), directory,
                                         name, dtype, metadata);
  }

 private:
  ArchSchema schema_;
};

}  // namespace

const Architecture& qwenimage_architecture() {
  static const QwenImageArchitecture arch;
  return arch;
}

}  // namespace wick
