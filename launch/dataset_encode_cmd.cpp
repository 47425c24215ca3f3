// `wick dataset encode IMAGE_DIR --model MODEL (--path PIPELINE | --vae F --clip-l F [--clip-g F] [--t5 F]
// --clip-vocab P [--t5-tokenizer P]) --out FILE.h5 [options]`: a folder of images and captions -> a cached-latent
// dataset (models/data/dataset_encode.h, docs/dataset.md "Encoding a folder"). MODEL is any registered architecture
// with a DatasetSpec; the text-encoder files and prompt options are theirs (launch/prompt_args.h).
//
//   wick dataset encode photos --model flux --path FLUX.1-dev --resolution 1024 --trigger-word ohwx
//        --device cuda --out data/photos.h5
//   mpirun -np 4 wick dataset encode photos --model sdxl --path sdxl-base --device cuda --out data/photos.h5
//
// Exit status 0 (skipped images are warnings), 2 bad command line or options (also: <out> exists, or an
// interrupted run with other options), 3 no readable image or a bad weights file. Under mpirun a failing rank
// ends every rank with its status (comm::exit_after_failure).
#include <cstdio>
#include <memory>
#include <string>

#include "comm/launch_env.h"
#include "launch/commands.h"
#include "launch/prompt_args.h"
#include "models/registry.h"
#include "models/data/dataset_encode.h"
#include "runtime/error.h"

