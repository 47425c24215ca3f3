#include "models/data/dataset_encode.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <utility>
#include <variant>

#include <nlohmann/json.hpp>

#include "comm/rank_layout.h"
#include "engine/data/image_folder.h"
#include "engine/data/latent_dataset.h"
#include "engine/progress.h"
#include "models/data/encode_chunks.h"
#include "models/registry.h"
#include "models/vae/image_vae.h"
#include "runtime/cpu/parallel.h"
#include "runtime/error.h"

namespace wick {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using encode::ChunkSample;
using encode::EncodeWorkDir;
using encode::LatentChunk;
using encode::TextChunk;

constexpr const char* kWho = "wick dataset encode";

std::string dump(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

void warn(const std::string& message) { std::fprintf(stderr, "%s: warning: %s\n", kWho, message.c_str()); }

struct Ranks {
  comm::ProcessGroup* group = nullptr;
  int rank = 0, world = 1;
  bool root() const { return rank == 0; }
  void barrier() const {
    if (group && world > 1) group->barrier();
  }
};

// The images of the folder, the buckets and everything a resumed run must agree on.
struct Job {
  Job(const DatasetEncodeOptions& o, Ranks r, DatasetSpec s)
      : options(o), ranks(r), spec(std::move(s)), dir(o.out + ".partial") {}
  const DatasetEncodeOptions& options;
  Ranks ranks;
  std::string model;            // the architecture's canonical name
  DatasetSpec spec;             // the architecture's
  ModelOptions prompt_options;  // its prompt options, defaults filled
  std::string vae_path;
  std::unique_ptr<vae::ImageVae> vae;  // the architecture's (open_dataset_vae), loaded by the first encode
  std::unique_ptr<BucketPlanner> planner;
  std::vector<ImageFolderEntry> images;
  std::vector<std::string> scan_warnings;
  int64_t n_listed = 0, n_chunks = 0;
  DType dtype = DType::F32;
  Device device = Device::cpu();
  vae::VaeTiling tiling;                    // tile_size resolved for the device
  mutable bool told_untiled = false;        // the VAE cannot tile, and that was said once
  std::vector<std::string> sample_prompts;  // trigger word applied
  EncodeWorkDir dir;

  std::pair<int64_t, int64_t> chunk_images(int64_t chunk) const {
    const int64_t first = chunk * options.chunk_size;
    return {first, std::min<int64_t>(first + options.chunk_size, static_cast<int64_t>(images.size()))};
  }
  bool mine(int64_t chunk) const { return chunk % ranks.world == ranks.rank; }
};

void check_options(const DatasetEncodeOptions& o) {
  WICK_CHECK_KIND(Config, !o.out.empty(), kWho, ": --out is required");
  WICK_CHECK_KIND(Config, !o.image_dir.empty(), kWho, ": the image folder is required");
  WICK_CHECK_KIND(Config, !o.vae.empty() || !o.prompts.pipeline.empty(), kWho,
                  ": give a diffusers pipeline folder (--path) or the VAE weights (--vae)");
  WICK_CHECK_KIND(Config, o.batch_size >= 1, kWho, ": --batch-size must be at least 1, got ", o.batch_size);
  WICK_CHECK_KIND(Config, o.chunk_size >= 1, kWho, ": --chunk-size must be at least 1, got ", o.chunk_size);
  WICK_CHECK_KIND(Config, o.tiling.tile_size >= -1, kWho,
                  ": --vae-tile-size must be >= 0 (0: never tile), or -1 (the device's default)");
}

DType resolve_dtype(const DatasetEncodeOptions& o, Device device) {
  const DType d = o.dtype ? *o.dtype : device.is_cuda() ? DType::BF16 : DType::F32;
  WICK_CHECK_KIND(Config, d == DType::F32 || d == DType::BF16, kWho, ": --dtype ", dtype_name(d),
                  " is not supported: use f32 or bf16 (the SDXL VAE and T5-XXL overflow f16)");
  return d;
}

// The JSON a resumed run must reproduce exactly: every option that changes the file, and the images
// (path, size as decoded, bytes on disk, caption). The device is not in it (a run may continue on another).
std::string make_plan(const Job& job) {
  const DatasetEncodeOptions& o = job.options;
  const text::PromptEncoderRequest& p = o.prompts;
  const BucketOptions& b = job.planner->options();
  json images = json::array();
  for (const ImageFolderEntry& e : job.images) {
    std::error_code ec;
    const auto bytes = static_cast<int64_t>(fs::file_size(e.path, ec));
    images.push_back({e.relative_path, e.header.height, e.header.width, ec ? -1 : bytes,
                      e.caption.texts.empty() ? "" : e.caption.texts[0]});
  }
  json plan = {
      {"version", 1},
      {"model", job.model},
      {"vae", job.vae_path},
      {"pipeline", p.pipeline},
      {"resolution", b.resolution},
      {"bucket_step", b.step},
      {"min_side", b.min_side},
      {"max_side", b.max_side},
      {"max_aspect", b.max_aspect},
      {"no_upscale", b.no_upscale},
      {"crop", o.random_crop ? "random" : "center"},
      {"seed", o.seed},
      {"flip", o.flip},
      {"latents", stored_latents_name(o.latents)},
      {"dtype", dtype_name(job.dtype)},
      {"batch_size", o.batch_size},  // the VAE's and the text encoders' batches: their rounding
      {"vae_tile_size", job.tiling.tile_size},
      {"vae_tile_overlap", o.tiling.overlap},
      {"chunk_size", o.chunk_size},
      {"sample_prompts", job.sample_prompts},
      {"images", images}};
  for (const text::PromptPart& part : job.spec.prompts.parts) plan[part.name] = text::prompt_file(p, part.name);
  for (const auto& [name, value] : job.prompt_options.values())
    plan[name] = std::visit([](const auto& v) { return json(v); }, value);
  return dump(plan);
}

// What differs between the plan of the work folder and this run's, for the error message.
std::string plan_difference(const std::string& before_text, const std::string& now_text) {
  const json before = json::parse(before_text, nullptr, false), now = json::parse(now_text);
  if (before.is_discarded() || !before.is_object()) return "the plan file is not readable";
  std::vector<std::string> differences;
  for (const auto& [key, value] : now.items()) {
    if (!before.contains(key)) {
      differences.push_back(key + " is new");
    } else if (before.at(key) != value && key != "images") {
      differences.push_back(key + " was " + dump(before.at(key)) + ", now " + dump(value));
    } else if (before.at(key) != value) {
      const json& old_images = before.at(key);
      for (size_t i = 0; i < std::max(old_images.size(), value.size()); ++i) {
        if (i < old_images.size() && i < value.size() && old_images[i] == value[i]) continue;
        differences.push_back("the folder changed at image " + std::to_string(i) + ": was " +
                              (i < old_images.size() ? dump(old_images[i]) : "none") + ", now " +
                              (i < value.size() ? dump(value[i]) : "none") + " ([path, height, width, bytes, caption])");
        break;
      }
    }
  }
  std::string text;
  for (const std::string& d : differences) text += (text.empty() ? "" : "; ") + d;
  return text.empty() ? "the plans differ" : text;
}

// Rank 0 makes the work folder and its plan, or checks an existing one; every rank then reads it back.
struct Resumed {
  int64_t latents = 0, whole = 0;  // chunks through the VAE, and through both
};

Resumed prepare_work_dir(const Job& job, const std::string& plan) {
  Resumed resumed;
  if (job.ranks.root()) {
    std::optional<std::string> before;
    if (job.dir.exists()) before = job.dir.read_plan();
    if (before && *before != plan && job.dir.n_committed_chunk_files() == 0) {
      warn(job.dir.path() + " holds an interrupted run with other options that finished no chunk: started over");
      job.dir.remove();
      before.reset();
    }
    if (before) {
      WICK_CHECK_KIND(Config, *before == plan, kWho, ": ", job.dir.path(),
                      " holds an interrupted run with other options or images (", plan_difference(*before, plan),
                      "): run with the same options to continue it, or delete the folder to start over");
    } else {
      job.dir.create();
      job.dir.write_plan(plan);
    }
  }
  job.ranks.barrier();
  if (!job.ranks.root()) {
    std::optional<std::string> seen = job.dir.read_plan();
    WICK_CHECK_KIND(Data, seen && *seen == plan, kWho, ": rank ", job.ranks.rank, " does not see the plan rank 0 "
                    "wrote in ", job.dir.path(), " (the image folder and --out must be on a file system every rank "
                    "shares, with the same contents)");
  }
  if (job.ranks.root())
    for (int64_t c = 0; c < job.n_chunks; ++c) {
      const bool latents = fs::exists(job.dir.latents_file(c));
      resumed.latents += latents ? 1 : 0;
      resumed.whole += latents && fs::exists(job.dir.text_file(c)) ? 1 : 0;
    }
  return resumed;
}

// A [n, ...] tensor of the rows (all of one shape and dtype, contiguous, CPU) stacked.
Tensor stack_rows(const std::vector<Tensor>& rows) {
  Shape shape = rows.front().shape();
  shape.insert(shape.begin(), static_cast<int64_t>(rows.size()));
  Tensor out = Tensor::empty(shape, rows.front().dtype());
  const size_t bytes = static_cast<size_t>(rows.front().numel()) * dtype_size(rows.front().dtype());
  auto* dst = static_cast<uint8_t*>(out.data());
  for (size_t i = 0; i < rows.size(); ++i) {
    WICK_CHECK(rows[i].shape() == rows.front().shape() && rows[i].dtype() == rows.front().dtype(),
               "stack_rows: row ", i, " is ", rows[i].describe(), ", row 0 ", rows.front().describe());
    const Tensor row = rows[i].contiguous();
    std::memcpy(dst + i * bytes, row.data(), bytes);
  }
  return out;
}

// ---- phase 1: images through the VAE ----

struct Fitted {
  ChunkSample sample;
  Image image;
};

// Decodes, buckets, crops (and mirrors) the images [first, last) on the CPU's threads. An image that
// fails becomes a "<path>: <reason>" line in `skipped`.
std::vector<Fitted> fit_images(const Job& job, int64_t first, int64_t last, std::vector<std::string>& skipped) {
  const DatasetEncodeOptions& o = job.options;
  const int64_t n = last - first;
  std::vector<std::vector<Fitted>> fitted(static_cast<size_t>(n));
  std::vector<std::string> errors(static_cast<size_t>(n));
  cpu::parallel_for(
      n,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const ImageFolderEntry& e = job.images[static_cast<size_t>(first + i)];
          try {
            const Image rgb = load_image(e.path, {.max_pixels = o.max_image_pixels});
            WICK_CHECK_KIND(Data, rgb.height == e.header.height && rgb.width == e.header.width, e.path, ": decoded ",
                            rgb.height, "x", rgb.width, " but the header said ", e.header.height, "x",
                            e.header.width);
            for (bool flip : {false, true}) {
              if (flip && !o.flip) break;
              const BucketPlacement placement =
                  job.planner->place(rgb.height, rgb.width,
                                     {.random = o.random_crop, .seed = o.seed,
                                      .sample_key = static_cast<uint64_t>(first + i), .epoch = 0, .flip = flip});
              fitted[static_cast<size_t>(i)].push_back(
                  {{.image = first + i,
                    .source = e.relative_path,
                    .caption = e.caption.texts.empty() ? "" : e.caption.texts[0],
                    .placement = placement},
                   fit_to_bucket(rgb, placement)});
            }
          } catch (const WickError& error) {
            errors[static_cast<size_t>(i)] = error.what();
          } catch (const std::exception& error) {
            errors[static_cast<size_t>(i)] = e.path + ": " + error.what();
          }
        }
      },
      1);
  std::vector<Fitted> out;
  for (int64_t i = 0; i < n; ++i) {
    if (!errors[static_cast<size_t>(i)].empty()) {
      skipped.push_back(errors[static_cast<size_t>(i)]);
      warn("skipped " + errors[static_cast<size_t>(i)]);
      continue;
    }
    for (Fitted& f : fitted[static_cast<size_t>(i)]) out.push_back(std::move(f));
  }
  return out;
}

