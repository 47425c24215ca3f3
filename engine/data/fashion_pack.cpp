#include "engine/data/fashion_pack.h"

#include <filesystem>
#include <system_error>

#include "engine/data/hashed_text_encoder.h"
#include "engine/data/idx.h"
#include "engine/data/latent_dataset.h"
#include "engine/progress.h"
#include "runtime/atomic_file.h"

namespace wick {

Tensor pack_images_2x2(const Tensor& images) {
  WICK_CHECK(images.dim() == 2 && images.size(1) == 28 * 28 && images.dtype() == DType::F32,
             "pack_images_2x2: expected f32 [N, 784], got ", images.describe());
  Tensor source = images.contiguous();
  int64_t n = images.size(0);
  Tensor out = Tensor::empty({n, 4, 14, 14}, DType::F32);
  const float* in = source.data_as<float>();
  float* dst = out.data_as<float>();
  for (int64_t s = 0; s < n; ++s)
    for (int64_t dy = 0; dy < 2; ++dy)
      for (int64_t dx = 0; dx < 2; ++dx)
        for (int64_t i = 0; i < 14; ++i)
          for (int64_t j = 0; j < 14; ++j) {
            int64_t channel = dy * 2 + dx;  // c * 4 + dy * 2 + dx with c = 0
            dst[((s * 4 + channel) * 14 + i) * 14 + j] = in[s * 784 + (2 * i + dy) * 28 + (2 * j + dx)] * 2.0f - 1.0f;
          }
  return out;
}

Tensor unpack_latents_2x2(const Tensor& latents) {
  WICK_CHECK(latents.dim() == 4 && latents.size(1) % 4 == 0 && latents.size(1) > 0 && is_floating(latents.dtype()),
             "unpack_latents_2x2: expected floating latents [N, 4c, h, w], got ", latents.describe());
  Tensor source = latents.to(Device::cpu()).to(DType::F32).contiguous();
  const int64_t n = latents.size(0), c = latents.size(1) / 4, h = latents.size(2), w = latents.size(3);
  Tensor out = Tensor::empty({n, c, 2 * h, 2 * w}, DType::F32);
  const float* in = source.data_as<float>();
  float* dst = out.data_as<float>();
  for (int64_t s = 0; s < n; ++s)
    for (int64_t k = 0; k < c; ++k)
      for (int64_t dy = 0; dy < 2; ++dy)
        for (int64_t dx = 0; dx < 2; ++dx) {
          const float* plane = in + ((s * 4 * c + k * 4 + dy * 2 + dx) * h) * w;
          float* image = dst + (s * c + k) * (2 * h) * (2 * w);
          for (int64_t i = 0; i < h; ++i)
            for (int64_t j = 0; j < w; ++j) image[(2 * i + dy) * (2 * w) + 2 * j + dx] = plane[i * w + j];
        }
  return out;
}

PackSummary pack_fashion_mnist(const PackOptions& options) {
  WICK_CHECK_KIND(Config, options.split == "train" || options.split == "test", "dataset pack: --split must be train or test, got '",
                  options.split, "'");
  WICK_CHECK_KIND(Config, !options.out.empty(), "dataset pack: --out is required");
  WICK_CHECK_KIND(Config, options.limit >= 0, "dataset pack: --limit must be >= 0");
  namespace fs = std::filesystem;
  fs::path out(options.out);
  WICK_CHECK_KIND(Config, options.force || !fs::exists(out), options.out, ": exists (pass --force to replace it)");
  std::error_code error;
  if (out.has_parent_path()) fs::create_directories(out.parent_path(), error);
  WICK_CHECK_KIND(Config, !error, out.parent_path().string(), ": cannot create the folder (", error.message(), ")");

  FashionMnist data = load_fashion_mnist(options.split);
  int64_t n = data.images.size(0);
  if (options.limit > 0 && options.limit < n) n = options.limit;

  const auto& names = fashion_mnist_class_names();
  LatentDatasetAttributes attributes;
  attributes.model_family = "fashion-dit";
  attributes.latent_channels = 4;
  attributes.vae_scaling_factor = 1.0;
  attributes.vae_shift_factor = 0.0;
  attributes.text_encoder = HashedTextEncoder::name;
  attributes.label_names.assign(names.begin(), names.end());
  HashedTextEncoder encoder;
  const fs::path temporary = atomic_temporary_path(out);  // <out>.tmp-<pid>, renamed over <out> when complete
  PackSummary summary;
  try {
    LatentDatasetWriter writer(temporary.string(), attributes);
    ProgressBar bar(n, "pack fashion-mnist " + options.split, stderr);
    const int64_t chunk = 1024;
    const int64_t* labels = data.labels.data_as<int64_t>();
    for (int64_t start = 0; start < n; start += chunk) {
      int64_t count = std::min(chunk, n - start);
      LatentSamples samples;
      samples.latents = pack_images_2x2(data.images.narrow(0, start, count));
      for (int64_t i = 0; i < count; ++i) samples.captions.emplace_back(names[static_cast<size_t>(labels[start + i])]);
      TextEncoding text = encoder.encode(samples.captions);
      samples.text_embeds = text.embeds;
      samples.text_pooled = text.pooled;
      samples.text_mask = text.mask;
      samples.labels = data.labels.narrow(0, start, count).contiguous();
      writer.append(samples);
      if (options.progress) bar.update(start + count);
    }
    writer.close();
    if (options.progress) bar.finish();
    summary.seconds = bar.elapsed_seconds();
  } catch (...) {
    fs::remove(temporary, error);  // never leave a half-written file behind
    throw;
  }
  replace_file(temporary, out);  // fsync, rename, fsync of the folder
  summary.n_samples = n;
  return summary;
}

}  // namespace wick
