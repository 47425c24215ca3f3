#include "models/diffusion/evaluate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "engine/data/idx.h"
#include "engine/init.h"
#include "models/diffusion/generate.h"
#include "models/nn/basic.h"
#include "models/nn/conv.h"
#include "models/nn/linear.h"
#include "models/nn/norm.h"
#include "runtime/error.h"
#include "runtime/ops/join.h"
#include "runtime/ops/reduce.h"

namespace wick {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The classifier's input: [N, 784] (mlp) or [N, 1, 28, 28] (cnn), f32 on the CPU.
Tensor classifier_input(const Tensor& images, ClassifierArch arch);

Tensor flat_pixels(const Tensor& images) {
  WICK_CHECK(images.dim() >= 2 && is_floating(images.dtype()), "classifier: expected floating images [N, ...], got ",
             images.describe());
  WICK_CHECK(images.numel() == images.size(0) * 784, "classifier: expected 28x28 gray images ([N, 1, 28, 28] or [N, 784]), got ",
             images.describe());
  return images.to(Device::cpu()).to(DType::F32).reshape({images.size(0), 784});
}

Tensor classifier_input(const Tensor& images, ClassifierArch arch) {
  Tensor flat = flat_pixels(images);
  return arch == ClassifierArch::Cnn ? flat.reshape({flat.size(0), 1, 28, 28}) : flat;
}

// Counts [10 x 10] (row: true class, column: prediction) of `predicted` against `labels`.
std::vector<int64_t> confusion_counts(const std::vector<int64_t>& labels, const std::vector<int64_t>& predicted) {
  std::vector<int64_t> counts(100, 0);
  for (size_t i = 0; i < labels.size(); ++i)
    if (labels[i] >= 0 && labels[i] < 10 && predicted[i] >= 0 && predicted[i] < 10)
      ++counts[static_cast<size_t>(labels[i] * 10 + predicted[i])];
  return counts;
}

}  // namespace

// ---- the classifier ----

const char* classifier_architecture(ClassifierArch arch) {
  return arch == ClassifierArch::Cnn ? "cnn conv3x3 32, 32/2, 64/2 + GroupNorm(8) relu, linear 3136-10"
                                     : "mlp 784-256-128-10 relu, dropout 0.1";
}

ClassifierArch classifier_arch_from_name(const std::string& name) {
  if (name == "mlp") return ClassifierArch::Mlp;
  if (name == "cnn") return ClassifierArch::Cnn;
  WICK_FAIL(Config, "classifier architecture '", name, "' is not one of: mlp, cnn");
}

std::shared_ptr<keras::Sequential> make_fashion_classifier(ClassifierArch arch) {
  auto model = std::make_shared<keras::Sequential>();
  if (arch == ClassifierArch::Cnn) {  // the `wick example fashion-cnn` network
    auto conv_block = [&](int64_t in, int64_t out, int64_t stride) {
      model->add(std::make_shared<nn::Conv2d>(in, out, 3, nn::Conv2dOptions{.stride = stride, .padding = 1}));
      model->add(std::make_shared<nn::GroupNorm>(8, out));
      model->add(std::make_shared<nn::Activation>("relu"));
    };
    conv_block(1, 32, 1);
    conv_block(32, 32, 2);
    conv_block(32, 64, 2);
    model->add(std::make_shared<nn::Flatten>());
    model->add(std::make_shared<nn::Linear>(64 * 7 * 7, 10));
    return model;
  }
  model->add(std::make_shared<nn::Linear>(784, 256));
  model->add(std::make_shared<nn::Activation>("relu"));
  model->add(std::make_shared<nn::Dropout>(0.1));
  model->add(std::make_shared<nn::Linear>(256, 128));
  model->add(std::make_shared<nn::Activation>("relu"));
  model->add(std::make_shared<nn::Linear>(128, 10));
  return model;
}

