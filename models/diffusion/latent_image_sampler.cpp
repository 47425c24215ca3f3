#include "models/diffusion/latent_image_sampler.h"

#include <algorithm>
#include <filesystem>

#include "engine/autograd/grad_mode.h"
#include "models/diffusion/generate.h"
#include "models/text/stored_prompts.h"
#include "models/weights/pipeline_folder.h"
#include "runtime/error.h"

namespace wick {
namespace {

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

std::unique_ptr<vae::ImageVae> open_vae(const LatentSamplerSetup& setup) {
  WICK_CHECK_KIND(Config, !setup.vae.empty(), setup.model, " sampler: the VAE (files.vae) is not given");
  return setup.open_vae(setup.vae, {.dtype = setup.device.is_cuda() ? DType::BF16 : DType::F32,
                                    .device = setup.device,
                                    .normalization = setup.vae_model});
}

}  // namespace

Device device_of(const Module& model) {
  auto parameters = model.named_parameters();
  return parameters.empty() ? Device::cpu() : parameters.front().second.device();
}

// ---- for a run ----

std::map<std::string, std::string> resolve_sampler_files(const ModelConfig& model,
                                                         const std::vector<SamplerFile>& files, std::string* pipeline) {
  std::map<std::string, std::string> out;
  for (const SamplerFile& file : files) out[file.key] = model.options.get_string(file.key);
  if (std::optional<std::string> root = pipeline_folder(model.name_or_path)) {
    for (const SamplerFile& file : files)
      if (out[file.key].empty() && !file.pipeline_parts.empty())
        out[file.key] = pipeline_part(*root, file.pipeline_parts);
    if (pipeline) *pipeline = *root;
  } else if (pipeline) {
    pipeline->clear();
  }
  for (const SamplerFile& file : files)
    if (out[file.key].empty() && !file.single_file_prefix.empty() &&
        file_has_prefix(model.name_or_path, file.single_file_prefix))
      out[file.key] = model.name_or_path;
  return out;
}

std::vector<std::string> grid_texts(const SamplerRequest& request, const std::optional<std::string>& negative) {
  std::vector<std::string> grid = request.config.sample.prompts;
  if (request.config.sample.n_per_class > 0) {
    const std::vector<std::string>& labels = request.dataset.attributes().label_names;
    grid.insert(grid.end(), labels.begin(), labels.end());
  }
  if (negative) grid.push_back(*negative);
  return grid;
}

std::optional<SamplePrompts> stored_prompts_for(const LatentDataset& dataset, bool fits) {
  std::optional<SamplePrompts> stored;
  if (fits) stored = dataset.sample_prompts();
  if (stored && stored->captions.empty()) stored.reset();
  return stored;
}

std::vector<std::pair<std::string, std::string>> text_part_labels(
    const std::vector<std::pair<SamplerFile, std::string>>& text) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [file, path] : text)
    if (file.required) out.emplace_back(file.label + " (model." + file.key + ")", path);
  return out;
}

bool text_optional(const std::optional<SamplePrompts>& stored, const std::vector<std::string>& not_stored) {
  return stored.has_value() && not_stored.empty();
}

void check_sampler_parts(const SamplerPartsCheck& c) {
  static const std::optional<SamplePrompts> none;
  const std::optional<SamplePrompts>& stored = c.stored ? *c.stored : none;
  const bool optional_text = text_optional(stored, c.not_stored);
  auto needed = [](const SamplerFile& file) { return file.label + " (model." + file.key + ": " + file.hint + ")"; };
  std::vector<std::string> missing;
  if (c.vae_path.empty()) missing.push_back(needed(c.vae));
  if (!optional_text)
    for (const auto& [file, path] : c.text)
      if (file.required && path.empty()) missing.push_back(needed(file));
  std::string why_text;  // why the text encoders are needed although the dataset stores sample prompts
  if (!optional_text && stored && missing.size() > (c.vae_path.empty() ? 1u : 0u))
    why_text = "; the sample prompts stored in " + c.dataset_path + " do not hold \"" + c.not_stored.front() + "\" (" +
               c.stored_rule + ")";
  WICK_CHECK_KIND(Config, missing.empty(), c.model, " sample images need ", join(missing, "; "), ", and ",
                  missing.size() == 1 ? "it is" : "they are", " not given (", c.where_all, ")", why_text);
  std::error_code ec;
  auto exists = [&](const SamplerFile& file, const std::string& path) {
    WICK_CHECK_KIND(Config, path.empty() || std::filesystem::exists(path, ec), "model.", file.key, ": ", path,
                    ": no such file or folder");
  };
  exists(c.vae, c.vae_path);
  for (const auto& [file, path] : c.text) exists(file, path);
}

