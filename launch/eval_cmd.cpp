// `wick eval RUN_DIR|CONFIG.yaml [--n-per-class 100] [--steps 20] [--guidance 3] [--lora PATH]
// [--out eval.json] [--classifier-arch mlp|cnn]`: generates images per class, classifies them with a
// Fashion-MNIST classifier (trained once through the Keras-like API, then reused), prints per-class
// accuracy next to the classifier's own on the real test images, what each class is mistaken for,
// pixel statistics vs the data and the quality targets (met / MISSED), and writes eval.json
// (docs/evaluation.md).
//
//   wick eval output/quickstart                    # the base: accuracy on the classes it saw
//   wick eval output/quickstart_lora               # base and base + LoRA, same noise: new class, drops
//
// With a LoRA (a lora/dora run, or --lora) the base is evaluated too, so the drop is measured on the
// same seeds. Exit status 0 whether targets are met or not (they are reported, never enforced).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "engine/data/idx.h"
#include "engine/logging/image.h"
#include "launch/commands.h"
#include "models/diffusion/evaluate.h"
#include "models/diffusion/generate.h"
#include "runtime/atomic_file.h"
#include "runtime/error.h"
#include "runtime/ops/join.h"

namespace wick::launch {
namespace {

namespace fs = std::filesystem;

struct EvalArgs {
  std::string source, lora, out, classifier, classifier_arch = "cnn";
  int64_t n_per_class = 100;
  int64_t steps = 20;
  double guidance = 3.0;
  int64_t seed = 0;
  bool retrain = false;
};

// Up to 8 images of each class, one row per class, the class name under each.
void save_class_grid(const ModelScores& m, const std::vector<std::string>& class_names, int64_t n_per_class,
                     const fs::path& path) {
  const int64_t shown = std::min<int64_t>(8, n_per_class);
  std::vector<Tensor> rows;
  std::vector<std::string> labels;
  for (size_t c = 0; c * static_cast<size_t>(n_per_class) < m.labels.size(); ++c) {
    rows.push_back(m.images.narrow(0, static_cast<int64_t>(c) * n_per_class, shown));
    int64_t label = m.labels[c * static_cast<size_t>(n_per_class)];
    for (int64_t k = 0; k < shown; ++k) labels.push_back(class_names[static_cast<size_t>(label)]);
  }
  Tensor images = concat(rows, 0);
  save_png(make_image_grid(images, {.n_columns = shown, .scale = 2, .value_min = 0.0f, .value_max = 1.0f,
                                    .labels = labels}),
           path.string());
}

void run_eval(const EvalArgs& args) {
  WICK_CHECK_KIND(Config, args.n_per_class >= 1, "eval: --n-per-class must be >= 1, got ", args.n_per_class);
  TrainedRun run = locate_run(args.source, args.lora);
  const LatentDataset& dataset = *run.dataset;
  const auto& class_names = dataset.attributes().label_names;
  WICK_CHECK_KIND(Data, dataset.has_labels() && !class_names.empty(), dataset.path(),
                  ": wick eval needs a class-labelled dataset (labels and /label_names)");
  fs::path out = args.out.empty() ? run.run_dir / "eval.json" : fs::path(args.out);
  const ClassifierArch arch = classifier_arch_from_name(args.classifier_arch);
  const char* default_file = arch == ClassifierArch::Cnn ? "fashion_cnn_classifier.safetensors"
                                                         : "fashion_classifier.safetensors";
  std::string classifier_path = args.classifier.empty()
                                    ? (fs::path(run.config.output_dir) / "classifier" / default_file).string()
                                    : args.classifier;

  std::fprintf(stderr, "wick eval: %s (weights %s%s%s), dataset %s, %s\n", args.source.c_str(),
               run.base_weights.c_str(), run.lora.empty() ? "" : ", LoRA ", run.lora.c_str(), dataset.path().c_str(),
               run.device.str().c_str());
  FashionClassifier classifier =
      load_or_train_classifier({.path = classifier_path, .arch = arch, .retrain = args.retrain, .verbose = 2});
  std::printf("classifier %s %s (%s): test accuracy %.2f%% on the 10,000 Fashion-MNIST test images",
              classifier_path.c_str(), classifier.trained ? "trained" : "loaded", args.classifier_arch.c_str(),
              100.0 * classifier.test_accuracy);
  if (classifier.trained) std::printf(" (trained in %.1fs)", classifier.train_seconds);
  std::printf("\n");

  EvalReport report;
  report.source = args.source;
  report.dataset = dataset.path();
  report.lora = run.lora;
  report.options = {.n_per_class = args.n_per_class, .steps = args.steps, .guidance = args.guidance,
                    .seed = static_cast<uint64_t>(args.seed)};
  report.classifier_path = classifier_path;
  report.classifier_arch = arch;
  report.classifier_test_accuracy = classifier.test_accuracy;
  report.classifier_test_confusion = classifier.test_confusion;
  // Classes the base saw: its training config's filter when known, else every class the LoRA did not bring.
  if (run.lora_config) report.new_labels = trained_labels(*run.lora_config, dataset);
  if (run.base_config) {
    report.seen_labels = trained_labels(*run.base_config, dataset);
  } else {
    for (int64_t k = 0; k < static_cast<int64_t>(class_names.size()); ++k)
      if (std::find(report.new_labels.begin(), report.new_labels.end(), k) == report.new_labels.end())
        report.seen_labels.push_back(k);
    std::printf("note: the base's training config was not found next to %s; taking the classes the LoRA did not "
                "train on as the base's\n", run.base_weights.c_str());
  }

  {
    std::shared_ptr<DiffusionModel> base = build_trained_model(run, false);
    report.models.push_back(evaluate_model(*base, run.config, dataset, classifier, report.options, "base"));
  }
  if (!run.lora.empty()) {
    std::shared_ptr<DiffusionModel> tuned = build_trained_model(run, true);
    report.models.push_back(evaluate_model(*tuned, run.config, dataset, classifier, report.options, "lora"));
  }
  report.targets = check_targets(report.models[0], report.models.size() > 1 ? &report.models[1] : nullptr,
                                 report.seen_labels, report.new_labels);
  std::printf("%s", eval_report_text(report).c_str());

  std::error_code error;
  if (out.has_parent_path()) fs::create_directories(out.parent_path(), error);
  WICK_CHECK_KIND(Config, !error, out.parent_path().string(), ": cannot create the folder (", error.message(), ")");
  write_file_atomically(out, eval_report_json(report));
  for (const ModelScores& m : report.models) {
    fs::path grid = out.parent_path() / ("eval_" + m.name + ".png");
    save_class_grid(m, class_names, args.n_per_class, grid);
    std::printf("wrote %s\n", grid.string().c_str());
  }
  std::printf("wrote %s\n", out.string().c_str());
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* eval = app.add_subcommand(
      "eval", "Measure a run: generate per class, classify with a Fashion-MNIST classifier, check the targets");
  eval->add_option("run", args->source, "run directory (output/<name>) or the run's config file")->required();
  eval->add_option("--n-per-class", args->n_per_class, "images generated per class")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{100000}));
  eval->add_option("--steps", args->steps, "sampler steps")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1000}));
  eval->add_option("--guidance", args->guidance, "classifier-free guidance scale (1 = none)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  eval->add_option("--seed", args->seed, "noise seed (image k of every class starts from noise k)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  eval->add_option("--lora", args->lora, "LoRA/DoRA file written by wick train (replaces the run's own)");
  eval->add_option("--out", args->out, "the JSON report (default RUN_DIR/eval.json); grids go next to it");
  eval->add_option("--classifier", args->classifier,
                   "classifier weights (default <output_dir>/classifier/fashion_cnn_classifier.safetensors; "
                   "fashion_classifier.safetensors with --classifier-arch mlp)");
  eval->add_option("--classifier-arch", args->classifier_arch,
                   "classifier network: cnn (91.6%, minutes to train once) or mlp (89%, seconds; docs/evaluation.md)")
      ->capture_default_str()
      ->check(CLI::IsMember({"mlp", "cnn"}));
  eval->add_flag("--retrain", args->retrain, "train the classifier again even when its file exists");
  eval->callback([args] { run_eval(*args); });
}

}  // namespace wick::launch
