#include "models/flux/flux_architecture.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "models/flux/flux.h"
#include "models/flux/flux_sampler.h"
#include "models/flux/flux_weights.h"
#include "models/weights/float8_weights.h"
#include "models/weights/key_map.h"
#include "runtime/error.h"

namespace wick {
namespace {

// The checks of a dataset against the model its weights describe (Config errors naming both sides).
void check_data(const flux::FluxConfig& c, const DataGeometry& data, const std::string& weights) {
  WICK_CHECK_KIND(Config, data.model_family.empty() || data.model_family == "flux", "the dataset's latents are of "
                  "model_family '", data.model_family, "', but Flux trains on latents of the Flux VAE (model_family "
                  "'flux'; other 16-channel VAEs, such as SD3's, encode differently)");
  WICK_CHECK_KIND(Config, data.latent_channels == 0 || data.latent_channels * 4 == c.in_channels, "the dataset has ",
                  data.latent_channels, "-channel latents but the Flux weights ", weights, " take ",
                  c.latent_channels(), " (img_in has ", c.in_channels, " inputs = channels x 2 x 2)");
  WICK_CHECK_KIND(Config, data.text_dim == 0 || data.text_dim == c.context_dim, "the dataset's text embeddings are ",
                  data.text_dim, " wide but the Flux weights ", weights, " take ", c.context_dim,
                  " (txt_in: T5-XXL's hidden states)");
  WICK_CHECK_KIND(Config, data.pooled_dim == 0 || data.pooled_dim == c.vec_dim, "the dataset's pooled embeddings are ",
                  data.pooled_dim, " wide but the Flux weights ", weights, " take ", c.vec_dim,
                  " (vector_in: CLIP-L's pooled output)");
}

// The RoPE widths per position axis, which no tensor shape gives: model.axes_dim when set, else the
// `axes_dims_rope` of a diffusers config.json beside the weights, else Flux.1's (16, 56, 56).
std::vector<int64_t> rope_axes(const ModelOptions& options, const WeightSource& source) {
  const std::vector<int64_t>& configured = options.get_int_list("axes_dim");
  if (!configured.empty()) return configured;
  const std::vector<std::string> files = source.files();
  if (!files.empty()) {
    const std::filesystem::path config_json = std::filesystem::path(files.front()).parent_path() / "config.json";
    std::ifstream in(config_json);
    if (in) {
      nlohmann::json json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
      WICK_CHECK_KIND(Data, !json.is_discarded(), config_json.string(), " is not JSON");
      if (json.is_object() && json.contains("axes_dims_rope")) {
        const nlohmann::json& axes = json["axes_dims_rope"];
        WICK_CHECK_KIND(Data, axes.is_array() && !axes.empty(), config_json.string(),
                        ": axes_dims_rope is not a list of integers");
        std::vector<int64_t> out;
        for (const nlohmann::json& a : axes) {
          WICK_CHECK_KIND(Data, a.is_number_integer(), config_json.string(),
                          ": axes_dims_rope is not a list of integers");
          out.push_back(a.get<int64_t>());
        }
        return out;
      }
    }
  }
  return {16, 56, 56};
}

class FluxArchitecture : public Architecture {
 public:
  FluxArchitecture() {
    schema_.name = "flux";
    schema_.aliases = {"flux1", "flux.1", "flux-dev", "flux-schnell"};
    schema_.flag = "is_flux";
    schema_.keys = {{.name = "guidance", .aliases = {"guidance_scale"}, .type = OptionType::Float,
                     .default_value = 1.0, .range = ConfigRange::at_least(0),
                     .help = "guidance input of a dev model during training"},
                    {.name = "axes_dim", .aliases = {"axes_dims_rope"}, .type = OptionType::IntList,
                     .default_value = std::vector<int64_t>{}, .range = ConfigRange::above(0),
                     .help = "RoPE widths of the (0, row, column) position axes, summing to the head width; empty = "
                             "a diffusers folder's config.json axes_dims_rope, else Flux.1's [16, 56, 56]"},
                    // What sample images need (flux_sampler.h); aliases: kohya's arguments, EriDiffusion's and
                    // SimpleTuner's keys. "" = the pipeline folder's part when name_or_path gives one.
                    {.name = "vae_path", .aliases = {"ae", "pretrained_vae_model_name_or_path"},
                     .type = OptionType::String, .default_value = std::string(),
                     .help = "the Flux VAE for sample images: ae.safetensors, a diffusers vae/ folder or a pipeline "
                             "folder"},
                    {.name = "clip_l_path", .aliases = {"clip_l", "text_encoder_path"}, .type = OptionType::String,
                     .default_value = std::string(),
                     .help = "CLIP-L for sample prompts: a file or a text_encoder/ folder"},
                    {.name = "t5_path", .aliases = {"t5xxl", "t5xxl_path", "text_encoder_2_path"},
                     .type = OptionType::String, .default_value = std::string(),
                     .help = "T5-XXL for sample prompts: a file or a text_encoder_2/ folder"},
                    {.name = "clip_tokenizer_path", .type = OptionType::String, .default_value = std::string(),
                     .help = "CLIP's vocabulary: a tokenizer/ folder (vocab.json, merges.txt) or open_clip's "
                             "bpe_simple_vocab_16e6.txt.gz"},
                    {.name = "t5_tokenizer_path", .type = OptionType::String, .default_value = std::string(),
                     .help = "T5's SentencePiece model: spiece.model or a tokenizer_2/ folder"},
                    {.name = "t5_length", .aliases = {"t5xxl_max_token_length", "max_sequence_length"},
                     .type = OptionType::Int, .default_value = int64_t{0}, .range = ConfigRange::at_least(0),
                     .help = "T5 tokens of sample prompts; 0 = the dataset's recorded length, else 512 (dev) / 256 "
                             "(schnell)"},
                    {.name = "keep_encoders_loaded", .type = OptionType::Bool, .default_value = false,
                     .help = "keep the text encoders and the VAE in memory between sample grids"}};
    schema_.needs_base_weights = true;
    schema_.sample_size = true;
    schema_.default_sample_guidance = 3.5;
  }

