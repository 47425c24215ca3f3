// `wick sample RUN_DIR|CONFIG.yaml --prompt TEXT [--prompt ...] [--n 4] [--steps N] [--guidance G]
// [--seed S] [--width W --height H] [--lora PATH] [--set key=value ...] --out FILE.png`: a labelled grid of
// generated images, one row per prompt, made by the run's architecture's sampler (models/image_sampler.h).
//
//   wick sample output/quickstart --prompt "Bag" --prompt "Trouser" --n 8 --out bags.png
//   wick sample output/quickstart_lora --prompt "Ankle boot" --out boots.png     # base + the run's LoRA
//   wick sample output/flux_lora --prompt "a photo of [trigger]" --n 2 --width 768 --out me.png   # Flux
//   wick sample output/flux_lora --prompt "[trigger] in Paris" --set model.t5_path=t5xxl_fp16.safetensors ...
//   wick sample output/sd35_lora --prompt "a photo of [trigger]" --guidance 5 --set sample.negative_prompt=blurry ...
//   wick sample output/sdxl_lora --prompt "a photo of [trigger]" --steps 30 --width 832 --height 1216 --out me.png
//
// --set overrides a key of the run's config for this command (the text encoders of a run that trained
// with the dataset's stored sample prompts only, keep_encoders_loaded, ...).
// Steps, guidance, seed and size default to the run's sample section. Image k of prompt p starts from
// noise index p·n + k of the seed (models/diffusion/generate.h).
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/logging/image.h"
#include "launch/commands.h"
#include "models/diffusion/generate.h"
#include "models/diffusion/sampling_watch.h"
#include "runtime/error.h"

namespace wick::launch {
namespace {

struct SampleArgs {
  std::string source, lora, out;
  std::vector<std::string> prompts, sets;
  int64_t n = 4;
  int64_t steps = 0;       // 0: the run's sample.steps
  double guidance = -1.0;  // < 0: the run's sample.guidance
  int64_t seed = -1;       // < 0: the run's sample.seed
  int64_t width = 0, height = 0;  // 0: the run's sample.width / height
  int64_t scale = 0;       // 0: 3 for images up to 64 pixels wide, else 1
};

void run_sample(const SampleArgs& args) {
  WICK_CHECK_KIND(Config, !args.prompts.empty(), "sample: give at least one --prompt");
  TrainedRun run = locate_run(args.source, args.lora, args.sets);
  std::unique_ptr<ImageSampler> sampler = make_run_sampler(run);
  std::shared_ptr<DiffusionModel> model = build_trained_model(run, true);
  SampleSettings settings = sample_settings(run.config.sample);
  if (args.steps > 0) settings.steps = args.steps;
  if (args.guidance >= 0.0) settings.guidance = args.guidance;
  if (args.seed >= 0) settings.seed = static_cast<uint64_t>(args.seed);
  if (args.width > 0) settings.width = args.width;
  if (args.height > 0) settings.height = args.height;
  std::vector<std::string> captions;
  for (const std::string& prompt : args.prompts)
    for (int64_t k = 0; k < args.n; ++k) captions.push_back(prompt);
  std::fprintf(stderr, "wick sample: %s%s%s, %zu prompt%s x %lld, %lld steps, guidance %g, seed %llu, %s; %s\n",
               run.base_weights.c_str(), run.lora.empty() ? "" : " + ", run.lora.c_str(), args.prompts.size(),
               args.prompts.size() == 1 ? "" : "s", static_cast<long long>(args.n),
               static_cast<long long>(settings.steps), settings.guidance,
               static_cast<unsigned long long>(settings.seed), run.device.str().c_str(), sampler->describe().c_str());
  // Progress: on a terminal each denoising step in place; in a log a line at each quarter of a batch's steps.
  const bool terminal = ::isatty(::fileno(stderr));
  diffusion::SamplingWatchScope watch([terminal](int64_t k, int64_t steps) {
    if (terminal) {
      std::fprintf(stderr, "\rwick sample: step %lld/%lld ", static_cast<long long>(k), static_cast<long long>(steps));
      if (k == steps) std::fprintf(stderr, "\n");
    } else if (k == steps || (4 * k) / steps != (4 * (k - 1)) / steps) {
      std::fprintf(stderr, "wick sample: step %lld/%lld\n", static_cast<long long>(k), static_cast<long long>(steps));
    }
  });
  Tensor images = sampler->generate(*model, captions, settings);
  const int64_t scale = args.scale > 0 ? args.scale : images.size(3) <= 64 ? 3 : 1;
  Image grid = make_image_grid(images, {.n_columns = args.n, .scale = scale, .value_min = 0.0f, .value_max = 1.0f,
                                        .labels = captions, .label_scale = images.size(3) >= 512 ? 2 : 1});
  save_png(grid, args.out);
  std::printf("wrote %s: %lld images (%zu rows of %lld)\n", args.out.c_str(), static_cast<long long>(images.size(0)),
              args.prompts.size(), static_cast<long long>(args.n));
}

}  // namespace

void add_sample_command(CLI::App& app) {
  auto args = std::make_shared<SampleArgs>();
  CLI::App* sample = app.add_subcommand("sample", "Generate a labelled image grid from a trained run (one row per prompt)");
  sample->add_option("run", args->source, "run directory (output/<name>) or the run's config file")->required();
  sample->add_option("--prompt", args->prompts, "caption to generate (repeatable; \"\" = unconditional)")
      ->required()
      ->allow_extra_args(false)
      ->take_all();
  sample->add_option("--n", args->n, "images per prompt")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{256}));
  sample->add_option("--steps", args->steps, "sampler steps (default: the run's sample.steps)")
      ->check(CLI::Range(int64_t{1}, int64_t{1000}));
  sample->add_option("--guidance", args->guidance,
                     "classifier-free guidance scale (SD3, SDXL, the DiT), 1 = none; Flux dev: its guidance input "
                     "(default: sample.guidance)")
      ->check(CLI::Range(0.0, 1e6));
  sample->add_option("--seed", args->seed, "noise seed (default: sample.seed)")->check(CLI::NonNegativeNumber);
  sample->add_option("--width", args->width, "image width in pixels, Flux, SD3 and SDXL (default: sample.width, else the "
                     "dataset's first bucket)")
      ->check(CLI::Range(int64_t{1}, int64_t{8192}));
  sample->add_option("--height", args->height, "image height in pixels, Flux, SD3 and SDXL (default: sample.height, else the "
                     "dataset's first bucket)")
      ->check(CLI::Range(int64_t{1}, int64_t{8192}));
  sample->add_option("--lora", args->lora, "LoRA/DoRA file written by wick train (replaces the run's own)");
  sample->add_option("--scale", args->scale,
                     "pixels per image pixel in the grid (default: 3 for images up to 64 pixels wide, else 1)")
      ->check(CLI::Range(int64_t{1}, int64_t{16}));
  sample->add_option("--set", args->sets,
                     "override a key of the run's config: --set model.t5_path=t5xxl_fp16.safetensors (repeatable)")
      ->allow_extra_args(false);
  sample->add_option("--out", args->out, "PNG file to write")->required();
  sample->callback([args] { run_sample(*args); });
}

}  // namespace wick::launch