namespace wick::launch {
namespace {

struct EncodeArgs {
  DatasetEncodeOptions options;
  PromptArgs text;
  std::string device = "cpu", dtype, latents = "distribution", config;
  std::string caption_ext = ".txt";
  bool random_crop = false, center_crop = false, no_progress = false;
};

void run_dataset_encode(EncodeArgs& args) {
  std::shared_ptr<comm::ProcessGroup> group;
  report_errors([&] {
    DatasetEncodeOptions& o = args.options;
    o.device = parse_device(args.device);
    if (o.device.is_cuda())
      WICK_CHECK_KIND(Config, cuda_device_count() > 0, "dataset encode: --device ", args.device,
                      ": no CUDA device is visible");
    if (!args.dtype.empty()) o.dtype = parse_dtype(args.dtype);
    o.latents = parse_stored_latents(args.latents);
    o.random_crop = args.random_crop;
    o.captions.extension = args.caption_ext;
    o.progress = !args.no_progress;
    if (!args.config.empty()) take_training_config(o, args.config);
    o.prompts = prompt_request(args.text, find_encodable_architecture(o.model, "dataset encode: --model"));
    // Ranks only wait for each other (no data moves between them): MPI under a launcher, no timeout, since
    // a rank may encode for hours before the others need it; a failing rank aborts the job instead.
    if (comm::detect_launch_env().world_size > 1) group = comm::make_process_group("mpi", Device::cpu(), 0);
    const DatasetEncodeSummary s = encode_image_folder(o, group.get());
    if (group && group->rank() != 0) return;
    if (!s.skipped.empty()) {
      std::fprintf(stderr, "wick dataset encode: %zu image%s skipped:\n", s.skipped.size(),
                   s.skipped.size() == 1 ? "" : "s");
      for (const std::string& line : s.skipped) std::fprintf(stderr, "  %s\n", line.c_str());
    }
    std::printf("wrote %s: %lld samples from %lld images (%zu skipped) in %zu buckets (latent height x width):",
                o.out.c_str(), static_cast<long long>(s.n_samples), static_cast<long long>(s.n_images),
                s.skipped.size(), s.buckets.size());
    for (const auto& [name, n] : s.buckets) std::printf(" %s (%lld)", name.c_str(), static_cast<long long>(n));
    std::printf("\n%lld chunks (%lld finished by an earlier run), %.1f s\n", static_cast<long long>(s.n_chunks),
                static_cast<long long>(s.n_chunks_resumed), s.seconds);
  }, [&] {
    return group && group->size() > 1
               ? " (rank " + std::to_string(group->rank()) + " of " + std::to_string(group->size()) + ")"
               : std::string();
  });
}

}  // namespace

void add_dataset_encode_command(CLI::App& dataset) {
  auto args = std::make_shared<EncodeArgs>();
  DatasetEncodeOptions& o = args->options;
  CLI::App* cmd = dataset.add_subcommand(
      "encode", "Encode a folder of images and captions into a cached-latent file (VAE + text encoders)");
  cmd->add_option("image_dir", o.image_dir, "folder of .jpg/.jpeg/.png/.webp images with caption files")->required();
  std::vector<std::string> models;
  for (const Architecture* arch : encodable_architectures()) models.push_back(arch->name());
  cmd->add_option("--model", o.model, encodable_architecture_names())->required()->check(CLI::IsMember(models));
  cmd->add_option("--out", o.out, "the .h5 file to write (work goes to OUT.partial/ until it is done)")->required();
  cmd->add_option("--vae", o.vae, "VAE weights (ae.safetensors, a vae/ folder, ...); overrides the pipeline's");
  add_prompt_args(*cmd, args->text);
  cmd->add_option("--config", args->config,
                  "training config: its sample.prompts go into the file, its trigger_word is used unless given");

  cmd->add_option("--resolution", o.buckets.resolution, "bucket area: resolution^2 pixels")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{16}, int64_t{16384}));
  cmd->add_option("--bucket-step", o.buckets.step, "bucket sides are multiples of this (kohya's bucket_reso_steps)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--min-side", o.buckets.min_side, "shortest bucket side (default resolution / 2)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-side", o.buckets.max_side, "longest bucket side (default 2 x resolution)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-aspect", o.buckets.max_aspect, "largest long side / short side of a bucket (0: no limit)")
      ->capture_default_str();
  cmd->add_flag("--no-upscale", o.buckets.no_upscale, "kohya's bucket_no_upscale: one bucket per image size, never enlarged");
  CLI::Option* center = cmd->add_flag("--center-crop", args->center_crop, "crop the centre of the resized image (default)");
  CLI::Option* random = cmd->add_flag("--random-crop", args->random_crop, "crop a random window (Philox, --seed)");
  center->excludes(random);
  cmd->add_option("--seed", o.seed, "seed of the random crops")->capture_default_str();
  cmd->add_flag("--flip", o.flip, "also store every image mirrored left-right (a second sample)");

  cmd->add_option("--caption-ext", args->caption_ext, "caption file extension (then .caption is tried)")
      ->capture_default_str();
  cmd->add_option("--default-caption", o.captions.default_caption, "caption of images without a caption file");
  cmd->add_option("--trigger-word", o.captions.trigger_word,
                  "replaces [trigger] and [name]; put in front of captions that lack it");
  cmd->add_flag("--allow-empty-captions", o.allow_empty_captions,
                "images without a caption are intended (no warning about them)");
  cmd->add_option("--max-image-pixels", o.max_image_pixels,
                  "skip images with more pixels than this (a decompression bomb guard; 0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--latents", args->latents,
                  "distribution: the VAE's mean and logvar (training samples from them); mean: the mean only")
      ->capture_default_str()
      ->check(CLI::IsMember({"distribution", "mean"}));
  cmd->add_option("--batch-size", o.batch_size, "images per VAE call, captions per text encoder call")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_option("--vae-tile-size", o.tiling.tile_size,
                  "encode images with a side over this many pixels in tiles (0: never; default 2048 on cuda, 512 on cpu)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--vae-tile-overlap", o.tiling.overlap, "pixels shared by neighbouring tiles (default tile / 4)");
  cmd->add_option("--chunk-size", o.chunk_size, "images per resumable chunk (and per unit of work between ranks)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--device", args->device, "cpu or cuda[:N] (under mpirun: each rank its node-local GPU)")
      ->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "f32 or bf16 (default: bf16 on cuda, f32 on cpu)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  cmd->add_flag("--force", o.force, "replace an existing --out file");
  cmd->add_flag("--no-progress", args->no_progress, "no progress bars");
  cmd->callback([args] { run_dataset_encode(*args); });
}

}  // namespace wick::launch
