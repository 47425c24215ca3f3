#include "models/sd3/sd3_architecture.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/image_sampler.h"
#include "models/sd3/sd3.h"
#include "models/sd3/sd3_sampler.h"
#include "models/sd3/sd3_weights.h"
#include "models/weights/key_map.h"
#include "runtime/error.h"

namespace wick {
namespace {

// The checks of a dataset against the model its weights describe (Config errors naming both sides).
void check_data(const sd3::Sd3Config& c, const DataGeometry& data, const std::string& weights) {
  WICK_CHECK_KIND(Config, data.model_family.empty() || data.model_family == "sd3", "the dataset's latents are of "
                  "model_family '", data.model_family, "', but SD3 trains on latents of the SD3 VAE (model_family "
                  "'sd3'; Flux's 16-channel VAE encodes differently)");
  WICK_CHECK_KIND(Config, data.latent_channels == 0 || data.latent_channels == c.in_channels, "the dataset has ",
                  data.latent_channels, "-channel latents but the SD3 weights ", weights, " take ", c.in_channels,
                  " (x_embedder.proj)");
  WICK_CHECK_KIND(Config, data.text_dim == 0 || data.text_dim == c.context_dim, "the dataset's text embeddings are ",
                  data.text_dim, " wide but the SD3 weights ", weights, " take ", c.context_dim,
                  " (context_embedder: CLIP-L and bigG zero-padded to T5-XXL's width, then T5-XXL)");
  WICK_CHECK_KIND(Config, data.pooled_dim == 0 || data.pooled_dim == c.pooled_dim,
                  "the dataset's pooled embeddings are ", data.pooled_dim, " wide but the SD3 weights ", weights,
                  " take ", c.pooled_dim, " (y_embedder: CLIP-L and bigG pooled, joined)");
}

// The head width, which no shape gives without QK norm: model.head_dim when set, else the
// attention_head_dim of a diffusers config.json beside the weights, else 0 (config_from_shapes then
// reads ln_q, or takes SAI's 64).
int64_t configured_head_dim(const ModelOptions& options, const WeightSource& source) {
  const int64_t configured = options.get_int("head_dim");
  if (configured > 0) return configured;
  const std::vector<std::string> files = source.files();
  if (files.empty()) return 0;
  const std::filesystem::path config_json = std::filesystem::path(files.front()).parent_path() / "config.json";
  std::ifstream in(config_json);
  if (!in) return 0;
  nlohmann::json json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  WICK_CHECK_KIND(Data, !json.is_discarded(), config_json.string(), " is not JSON");
  if (!json.is_object() || !json.contains("attention_head_dim")) return 0;
  WICK_CHECK_KIND(Data, json["attention_head_dim"].is_number_integer() && json["attention_head_dim"].get<int64_t>() > 0,
                  config_json.string(), ": attention_head_dim is not a positive integer");
  return json["attention_head_dim"].get<int64_t>();
}

class Sd3Architecture : public Architecture {
 public:
  Sd3Architecture() {
    schema_.name = "sd3";
    schema_.aliases = {"sd3.5", "sd35", "mmdit"};
    schema_.flag = "is_v3";
    schema_.keys = {{.name = "head_dim", .aliases = {"attention_head_dim"}, .type = OptionType::Int,
                     .default_value = int64_t{0}, .range = ConfigRange::at_least(0),
                     .help = "attention head width; 0 = attn.ln_q's width, else a diffusers folder's config.json "
                             "attention_head_dim, else SAI's 64"},
                    // What sample images need (sd3_sampler.h); aliases: kohya's arguments, ai-toolkit's and
                    // SimpleTuner's keys. "" = the pipeline folder's part, or the single file's, when there is one.
                    {.name = "vae_path", .aliases = {"vae", "pretrained_vae_model_name_or_path"},
                     .type = OptionType::String, .default_value = std::string(),
                     .help = "the SD3 VAE for sample images: a diffusers vae/ folder, a VAE file or an SD3.5 single "
                             "file"},
                    {.name = "clip_l_path", .aliases = {"clip_l", "text_encoder_path"}, .type = OptionType::String,
                     .default_value = std::string(),
                     .help = "CLIP-L for sample prompts: a file or a text_encoder/ folder"},
                    {.name = "clip_g_path", .aliases = {"clip_g", "text_encoder_2_path"}, .type = OptionType::String,
                     .default_value = std::string(),
                     .help = "CLIP-G (bigG) for sample prompts: a file or a text_encoder_2/ folder"},
                    {.name = "t5_path", .aliases = {"t5xxl", "t5xxl_path", "text_encoder_3_path"},
                     .type = OptionType::String, .default_value = std::string(),
                     .help = "T5-XXL for sample prompts: a file or a text_encoder_3/ folder"},
                    {.name = "clip_tokenizer_path", .type = OptionType::String, .default_value = std::string(),
                     .help = "CLIP's vocabulary: a tokenizer/ folder (vocab.json, merges.txt) or open_clip's "
                             "bpe_simple_vocab_16e6.txt.gz"},
                    {.name = "clip_g_tokenizer_path", .type = OptionType::String, .default_value = std::string(),
                     .help = "bigG's tokenizer_2/ folder; empty = clip_tokenizer_path padded with \"!\" (SAI, "
                             "ComfyUI)"},
                    {.name = "t5_tokenizer_path", .type = OptionType::String, .default_value = std::string(),
                     .help = "T5's SentencePiece model: spiece.model or a tokenizer_3/ folder"},
                    {.name = "t5_length", .aliases = {"t5xxl_max_token_length", "max_sequence_length"},
                     .type = OptionType::Int, .default_value = int64_t{0}, .range = ConfigRange::at_least(0),
                     .help = "T5 tokens of sample prompts; 0 = the dataset's recorded length, else 256"},
                    {.name = "sample_shift", .type = OptionType::Float, .default_value = 0.0,
                     .range = ConfigRange::at_least(0),
                     .help = "the sampling schedule's shift; 0 = a pipeline folder's scheduler_config.json shift, "
                             "else 3.0 (SD3.5's)"},
                    {.name = "keep_encoders_loaded", .type = OptionType::Bool, .default_value = false,
                     .help = "keep the text encoders and the VAE in memory between sample grids"}};
    schema_.needs_base_weights = true;
    schema_.sample_size = true;
    // sample.guidance when the config gives none: SAI's sd3_infer.py for SD3.5 Large (CFG_SCALE; Medium 5.0).
    schema_.default_sample_guidance = 4.5;
    schema_.default_lora_format = LoraFormat::Peft;  // diffusers and ComfyUI load PEFT SD3 LoRAs
  }

