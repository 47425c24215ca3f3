// Measuring a class-conditional model: generate images per class, classify them with a Fashion-MNIST
// classifier trained through the Keras-like API, compare pixel statistics with the data, and check
// the quickstart's quality targets (docs/evaluation.md).
//
//   FashionClassifier classifier = load_or_train_classifier({.path = "output/classifier/fashion_classifier.safetensors"});
//   ModelScores base = evaluate_model(*model, config, *dataset, classifier, {.n_per_class = 100}, "base");
//   ImageScores real = score_images(classifier, images, labels, class_names);   // any images in [0, 1]
//   std::vector<TargetCheck> t = check_targets(base, nullptr, seen_labels, {});
//   write_file_atomically(run_dir / "eval.json", eval_report_json(report));   // runtime/atomic_file.h
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/config/train_config.h"
#include "engine/data/latent_dataset.h"
#include "engine/keras/sequential.h"
#include "models/architecture.h"

namespace wick {

// ---- the classifier ----
// mlp: 784-256-128-10, ReLU, dropout 0.1 (about 89% test accuracy, seconds to train); cnn: the
// `wick example fashion-cnn` network, conv 32-32-64 + GroupNorm + linear (91.55% in 4 epochs with
// this recipe, docs/evaluation.md; about 47 s an epoch on 2 quiet CPU cores).
enum class ClassifierArch { Mlp, Cnn };
const char* classifier_architecture(ClassifierArch arch);  // one line, for reports
ClassifierArch classifier_arch_from_name(const std::string& name);  // "mlp" | "cnn"; else a Config error

struct ClassifierOptions {
  std::string path = "output/classifier/fashion_classifier.safetensors";
  ClassifierArch arch = ClassifierArch::Mlp;
  bool retrain = false;  // train and overwrite even when `path` exists
  int64_t epochs = 0;    // 0: the architecture's (mlp 12, cnn 4)
  int64_t batch_size = 128;
  double learning_rate = 2e-3;
  uint64_t seed = 0;
  int verbose = 0;       // keras fit verbosity while training (0 silent, 1 bar, 2 epoch lines)
};

struct FashionClassifier {
  std::shared_ptr<keras::Sequential> model;
  ClassifierArch arch = ClassifierArch::Mlp;
  // On the 10,000 test images: counts [10 x 10] row-major, row the true class, column the prediction.
  std::vector<int64_t> test_confusion;
  double test_accuracy = 0.0;   // on the 10,000 Fashion-MNIST test images (measured at load or training)
  bool trained = false;         // true: trained by this call; false: loaded from `path`
  double train_seconds = 0.0;
  std::string path;
};

// The classifier's layers (untrained): input f32 pixels in [0, 1], [N, 784] (mlp) or [N, 1, 28, 28]
// (cnn) -> logits [N, 10].
std::shared_ptr<keras::Sequential> make_fashion_classifier(ClassifierArch arch = ClassifierArch::Mlp);
// Loads `options.path` when it exists (and retrain is false), else trains on the Fashion-MNIST
// training split (Debian's dataset-fashion-mnist; missing files throw WickError (Data) naming the
// package) and saves it there (creating folders). Either way measures the test accuracy.
FashionClassifier load_or_train_classifier(const ClassifierOptions& options);
// Predicted class I64 [N] of images [N, 1, 28, 28] or [N, 784] in [0, 1] (any float dtype and device).
Tensor classify_images(keras::Model& classifier, const Tensor& images, ClassifierArch arch = ClassifierArch::Mlp);

// ---- scores ----
struct PixelStats {
  double mean = 0.0, std = 0.0;  // over every pixel, in [0, 1] units (population std)
  int64_t n_images = 0;
};
// images [N, ...] in [0, 1]; N = 0 gives zeros.
PixelStats pixel_stats(const Tensor& images);

struct ClassScore {
  int64_t label = 0;
  std::string name;
  int64_t n = 0, correct = 0;
  double accuracy = 0.0;
  PixelStats pixels;       // of the images of this class
  PixelStats data_pixels;  // of real images of this class (filled by evaluate_model)
  std::vector<int64_t> predicted;  // per label of class_names: how many of these images it was called
};

struct ImageScores {
  std::vector<ClassScore> classes;  // one per class that has images, by label
  int64_t n = 0, correct = 0;
  double accuracy = 0.0;
  PixelStats pixels;
  // Accuracy over the images whose target label is in `labels` (0 when there are none).
  double accuracy_over(const std::vector<int64_t>& labels) const;
  const ClassScore* find(int64_t label) const;
};

// Classifies images [N, 1, 28, 28] in [0, 1] whose intended classes are `labels` (N values in
// [0, class_names.size())) and counts the hits per class.
ImageScores score_images(FashionClassifier& classifier, const Tensor& images, const std::vector<int64_t>& labels,
                         const std::vector<std::string>& class_names);

// ---- evaluating a model ----
struct EvalOptions {
  int64_t n_per_class = 100;
  int64_t steps = 20;
  double guidance = 3.0;
  uint64_t seed = 0;
  std::vector<int64_t> labels;  // classes to generate; empty = every class of the dataset
  bool progress = true;         // a progress line per class on stderr
};

struct ModelScores {
  std::string name;  // "base", "lora"
  ImageScores scores;
  double seconds = 0.0;
  Tensor images;     // f32 [N, 1, 28, 28] in [0, 1], class-major (n_per_class of each label in turn)
  std::vector<int64_t> labels;
};

// Generates options.n_per_class images per class with the class name as caption (models/diffusion/generate.h;
// image k of every class starts from noise index k of options.seed), classifies them, and fills the per-class
// pixel statistics of up to n_per_class real samples of each class read from `dataset`. The dataset
// needs labels and /label_names; the model must fit it (a WickError otherwise).
ModelScores evaluate_model(DiffusionModel& model, const TrainConfig& config, const LatentDataset& dataset,
                           FashionClassifier& classifier, const EvalOptions& options, const std::string& name);

// ---- the quickstart's targets (issue: base >= 70% on the classes it saw; after the LoRA >= 60% on
// the new classes while the other classes drop by <= 5 points) ----
struct TargetCheck {
  std::string name;       // "base_seen_accuracy", "lora_new_class_accuracy", "lora_other_classes_drop"
  double value = 0.0;
  double threshold = 0.0;
  bool higher_is_better = true;
  bool met = false;
  std::string description;
};
// The quickstart's goals, judged by the CNN classifier (docs/evaluation.md "Targets").
inline constexpr double base_seen_accuracy_target = 0.80;
inline constexpr double lora_new_class_accuracy_target = 0.80;
inline constexpr double lora_max_other_drop = 0.03;

// `lora` may be null (only the base target). seen_labels: the classes the base was trained on;
// new_labels: the classes the LoRA was trained on. The drop compares the accuracy over the classes
// in seen_labels and not in new_labels, base minus LoRA, same images seeds.
std::vector<TargetCheck> check_targets(const ModelScores& base, const ModelScores* lora,
                                       const std::vector<int64_t>& seen_labels, const std::vector<int64_t>& new_labels);

// The labels a config's training datasets teach (include/exclude filters over the dataset's labels;
// a regularization dataset, is_reg, is not counted).
std::vector<int64_t> trained_labels(const TrainConfig& config, const LatentDataset& dataset);

// ---- the report ----
struct EvalReport {
  std::string source;        // run directory or config file evaluated
  std::string dataset;
  std::string lora;          // LoRA file, "" when none
  EvalOptions options;
  std::string classifier_path;
  ClassifierArch classifier_arch = ClassifierArch::Mlp;
  double classifier_test_accuracy = 0.0;
  std::vector<int64_t> classifier_test_confusion;  // FashionClassifier::test_confusion
  std::vector<ModelScores> models;  // base first, then the LoRA
  std::vector<int64_t> seen_labels, new_labels;
  std::vector<TargetCheck> targets;
};

// eval.json (docs/evaluation.md): settings, classifier, per model per class accuracy and pixel
// statistics, the targets with met true/false.
std::string eval_report_json(const EvalReport& report);
// Human-readable table of the same (what `wick eval` prints).
std::string eval_report_text(const EvalReport& report);

}  // namespace wick