FashionClassifier load_or_train_classifier(const ClassifierOptions& options) {
  namespace fs = std::filesystem;
  WICK_CHECK_KIND(Config, !options.path.empty(), "classifier: the path is empty");
  WICK_CHECK_KIND(Config, options.epochs >= 0 && options.batch_size >= 1,
                  "classifier: epochs must be >= 0 and the batch size >= 1");
  const int64_t epochs = options.epochs > 0 ? options.epochs : options.arch == ClassifierArch::Cnn ? 4 : 12;
  FashionClassifier result;
  result.path = options.path;
  result.arch = options.arch;
  FashionMnist test = load_fashion_mnist("test");
  test.images = classifier_input(test.images, options.arch);
  keras::CompileOptions compile{.optimizer = "adamw", .learning_rate = options.learning_rate, .lr_schedule = "cosine",
                                .loss = "cross_entropy", .metrics = {"accuracy"}};
  if (!options.retrain && fs::exists(options.path)) {
    result.model = make_fashion_classifier(options.arch);
    result.model->load(options.path);
  } else {
    FashionMnist train = load_fashion_mnist("train");
    train.images = classifier_input(train.images, options.arch);
    set_init_seed(options.seed);
    result.model = make_fashion_classifier(options.arch);
    result.model->compile(compile);
    auto start = std::chrono::steady_clock::now();
    result.model->fit(train.images, train.labels,
                      {.epochs = epochs, .batch_size = options.batch_size, .shuffle = true, .seed = options.seed,
                       .verbose = options.verbose});
    result.train_seconds = seconds_since(start);
    fs::path path(options.path);
    std::error_code error;
    if (path.has_parent_path()) fs::create_directories(path.parent_path(), error);
    WICK_CHECK_KIND(Config, !error, path.parent_path().string(), ": cannot create the folder (", error.message(), ")");
    result.model->save(options.path);
    result.trained = true;
  }
  if (!result.model->compiled()) result.model->compile(compile);
  result.test_accuracy = result.model->evaluate(test.images, test.labels, 1024).at("accuracy");
  std::vector<int64_t> predicted = classify_images(*result.model, test.images, options.arch).to_vector<int64_t>();
  result.test_confusion = confusion_counts(test.labels.to(DType::I64).to_vector<int64_t>(), predicted);
  return result;
}

Tensor classify_images(keras::Model& classifier, const Tensor& images, ClassifierArch arch) {
  Tensor logits = classifier.predict(classifier_input(images, arch), 1024);
  return argmax(logits.to(Device::cpu()), {1}).to(DType::I64);
}

// ---- scores ----

PixelStats pixel_stats(const Tensor& images) {
  PixelStats stats;
  if (!images.defined() || images.numel() == 0) return stats;
  stats.n_images = images.size(0);
  double sum = 0.0, sum_sq = 0.0;
  std::vector<double> values = images.to_vector<double>();
  for (double v : values) {
    sum += v;
    sum_sq += v * v;
  }
  double n = static_cast<double>(values.size());
  stats.mean = sum / n;
  stats.std = std::sqrt(std::max(0.0, sum_sq / n - stats.mean * stats.mean));
  return stats;
}

double ImageScores::accuracy_over(const std::vector<int64_t>& labels) const {
  int64_t n_total = 0, hits = 0;
  for (const ClassScore& c : classes)
    if (std::find(labels.begin(), labels.end(), c.label) != labels.end()) {
      n_total += c.n;
      hits += c.correct;
    }
  return n_total > 0 ? static_cast<double>(hits) / static_cast<double>(n_total) : 0.0;
}

const ClassScore* ImageScores::find(int64_t label) const {
  for (const ClassScore& c : classes)
    if (c.label == label) return &c;
  return nullptr;
}

