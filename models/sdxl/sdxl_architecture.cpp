#include "models/sdxl/sdxl_architecture.h"

#include "models/sdxl/sdxl_sampler.h"
#include "models/sdxl/sdxl_unet.h"
#include "models/sdxl/sdxl_weights.h"
#include "models/weights/key_map.h"
#include "runtime/error.h"

namespace wick {
namespace {

// The checks of a dataset against the UNet its weights describe (Config errors naming both sides).
void check_data(const sdxl::UnetConfig& c, const DataGeometry& data, const std::string& weights) {
  WICK_CHECK_KIND(Config, data.model_family.empty() || data.model_family == "sdxl", "the dataset's latents are of "
                  "model_family '", data.model_family, "', but SDXL trains on latents of the SDXL VAE (model_family "
                  "'sdxl'; SD 1.x's 4-channel VAE encodes differently)");
  WICK_CHECK_KIND(Config, data.latent_channels == 0 || data.latent_channels == c.in_channels, "the dataset has ",
                  data.latent_channels, "-channel latents but the SDXL weights ", weights, " take ", c.in_channels,
                  " (input_blocks.0.0)");
  WICK_CHECK_KIND(Config, data.text_dim == 0 || data.text_dim == c.context_dim, "the dataset's text embeddings are ",
                  data.text_dim, " wide but the SDXL weights ", weights, " take ", c.context_dim,
                  " (attn2.to_k: CLIP-L's and bigG's penultimate hidden states, joined)");
  WICK_CHECK_KIND(Config, c.adm_in_channels == 0 || data.pooled_dim == 0 || data.pooled_dim == c.pooled_dim(),
                  "the dataset's pooled embeddings are ", data.pooled_dim, " wide but the SDXL weights ", weights,
                  " take ", c.pooled_dim(), " (label_emb's ", c.adm_in_channels, " inputs less 6 size sinusoids of ",
                  c.size_embed_dim, ": bigG's pooled output)");
}

// Explicit model options over a diffusers config.json's facts.
sdxl::ConfigHints hints_for(const ModelOptions& options, const WeightSource& source) {
  sdxl::ConfigHints hints = sdxl::diffusers_config_hints(source);
  auto take = [&](const char* key, int64_t& slot) {
    const int64_t v = options.get_int(key);
    if (v > 0) slot = v;
  };
  const int64_t heads = options.get_int("num_heads"), width = options.get_int("head_dim");
  if (heads > 0 || width > 0) hints.head_dim = hints.num_heads = 0;
  take("head_dim", hints.head_dim);
  take("num_heads", hints.num_heads);
  take("norm_groups", hints.norm_groups);
  take("addition_time_embed_dim", hints.size_embed_dim);
  return hints;
}

class SdxlArchitecture : public Architecture {
 public:
  SdxlArchitecture() {
    schema_.name = "sdxl";
    schema_.aliases = {"sdxl_base", "sd_xl", "stable-diffusion-xl", "sdxl-unet"};
    schema_.flag = "is_sdxl";
    schema_.flag_aliases = {"is_xl"};
    schema_.keys = {
        {.name = "head_dim", .aliases = {"num_head_channels"}, .type = OptionType::Int, .default_value = int64_t{0},
         .range = ConfigRange::at_least(0),
         .help = "attention head width; 0 = a diffusers folder's config.json, else SDXL's 64"},
        {.name = "num_heads", .type = OptionType::Int, .default_value = int64_t{0}, .range = ConfigRange::at_least(0),
         .help = "a fixed head count instead of a head width (SD 1.x: 8); 0 = by head_dim"},
        {.name = "norm_groups", .aliases = {"norm_num_groups"}, .type = OptionType::Int, .default_value = int64_t{0},
         .range = ConfigRange::at_least(0),
         .help = "GroupNorm groups; 0 = a diffusers folder's config.json, else 32"},
        {.name = "addition_time_embed_dim", .aliases = {"size_embed_dim"}, .type = OptionType::Int,
         .default_value = int64_t{0}, .range = ConfigRange::at_least(0),
         .help = "width of each micro-conditioning sinusoid; 0 = a diffusers folder's config.json, else 256"},
        // What sample images need (sdxl_sampler.h); aliases: kohya's arguments, ai-toolkit's and SimpleTuner's keys.
        // "" = the pipeline folder's part, or the single file's, when there is one.
        {.name = "vae_path", .aliases = {"vae", "pretrained_vae_model_name_or_path"}, .type = OptionType::String,
         .default_value = std::string(),
         .help = "the SDXL VAE for sample images: a diffusers vae/ folder, a VAE file or an SDXL single file"},
        {.name = "clip_l_path", .aliases = {"clip_l", "text_encoder_path"}, .type = OptionType::String,
         .default_value = std::string(),
         .help = "CLIP-L for sample prompts: a file, a text_encoder/ folder or an SDXL single file"},
        {.name = "clip_g_path", .aliases = {"clip_g", "text_encoder_2_path"}, .type = OptionType::String,
         .default_value = std::string(),
         .help = "CLIP-G (bigG) for sample prompts: a file, a text_encoder_2/ folder or an SDXL single file"},
        {.name = "clip_tokenizer_path", .type = OptionType::String, .default_value = std::string(),
         .help = "CLIP's vocabulary: a tokenizer/ folder (vocab.json, merges.txt) or open_clip's "
                 "bpe_simple_vocab_16e6.txt.gz"},
        {.name = "clip_g_tokenizer_path", .type = OptionType::String, .default_value = std::string(),
         .help = "bigG's tokenizer_2/ folder; empty = clip_tokenizer_path padded with \"!\" (SAI, ComfyUI)"},
        {.name = "keep_encoders_loaded", .type = OptionType::Bool, .default_value = false,
         .help = "keep the text encoders and the VAE in memory between sample grids"}};
    schema_.needs_base_weights = true;
    schema_.sample_size = true;
    // sample.guidance when the config gives none: StableDiffusionXLPipeline's guidance_scale.
    schema_.default_sample_guidance = 5.0;
    schema_.default_sampler = SamplerKind::Euler;  // diffusers' EulerDiscreteScheduler (sdxl_sampler.h)
    schema_.default_noise_scheduler = NoiseScheduler::Ddpm;
    schema_.default_lora_format = LoraFormat::Kohya;  // ComfyUI reads no PEFT SDXL LoRA; diffusers reads kohya
  }

