// Checks for the `wick dataset encode` CLI test (tests/cli/dataset_encode_test.sh):
//
//   wick_dataset_encode_check same A.h5 B.h5
//     the two files hold the same contents, bitwise: attributes, buckets, and for every sample id every
//     member (latents, latents_logvar, text, captions, original_size, crop, flipped, source), and the
//     sample prompts. Not the bytes of the files (HDF5's layout may differ).
//   wick_dataset_encode_check list FILE.h5
//     one line per sample id: "<id> <bucket> <source> <original h>x<w> crop <top>,<left> flip <0|1> | <caption>"
//   wick_dataset_encode_check batches FILE.h5 GLOBAL_BATCH SEED
//     the training order wick train takes from the file (DistributedSampler over every sample id, its bucket),
//     for epochs 0 and 1: every global batch of GLOBAL_BATCH ids holds one bucket, every id is in each epoch, and
//     the ranks of a 2-rank run (GLOBAL_BATCH / 2 each) take exactly the 1-rank run's global batches, in order.
//     Prints the buckets of the global batches of each epoch.
//   wick_dataset_encode_check recompute FILE.h5 IMAGE_DIR VAE CLIP_L T5 CLIP_VOCAB SPIECE T5_LENGTH RESOLUTION STEP
//     every sample against the building blocks, one at a time: the source image decoded, placed by
//     BucketPlanner (centred crop), fitted, mirrored when flipped, encoded by the VAE in f32 (mean and
//     logvar); the caption by flux::encode_flux_prompts; the sample prompts likewise. Within f16 rounding.
// Exit status 0 when it holds, 1 (with the first differences) when not.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/data/buckets.h"
#include "engine/data/distributed_sampler.h"
#include "engine/data/image_decode.h"
#include "engine/data/latent_dataset.h"
#include "models/flux/flux_sampler.h"
#include "models/flux/flux_text.h"
#include "models/vae/vae_weights.h"

namespace wick {
namespace {

int failures = 0;

void fail(const std::string& message) {
  if (++failures <= 10) std::printf("  differs: %s\n", message.c_str());
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::equal(static_cast<const uint8_t*>(x.data()),
                    static_cast<const uint8_t*>(x.data()) + x.numel() * static_cast<int64_t>(dtype_size(x.dtype())),
                    static_cast<const uint8_t*>(y.data()));
}

// max |a - b| / max(1, max |b|), f32.
double relative_error(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to(DType::F32).contiguous().to_vector<float>();
  const std::vector<float> y = b.to(DType::F32).contiguous().to_vector<float>();
  if (x.size() != y.size()) return INFINITY;
  double worst = 0, scale = 1;
  for (size_t i = 0; i < x.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(x[i]) - y[i]));
    scale = std::max(scale, std::abs(static_cast<double>(y[i])));
  }
  return worst / scale;
}

int same(const std::string& a_path, const std::string& b_path) {
  auto a = LatentDataset::open(a_path), b = LatentDataset::open(b_path);
  const LatentDatasetAttributes &x = a->attributes(), &y = b->attributes();
  if (x.model_family != y.model_family || x.latent_channels != y.latent_channels ||
      x.vae_scaling_factor != y.vae_scaling_factor || x.vae_shift_factor != y.vae_shift_factor ||
      x.text_encoder != y.text_encoder || x.text_embeds_encoder != y.text_embeds_encoder ||
      x.text_pooled_encoder != y.text_pooled_encoder || x.text_max_length != y.text_max_length)
    fail("root attributes");
  if (a->size() != b->size()) fail("sample count " + std::to_string(a->size()) + " vs " + std::to_string(b->size()));
  if (a->buckets().size() != b->buckets().size()) fail("bucket count");
  for (size_t i = 0; i < std::min(a->buckets().size(), b->buckets().size()); ++i)
    if (a->buckets()[i].name != b->buckets()[i].name || a->buckets()[i].n_samples != b->buckets()[i].n_samples)
      fail("bucket " + std::to_string(i) + ": " + a->buckets()[i].name + " vs " + b->buckets()[i].name);
  for (int64_t id = 0; id < std::min(a->size(), b->size()); ++id) {
    if (a->bucket_of(id) != b->bucket_of(id) || a->row_of(id) != b->row_of(id)) {
      fail("sample " + std::to_string(id) + " sits elsewhere");
      continue;
    }
    const LatentSamples s = a->read({id}), t = b->read({id});
    const std::string at = "sample " + std::to_string(id) + ": ";
    if (!same_bits(s.latents, t.latents)) fail(at + "latents");
    if (!same_bits(s.latents_logvar, t.latents_logvar)) fail(at + "latents_logvar");
    if (!same_bits(s.text_embeds, t.text_embeds)) fail(at + "text/embeds");
    if (!same_bits(s.text_pooled, t.text_pooled)) fail(at + "text/pooled");
    if (!same_bits(s.text_mask, t.text_mask)) fail(at + "text/mask");
    if (!same_bits(s.original_size, t.original_size)) fail(at + "original_size");
    if (!same_bits(s.crop, t.crop)) fail(at + "crop");
    if (!same_bits(s.flipped, t.flipped)) fail(at + "flipped");
    if (s.captions != t.captions) fail(at + "caption");
    if (s.sources != t.sources) fail(at + "source");
  }
  const auto p = a->sample_prompts(), q = b->sample_prompts();
  if (p.has_value() != q.has_value()) fail("sample prompts present in one file only");
  if (p && q &&
      (p->captions != q->captions || !same_bits(p->embeds, q->embeds) || !same_bits(p->pooled, q->pooled) ||
       !same_bits(p->mask, q->mask)))
    fail("sample prompts");
  std::printf("%s and %s: %lld samples, %s\n", a_path.c_str(), b_path.c_str(), static_cast<long long>(a->size()),
              failures == 0 ? "the same contents" : "DIFFERENT");
  return failures == 0 ? 0 : 1;
}

