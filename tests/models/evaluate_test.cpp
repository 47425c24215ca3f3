// Quality measurement (models/diffusion/evaluate.h): the Fashion-MNIST classifier scores real test
// images at its known accuracy, saves and reloads, per-class counts and pixel statistics, the
// targets' met/missed logic, eval.json fields, and evaluate_model on a tiny packed dataset.
// Tests that need Debian's dataset-fashion-mnist skip (visibly) without it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include "engine/data/fashion_pack.h"
#include "engine/data/idx.h"
#include "engine/init.h"
#include "models/diffusion/evaluate.h"
#include "models/diffusion/generate.h"
#include "models/dit/dit.h"
#include "runtime/ops/creation.h"
#include "tests/error_of.h"

namespace wick {
namespace {

using ::testing::HasSubstr;
using wick::testing::error_of;

bool have_fashion_mnist() {
  return std::filesystem::exists(fashion_mnist_dir() + "/t10k-images-idx3-ubyte.gz") &&
         std::filesystem::exists(fashion_mnist_dir() + "/train-images-idx3-ubyte.gz");
}

#define REQUIRE_FASHION_MNIST()                                                                              \
  if (!have_fashion_mnist())                                                                                 \
  GTEST_SKIP() << "Fashion-MNIST is not installed in " << fashion_mnist_dir()                                \
               << " (apt-get install dataset-fashion-mnist)"

// Per process: ctest runs this program's tests in several shards at once.
std::string temp(const std::string& name) {
  return ::testing::TempDir() + "/evaluate_test_" + std::to_string(::getpid()) + "_" + name;
}

std::vector<std::string> class_names() {
  const auto& names = fashion_mnist_class_names();
  return {names.begin(), names.end()};
}

// One classifier for the whole suite: trained once (4 epochs, a few seconds), then reloaded.
FashionClassifier& shared_classifier() {
  static FashionClassifier classifier = [] {
    std::filesystem::remove(temp("classifier.safetensors"));
    return load_or_train_classifier({.path = temp("classifier.safetensors"), .epochs = 4});
  }();
  return classifier;
}

TEST(Evaluate, ClassifierScoresRealTestImagesAtItsKnownAccuracy) {
  REQUIRE_FASHION_MNIST();
  FashionClassifier& classifier = shared_classifier();
  EXPECT_TRUE(classifier.trained);
  EXPECT_GE(classifier.test_accuracy, 0.85);
  FashionMnist test = load_fashion_mnist("test");
  std::vector<int64_t> labels = test.labels.to_vector<int64_t>();
  Tensor images = test.images.reshape({test.images.size(0), 1, 28, 28});
  ImageScores scores = score_images(classifier, images, labels, class_names());
  EXPECT_EQ(scores.n, 10000);
  EXPECT_NEAR(scores.accuracy, classifier.test_accuracy, 1e-9);
  ASSERT_EQ(scores.classes.size(), 10u);
  for (const ClassScore& c : scores.classes) {
    EXPECT_EQ(c.n, 1000) << c.name;  // the test split is balanced
    EXPECT_GT(c.accuracy, 0.5) << c.name;
  }
  EXPECT_EQ(scores.classes[9].name, "Ankle boot");
  // The confusion on the test images: 1000 per row, its diagonal the hits, and each class's predicted
  // counts from score_images are that row.
  ASSERT_EQ(classifier.test_confusion.size(), 100u);
  int64_t diagonal = 0;
  for (int64_t r = 0; r < 10; ++r) {
    const auto& counts = classifier.test_confusion;
    std::vector<int64_t> row(counts.begin() + r * 10, counts.begin() + r * 10 + 10);
    EXPECT_EQ(std::accumulate(row.begin(), row.end(), int64_t{0}), 1000) << "row " << r;
    EXPECT_EQ(row, scores.classes[static_cast<size_t>(r)].predicted) << "row " << r;
    diagonal += row[static_cast<size_t>(r)];
  }
  EXPECT_EQ(diagonal, scores.correct);
  // Pixel statistics of the real test images: Fashion-MNIST's mean is about 0.286, std about 0.353.
  EXPECT_NEAR(scores.pixels.mean, 0.286, 0.01);
  EXPECT_NEAR(scores.pixels.std, 0.353, 0.01);
  // Through the packed latents and back, the same images score the same.
  Tensor round_trip = latents_to_images(pack_images_2x2(test.images.narrow(0, 0, 500)),
                                        {.model_family = "fashion-dit", .latent_channels = 4});
  std::vector<int64_t> first(labels.begin(), labels.begin() + 500);
  ImageScores direct = score_images(classifier, images.narrow(0, 0, 500), first, class_names());
  EXPECT_EQ(score_images(classifier, round_trip, first, class_names()).correct, direct.correct);
}

TEST(Evaluate, ClassifierIsReloadedFromItsFile) {
  REQUIRE_FASHION_MNIST();
  FashionClassifier& trained = shared_classifier();
  FashionClassifier loaded = load_or_train_classifier({.path = temp("classifier.safetensors"), .epochs = 4});
  EXPECT_FALSE(loaded.trained);
  EXPECT_DOUBLE_EQ(loaded.test_accuracy, trained.test_accuracy);
  EXPECT_EQ(loaded.test_confusion, trained.test_confusion);
  // The file is an MLP's: loading it as the CNN fails, naming the file.
  EXPECT_THROW(load_or_train_classifier({.path = temp("classifier.safetensors"), .arch = ClassifierArch::Cnn}),
               WickError);
}

// The CNN classifier (the fashion-cnn example's network) takes [N, 1, 28, 28] and gives 10 logits;
// trained here only for its shapes (full training: docs/evaluation.md).
TEST(Evaluate, CnnClassifierShapes) {
  auto cnn = make_fashion_classifier(ClassifierArch::Cnn);
  cnn->compile({.optimizer = "adamw", .learning_rate = 1e-3, .loss = "cross_entropy", .metrics = {"accuracy"}});
  Tensor logits = cnn->predict(zeros({3, 1, 28, 28}), 8);
  EXPECT_EQ(logits.shape(), (Shape{3, 10}));
  EXPECT_EQ(classify_images(*cnn, zeros({3, 784}), ClassifierArch::Cnn).shape(), (Shape{3}));
  EXPECT_EQ(classifier_arch_from_name("cnn"), ClassifierArch::Cnn);
  EXPECT_THAT(error_of([] { classifier_arch_from_name("resnet"); }), HasSubstr("mlp, cnn"));
}

TEST(Evaluate, PerClassCountsAndPixelStatistics) {
  REQUIRE_FASHION_MNIST();
  // All-black images are one class for the classifier; whatever it says, counts add up.
  Tensor black = zeros({6, 1, 28, 28});
  ImageScores s = score_images(shared_classifier(), black, {0, 0, 3, 3, 3, 7}, class_names());
  ASSERT_EQ(s.classes.size(), 3u);
  EXPECT_EQ(s.classes[1].label, 3);
  EXPECT_EQ(s.classes[1].n, 3);
  EXPECT_EQ(s.n, 6);
  int64_t predicted = classify_images(*shared_classifier().model, black).to_vector<int64_t>()[0];
  int64_t expected = predicted == 0 ? 2 : predicted == 3 ? 3 : predicted == 7 ? 1 : 0;
  EXPECT_EQ(s.correct, expected);
  EXPECT_DOUBLE_EQ(s.pixels.mean, 0.0);
  EXPECT_DOUBLE_EQ(s.pixels.std, 0.0);
  EXPECT_NEAR(s.accuracy_over({3, 7}), static_cast<double>(s.classes[1].correct + s.classes[2].correct) / 4.0, 1e-12);
  EXPECT_THAT(error_of([&] { score_images(shared_classifier(), black, {0, 1}, class_names()); }), HasSubstr("2 labels"));
  EXPECT_THAT(error_of([&] { score_images(shared_classifier(), black, {0, 0, 0, 0, 0, 10}, class_names()); }),
              HasSubstr("label 10"));
}

TEST(Evaluate, PixelStatsAreMeanAndPopulationStd) {
  Tensor x = Tensor::from_vector<float>({0.0f, 1.0f, 0.0f, 1.0f}, {2, 2});
  PixelStats s = pixel_stats(x);
  EXPECT_DOUBLE_EQ(s.mean, 0.5);
  EXPECT_DOUBLE_EQ(s.std, 0.5);
  EXPECT_EQ(s.n_images, 2);
}

ModelScores fake_scores(const std::string& name, const std::vector<std::pair<int64_t, double>>& accuracy) {
  ModelScores m;
  m.name = name;
  for (auto [label, acc] : accuracy) {
    ClassScore c{.label = label, .n = 100, .correct = static_cast<int64_t>(acc * 100.0 + 0.5), .accuracy = acc};
    c.name = std::string(1, 'c').append(std::to_string(label));
    m.scores.n += c.n;
    m.scores.correct += c.correct;
    m.scores.classes.push_back(c);
  }
  m.scores.accuracy = static_cast<double>(m.scores.correct) / static_cast<double>(m.scores.n);
  return m;
}

TEST(Evaluate, TargetsAreMetOrMissedFromTheNumbers) {
  ModelScores base = fake_scores("base", {{0, 0.90}, {1, 0.80}, {2, 0.10}});
  // The base saw classes 0 and 1 (85% > 80%); class 2 is new for the LoRA.
  std::vector<TargetCheck> only_base = check_targets(base, nullptr, {0, 1}, {});
  ASSERT_EQ(only_base.size(), 1u);
  EXPECT_EQ(only_base[0].name, "base_seen_accuracy");
  EXPECT_NEAR(only_base[0].value, 0.85, 1e-12);
  EXPECT_TRUE(only_base[0].met);
  EXPECT_FALSE(check_targets(fake_scores("base", {{0, 0.7}, {1, 0.8}}), nullptr, {0, 1}, {})[0].met);

  ModelScores good = fake_scores("lora", {{0, 0.88}, {1, 0.78}, {2, 0.81}});  // others drop 2 points
  std::vector<TargetCheck> t = check_targets(base, &good, {0, 1}, {2});
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[1].name, "lora_new_class_accuracy");
  EXPECT_NEAR(t[1].value, 0.81, 1e-12);
  EXPECT_TRUE(t[1].met);
  EXPECT_EQ(t[2].name, "lora_other_classes_drop");
  EXPECT_NEAR(t[2].value, 0.02, 1e-12);
  EXPECT_TRUE(t[2].met);
  ModelScores bad = fake_scores("lora", {{0, 0.80}, {1, 0.70}, {2, 0.79}});  // drop 10 points, new 79%
  std::vector<TargetCheck> missed = check_targets(base, &bad, {0, 1}, {2});
  EXPECT_FALSE(missed[1].met);
  EXPECT_NEAR(missed[2].value, 0.10, 1e-12);
  EXPECT_FALSE(missed[2].met);
}

TEST(Evaluate, ReportJsonHasTheDocumentedFields) {
  EvalReport report;
  report.source = "output/quickstart";
  report.dataset = "data/fashion.h5";
  report.options.n_per_class = 100;
  report.classifier_path = "output/classifier/fashion_classifier.safetensors";
  report.classifier_test_accuracy = 0.885;
  report.classifier_test_confusion.assign(100, 0);
  report.classifier_test_confusion[0] = 90, report.classifier_test_confusion[1] = 7;  // class 0: 7 called c1
  report.classifier_test_confusion[2] = 3;
  report.seen_labels = {0, 1};
  report.new_labels = {2};
  report.models = {fake_scores("base", {{0, 0.90}, {1, 0.80}, {2, 0.10}}),
                   fake_scores("lora", {{0, 0.88}, {1, 0.78}, {2, 0.81}})};
  report.models[0].scores.classes[0].data_pixels = {0.3, 0.4, 100};
  report.models[0].scores.classes[0].predicted = {80, 0, 20};
  report.targets = check_targets(report.models[0], &report.models[1], report.seen_labels, report.new_labels);
  nlohmann::json j = nlohmann::json::parse(eval_report_json(report));
  EXPECT_EQ(j["format"], "wick.eval");
  EXPECT_EQ(j["format_version"], 1);
  EXPECT_EQ(j["settings"]["n_per_class"], 100);
  EXPECT_DOUBLE_EQ(j["classifier"]["test_accuracy"].get<double>(), 0.885);
  ASSERT_EQ(j["models"].size(), 2u);
  EXPECT_EQ(j["models"][1]["name"], "lora");
  EXPECT_NEAR(j["models"][0]["seen_accuracy"].get<double>(), 0.85, 1e-12);
  EXPECT_NEAR(j["models"][1]["new_accuracy"].get<double>(), 0.81, 1e-12);
  EXPECT_EQ(j["models"][0]["classes"][0]["name"], "c0");
  EXPECT_DOUBLE_EQ(j["models"][0]["classes"][0]["data_pixels"]["mean"].get<double>(), 0.3);
  EXPECT_DOUBLE_EQ(j["models"][0]["data_pixels"]["std"].get<double>(), 0.4);
  ASSERT_EQ(j["targets"].size(), 3u);
  EXPECT_EQ(j["targets"][0]["name"], "base_seen_accuracy");
  EXPECT_EQ(j["targets"][0]["met"], true);
  EXPECT_EQ(j["targets"][2]["comparison"], "<=");
  EXPECT_EQ(j["classifier"]["test_confusion"][0][1], 7);
  EXPECT_EQ(j["models"][0]["classes"][0]["predicted"][2], 20);
  std::string text = eval_report_text(report);
  EXPECT_THAT(text, HasSubstr("target lora_new_class_accuracy"));
  // Real test images of class 0: 90% right, mistaken for c1 (7%) and c2 (3%); the base's: c2 20%.
  EXPECT_THAT(text, HasSubstr("     90.0%"));
  EXPECT_THAT(text, HasSubstr("0 c0: c1 7.0%, c2 3.0% | c2 20.0% | "));
  EXPECT_THAT(text, HasSubstr("met"));
}

TEST(Evaluate, EvaluateModelOnATinyPackedDataset) {
  REQUIRE_FASHION_MNIST();
  std::string path = temp("tiny.h5");
  pack_fashion_mnist({.out = path, .split = "test", .limit = 40, .force = true, .progress = false});
  auto dataset = LatentDataset::open(path);
  TrainConfig config;
  config.name = "tiny";
  config.datasets = {DatasetConfig{.path = path, .exclude_labels = {9}}};
  EXPECT_EQ(trained_labels(config, *dataset), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  set_init_seed(3);
  DiT model(DiTConfig{.in_channels = 4, .input_size = 14, .patch_size = 2, .hidden_size = 16, .depth = 1,
                      .num_heads = 2, .mlp_ratio = 2.0, .text_dim = 64, .pooled_dim = 64});
  ModelScores m = evaluate_model(model, config, *dataset, shared_classifier(),
                                 {.n_per_class = 2, .steps = 2, .guidance = 2.0, .labels = {1, 9}, .progress = false},
                                 "base");
  EXPECT_EQ(m.images.shape(), (Shape{4, 1, 28, 28}));
  EXPECT_EQ(m.labels, (std::vector<int64_t>{1, 1, 9, 9}));
  ASSERT_EQ(m.scores.classes.size(), 2u);
  EXPECT_EQ(m.scores.classes[1].name, "Ankle boot");
  EXPECT_EQ(m.scores.classes[1].n, 2);
  // Real pixels of the class come from the dataset: up to n_per_class samples.
  EXPECT_EQ(m.scores.classes[1].data_pixels.n_images, 2);
  EXPECT_GT(m.scores.classes[1].data_pixels.mean, 0.05);
  // An untrained DiT predicts zero velocity: its "images" are the clamped noise, mean near 0.5.
  EXPECT_NEAR(m.scores.pixels.mean, 0.5, 0.1);
  EXPECT_THAT(error_of([&] {
                evaluate_model(model, config, *dataset, shared_classifier(), {.n_per_class = 0, .progress = false}, "x");
              }),
              HasSubstr("--n-per-class must be >= 1"));
}

}  // namespace
}  // namespace wick