// Once per run: a VAE without tiling (the Wan VAE) encodes images larger than --vae-tile-size whole.
void warn_if_untiled(const Job& job, const Bucket& bucket) {
  const int64_t tile = job.tiling.tile_size;
  if (job.vae->info().tiling || job.told_untiled || tile <= 0 || (bucket.height <= tile && bucket.width <= tile))
    return;
  job.told_untiled = true;
  warn("the VAE (" + job.vae->info().source + ") cannot tile: images larger than --vae-tile-size " +
       std::to_string(tile) + " (" + std::to_string(bucket.width) + "x" + std::to_string(bucket.height) +
       " here) are encoded whole, and take memory for the whole image");
}

// One chunk through the VAE: samples grouped by bucket (in order of first appearance), batch_size per
// call; per sample the mean and (kept or not) logvar in f16 on the CPU.
LatentChunk encode_latent_chunk(const Job& job, int64_t chunk, ProgressBar* bar, int64_t& done) {
  const DatasetEncodeOptions& o = job.options;
  const auto [first, last] = job.chunk_images(chunk);
  LatentChunk out;
  std::vector<Fitted> fitted = fit_images(job, first, last, out.skipped);
  done += static_cast<int64_t>(last - first - static_cast<int64_t>(fitted.size()) / (o.flip ? 2 : 1)) *
          (o.flip ? 2 : 1);
  const vae::ImageVaeInfo& info = job.vae->info();
  out.latent_channels = info.z_channels;
  out.scaling_factor = info.scaling_factor;
  out.shift_factor = info.shift_factor;
  out.channel_mean = info.channel_mean;
  out.channel_std = info.channel_std;
  const auto n = static_cast<int64_t>(fitted.size());
  out.mean.resize(static_cast<size_t>(n));
  if (o.latents == StoredLatents::Distribution) out.logvar.resize(static_cast<size_t>(n));
  std::vector<bool> encoded(static_cast<size_t>(n), false);
  for (int64_t k = 0; k < n; ++k) {
    if (encoded[static_cast<size_t>(k)]) continue;
    const Bucket bucket = fitted[static_cast<size_t>(k)].sample.placement.bucket;
    std::vector<int64_t> group;  // this bucket's samples from k on, in order
    for (int64_t j = k; j < n; ++j)
      if (!encoded[static_cast<size_t>(j)] && fitted[static_cast<size_t>(j)].sample.placement.bucket == bucket)
        group.push_back(j);
    for (size_t start = 0; start < group.size(); start += static_cast<size_t>(o.batch_size)) {
      const size_t count = std::min(group.size() - start, static_cast<size_t>(o.batch_size));
      std::vector<Tensor> images;
      for (size_t b = 0; b < count; ++b)
        images.push_back(image_to_tensor(fitted[static_cast<size_t>(group[start + b])].image));
      warn_if_untiled(job, bucket);
      const vae::VaeMoments moments = job.vae->encode(stack_rows(images), job.tiling);
      const Tensor mean = moments.mean.to(Device::cpu()).to(DType::F16);
      const Tensor logvar = out.logvar.empty() ? Tensor() : moments.logvar.to(Device::cpu()).to(DType::F16);
      for (size_t b = 0; b < count; ++b) {
        const auto j = static_cast<size_t>(group[start + b]);
        out.mean[j] = mean.select(0, static_cast<int64_t>(b)).contiguous();
        if (logvar.defined()) out.logvar[j] = logvar.select(0, static_cast<int64_t>(b)).contiguous();
        encoded[j] = true;
        fitted[j].image = Image();  // the pixels are no longer needed
      }
      done += static_cast<int64_t>(count);
      if (bar) bar->update(done, {{"samples/s", static_cast<double>(done) / std::max(1e-9, bar->elapsed_seconds())}});
    }
  }
  for (Fitted& f : fitted) out.samples.push_back(std::move(f.sample));
  return out;
}