  const ArchSchema& schema() const override { return schema_; }

  std::shared_ptr<DiffusionModel> build(const ModelRequest& request) const override {
    const std::string& path = request.model.name_or_path;
    WICK_CHECK_KIND(Config, !path.empty(), "model.arch flux needs model.name_or_path (the base weights)");
    WeightSource source = WeightSource::open(path, "transformer");
    DetectedFormat format = flux::detect_weight_format(source);
    std::map<std::string, Shape> shapes = mapped_shapes(source, format);
    std::erase_if(shapes, [](const auto& entry) { return is_float8_companion(entry.first); });
    flux::FluxConfig config = flux::config_from_shapes(shapes, rope_axes(request.model.options, source));
    check_data(config, request.data, path);
    config.dtype = request.dtype;
    config.device = request.device;
    config.gradient_checkpointing = request.gradient_checkpointing;
    config.initialize = false;  // every parameter comes from the file
    auto model = std::make_shared<flux::FluxTransformer>(config);
    // A float8 checkpoint (F8_E4M3 Linear weights, with or without scales) stays float8.
    Float8Source float8 = prepare_float8_layers(*model, source, format);
    load_mapped(*model, source, float8.format, {.trainable = false, .prefilled = float8.prefilled});
    model->set_default_guidance(request.model.options.get_float("guidance"));
    return model;
  }

  std::map<std::string, std::vector<std::string>> target_presets() const override {
    const std::vector<std::string> attention = {
        "double_blocks.*.img_attn.qkv", "double_blocks.*.img_attn.proj", "double_blocks.*.txt_attn.qkv",
        "double_blocks.*.txt_attn.proj", "single_blocks.*.linear1", "single_blocks.*.linear2"};
    std::vector<std::string> attention_mlp = attention;
    attention_mlp.insert(attention_mlp.end(), {"double_blocks.*.img_mlp.*", "double_blocks.*.txt_mlp.*"});
    return {{"attention", attention}, {"attention_mlp", attention_mlp}, {"all", {"double_blocks.*", "single_blocks.*"}}};
  }
  std::string default_preset() const override { return "all"; }

  LoraNaming lora_naming(const DiffusionModel& model) const override {
    const auto& flux = dynamic_cast<const flux::FluxTransformer&>(model);
    std::map<std::string, Shape> shapes;
    for (const auto& [name, tensor] : model.named_parameters()) shapes[name] = tensor.shape();
    const bool dev = flux.config().guidance_embed;
    return {.metadata = {{"ss_base_model_version", dev ? "flux1" : "flux1_schnell"},
                         {"modelspec.architecture", dev ? "flux-1-dev/lora" : "flux-1-schnell/lora"},
                         {"modelspec.implementation", "https://github.com/black-forest-labs/flux"}},
            .peft_layout = flux::lora_layout(flux::layout_sizes(shapes))};
  }

  std::unique_ptr<ImageSampler> make_sampler(const SamplerRequest& request) const override {
    return flux::make_flux_sampler(request);
  }

  std::optional<DatasetSpec> dataset_spec() const override {
    return DatasetSpec{.latent_channels = 16,
                       .normalization = flux::kVaeNormalization,
                       .patch = 2,
                       .negative = StoredNegative::Never,
                       .prompts = flux::flux_prompt_spec()};
  }

  std::unique_ptr<text::PromptEncoder> make_prompt_encoder(const text::PromptEncoderRequest& request) const override {
    return flux::make_flux_prompt_encoder(request);
  }

 private:
  ArchSchema schema_;
};

}  // namespace

const Architecture& flux_architecture() {
  static const FluxArchitecture arch;
  return arch;
}

}  // namespace wick