ImageScores score_images(FashionClassifier& classifier, const Tensor& images, const std::vector<int64_t>& labels,
                         const std::vector<std::string>& class_names) {
  WICK_CHECK(images.defined() && images.size(0) == static_cast<int64_t>(labels.size()), "score_images: ",
             labels.size(), " labels for images ", images.defined() ? images.describe() : "undefined");
  const int64_t n_classes = static_cast<int64_t>(class_names.size());
  for (int64_t label : labels)
    WICK_CHECK(label >= 0 && label < n_classes, "score_images: label ", label, " outside [0, ", n_classes, ")");
  std::vector<int64_t> predicted = classify_images(*classifier.model, images, classifier.arch).to_vector<int64_t>();
  Tensor pixels = flat_pixels(images);
  ImageScores scores;
  std::map<int64_t, std::vector<int64_t>> rows_of;
  for (size_t i = 0; i < labels.size(); ++i) rows_of[labels[i]].push_back(static_cast<int64_t>(i));
  for (const auto& [label, rows] : rows_of) {
    ClassScore c;
    c.label = label;
    c.name = class_names[static_cast<size_t>(label)];
    c.n = static_cast<int64_t>(rows.size());
    c.predicted.assign(static_cast<size_t>(n_classes), 0);
    std::vector<Tensor> class_pixels;
    for (int64_t row : rows) {
      const int64_t p = predicted[static_cast<size_t>(row)];
      if (p >= 0 && p < n_classes) ++c.predicted[static_cast<size_t>(p)];
      c.correct += p == label;
      class_pixels.push_back(pixels.narrow(0, row, 1));
    }
    c.accuracy = static_cast<double>(c.correct) / static_cast<double>(c.n);
    double sum = 0, sum_sq = 0;
    for (const Tensor& p : class_pixels)
      for (float v : p.to_vector<float>()) {
        sum += v;
        sum_sq += static_cast<double>(v) * v;
      }
    double count = static_cast<double>(c.n) * 784.0;
    c.pixels = {sum / count, std::sqrt(std::max(0.0, sum_sq / count - (sum / count) * (sum / count))), c.n};
    scores.n += c.n;
    scores.correct += c.correct;
    scores.classes.push_back(std::move(c));
  }
  scores.accuracy = scores.n > 0 ? static_cast<double>(scores.correct) / static_cast<double>(scores.n) : 0.0;
  scores.pixels = pixel_stats(pixels);
  return scores;
}

// ---- evaluating a model ----

std::vector<int64_t> trained_labels(const TrainConfig& config, const LatentDataset& dataset) {
  const int64_t n_classes = static_cast<int64_t>(dataset.attributes().label_names.size());
  std::set<int64_t> labels;
  for (const DatasetConfig& d : config.datasets) {
    if (d.is_reg) continue;  // regularization data keeps classes, it does not teach them
    for (int64_t k = 0; k < n_classes; ++k) {
      bool included = d.include_labels.empty() ||
                      std::find(d.include_labels.begin(), d.include_labels.end(), k) != d.include_labels.end();
      bool excluded = std::find(d.exclude_labels.begin(), d.exclude_labels.end(), k) != d.exclude_labels.end();
      if (included && !excluded) labels.insert(k);
    }
  }
  return {labels.begin(), labels.end()};
}

ModelScores evaluate_model(DiffusionModel& model, const TrainConfig& config, const LatentDataset& dataset,
                           FashionClassifier& classifier, const EvalOptions& options, const std::string& name) {
  WICK_CHECK_KIND(Config, options.n_per_class >= 1, "eval: --n-per-class must be >= 1, got ", options.n_per_class);
  const auto& class_names = dataset.attributes().label_names;
  WICK_CHECK_KIND(Data, dataset.has_labels() && !class_names.empty(), dataset.path(),
                  ": class-conditional evaluation needs labels and /label_names");
  std::vector<int64_t> labels = options.labels;
  if (labels.empty())
    for (int64_t k = 0; k < static_cast<int64_t>(class_names.size()); ++k) labels.push_back(k);
  HashedTextEncoder encoder = dataset_text_encoder(dataset);

  auto start = std::chrono::steady_clock::now();
  ModelScores result;
  result.name = name;
  std::vector<Tensor> images;
  for (int64_t label : labels) {
    WICK_CHECK_KIND(Config, label >= 0 && label < static_cast<int64_t>(class_names.size()), "eval: class ", label,
                    " is not a label of ", dataset.path());
    std::vector<std::string> captions(static_cast<size_t>(options.n_per_class), class_names[static_cast<size_t>(label)]);
    // Every class starts from the same noise (indices 0 .. n_per_class − 1 of options.seed): classes
    // differ by their caption only, and a class's images do not depend on which others run.
    Tensor latents = generate_latents(model, config, encoder, captions, sample_latent_shape(dataset), options.steps,
                                      options.guidance, options.seed);
    images.push_back(latents_to_images(latents, dataset.attributes()));
    for (int64_t k = 0; k < options.n_per_class; ++k) result.labels.push_back(label);
    if (options.progress)
      std::fprintf(stderr, "eval %s: %s, %lld images (%.1fs)\n", name.c_str(), class_names[static_cast<size_t>(label)].c_str(),
                   static_cast<long long>(options.n_per_class), seconds_since(start));
  }
  result.images = concat(images, 0);
  result.scores = score_images(classifier, result.images, result.labels, class_names);
  // Real samples of each class: the first n_per_class of the class in the file.
  for (ClassScore& c : result.scores.classes) {
    std::vector<int64_t> ids = select_ids(dataset, {.include = {c.label}});
    if (static_cast<int64_t>(ids.size()) > options.n_per_class) ids.resize(static_cast<size_t>(options.n_per_class));
    if (ids.empty()) continue;
    c.data_pixels = pixel_stats(latents_to_images(dataset.read(ids).latents, dataset.attributes()));
  }
  result.seconds = seconds_since(start);
  return result;
}

