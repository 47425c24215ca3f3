// `wick dataset encode`: a folder of images with caption files -> the cached-latent dataset a run of a
// registered architecture trains on (docs/dataset.md "Encoding a folder"): bucketed and cropped images
// through the VAE (mean and log-variance), captions through the model's text encoders, the config's
// sample prompts. The architecture's DatasetSpec (models/architecture.h) says what it takes.
//
//   DatasetEncodeOptions o{.image_dir = "photos", .out = "data/photos.h5", .model = "flux",
//                          .prompts = {.pipeline = "FLUX.1-dev"}};
//   o.buckets.resolution = 1024;
//   o.captions.trigger_word = "ohwx";
//   DatasetEncodeSummary s = encode_image_folder(o, group.get());   // group: nullptr, or every rank of mpirun
//
// Resumable: the work is cut into chunks of `chunk_size` images (in the folder's sorted order); each
// finished chunk is committed as files under `<out>.partial/` (safetensors written to a temporary name,
// fsynced and renamed), so a run killed at any point continues where it stopped when started again with
// the same options. Under mpirun, chunk c is encoded by rank c % world; rank 0 merges the chunks, in
// order, into `<out>` (written as `<out>.partial/merged.h5`, checked, then renamed). The result does
// not depend on the number of ranks or on interruptions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "engine/data/buckets.h"
#include "engine/data/captions.h"
#include "engine/data/image_decode.h"
#include "models/text/prompt_encoder.h"
#include "models/vae/vae_tiling.h"
#include "runtime/device.h"

namespace wick {

// What the file keeps of the VAE's distribution.
enum class StoredLatents {
  Distribution,  // latents = the mean, latents_logvar = the log-variance (training samples or takes the mean)
  Mean,          // latents = the mean only (OneTrainer's and BFL's choice)
};
// "distribution", "mean"; parse_stored_latents throws WickError (Config) listing them.
const char* stored_latents_name(StoredLatents value);
StoredLatents parse_stored_latents(const std::string& name);

struct DatasetEncodeOptions {
  std::string image_dir;  // read recursively (engine/data/image_folder.h)
  std::string out;        // the .h5 file
  std::string model;      // a registered architecture with a DatasetSpec (models/registry.h: "flux", "sd3", "sdxl")
  // The text encoders: prompts.pipeline (a diffusers pipeline folder) or prompts.files (the parts of the model's
  // DatasetSpec::prompts), prompts.options its prompt options (empty: the defaults); loading and batch_size are set
  // from the fields here.
  text::PromptEncoderRequest prompts;
  std::string vae;        // VAE weights (file, vae/ folder); "": the pipeline's vae/
  // Buckets in image pixels (kohya's rules); `divisor` is set from the VAE: its downscale factor times the
  // model's patch (DatasetSpec::patch: 2 for Flux's and SD3's 2x2 latent patches).
  BucketOptions buckets;
  bool random_crop = false;  // else centred (kohya's default)
  uint64_t seed = 42;        // random crops: Philox (seed, image index, 0, Augment)
  bool flip = false;         // also store each image mirrored left-right (a second sample)
  // Sidecar extension, default caption, trigger word (prepended when absent, as ai-toolkit).
  CaptionOptions captions;
  // Images whose caption comes out empty (no sidecar or a blank one, no default caption, no trigger word) are
  // encoded with the empty caption and counted; a warning names them unless this says it is intended.
  bool allow_empty_captions = false;
  // Images with more pixels (width x height from the header) are skipped with a warning: a decompression bomb guard;
  // 0 = no limit. Default: Pillow's 178,956,970.
  int64_t max_image_pixels = default_max_image_pixels;
  StoredLatents latents = StoredLatents::Distribution;
  // Prompts encoded into /sample_prompts ("[trigger]" and "[name]" become the trigger word).
  std::vector<std::string> sample_prompts;
  // Stored after them when the model samples with classifier-free guidance (DatasetSpec::negative), there are
  // sample prompts, and it is not one of them ("" by default, as diffusers encodes it for SD3).
  std::string negative_prompt;
  Device device = Device::cpu();  // under mpirun with CUDA: the rank's node-local GPU
  std::optional<DType> dtype;     // VAE and text encoders: f32 or bf16 (default bf16 on CUDA, f32 on the CPU)
  int64_t batch_size = 4;         // images per VAE call (one bucket each); prompts per text encoder call
  // Images with a side over tile_size pixels are encoded in tiles; 0: never; -1: 2048 on CUDA (nothing tiles at
  // resolution 1024), 512 on the CPU (whose im2col convolutions would take 18 GiB for a whole 1024² image).
  vae::VaeTiling tiling = {.tile_size = -1};
  int64_t chunk_size = 32;        // images per resumable unit (and per unit of work between ranks)
  bool force = false;             // replace an existing `out`
  bool progress = true;           // progress bars on rank 0's stderr
};

struct DatasetEncodeSummary {
  int64_t n_images = 0;   // images listed in the folder (readable or not)
  int64_t n_samples = 0;  // samples in the file (flipped copies included)
  int64_t n_chunks = 0;
  int64_t n_chunks_resumed = 0;           // chunks found finished under <out>.partial when this run started
  std::vector<std::string> skipped;       // "<path>: <reason>", every image left out (this run and resumed ones)
  std::vector<std::pair<std::string, int64_t>> buckets;  // latent bucket name -> samples
  double seconds = 0;
};

// Encodes the folder into options.out. `group` (may be null: one process) gives rank and world; every
// rank must call this with the same options, and the folder and <out>.partial must be on a file system
// every rank sees. Bad images are skipped with a warning ("<path>: <reason>") and counted. WickError
// (Config): bad options, `out` exists without force, <out>.partial made with other options or another
// folder content; (Data): no readable image, unreadable weights; a failure on one rank is the caller's to
// end every rank with (comm::exit_after_failure).
DatasetEncodeSummary encode_image_folder(const DatasetEncodeOptions& options, comm::ProcessGroup* group = nullptr);

// Takes sample.prompts, sample.negative_prompt and trigger_word from a training config (when the options do not give
// a trigger word already). WickError (Config) for a config that does not parse.
void take_training_config(DatasetEncodeOptions& options, const std::string& config_path);

}  // namespace wick
