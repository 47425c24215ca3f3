// The Keras-like API: compile-time name checks, fit on a separable toy problem, validation split,
// determinism, save/load, callbacks, predict without a graph, metrics and the summary.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/error_of.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <unistd.h>

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/init.h"
#include "engine/keras/batching.h"
#include "engine/keras/losses.h"
#include "engine/keras/sequential.h"
#include "models/nn/basic.h"
#include "models/nn/linear.h"
#include "runtime/error.h"
#include "runtime/ops/random.h"

namespace wick {
namespace {

using ::testing::FloatNear;
using ::testing::HasSubstr;
using ::testing::Pointwise;

using wick::testing::error_of;

// Two well separated classes in the plane: label = (x0 + x1 > 0), pushed 0.75 away from the line.
struct Toy {
  Tensor x, y;
};
Toy make_toy(int64_t n, uint64_t seed = 1) {
  std::vector<float> points = randn({n, 2}, derive_stream(seed, 0, 0, RngPurpose::Test)).to_vector<float>();
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    float* p = points.data() + 2 * i;
    bool positive = p[0] + p[1] > 0.0f;
    labels[static_cast<size_t>(i)] = positive ? 1 : 0;
    p[0] += positive ? 0.75f : -0.75f;
    p[1] += positive ? 0.75f : -0.75f;
  }
  return {Tensor::from_vector<float>(points, {n, 2}), Tensor::from_vector<int64_t>(labels, {n})};
}

std::unique_ptr<keras::Sequential> make_mlp(uint64_t init_seed, double dropout = 0.0) {
  set_init_seed(init_seed);
  auto model = std::make_unique<keras::Sequential>();
  model->add(std::make_shared<nn::Linear>(2, 16));
  model->add(std::make_shared<nn::Activation>("relu"));
  if (dropout > 0.0) model->add(std::make_shared<nn::Dropout>(dropout));
  model->add(std::make_shared<nn::Linear>(16, 2));
  return model;
}

std::vector<std::vector<float>> parameter_values(const keras::Model& model) {
  std::vector<std::vector<float>> out;
  for (const auto& [name, tensor] : model.module().named_parameters()) out.push_back(tensor.to_vector<float>());
  return out;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("wick_keras_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

TEST(Keras, CompileRejectsUnknownNamesListingValidOnes) {
  auto model = make_mlp(0);
  std::string optimizer = error_of([&] { model->compile({.optimizer = "adam"}); });
  EXPECT_THAT(optimizer, HasSubstr("unknown optimizer \"adam\""));
  EXPECT_THAT(optimizer, HasSubstr("adamw8bit"));
  std::string loss = error_of([&] { model->compile({.loss = "hinge"}); });
  EXPECT_THAT(loss, HasSubstr("unknown loss \"hinge\""));
  EXPECT_THAT(loss, HasSubstr("bce_with_logits, cross_entropy, mse"));
  std::string metric = error_of([&] { model->compile({.metrics = {"accuracy", "f1"}}); });
  EXPECT_THAT(metric, HasSubstr("unknown metric \"f1\""));
  EXPECT_THAT(metric, HasSubstr("mae"));
  std::string schedule = error_of([&] { model->compile({.lr_schedule = "exponential"}); });
  EXPECT_THAT(schedule, HasSubstr("exponential"));
  EXPECT_THAT(schedule, HasSubstr("cosine"));
  EXPECT_FALSE(model->compiled());
  EXPECT_THAT(error_of([&] { model->fit(make_toy(8).x, make_toy(8).y); }), HasSubstr("compile()"));
  try {
    model->compile({.loss = "hinge"});
    FAIL() << "no error";
  } catch (const WickError& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Config);
  }
}

TEST(Keras, FitSolvesASeparableProblem) {
  Toy toy = make_toy(64);
  auto model = make_mlp(3);
  model->compile({.optimizer = "adamw", .learning_rate = 0.05});
  keras::History history = model->fit(toy.x, toy.y, {.epochs = 30, .batch_size = 16, .verbose = 0});
  ASSERT_EQ(history.epochs_run(), 30);
  const std::vector<double>& loss = history["loss"];
  EXPECT_LT(loss.back(), 0.1 * loss.front());
  EXPECT_DOUBLE_EQ(history["accuracy"].back(), 1.0);
  std::map<std::string, double> result = model->evaluate(toy.x, toy.y, 10);
  EXPECT_DOUBLE_EQ(result.at("accuracy"), 1.0);
  EXPECT_LT(result.at("loss"), 0.05);
  EXPECT_THAT(error_of([&] { (void)history["val_loss"]; }), HasSubstr("accuracy, loss"));
}

TEST(Keras, FitWorksWithEachOptimizerAndLoss) {
  Toy toy = make_toy(64);
  for (const char* optimizer : {"sgd", "adamw8bit"}) {
    auto model = make_mlp(3);
    model->compile({.optimizer = optimizer, .learning_rate = std::string(optimizer) == "sgd" ? 0.2 : 0.05,
                    .lr_schedule = "cosine", .warmup_steps = 4, .max_grad_norm = 1.0});
    keras::History h = model->fit(toy.x, toy.y, {.epochs = 30, .batch_size = 16, .verbose = 0});
    EXPECT_LT(h["loss"].back(), 0.3 * h["loss"].front()) << optimizer;
    EXPECT_EQ(model->optimizer()->steps_taken(), 30 * 4) << optimizer;
  }
  // bce_with_logits on one logit per sample, with float targets [N, 1].
  set_init_seed(4);
  keras::Sequential model({std::make_shared<nn::Linear>(2, 1)});
  model.compile({.learning_rate = 0.1, .loss = "bce_with_logits", .metrics = {"accuracy", "mae"}});
  Tensor targets = toy.y.to(DType::F32).reshape({64, 1});
  keras::History h = model.fit(toy.x, targets, {.epochs = 40, .batch_size = 16, .verbose = 0});
  EXPECT_DOUBLE_EQ(h["accuracy"].back(), 1.0);
  EXPECT_EQ(h.history.count("mae"), 1u);
}

TEST(Keras, ValidationSplitTakesTheLastFraction) {
  EXPECT_EQ(keras::split_point(10, 0.25), 7);  // Keras: int(10 * 0.75)
  EXPECT_EQ(keras::split_point(100, 0.1), 90);
  Toy toy = make_toy(40);
  auto model = make_mlp(2);
  // lr 0: the parameters never change, so val_loss must equal the loss on the held-out samples.
  model->compile({.optimizer = "sgd", .learning_rate = 0.0});
  keras::History history = model->fit(toy.x, toy.y, {.epochs = 1, .batch_size = 8, .validation_split = 0.25,
                                                     .verbose = 0});
  // fit evaluates in batches of its batch_size.
  std::map<std::string, double> last = model->evaluate(toy.x.narrow(0, 30, 10), toy.y.narrow(0, 30, 10), 8);
  std::map<std::string, double> first = model->evaluate(toy.x.narrow(0, 0, 10), toy.y.narrow(0, 0, 10), 8);
  EXPECT_DOUBLE_EQ(history["val_loss"][0], last.at("loss"));
  EXPECT_DOUBLE_EQ(history["val_accuracy"][0], last.at("accuracy"));
  EXPECT_NE(history["val_loss"][0], first.at("loss"));
  // 30 training samples in batches of 8: 4 steps.
  EXPECT_EQ(model->optimizer()->steps_taken(), 4);
  EXPECT_THAT(error_of([&] { model->fit(toy.x, toy.y, {.validation_split = 1.0, .verbose = 0}); }),
              HasSubstr("validation_split"));
}

TEST(Keras, ShuffleIsAPermutationFixedBySeedAndEpoch) {
  std::vector<int64_t> a = keras::shuffled_order(1000, 7, 0);
  std::set<int64_t> unique(a.begin(), a.end());
  EXPECT_EQ(unique.size(), 1000u);
  EXPECT_EQ(*unique.begin(), 0);
  EXPECT_EQ(*unique.rbegin(), 999);
  EXPECT_EQ(a, keras::shuffled_order(1000, 7, 0));
  EXPECT_NE(a, keras::shuffled_order(1000, 7, 1));
  EXPECT_NE(a, keras::shuffled_order(1000, 8, 0));
  // Frozen: sorted 64-bit Philox keys of derive_stream(seed, epoch, 0, Shuffle), the same on every
  // platform (values from an independent Python Philox-4x32-10).
  EXPECT_EQ(keras::shuffled_order(8, 0, 0), (std::vector<int64_t>{1, 0, 4, 6, 2, 5, 3, 7}));
  EXPECT_EQ(keras::shuffled_order(10, 3, 2), (std::vector<int64_t>{4, 9, 5, 7, 0, 6, 2, 1, 3, 8}));
}

TEST(Keras, SameSeedGivesBitwiseEqualParameters) {
  Toy toy = make_toy(48);
  auto fit_once = [&](uint64_t shuffle_seed) {
    auto model = make_mlp(11, 0.2);
    model->compile({.optimizer = "adamw", .learning_rate = 0.02});
    model->fit(toy.x, toy.y, {.epochs = 3, .batch_size = 8, .validation_split = 0.25, .seed = shuffle_seed,
                              .verbose = 0});
    return parameter_values(*model);
  };
  auto a = fit_once(5), b = fit_once(5), c = fit_once(6);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(bitwise_equal(a[i], b[i])) << "parameter " << i;
  bool any_different = false;
  for (size_t i = 0; i < a.size(); ++i) any_different = any_different || !bitwise_equal(a[i], c[i]);
  EXPECT_TRUE(any_different) << "the shuffle seed changed nothing";
}

TEST(Keras, SaveLoadRoundTripGivesIdenticalPredictions) {
  Toy toy = make_toy(32);
  auto model = make_mlp(1);
  model->compile({.optimizer = "adamw", .learning_rate = 0.05, .loss = "cross_entropy", .metrics = {"accuracy"}});
  model->fit(toy.x, toy.y, {.epochs = 2, .batch_size = 8, .verbose = 0});
  std::string path = temp_path("model.safetensors");
  model->save(path);

  auto restored = make_mlp(99);  // different initial weights
  std::vector<float> before = restored->predict(toy.x).to_vector<float>();
  std::vector<float> expected = model->predict(toy.x).to_vector<float>();
  ASSERT_FALSE(bitwise_equal(before, expected));
  restored->load(path);
  // Bitwise at the same batch size; another batch size changes the matrix shapes the BLAS sees, and
  // with them its blocking and summation order, so only rounding-level agreement holds.
  EXPECT_TRUE(bitwise_equal(restored->predict(toy.x).to_vector<float>(), expected));
  EXPECT_THAT(restored->predict(toy.x, 5).to_vector<float>(), Pointwise(FloatNear(1e-5f), expected));
  ASSERT_TRUE(restored->compiled());  // from the file's metadata
  EXPECT_EQ(restored->compile_options().loss, "cross_entropy");
  EXPECT_DOUBLE_EQ(restored->compile_options().learning_rate, 0.05);
  EXPECT_DOUBLE_EQ(restored->evaluate(toy.x, toy.y).at("loss"), model->evaluate(toy.x, toy.y).at("loss"));
  // The loaded parameters stay trainable, in the same tensors.
  for (const auto& [name, tensor] : restored->module().named_parameters())
    EXPECT_TRUE(autograd::requires_grad(tensor)) << name;
  restored->fit(toy.x, toy.y, {.epochs = 1, .batch_size = 8, .verbose = 0});

  set_init_seed(0);
  keras::Sequential other({std::make_shared<nn::Linear>(2, 3)});
  std::string error = error_of([&] { other.load(path); });
  EXPECT_THAT(error, HasSubstr("0.weight"));
  std::filesystem::remove(path);
}

TEST(Keras, EarlyStoppingStopsAfterPatienceEpochs) {
  Toy toy = make_toy(16);
  auto model = make_mlp(1);
  model->compile({.optimizer = "sgd", .learning_rate = 0.0});  // the loss never improves
  auto stop = std::make_shared<keras::EarlyStopping>("loss", /*patience=*/2);
  keras::History history = model->fit(toy.x, toy.y, {.epochs = 20, .batch_size = 8, .shuffle = false, .verbose = 0,
                                                     .callbacks = {stop}});
  EXPECT_EQ(history.epochs_run(), 3);  // epoch 0 is the best; epochs 1 and 2 do not improve
  EXPECT_EQ(stop->stopped_epoch(), 2);
  EXPECT_EQ(stop->best_epoch(), 0);

  auto missing = std::make_shared<keras::EarlyStopping>("val_loss", 1);
  std::string error = error_of([&] { model->fit(toy.x, toy.y, {.epochs = 2, .verbose = 0, .callbacks = {missing}}); });
  EXPECT_THAT(error, HasSubstr("\"val_loss\" is not logged"));
}

TEST(Keras, EarlyStoppingRestoresTheBestWeights) {
  Toy toy = make_toy(32);
  auto model = make_mlp(1);
  model->compile({.optimizer = "sgd", .learning_rate = 5.0});  // diverges after the first epochs
  auto stop = std::make_shared<keras::EarlyStopping>("loss", 1, 0.0, "auto", true);
  std::vector<std::vector<float>> best;
  struct Snapshot : keras::Callback {
    std::vector<std::vector<std::vector<float>>> per_epoch;
    void on_epoch_end(keras::Model& m, int64_t, const keras::Logs&) override { per_epoch.push_back(parameter_values(m)); }
  };
  auto snapshot = std::make_shared<Snapshot>();
  model->fit(toy.x, toy.y, {.epochs = 30, .batch_size = 8, .verbose = 0, .callbacks = {snapshot, stop}});
  ASSERT_GE(stop->best_epoch(), 0);
  auto restored = parameter_values(*model);
  const auto& expected = snapshot->per_epoch[static_cast<size_t>(stop->best_epoch())];
  for (size_t i = 0; i < restored.size(); ++i) EXPECT_TRUE(bitwise_equal(restored[i], expected[i]));
}

TEST(Keras, CallbackCanStopAfterABatch) {
  struct StopAtBatch : keras::Callback {
    int64_t batches = 0;
    void on_batch_end(keras::Model& model, int64_t batch, const keras::Logs& logs) override {
      EXPECT_EQ(logs.count("loss"), 1u);
      if (++batches == 3) model.request_stop();
    }
  };
  Toy toy = make_toy(64);
  auto model = make_mlp(1);
  model->compile();
  auto cb = std::make_shared<StopAtBatch>();
  keras::History history = model->fit(toy.x, toy.y, {.epochs = 5, .batch_size = 8, .verbose = 0, .callbacks = {cb}});
  EXPECT_EQ(cb->batches, 3);
  EXPECT_EQ(history.epochs_run(), 1);
  EXPECT_EQ(model->optimizer()->steps_taken(), 3);
}

TEST(Keras, MetricsLoggerWritesCsvAndJsonLines) {
  Toy toy = make_toy(16);
  auto model = make_mlp(1);
  model->compile({.metrics = {"accuracy"}});
  std::string csv = temp_path("log.csv"), jsonl = temp_path("log.jsonl");
  model->fit(toy.x, toy.y, {.epochs = 3, .batch_size = 8, .validation_split = 0.5, .verbose = 0,
                            .callbacks = {std::make_shared<keras::MetricsLogger>(csv),
                                          std::make_shared<keras::MetricsLogger>(jsonl)}});
  std::ifstream csv_in(csv), jsonl_in(jsonl);
  std::vector<std::string> csv_lines, jsonl_lines;
  for (std::string line; std::getline(csv_in, line);) csv_lines.push_back(line);
  for (std::string line; std::getline(jsonl_in, line);) jsonl_lines.push_back(line);
  ASSERT_EQ(csv_lines.size(), 4u);
  EXPECT_EQ(csv_lines[0], "epoch,accuracy,loss,val_accuracy,val_loss");
  EXPECT_EQ(csv_lines[3].substr(0, 2), "2,");
  ASSERT_EQ(jsonl_lines.size(), 3u);
  EXPECT_THAT(jsonl_lines[1], HasSubstr("{\"epoch\": 1, \"accuracy\": "));
  EXPECT_THAT(jsonl_lines[1], HasSubstr("\"val_loss\": "));
  std::filesystem::remove(csv);
  std::filesystem::remove(jsonl);
}

TEST(Keras, PredictRunsInEvalModeWithoutAGraph) {
  Toy toy = make_toy(20);
  auto model = make_mlp(2, /*dropout=*/0.5);
  model->module().train();
  ASSERT_TRUE(autograd::grad_enabled());
  Tensor a = model->predict(toy.x, 7), b = model->predict(toy.x);
  EXPECT_FALSE(autograd::requires_grad(a));
  EXPECT_EQ(autograd::grad_fn(a), nullptr);
  EXPECT_EQ(a.shape(), (Shape{20, 2}));
  // Dropout off: equal up to the summation order that batch size 7 vs 20 gives the BLAS.
  EXPECT_THAT(a.to_vector<float>(), Pointwise(FloatNear(1e-5f), b.to_vector<float>()));
  EXPECT_TRUE(model->module().is_training());  // restored
  EXPECT_TRUE(autograd::grad_enabled());
  // Equal to an eval-mode forward; a training-mode forward (dropout on) differs and records a graph.
  model->module().eval();
  Tensor eval_out = model->module().forward(toy.x);
  model->module().train();
  EXPECT_TRUE(bitwise_equal(b.to_vector<float>(), eval_out.to_vector<float>()));  // one batch of 20 both times
  Tensor train_out = model->module().forward(toy.x);
  EXPECT_NE(autograd::grad_fn(train_out), nullptr);
  EXPECT_FALSE(bitwise_equal(a.to_vector<float>(), train_out.to_vector<float>()));
}

TEST(Keras, MetricValues) {
  Tensor logits = Tensor::from_vector<float>({2, 1, 0, 0, 3, 1, 5, 0, 9, 1, 1, 0}, {4, 3});
  Tensor labels = Tensor::from_vector<int64_t>({0, 1, 0, 1}, {4});
  auto accuracy = keras::make_metric("accuracy", "cross_entropy");
  accuracy->update(logits, labels);
  EXPECT_DOUBLE_EQ(accuracy->result(), 0.5);  // rows pick 0, 1, 2, 0 (the first of a tie)
  accuracy->update(logits.narrow(0, 0, 2), labels.narrow(0, 0, 2));
  EXPECT_DOUBLE_EQ(accuracy->result(), 4.0 / 6.0);
  auto probabilities = keras::make_metric("accuracy", "cross_entropy");
  probabilities->update(logits, Tensor::from_vector<float>({1, 0, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0}, {4, 3}));
  EXPECT_DOUBLE_EQ(probabilities->result(), 0.75);  // target argmax 0, 2, 2, 0
  accuracy->reset();
  EXPECT_DOUBLE_EQ(accuracy->result(), 0.0);

  auto binary = keras::make_metric("acc", "bce_with_logits");
  binary->update(Tensor::from_vector<float>({-1.0f, 0.5f, 2.0f, -0.1f}, {4}), Tensor::from_vector<float>({0, 1, 0, 1}, {4}));
  EXPECT_DOUBLE_EQ(binary->result(), 0.5);
  EXPECT_EQ(binary->name(), "accuracy");

  Tensor pred = Tensor::from_vector<float>({1.0f, 2.0f, 4.0f}, {3}), target = Tensor::from_vector<float>({0, 2, 1}, {3});
  auto mae = keras::make_metric("mae", "mse"), mse = keras::make_metric("mse", "mse");
  mae->update(pred, target);
  mse->update(pred, target);
  EXPECT_DOUBLE_EQ(mae->result(), 4.0 / 3.0);
  EXPECT_DOUBLE_EQ(mse->result(), 10.0 / 3.0);

  // The mse loss accepts [N] targets for [N, 1] predictions.
  Tensor loss = keras::compute_loss("mse", pred.reshape({3, 1}), target);
  EXPECT_NEAR(loss.item(), 10.0 / 3.0, 1e-6);
}

TEST(Keras, SummaryListsLayersShapesAndParameterCounts) {
  auto model = make_mlp(0);
  std::string text = model->summary_string({2});
  EXPECT_THAT(text, HasSubstr("Model: Sequential"));
  EXPECT_THAT(text, HasSubstr("Linear"));
  EXPECT_THAT(text, HasSubstr("Activation(relu)"));
  EXPECT_THAT(text, HasSubstr("[N, 16]"));
  EXPECT_THAT(text, HasSubstr("[N, 2]"));
  EXPECT_THAT(text, HasSubstr("Total params: 82"));  // 2*16 + 16 + 16*2 + 2
  EXPECT_THAT(text, HasSubstr("Trainable params: 82"));
  model->module().set_trainable({"0.*"}, false);
  EXPECT_THAT(model->summary_string(), HasSubstr("Non-trainable params: 48"));
}

}  // namespace
}  // namespace wick