// ---- targets ----

std::vector<TargetCheck> check_targets(const ModelScores& base, const ModelScores* lora,
                                       const std::vector<int64_t>& seen_labels, const std::vector<int64_t>& new_labels) {
  std::vector<TargetCheck> checks;
  std::vector<int64_t> base_labels;  // the seen classes the base was scored on
  for (int64_t label : seen_labels)
    if (base.scores.find(label) != nullptr) base_labels.push_back(label);
  if (!base_labels.empty()) {
    TargetCheck t{.name = "base_seen_accuracy", .value = base.scores.accuracy_over(base_labels),
                  .threshold = base_seen_accuracy_target, .higher_is_better = true};
    t.met = t.value >= t.threshold;
    t.description = "class-conditional accuracy of the base's samples on the " + std::to_string(base_labels.size()) +
                    " classes it was trained on";
    checks.push_back(t);
  }
  if (lora == nullptr) return checks;
  std::vector<int64_t> fresh, others;
  for (int64_t label : new_labels)
    if (lora->scores.find(label) != nullptr) fresh.push_back(label);
  for (int64_t label : base_labels)
    if (std::find(new_labels.begin(), new_labels.end(), label) == new_labels.end() && lora->scores.find(label) != nullptr)
      others.push_back(label);
  if (!fresh.empty()) {
    TargetCheck t{.name = "lora_new_class_accuracy", .value = lora->scores.accuracy_over(fresh),
                  .threshold = lora_new_class_accuracy_target, .higher_is_better = true};
    t.met = t.value >= t.threshold;
    t.description = "accuracy of the LoRA's samples on the class(es) only the LoRA was trained on";
    checks.push_back(t);
  }
  if (!others.empty()) {
    TargetCheck t{.name = "lora_other_classes_drop",
                  .value = base.scores.accuracy_over(others) - lora->scores.accuracy_over(others),
                  .threshold = lora_max_other_drop, .higher_is_better = false};
    t.met = t.value <= t.threshold;
    t.description = "accuracy over the base's other classes, base minus LoRA (same noise seeds)";
    checks.push_back(t);
  }
  return checks;
}

// ---- the report ----

namespace {

nlohmann::json stats_json(const PixelStats& s) { return {{"mean", s.mean}, {"std", s.std}, {"n_images", s.n_images}}; }

nlohmann::json labels_json(const std::vector<int64_t>& labels) { return nlohmann::json(labels); }

}  // namespace