vae::VaeConfig sampler_vae_config(const std::string& vae_path) {
  try {
    return vae::read_vae_header(vae_path).config;
  } catch (const WickError& error) {
    throw WickError(error.kind(), "model.vae_path " + vae_path + ": " + message_of(error));
  }
}

SamplerDataset sampler_dataset(const LatentDataset& dataset, const std::string& model, vae::LatentNormalization preset,
                               const vae::VaeConfig& sizes, const std::string& vae_path) {
  return sampler_dataset(dataset, model, preset,
                         vae::ImageVaeInfo{.z_channels = sizes.z_channels, .downscale = sizes.downscale()}, vae_path);
}

SamplerDataset sampler_dataset(const LatentDataset& dataset, const std::string& model, vae::LatentNormalization preset,
                               const vae::ImageVaeInfo& sizes, const std::string& vae_path) {
  const LatentDatasetAttributes& data = dataset.attributes();
  SamplerDataset out{.normalization = preset};
  const bool data_per_channel = !data.vae_latents_mean.empty() || !data.vae_latents_std.empty();
  if (sizes.channel_mean.empty()) {
    // The training latents were also normalized per channel (Objective::scale_latents); this sampler's decoder undoes
    // only the scalar factors, so its images would be wrong.
    WICK_CHECK_KIND(Data, !data_per_channel, dataset.path(),
                    ": the dataset's latents are normalized per channel (vae_latents_mean / vae_latents_std, a Wan "
                    "VAE's), but the ", model, " sampler decodes with an AutoencoderKL and a scalar normalization "
                    "only: encode the dataset with `wick dataset encode --model ", model, "`");
  } else {
    // The decoder undoes its own per-channel lists: the dataset's must be those.
    WICK_CHECK_KIND(Data, data_per_channel || data.model_family != model, dataset.path(), ": a ", model,
                    " dataset without per-channel latent normalization (vae_latents_mean / vae_latents_std): encode it "
                    "with `wick dataset encode --model ", model, "`");
    WICK_CHECK_KIND(Config, !data_per_channel || (data.vae_latents_mean == sizes.channel_mean &&
                                                  data.vae_latents_std == sizes.channel_std),
                    dataset.path(), "'s latents are normalized with other per-channel means and deviations than the "
                    "VAE's (model.vae_path ", vae_path, ", ", sizes.source, "): sample with the VAE the dataset was "
                    "encoded with");
  }
  // The latents the model learned were normalized with the dataset's factors.
  if (data.model_family == model) out.normalization = {data.vae_scaling_factor, data.vae_shift_factor};
  WICK_CHECK_KIND(Data, !dataset.buckets().empty(), dataset.path(), ": the dataset has no buckets");
  out.default_height = dataset.buckets().front().height * sizes.downscale;
  out.default_width = dataset.buckets().front().width * sizes.downscale;
  WICK_CHECK_KIND(Config, data.latent_channels == 0 || data.latent_channels == sizes.z_channels, dataset.path(),
                  " holds ", data.latent_channels, "-channel latents but the VAE (model.vae_path ", vae_path,
                  ") has ", sizes.z_channels);
  return out;
}

// ---- LatentImageSampler ----

LatentImageSampler::LatentImageSampler(LatentSamplerSetup setup)
    : setup_(std::move(setup)), vae_(open_vae(setup_)) {
  if (const std::optional<SamplePrompts>& stored = setup_.stored_prompts) {
    const auto k = static_cast<int64_t>(stored->captions.size());
    std::string model = setup_.model;
    std::transform(model.begin(), model.end(), model.begin(), [](unsigned char c) { return std::tolower(c); });
    WICK_CHECK(stored->embeds.dim() == 3 && stored->embeds.size(0) == k && stored->pooled.dim() == 2 &&
                   stored->pooled.size(0) == k,
               model, " sampler: stored prompts must be embeds [K, L, D] and pooled [K, P] for K captions, got ", k,
               " captions, ", stored->embeds.describe(), ", ", stored->pooled.describe());
    for (int64_t row = 0; row < k; ++row) stored_row_.emplace(stored->captions[static_cast<size_t>(row)], row);
  }
}

