// `wick sample RUN_DIR|CONFIG.yaml --prompt TEXT [--prompt ...] [--n 4] [--steps N] [--guidance G]
// [--seed S] [--lora PATH] --out FILE.png`: a labelled grid of generated images, one row per prompt.
//
//   wick sample output/quickstart --prompt "Bag" --prompt "Trouser" --n 8 --out bags.png
//   wick sample output/quickstart_lora --prompt "Ankle boot" --out boots.png     # base + the run's LoRA
//
// Steps, guidance and seed default to the run's sample section. Image k of prompt p starts from
// noise index p·n + k of the seed (models/diffusion/generate.h).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/logging/image.h"
#include "launch/commands.h"
#include "models/diffusion/generate.h"
#include "runtime/error.h"

namespace wick::launch {
namespace {

struct SampleArgs {
  std::string source, lora, out;
  std::vector<std::string> prompts;
  int64_t n = 4;
  int64_t steps = 0;       // 0: the run's sample.steps
  double guidance = -1.0;  // < 0: the run's sample.guidance
  int64_t seed = -1;       // < 0: the run's sample.seed
  int64_t scale = 3;
};

void run_sample(const SampleArgs& args) {
  WICK_CHECK_KIND(Config, !args.prompts.empty(), "sample: give at least one --prompt");
  TrainedRun run = locate_run(args.source, args.lora);
  std::shared_ptr<DiffusionModel> model = build_trained_model(run, true);
  const int64_t steps = args.steps > 0 ? args.steps : run.config.sample.steps;
  const double guidance = args.guidance >= 0.0 ? args.guidance : run.config.sample.guidance;
  const auto seed = static_cast<uint64_t>(args.seed >= 0 ? args.seed : run.config.sample.seed);
  std::vector<std::string> captions;
  for (const std::string& prompt : args.prompts)
    for (int64_t k = 0; k < args.n; ++k) captions.push_back(prompt);
  std::fprintf(stderr, "wick sample: %s%s%s, %zu prompt%s x %lld, %lld steps, guidance %g, seed %llu, %s\n",
               run.base_weights.c_str(), run.lora.empty() ? "" : " + ", run.lora.c_str(), args.prompts.size(),
               args.prompts.size() == 1 ? "" : "s", static_cast<long long>(args.n), static_cast<long long>(steps),
               guidance, static_cast<unsigned long long>(seed), run.device.str().c_str());
  Tensor latents = generate_latents(*model, run.config, dataset_text_encoder(*run.dataset), captions,
                                    sample_latent_shape(*run.dataset), steps, guidance, seed);
  Tensor images = latents_to_images(latents, run.dataset->attributes());
  Image grid = make_image_grid(images, {.n_columns = args.n, .scale = args.scale, .value_min = 0.0f,
                                        .value_max = 1.0f, .labels = captions});
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
  sample->add_option("--guidance", args->guidance, "classifier-free guidance scale, 1 = none (default: sample.guidance)")
      ->check(CLI::Range(0.0, 1e6));
  sample->add_option("--seed", args->seed, "noise seed (default: sample.seed)")->check(CLI::NonNegativeNumber);
  sample->add_option("--lora", args->lora, "LoRA/DoRA file written by wick train (replaces the run's own)");
  sample->add_option("--scale", args->scale, "pixels per image pixel in the grid")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{16}));
  sample->add_option("--out", args->out, "PNG file to write")->required();
  sample->callback([args] { run_sample(*args); });
}

}  // namespace wick::launch