// ---- phase 2: captions through the text encoders ----

TextChunk encode_text_chunk(const LatentChunk& latents, const text::PromptEncoder& encoder) {
  TextChunk out;
  std::vector<std::string> unique;
  std::map<std::string, int64_t> row_of;
  for (const ChunkSample& s : latents.samples) {
    auto [it, added] = row_of.emplace(s.caption, static_cast<int64_t>(unique.size()));
    if (added) unique.push_back(s.caption);
    out.row_of.push_back(it->second);
  }
  if (unique.empty()) return out;
  const text::PromptEmbeddings e = encoder.encode(unique);
  out.embeds = e.context.to(Device::cpu()).to(DType::F16).contiguous();
  out.pooled = e.pooled.to(Device::cpu()).to(DType::F16).contiguous();
  out.mask = e.mask.to(Device::cpu()).to(DType::U8).contiguous();
  out.embeds_encoder = e.info.embeds_encoder;
  out.pooled_encoder = e.info.pooled_encoder;
  out.max_length = e.info.max_length;
  return out;
}

// ---- merge (rank 0) ----

// Appends samples [begin, end) of a chunk (one bucket) to the writer.
void append_run(LatentDatasetWriter& writer, const LatentChunk& l, const TextChunk& t, size_t begin, size_t end) {
  std::vector<Tensor> mean, logvar, embeds, pooled, mask;
  LatentSamples s;
  std::vector<int64_t> original, crop;
  std::vector<uint8_t> flipped;
  for (size_t k = begin; k < end; ++k) {
    const ChunkSample& sample = l.samples[k];
    const int64_t row = t.row_of[k];
    mean.push_back(l.mean[k]);
    if (!l.logvar.empty()) logvar.push_back(l.logvar[k]);
    embeds.push_back(t.embeds.select(0, row));
    pooled.push_back(t.pooled.select(0, row));
    mask.push_back(t.mask.select(0, row));
    s.captions.push_back(sample.caption);
    s.sources.push_back(sample.source);
    original.insert(original.end(), {sample.placement.original_height, sample.placement.original_width});
    crop.insert(crop.end(), {sample.placement.crop_top, sample.placement.crop_left});
    flipped.push_back(sample.placement.flipped ? 1 : 0);
  }
  const auto n = static_cast<int64_t>(end - begin);
  s.latents = stack_rows(mean);
  if (!logvar.empty()) s.latents_logvar = stack_rows(logvar);
  s.text_embeds = stack_rows(embeds);
  s.text_pooled = stack_rows(pooled);
  s.text_mask = stack_rows(mask);
  s.original_size = Tensor::from_vector<int64_t>(original, {n, 2});
  s.crop = Tensor::from_vector<int64_t>(crop, {n, 2});
  s.flipped = Tensor::from_vector<uint8_t>(flipped, {n});
  writer.append(s);
}