std::string eval_report_json(const EvalReport& report) {
  nlohmann::json j;
  j["format"] = "wick.eval";
  j["format_version"] = 1;
  j["source"] = report.source;
  j["dataset"] = report.dataset;
  j["lora"] = report.lora.empty() ? nlohmann::json(nullptr) : nlohmann::json(report.lora);
  j["settings"] = {{"n_per_class", report.options.n_per_class},
                   {"steps", report.options.steps},
                   {"guidance", report.options.guidance},
                   {"seed", report.options.seed}};
  j["classifier"] = {{"path", report.classifier_path},
                     {"architecture", classifier_architecture(report.classifier_arch)},
                     {"test_accuracy", report.classifier_test_accuracy}};
  if (report.classifier_test_confusion.size() == 100) {
    nlohmann::json rows = nlohmann::json::array();
    const auto& counts = report.classifier_test_confusion;
    for (std::ptrdiff_t r = 0; r < 10; ++r)
      rows.push_back(std::vector<int64_t>(counts.begin() + r * 10, counts.begin() + r * 10 + 10));
    j["classifier"]["test_confusion"] = rows;
  }
  j["seen_labels"] = labels_json(report.seen_labels);
  j["new_labels"] = labels_json(report.new_labels);
  nlohmann::json models = nlohmann::json::array();
  for (const ModelScores& m : report.models) {
    nlohmann::json classes = nlohmann::json::array();
    PixelStats data_all;
    double data_sum = 0, data_sum_sq = 0, data_count = 0;
    for (const ClassScore& c : m.scores.classes) {
      classes.push_back({{"label", c.label},
                         {"name", c.name},
                         {"n", c.n},
                         {"correct", c.correct},
                         {"accuracy", c.accuracy},
                         {"pixels", stats_json(c.pixels)},
                         {"data_pixels", stats_json(c.data_pixels)},
                         {"predicted", c.predicted}});
      double n = static_cast<double>(c.data_pixels.n_images);
      data_sum += n * c.data_pixels.mean;
      data_sum_sq += n * (c.data_pixels.std * c.data_pixels.std + c.data_pixels.mean * c.data_pixels.mean);
      data_count += n;
      data_all.n_images += c.data_pixels.n_images;
    }
    if (data_count > 0) {
      data_all.mean = data_sum / data_count;
      data_all.std = std::sqrt(std::max(0.0, data_sum_sq / data_count - data_all.mean * data_all.mean));
    }
    nlohmann::json entry = {{"name", m.name},
                            {"n", m.scores.n},
                            {"correct", m.scores.correct},
                            {"accuracy", m.scores.accuracy},
                            {"seen_accuracy", m.scores.accuracy_over(report.seen_labels)},
                            {"pixels", stats_json(m.scores.pixels)},
                            {"data_pixels", stats_json(data_all)},
                            {"seconds", m.seconds},
                            {"classes", classes}};
    if (!report.new_labels.empty()) entry["new_accuracy"] = m.scores.accuracy_over(report.new_labels);
    models.push_back(entry);
  }
  j["models"] = models;
  nlohmann::json targets = nlohmann::json::array();
  for (const TargetCheck& t : report.targets)
    targets.push_back({{"name", t.name},
                       {"value", t.value},
                       {"threshold", t.threshold},
                       {"comparison", t.higher_is_better ? ">=" : "<="},
                       {"met", t.met},
                       {"description", t.description}});
  j["targets"] = targets;
  return j.dump(2) + "\n";
}