int list(const std::string& path) {
  auto ds = LatentDataset::open(path);
  for (int64_t id = 0; id < ds->size(); ++id) {
    const LatentSamples s = ds->read({id});
    const auto size = s.original_size.to_vector<int64_t>();
    const auto crop = s.crop.to_vector<int64_t>();
    std::printf("%lld %s %s %lldx%lld crop %lld,%lld flip %d | %s\n", static_cast<long long>(id),
                ds->buckets()[static_cast<size_t>(ds->bucket_of(id))].name.c_str(), s.sources[0].c_str(),
                static_cast<long long>(size[0]), static_cast<long long>(size[1]), static_cast<long long>(crop[0]),
                static_cast<long long>(crop[1]), s.flipped.to_vector<uint8_t>()[0], s.captions[0].c_str());
  }
  return 0;
}

int recompute(char** argv) {
  const std::string path = argv[0], image_dir = argv[1];
  auto ds = LatentDataset::open(path);
  vae::LoadedVae vae =
      vae::load_vae(argv[2], {.normalization = vae::ModelNormalization{flux::kVaeNormalization, "flux"}});
  auto encoders = flux::FluxTextEncoders::from_files(
      {.clip_l = argv[3], .t5 = argv[4], .clip_vocab = argv[5], .t5_tokenizer = argv[6]});
  const int64_t t5_length = std::stoll(argv[7]);
  const BucketPlanner planner(
      {.resolution = std::stoll(argv[8]), .step = std::stoll(argv[9]), .divisor = 2 * vae.model->config().downscale()});
  double worst_mean = 0, worst_logvar = 0, worst_embeds = 0, worst_pooled = 0;
  for (int64_t id = 0; id < ds->size(); ++id) {
    const LatentSamples s = ds->read({id});
    const std::string at = "sample " + std::to_string(id) + " (" + s.sources[0] + "): ";
    const Image rgb = load_image(image_dir + "/" + s.sources[0]);
    const bool flipped = s.flipped.to_vector<uint8_t>()[0] != 0;
    const BucketPlacement p = planner.place(rgb.height, rgb.width, {.flip = flipped});
    const auto size = s.original_size.to_vector<int64_t>();
    const auto crop = s.crop.to_vector<int64_t>();
    if (size != std::vector<int64_t>{rgb.height, rgb.width}) fail(at + "original_size");
    if (crop != std::vector<int64_t>{p.crop_top, p.crop_left}) fail(at + "crop");
    const int64_t f = vae.model->config().downscale();
    if (s.latents.size(2) * f != p.bucket.height || s.latents.size(3) * f != p.bucket.width) fail(at + "bucket");
    Tensor pixels = image_to_tensor(fit_to_bucket(rgb, p));
    const vae::VaeMoments m = vae.model->encode(pixels.view({1, 3, p.bucket.height, p.bucket.width}));
    if (m.mean.shape() != s.latents.shape()) {
      fail(at + "latent shape");
      continue;
    }
    worst_mean = std::max(worst_mean, relative_error(s.latents, m.mean));
    if (s.latents_logvar.defined()) worst_logvar = std::max(worst_logvar, relative_error(s.latents_logvar, m.logvar));
    const text::PromptEmbeddings e = flux::encode_flux_prompts(encoders, s.captions, {.t5_length = t5_length});
    worst_embeds = std::max(worst_embeds, relative_error(s.text_embeds, e.context));
    worst_pooled = std::max(worst_pooled, relative_error(s.text_pooled, e.pooled));
    if (!same_bits(s.text_mask, e.mask.to(DType::U8))) fail(at + "text/mask");
  }
  if (auto prompts = ds->sample_prompts()) {
    const text::PromptEmbeddings e = flux::encode_flux_prompts(encoders, prompts->captions, {.t5_length = t5_length});
    worst_embeds = std::max(worst_embeds, relative_error(prompts->embeds, e.context));
    worst_pooled = std::max(worst_pooled, relative_error(prompts->pooled, e.pooled));
  }
  // f16 storage: a relative rounding of 2^-11 of each value; the batched VAE and text calls agree with these
  // one-at-a-time calls far below that.
  const double bound = 1e-3;
  std::printf("recomputed %lld samples: mean %.2e, logvar %.2e, embeds %.2e, pooled %.2e (bound %.0e)\n",
              static_cast<long long>(ds->size()), worst_mean, worst_logvar, worst_embeds, worst_pooled, bound);
  for (double worst : {worst_mean, worst_logvar, worst_embeds, worst_pooled})
    if (!(worst <= bound)) fail("a value is off by more than the bound");
  return failures == 0 ? 0 : 1;
}