// Every chunk, in order, into <dir>/merged.h5, checked, then renamed to `out`.
void merge(const Job& job, DatasetEncodeSummary& summary) {
  const DatasetEncodeOptions& o = job.options;
  std::error_code ec;
  fs::remove(job.dir.merged_file(), ec);
  std::unique_ptr<LatentDatasetWriter> writer;
  LatentDatasetAttributes attributes;
  ProgressBar bar(job.n_chunks, "merge", stderr);
  for (int64_t c = 0; c < job.n_chunks; ++c) {
    std::optional<LatentChunk> l = job.dir.read_latents(c);
    std::optional<TextChunk> t = job.dir.read_text(c);
    WICK_CHECK_KIND(Data, l && t, kWho, ": chunk ", c, " is not finished in ", job.dir.path(),
                    " (did a rank stop early?): run the command again to finish it");
    summary.skipped.insert(summary.skipped.end(), l->skipped.begin(), l->skipped.end());
    if (l->samples.empty()) continue;
    WICK_CHECK_KIND(Data, t->row_of.size() == l->samples.size(), job.dir.text_file(c), ": ", t->row_of.size(),
                    " captions for ", l->samples.size(), " samples");
    if (!writer) {
      attributes.model_family = job.model;
      attributes.latent_channels = l->latent_channels;
      attributes.vae_scaling_factor = l->scaling_factor;
      attributes.vae_shift_factor = l->shift_factor;
      attributes.vae_latents_mean = l->channel_mean;
      attributes.vae_latents_std = l->channel_std;
      attributes.text_encoder = job.model + " text encoders (" + t->embeds_encoder + "; " + t->pooled_encoder + ")";
      attributes.text_embeds_encoder = t->embeds_encoder;
      attributes.text_pooled_encoder = t->pooled_encoder;
      attributes.text_max_length = t->max_length;
      attributes.trigger_word = job.options.captions.trigger_word;
      writer = std::make_unique<LatentDatasetWriter>(job.dir.merged_file(), attributes);
    }
    WICK_CHECK_KIND(Data, l->latent_channels == attributes.latent_channels &&
                              l->scaling_factor == attributes.vae_scaling_factor &&
                              l->shift_factor == attributes.vae_shift_factor &&
                              l->channel_mean == attributes.vae_latents_mean &&
                              l->channel_std == attributes.vae_latents_std &&
                              t->embeds_encoder == attributes.text_embeds_encoder &&
                              t->max_length == attributes.text_max_length,
                    kWho, ": chunk ", c, " was encoded with another VAE or text encoders than chunk 0's");
    size_t begin = 0;
    while (begin < l->samples.size()) {
      size_t end = begin + 1;
      while (end < l->samples.size() && l->samples[end].placement.bucket == l->samples[begin].placement.bucket) ++end;
      append_run(*writer, *l, *t, begin, end);
      begin = end;
    }
    if (o.progress) bar.update(c + 1);
  }
  if (o.progress) bar.finish();
  WICK_CHECK_KIND(Data, writer != nullptr, kWho, ": no image in ", o.image_dir, " could be encoded (",
                  job.n_listed, " found, ", summary.skipped.size(), " skipped)");
  if (!job.sample_prompts.empty()) {
    std::optional<encode::PromptChunk> prompts = job.dir.read_prompts();
    WICK_CHECK_KIND(Data, prompts.has_value(), kWho, ": the sample prompts are missing from ", job.dir.path());
    writer->set_sample_prompts(
        {.captions = prompts->captions, .embeds = prompts->embeds, .pooled = prompts->pooled, .mask = prompts->mask});
  }
  writer->close();
  writer.reset();

  // Never publish a file that does not validate.
  std::shared_ptr<LatentDataset> merged = LatentDataset::open(job.dir.merged_file());
  const ValidationReport report = merged->validate();
  if (!report.ok()) {
    std::string problems;
    for (size_t i = 0; i < std::min<size_t>(report.errors.size(), 3); ++i) problems += "; " + report.errors[i];
    WICK_FAIL(Data, kWho, ": the merged file ", job.dir.merged_file(), " does not validate", problems);
  }
  summary.n_samples = merged->size();
  for (const BucketInfo& b : merged->buckets()) summary.buckets.emplace_back(b.name, b.n_samples);
  merged.reset();
  fs::path out(o.out);
  fs::rename(job.dir.merged_file(), out, ec);
  WICK_CHECK_KIND(Data, !ec, kWho, ": cannot rename ", job.dir.merged_file(), " to ", o.out, " (", ec.message(), ")");
  job.dir.remove();
}