Tensor LatentImageSampler::generate(DiffusionModel& model, const std::vector<std::string>& prompts,
                                    const SampleSettings& settings) {
  const SizeRule rule = size_rule(model);
  const int64_t height = settings.height > 0 ? settings.height : setup_.default_height;
  const int64_t width = settings.width > 0 ? settings.width : setup_.default_width;
  const int64_t f = vae_sizes().downscale, multiple = f * rule.latent_multiple;
  auto near = [multiple](int64_t v) { return std::max<int64_t>(multiple, (v + multiple / 2) / multiple * multiple); };
  std::string model_name = setup_.model;
  std::transform(model_name.begin(), model_name.end(), model_name.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  WICK_CHECK_KIND(Config, height > 0 && width > 0, model_name,
                  " sampler: no image size (give sample.width and sample.height)");
  WICK_CHECK_KIND(Config, height % multiple == 0 && width % multiple == 0, "image size ", width, " x ", height,
                  " (sample.width x sample.height): ", setup_.model, " images must be multiples of ", multiple,
                  " pixels (the VAE's ", f, " x ", rule.why, "); the nearest are ", near(width), " x ", near(height));
  model.check_latent_size(height / f, width / f);
  const auto n = static_cast<int64_t>(prompts.size());
  if (n == 0) return Tensor::empty({0, vae_sizes().image_channels, height, width}, DType::F32);
  Tensor noise = sample_noise({vae_sizes().z_channels, height / f, width / f}, 0, n, settings.seed, device_of(model));
  return sample(model, prompts, noise, settings);
}

std::vector<std::string> LatentImageSampler::texts_of(const std::vector<std::string>& prompts) const {
  std::vector<std::string> texts;
  for (const std::string& prompt : prompts) texts.push_back(text::prompt_text(prompt, setup_.trigger_word));
  return texts;
}

bool LatentImageSampler::holds(const std::string& prompt) const {
  return setup_.stored_prompts && stored_row_.count(text::prompt_text(prompt, setup_.trigger_word)) > 0;
}

text::PromptRows LatentImageSampler::embed(
    const std::vector<std::string>& texts, const std::function<bool(int64_t)>& usable,
    const std::function<text::PromptEmbeddings(const std::vector<std::string>&)>& encode,
    const std::optional<std::string>& negative, const std::string& length_note) {
  const text::PromptPlan plan = text::plan_prompts(texts, [&](const std::string& text) -> std::optional<int64_t> {
    if (!holds(text) || !usable(setup_.stored_prompts->embeds.size(1))) return std::nullopt;
    return stored_row_.at(text);
  });
  if (!plan.to_encode.empty() && !has_encoders()) {
    const bool is_negative = negative && plan.to_encode.front() == *negative;
    WICK_FAIL(Config, "the ", is_negative ? "negative prompt" : "prompt", " \"", plan.to_encode.front(),
              "\" is not among the sample prompts stored in the dataset (",
              text::quoted_captions(*setup_.stored_prompts), length_note,
              "), so it needs the text encoders, and these are not given: ", missing_text_parts(),
              " (a diffusers pipeline folder as model.name_or_path gives all of them; wick sample takes "
              "--set model.clip_l_path=... and the like)");
  }
  text::PromptEmbeddings encoded;
  if (!plan.to_encode.empty()) encoded = encode(plan.to_encode);
  return text::gather_prompts(plan, setup_.stored_prompts ? &*setup_.stored_prompts : nullptr, encoded);
}

Tensor LatentImageSampler::decode(const Tensor& latents) {
  Tensor images = vae_->decode_to_images(latents, setup_.normalization);
  if (!setup_.keep_loaded) vae_->unload();
  return images;
}

std::string LatentImageSampler::missing_text_parts() const {
  std::vector<std::string> missing;
  for (const auto& [label, path] : setup_.text_parts)
    if (path.empty()) missing.push_back(label);
  return join(missing, ", ");
}

void LatentImageSampler::check_stored_widths(int64_t context_dim, const std::string& context_what, int64_t pooled_dim,
                                             const std::string& pooled_what) const {
  const std::optional<SamplePrompts>& stored = setup_.stored_prompts;
  if (!stored) return;
  WICK_CHECK_KIND(Config, context_dim == stored->embeds.size(2), "the ", setup_.model, " model takes ", context_dim,
                  "-wide ", context_what, " but the stored sample prompts are ", stored->embeds.size(2), " wide");
  WICK_CHECK_KIND(Config, pooled_dim == stored->pooled.size(1), "the ", setup_.model, " model takes a ", pooled_dim,
                  "-wide ", pooled_what, " but the stored sample prompts' is ", stored->pooled.size(1), " wide");
}

void LatentImageSampler::unload() {
  vae_->unload();
  if (has_encoders()) unload_encoders();
}

std::string LatentImageSampler::describe() const {
  std::string out = setup_.model + ": VAE " + setup_.vae + describe_text() + describe_choices();
  if (setup_.stored_prompts) {
    const size_t k = setup_.stored_prompts->captions.size();
    out += "; the embeddings of the " + std::to_string(k) + " sample prompt" + (k == 1 ? "" : "s") +
           " stored in the dataset";
    if (!has_encoders()) out += ", no text encoders (other prompts need " + missing_text_parts() + ")";
  }
  return out;
}

}  // namespace wick