  const ArchSchema& schema() const override { return schema_; }

  std::shared_ptr<DiffusionModel> build(const ModelRequest& request) const override {
    const std::string& path = request.model.name_or_path;
    WICK_CHECK_KIND(Config, !path.empty(), "model.arch sdxl needs model.name_or_path (the base weights)");
    WeightSource source = WeightSource::open(path, "unet");
    DetectedFormat format = sdxl::detect_weight_format(source);
    sdxl::UnetConfig config =
        sdxl::config_from_shapes(mapped_shapes(source, format), hints_for(request.model.options, source));
    check_data(config, request.data, path);
    config.dtype = request.dtype;
    config.device = request.device;
    config.gradient_checkpointing = request.gradient_checkpointing;
    config.initialize = false;  // every parameter comes from the file
    auto model = std::make_shared<sdxl::Unet>(config);
    load_mapped(*model, source, format, {.trainable = false});
    model->set_weight_origin({.layout = format.format.name, .prefix = format.prefix, .path = source.path(),
                              .files = source.files()});
    return model;
  }

  std::map<std::string, std::vector<std::string>> target_presets() const override {
    const std::vector<std::string> attention = {"*.attn1.*", "*.attn2.*"};
    std::vector<std::string> attention_mlp = attention;
    attention_mlp.push_back("*.ff.net.*");
    // all: every Linear (and 1x1 conv) of the spatial transformers, kohya's default for SDXL.
    return {{"attention", attention},
            {"attention_mlp", attention_mlp},
            {"all", {"*.proj_in", "*.transformer_blocks.*", "*.proj_out"}}};
  }
  std::string default_preset() const override { return "all"; }

  // kohya's conv_dim set: the resnets (3x3 in_layers.2 / out_layers.3; emb_layers.1 and the 1x1 skip_connection at
  // the linear rank), the downsamplers' op and the upsamplers' conv.
  std::vector<std::string> conv_targets() const override {
    return {"*.in_layers.2", "*.out_layers.3", "*.emb_layers.1", "*.skip_connection", "*.op", "output_blocks.*.conv"};
  }

  LoraNaming lora_naming(const DiffusionModel& model) const override {
    const sdxl::UnetConfig& c = dynamic_cast<const sdxl::Unet&>(model).config();
    const std::string variant = sdxl::variant_name(c);
    std::map<std::string, std::string> metadata;
    if (c.adm_in_channels > 0) {
      metadata = {{"ss_base_model_version", "sdxl_base_v1-0"},
                  {"modelspec.architecture", "stable-diffusion-xl-v1-base/lora"}};
    } else if (variant == "SD 2.x UNet") {
      metadata = {{"ss_base_model_version", "sd_v2"}, {"ss_v2", "True"},
                  {"modelspec.architecture", "stable-diffusion-v2/lora"}};
    } else {
      metadata = {{"ss_base_model_version", "sd_v1"}, {"modelspec.architecture", "stable-diffusion-v1/lora"}};
    }
    metadata["modelspec.implementation"] = "https://github.com/Stability-AI/generative-models";
    return {.metadata = metadata, .peft_layout = sdxl::lora_layout(c)};
  }

  std::unique_ptr<ImageSampler> make_sampler(const SamplerRequest& request) const override {
    return sdxl::make_sdxl_sampler(request);
  }

  std::optional<DatasetSpec> dataset_spec() const override {
    return DatasetSpec{.latent_channels = 4,
                       .normalization = sdxl::kVaeNormalization,
                       .patch = 1,
                       .negative = StoredNegative::WhenNotEmpty,
                       .prompts = sdxl::sdxl_prompt_spec()};
  }

  std::unique_ptr<text::PromptEncoder> make_prompt_encoder(const text::PromptEncoderRequest& request) const override {
    return sdxl::make_sdxl_prompt_encoder(request);
  }

  std::filesystem::path export_model(const DiffusionModel& model, const std::filesystem::path& directory,
                                     const std::string& name, DType dtype,
                                     const std::map<std::string, std::string>& metadata) const override {
    return sdxl::export_unet(dynamic_cast<const sdxl::Unet&>(model), directory, name, dtype, metadata);
  }

 private:
  ArchSchema schema_;
};

}  // namespace

const Architecture& sdxl_architecture() {
  static const SdxlArchitecture arch;
  return arch;
}

}  // namespace wick