// Phase 1: `chunks` through the VAE, loaded by the first encode and freed at the end (before any text encoder loads).
void run_vae_phase(const Job& job, const std::vector<int64_t>& chunks) {
  if (chunks.empty()) return;
  const DatasetEncodeOptions& o = job.options;
  int64_t total = 0, done = 0;
  for (int64_t c : chunks) {
    const auto [first, last] = job.chunk_images(c);
    total += (last - first) * (o.flip ? 2 : 1);
  }
  std::unique_ptr<ProgressBar> bar;
  if (o.progress && job.ranks.root()) bar = std::make_unique<ProgressBar>(total, "vae", stderr);
  for (int64_t c : chunks) job.dir.write_latents(c, encode_latent_chunk(job, c, bar.get(), done));
  if (bar) bar->finish();
  job.vae->unload();
}

// Phase 2: the captions of `chunks` through the text encoders, each loaded once and kept until the last chunk;
// rank 0 also encodes the sample prompts. The encoders are freed at the end.
void run_text_phase(const Job& job, const std::vector<int64_t>& chunks, const text::PromptEncoder& encoder) {
  std::unique_ptr<ProgressBar> bar;
  if (job.options.progress && job.ranks.root() && !chunks.empty())
    bar = std::make_unique<ProgressBar>(static_cast<int64_t>(chunks.size()), "text", stderr);
  int64_t done = 0;
  for (int64_t c : chunks) {
    std::optional<LatentChunk> latents = job.dir.read_latents(c);
    WICK_CHECK_KIND(Data, latents.has_value(), kWho, ": ", job.dir.latents_file(c), " cannot be read back");
    job.dir.write_text(c, encode_text_chunk(*latents, encoder));
    if (bar) bar->update(++done);
  }
  if (bar) bar->finish();
  if (job.ranks.root() && !job.sample_prompts.empty()) {
    std::string warning;
    if (!job.dir.read_prompts(&warning)) {
      if (!warning.empty()) warn(warning);
      const text::PromptEmbeddings e = encoder.encode(job.sample_prompts);
      job.dir.write_prompts({.captions = job.sample_prompts,
                             .embeds = e.context.to(Device::cpu()).to(DType::F16).contiguous(),
                             .pooled = e.pooled.to(Device::cpu()).to(DType::F16).contiguous(),
                             .mask = e.mask.to(Device::cpu()).to(DType::U8).contiguous()});
    }
  }
  encoder.unload();
}

}  // namespace