  const ArchSchema& schema() const override { return schema_; }

  std::shared_ptr<DiffusionModel> build(const ModelRequest& request) const override {
    const std::string& path = request.model.name_or_path;
    WICK_CHECK_KIND(Config, !path.empty(), "model.arch sd3 needs model.name_or_path (the base weights)");
    WeightSource source = WeightSource::open(path, "transformer");
    DetectedFormat format = sd3::detect_weight_format(source);
    sd3::Sd3Config config =
        sd3::config_from_shapes(mapped_shapes(source, format), configured_head_dim(request.model.options, source));
    check_data(config, request.data, path);
    config.dtype = request.dtype;
    config.device = request.device;
    config.gradient_checkpointing = request.gradient_checkpointing;
    config.initialize = false;  // every parameter comes from the file
    auto model = std::make_shared<sd3::MMDiT>(config);
    load_mapped(*model, source, format, {.trainable = false});
    return model;
  }

  std::map<std::string, std::vector<std::string>> target_presets() const override {
    const std::vector<std::string> attention = {"joint_blocks.*.attn.qkv", "joint_blocks.*.attn.proj",
                                                "joint_blocks.*.attn2.qkv", "joint_blocks.*.attn2.proj"};
    std::vector<std::string> attention_mlp = attention;
    attention_mlp.insert(attention_mlp.end(), {"joint_blocks.*.mlp.fc1", "joint_blocks.*.mlp.fc2"});
    // all: every Linear of both streams, adaLN_modulation included (kohya's and ai-toolkit's default).
    return {{"attention", attention}, {"attention_mlp", attention_mlp}, {"all", {"joint_blocks.*"}}};
  }
  std::string default_preset() const override { return "all"; }

  LoraNaming lora_naming(const DiffusionModel& model) const override {
    const auto& mmdit = dynamic_cast<const sd3::MMDiT&>(model);
    std::map<std::string, Shape> shapes;
    for (const auto& [name, tensor] : model.named_parameters()) shapes[name] = tensor.shape();
    const sd3::Sd3Config& c = mmdit.config();
    // kohya's modelspec: "stable-diffusion-3" + the variant; SD3.5 Medium is the one with attn2.
    std::string variant = !c.qk_norm                          ? "stable-diffusion-3-medium"
                          : !c.dual_attention_layers.empty() ? "stable-diffusion-3-5-medium"
                                                             : "stable-diffusion-3-5-large";
    return {.metadata = {{"ss_base_model_version", "sd3"},
                         {"modelspec.architecture", variant + "/lora"},
                         {"modelspec.implementation", "diffusers"}},
            .peft_layout = sd3::lora_layout(sd3::layout_sizes(shapes))};
  }

  std::unique_ptr<ImageSampler> make_sampler(const SamplerRequest& request) const override {
    return sd3::make_sd3_sampler(request);
  }

  std::optional<DatasetSpec> dataset_spec() const override {
    return DatasetSpec{.latent_channels = 16,
                       .normalization = sd3::kVaeNormalization,
                       .patch = 2,
                       .negative = StoredNegative::Always,
                       .prompts = sd3::sd3_prompt_spec()};
  }

  std::unique_ptr<text::PromptEncoder> make_prompt_encoder(const text::PromptEncoderRequest& request) const override {
    return sd3::make_sd3_prompt_encoder(request);
  }

 private:
  ArchSchema schema_;
};

}  // namespace

const Architecture& sd3_architecture() {
  static const Sd3Architecture arch;
  return arch;
}

}  // namespace wick