int batches(const std::string& path, int64_t global_batch, uint64_t seed) {
  auto dataset = LatentDataset::open(path);
  std::vector<int64_t> ids, bucket_of;
  for (int64_t id = 0; id < dataset->size(); ++id) {
    ids.push_back(id);
    bucket_of.push_back(dataset->bucket_of(id));
  }
  if (global_batch % 2 != 0) {
    fail("GLOBAL_BATCH must be even (2 ranks)");
    return 1;
  }
  const DistributedSampler one(ids, bucket_of, {.seed = seed, .rank = 0, .world = 1, .batch_size = global_batch});
  const DistributedSampler rank0(ids, bucket_of, {.seed = seed, .rank = 0, .world = 2, .batch_size = global_batch / 2});
  const DistributedSampler rank1(ids, bucket_of, {.seed = seed, .rank = 1, .world = 2, .batch_size = global_batch / 2});
  if (rank0.batches_per_epoch() != one.batches_per_epoch() || rank1.batches_per_epoch() != one.batches_per_epoch())
    fail("2 ranks take another number of batches per epoch than 1 rank");
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    std::vector<bool> seen(static_cast<size_t>(dataset->size()), false);
    std::string order;
    for (int64_t b = 0; b < one.batches_per_epoch(); ++b) {
      const std::vector<int64_t> global = one.rank_batch(epoch, b);
      const std::vector<int64_t> r0 = rank0.rank_batch(epoch, b), r1 = rank1.rank_batch(epoch, b);
      std::vector<int64_t> joined;  // rank r holds positions r, r + 2, ...
      for (size_t i = 0; i < r0.size(); ++i) joined.insert(joined.end(), {r0[i], r1[i]});
      if (joined != global)
        fail("epoch " + std::to_string(epoch) + " batch " + std::to_string(b) +
             ": the 2 ranks' ids are not the 1-rank global batch");
      const int64_t bucket = dataset->bucket_of(global.front());
      for (int64_t id : global) {
        seen[static_cast<size_t>(id)] = true;
        if (dataset->bucket_of(id) != bucket)
          fail("epoch " + std::to_string(epoch) + " batch " + std::to_string(b) + " mixes buckets");
      }
      order += " " + dataset->buckets()[static_cast<size_t>(bucket)].name;
    }
    if (std::find(seen.begin(), seen.end(), false) != seen.end())
      fail("epoch " + std::to_string(epoch) + " leaves a sample out");
    std::printf("epoch %lld: %lld global batches of %lld, buckets:%s\n", static_cast<long long>(epoch),
                static_cast<long long>(one.batches_per_epoch()), static_cast<long long>(global_batch), order.c_str());
  }
  if (one.epoch_order(0) == one.epoch_order(1)) fail("epochs 0 and 1 have the same order");
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace wick

int main(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  try {
    if (command == "same" && argc == 4) return wick::same(argv[2], argv[3]);
    if (command == "list" && argc == 3) return wick::list(argv[2]);
    if (command == "batches" && argc == 5)
      return wick::batches(argv[2], std::stoll(argv[3]), static_cast<uint64_t>(std::stoull(argv[4])));
    if (command == "recompute" && argc == 12) return wick::recompute(argv + 2);
  } catch (const std::exception& error) {
    std::printf("error: %s\n", error.what());
    return 1;
  }
  std::fprintf(stderr,
               "usage: %s same A B | list FILE | batches FILE GLOBAL_BATCH SEED | recompute FILE IMAGE_DIR VAE CLIP_L T5 "
               "VOCAB SPIECE T5_LENGTH RESOLUTION STEP\n",
               argv[0]);
  return 2;
}