const char* stored_latents_name(StoredLatents value) {
  return value == StoredLatents::Distribution ? "distribution" : "mean";
}

StoredLatents parse_stored_latents(const std::string& name) {
  if (name == "distribution") return StoredLatents::Distribution;
  if (name == "mean") return StoredLatents::Mean;
  WICK_FAIL(Config, "--latents must be distribution (mean and logvar) or mean, got '", name, "'");
}

void take_training_config(DatasetEncodeOptions& options, const std::string& config_path) {
  const TrainConfig config = parse_config_file(config_path, config_schema());
  options.sample_prompts = config.sample.prompts;
  options.negative_prompt = config.sample.negative_prompt;
  if (options.captions.trigger_word.empty()) options.captions.trigger_word = config.trigger_word;
}

DatasetEncodeSummary encode_image_folder(const DatasetEncodeOptions& options, comm::ProcessGroup* group) {
  const auto started = std::chrono::steady_clock::now();
  const Architecture& arch = find_encodable_architecture(options.model, std::string(kWho) + ": --model");
  check_options(options);
  Ranks ranks{.group = group, .rank = group ? group->rank() : 0, .world = group ? group->size() : 1};
  Job job(options, ranks, *arch.dataset_spec());
  job.model = arch.name();
  std::error_code ec;
  WICK_CHECK_KIND(Config, options.force || !fs::exists(options.out, ec), options.out, ": exists (pass --force to "
                  "replace it)");
  if (fs::path(options.out).has_parent_path()) fs::create_directories(fs::path(options.out).parent_path(), ec);

  job.device = options.device;
  if (job.device.is_cuda() && ranks.world > 1 && group)
    job.device = Device::cuda(comm::gpu_for_local_rank(group->local_rank(), cuda_device_count()));
  job.dtype = resolve_dtype(options, job.device);
  job.tiling = options.tiling;
  if (job.tiling.tile_size < 0) job.tiling.tile_size = job.device.is_cuda() ? 2048 : 512;

  // Everything that can be wrong with the weights is found now, before any work: headers only.
  job.vae_path = options.vae.empty() ? options.prompts.pipeline : options.vae;
  job.vae = arch.open_dataset_vae(job.vae_path, {.dtype = job.dtype, .device = job.device});
  const int64_t want_channels = job.spec.latent_channels;
  WICK_CHECK_KIND(Data, job.vae->info().z_channels == want_channels, job.vae_path, ": the VAE makes ",
                  job.vae->info().z_channels, "-channel latents, ", job.model, " takes ", want_channels);
  text::PromptEncoderRequest prompt_request = options.prompts;
  job.prompt_options = text::resolved_options(job.spec.prompts, prompt_request);
  prompt_request.options = job.prompt_options;
  prompt_request.batch_size = options.batch_size;
  prompt_request.loading = {.device = job.device, .dtype = job.dtype, .keep_loaded = true};
  const std::unique_ptr<text::PromptEncoder> encoder = arch.make_prompt_encoder(prompt_request);
  for (const std::string& prompt : options.sample_prompts)
    job.sample_prompts.push_back(apply_trigger(prompt, options.captions.trigger_word, false));
  // Models that sample with classifier-free guidance encode the negative prompt too (DatasetSpec::negative): SD3
  // always, SDXL unless it is empty (zeros: force_zeros_for_empty_prompt).
  const std::string negative = apply_trigger(options.negative_prompt, options.captions.trigger_word, false);
  const bool stores_negative = job.spec.negative == StoredNegative::Always ||
                               (job.spec.negative == StoredNegative::WhenNotEmpty && !negative.empty());
  if (stores_negative && !job.sample_prompts.empty() &&
      std::find(job.sample_prompts.begin(), job.sample_prompts.end(), negative) == job.sample_prompts.end())
    job.sample_prompts.push_back(negative);

  BucketOptions buckets = options.buckets;
  buckets.divisor = job.vae->info().downscale * job.spec.patch;
  job.planner = std::make_unique<BucketPlanner>(buckets);

  ImageFolderScan scan = scan_image_folder(options.image_dir, {.decode = {.max_pixels = options.max_image_pixels},
                                                               .captions = options.captions});
  job.images = std::move(scan.images);
  job.scan_warnings = std::move(scan.warnings);
  job.n_listed = static_cast<int64_t>(job.images.size()) + scan.n_skipped;
  DatasetEncodeSummary summary;
  summary.skipped = job.scan_warnings;
  if (ranks.root())
    for (const std::string& w : job.scan_warnings) warn("skipped " + w);
  if (ranks.root() && !scan.uncaptioned.empty() && !options.allow_empty_captions) {
    std::string examples;
    for (size_t i = 0; i < std::min<size_t>(scan.uncaptioned.size(), 3); ++i)
      examples += (i ? ", " : "") + scan.uncaptioned[i];
    warn(std::to_string(scan.uncaptioned.size()) + " of " + std::to_string(job.images.size()) +
         " images found have no caption (no " + options.captions.extension +
         " or fallback caption file, or a blank one) and are encoded with an empty caption (" + examples +
         (scan.uncaptioned.size() > 3 ? ", ..." : "") +
         "); write caption files or give --default-caption or --trigger-word, or pass --allow-empty-captions "
         "when that is intended");
  }
  WICK_CHECK_KIND(Data, !job.images.empty(), kWho, ": no readable image in ", options.image_dir, " (",
                  scan.n_skipped, " skipped; .jpg, .jpeg, .png and .webp files are read)");
  job.n_chunks = (static_cast<int64_t>(job.images.size()) + options.chunk_size - 1) / options.chunk_size;

  summary.n_images = job.n_listed;
  summary.n_chunks = job.n_chunks;
  const Resumed resumed = prepare_work_dir(job, make_plan(job));
  summary.n_chunks_resumed = resumed.whole;
  if (ranks.root()) {
    const std::string resuming =
        resumed.latents > 0 ? ", resuming (" + std::to_string(resumed.latents) + " through the VAE and " +
                                  std::to_string(resumed.whole) + " through the text encoders before)"
                            : "";
    const std::string world = ranks.world > 1 ? ", " + std::to_string(ranks.world) + " ranks" : "";
    std::fprintf(stderr, "%s: %zu images in %s (%lld unreadable), %lld chunks of %lld%s, %s %s on %s%s\n", kWho,
                 job.images.size(), options.image_dir.c_str(), static_cast<long long>(scan.n_skipped),
                 static_cast<long long>(job.n_chunks), static_cast<long long>(options.chunk_size), resuming.c_str(),
                 job.model.c_str(), dtype_name(job.dtype), job.device.str().c_str(), world.c_str());
  }

  // This rank's chunks that are not finished: without latents, and without text (or with latents to redo).
  std::vector<int64_t> need_latents, need_text;
  for (int64_t c = 0; c < job.n_chunks; ++c) {
    if (!job.mine(c)) continue;
    std::string warning;
    const bool latents_done = job.dir.read_latents(c, &warning).has_value();
    const bool text_done = latents_done && job.dir.read_text(c, &warning).has_value();
    if (!warning.empty()) warn(warning);
    if (!latents_done) need_latents.push_back(c);
    if (!text_done) need_text.push_back(c);
  }
  run_vae_phase(job, need_latents);
  run_text_phase(job, need_text, *encoder);

  ranks.barrier();  // every chunk is finished
  if (ranks.root()) merge(job, summary);
  ranks.barrier();  // the file is in place (or rank 0 failed, and its abort ends the others)
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return summary;
}

}  // namespace wick