namespace {

// The classifier's accuracy on the real test images of `label` (its confusion row).
double real_accuracy(const std::vector<int64_t>& confusion, int64_t label) {
  int64_t n = 0;
  for (int64_t k = 0; k < 10; ++k) n += confusion[static_cast<size_t>(label * 10 + k)];
  return n > 0 ? static_cast<double>(confusion[static_cast<size_t>(label * 11)]) / static_cast<double>(n) : 0.0;
}

// label -> class name, from the scored classes (names of labels without images are "class <k>").
std::vector<std::string> names_of(const ImageScores& scores) {
  std::vector<std::string> names(10);
  for (size_t k = 0; k < names.size(); ++k) names[k] = "class " + std::to_string(k);
  for (const ClassScore& c : scores.classes)
    if (c.label >= 0 && c.label < 10) names[static_cast<size_t>(c.label)] = c.name;
  return names;
}

// "Sandal 12.0%, Sneaker 3.0%": the two most frequent wrong predictions of a row of counts, as shares of
// the row; "none" when every image was called `label`.
std::string top_confusions(const std::vector<int64_t>& counts, int64_t label, const std::vector<std::string>& names) {
  int64_t total = 0;
  std::vector<std::pair<int64_t, int64_t>> wrong;  // (count, predicted label)
  for (size_t k = 0; k < counts.size(); ++k) {
    total += counts[k];
    if (static_cast<int64_t>(k) != label && counts[k] > 0) wrong.emplace_back(counts[k], static_cast<int64_t>(k));
  }
  std::sort(wrong.begin(), wrong.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  if (wrong.empty()) return "none";
  std::string text;
  char share[32];
  for (size_t i = 0; i < std::min<size_t>(2, wrong.size()); ++i) {
    std::snprintf(share, sizeof share, " %.1f%%",
                  100.0 * static_cast<double>(wrong[i].first) / static_cast<double>(total));
    const size_t k = static_cast<size_t>(wrong[i].second);
    text += (i ? ", " : "") + (k < names.size() ? names[k] : "class " + std::to_string(k)) + share;
  }
  return text;
}

}  // namespace

std::string eval_report_text(const EvalReport& report) {
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof line, "classifier: %s, test accuracy %.2f%%\n", report.classifier_path.c_str(),
                100.0 * report.classifier_test_accuracy);
  out << line;
  std::snprintf(line, sizeof line, "%lld images per class, %lld steps, guidance %g, seed %llu\n",
                static_cast<long long>(report.options.n_per_class), static_cast<long long>(report.options.steps),
                report.options.guidance, static_cast<unsigned long long>(report.options.seed));
  out << line;
  if (report.models.empty()) return out.str();
  const bool real = report.classifier_test_confusion.size() == 100;
  out << "\nclass              ";
  if (real) out << " | real test";
  for (const ModelScores& m : report.models) {
    std::snprintf(line, sizeof line, " | %-6s acc   mean   std", m.name.c_str());
    out << line;
  }
  out << " |  data mean   std\n";
  const ModelScores& first = report.models.front();
  for (const ClassScore& c : first.scores.classes) {
    bool seen = std::find(report.seen_labels.begin(), report.seen_labels.end(), c.label) != report.seen_labels.end();
    bool fresh = std::find(report.new_labels.begin(), report.new_labels.end(), c.label) != report.new_labels.end();
    std::snprintf(line, sizeof line, "%d %-14s %s", static_cast<int>(c.label), c.name.c_str(), fresh ? "new" : seen ? "   " : " - ");
    out << line;
    if (real) {
      std::snprintf(line, sizeof line, " | %8.1f%%", 100.0 * real_accuracy(report.classifier_test_confusion, c.label));
      out << line;
    }
    for (const ModelScores& m : report.models) {
      const ClassScore* s = m.scores.find(c.label);
      if (s == nullptr) {
        out << " |                         ";
        continue;
      }
      std::snprintf(line, sizeof line, " | %9.1f%% %6.3f %5.3f", 100.0 * s->accuracy, s->pixels.mean, s->pixels.std);
      out << line;
    }
    std::snprintf(line, sizeof line, " | %10.3f %5.3f\n", c.data_pixels.mean, c.data_pixels.std);
    out << line;
  }
  for (const ModelScores& m : report.models) {
    std::snprintf(line, sizeof line, "%s: overall %.1f%% (%lld/%lld), pixels mean %.3f std %.3f, %.1fs\n", m.name.c_str(),
                  100.0 * m.scores.accuracy, static_cast<long long>(m.scores.correct), static_cast<long long>(m.scores.n),
                  m.scores.pixels.mean, m.scores.pixels.std, m.seconds);
    out << line;
  }
  out << "(\"new\": trained only by the LoRA; \" - \": not in the base's training data; \"real test\": the "
         "classifier on the real test images of the class)\n";
  // What each class is mistaken for: by the classifier on real test images (its own errors), and on
  // each model's images.
  out << "\nmistaken for (the two most frequent wrong labels): class: real test images";
  for (const ModelScores& m : report.models) out << " | " << m.name;
  out << "\n";
  for (const ClassScore& c : first.scores.classes) {
    out << c.label << " " << c.name << ": ";
    if (real) {
      std::vector<int64_t> row(report.classifier_test_confusion.begin() + c.label * 10,
                               report.classifier_test_confusion.begin() + c.label * 10 + 10);
      out << top_confusions(row, c.label, names_of(first.scores));
    } else {
      out << "-";
    }
    for (const ModelScores& m : report.models) {
      const ClassScore* s = m.scores.find(c.label);
      out << " | " << (s ? top_confusions(s->predicted, c.label, names_of(first.scores)) : "-");
    }
    out << "\n";
  }
  for (const TargetCheck& t : report.targets) {
    std::snprintf(line, sizeof line, "target %-24s %6.1f%% %s %4.1f%%  %s\n", t.name.c_str(), 100.0 * t.value,
                  t.higher_is_better ? ">=" : "<=", 100.0 * t.threshold, t.met ? "met" : "MISSED");
    out << line;
  }
  return out.str();
}

}  // namespace wick
