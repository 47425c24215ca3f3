// `wick example fashion-mlp | fashion-cnn`: small end-to-end trainings on Fashion-MNIST (Debian's
// dataset-fashion-mnist package) through the Keras-like API.
//
//   wick example fashion-mlp --epochs 10 --batch-size 128 --optimizer adamw --lr 2e-3
//   wick example fashion-cnn --epochs 3 --out output/fashion_cnn
//   wick example fashion-mlp --epochs 1 --limit 2000        # a quick smoke run
//
// Prints one line per epoch (loss and accuracy on the training data, then on the test set, and the
// time), the final test accuracy, and where the model was saved (<out>/model.safetensors).
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "engine/data/idx.h"
#include "engine/init.h"
#include "engine/keras/sequential.h"
#include "launch/commands.h"
#include "models/nn/basic.h"
#include "models/nn/conv.h"
#include "models/nn/linear.h"
#include "models/nn/norm.h"
#include "runtime/cpu/parallel.h"

namespace wick::launch {
namespace {

struct ExampleOptions {
  int64_t epochs = 10;
  int64_t batch_size = 128;
  std::string optimizer = "adamw";
  double lr = 2e-3;
  std::string schedule = "cosine";
  uint64_t seed = 0;
  std::string out;
  int64_t limit = 0;  // 0: every sample
};

void build_mlp(keras::Sequential& model) {
  model.add(std::make_shared<nn::Linear>(784, 128));
  model.add(std::make_shared<nn::Activation>("relu"));
  model.add(std::make_shared<nn::Linear>(128, 10));
}

// conv(1->32) GN ReLU, conv(32->32, stride 2) GN ReLU, conv(32->64, stride 2) GN ReLU, linear.
void build_cnn(keras::Sequential& model) {
  auto conv_block = [&](int64_t in, int64_t out, int64_t stride) {
    model.add(std::make_shared<nn::Conv2d>(in, out, 3, nn::Conv2dOptions{.stride = stride, .padding = 1}));
    model.add(std::make_shared<nn::GroupNorm>(8, out));
    model.add(std::make_shared<nn::Activation>("relu"));
  };
  conv_block(1, 32, 1);
  conv_block(32, 32, 2);
  conv_block(32, 64, 2);
  model.add(std::make_shared<nn::Flatten>());
  model.add(std::make_shared<nn::Linear>(64 * 7 * 7, 10));
}

FashionMnist load_split(const std::string& split, int64_t limit, bool images_2d) {
  FashionMnist data = load_fashion_mnist(split);
  if (limit > 0 && limit < data.images.size(0)) {
    data.images = data.images.narrow(0, 0, limit);
    data.labels = data.labels.narrow(0, 0, limit);
  }
  if (images_2d) data.images = data.images.reshape({data.images.size(0), 1, 28, 28});
  return data;
}

void run_example(const std::string& name, const ExampleOptions& o) {
  bool cnn = name == "fashion-cnn";
  std::string out_dir = o.out.empty() ? (cnn ? "output/fashion_cnn" : "output/fashion_mlp") : o.out;
  FashionMnist train = load_split("train", o.limit, cnn);
  FashionMnist test = load_split("test", o.limit, cnn);
  std::printf("%s: Fashion-MNIST from %s, %lld training and %lld test images, %d CPU threads\n", name.c_str(),
              fashion_mnist_dir().c_str(), static_cast<long long>(train.images.size(0)),
              static_cast<long long>(test.images.size(0)), cpu::max_threads());

  set_init_seed(o.seed);
  keras::Sequential model;
  if (cnn)
    build_cnn(model);
  else
    build_mlp(model);
  model.summary(cnn ? Shape{1, 28, 28} : Shape{784});
  model.compile({.optimizer = o.optimizer, .learning_rate = o.lr, .lr_schedule = o.schedule, .loss = "cross_entropy",
                 .metrics = {"accuracy"}});
  std::printf("optimizer %s, lr %g (%s), batch size %lld, %lld epochs (val_* = the test set)\n", o.optimizer.c_str(),
              o.lr, o.schedule.c_str(), static_cast<long long>(o.batch_size), static_cast<long long>(o.epochs));
  keras::History history = model.fit(train.images, train.labels,
                                     {.epochs = o.epochs, .batch_size = o.batch_size, .validation_x = test.images,
                                      .validation_y = test.labels, .shuffle = true, .seed = o.seed, .verbose = 1});
  double total_seconds = 0.0;
  for (double s : history.epoch_seconds) total_seconds += s;
  std::map<std::string, double> result =
      history.epochs_run() > 0 ? std::map<std::string, double>{{"loss", history["val_loss"].back()},
                                                               {"accuracy", history["val_accuracy"].back()}}
                               : model.evaluate(test.images, test.labels, 512);
  std::printf("test accuracy: %.4f (loss %.4f) after %lld epochs, %.1fs per epoch\n", result["accuracy"],
              result["loss"], static_cast<long long>(history.epochs_run()),
              history.epochs_run() > 0 ? total_seconds / static_cast<double>(history.epochs_run()) : 0.0);
  std::filesystem::create_directories(out_dir);
  std::string path = (std::filesystem::path(out_dir) / "model.safetensors").string();
  model.save(path);
  std::printf("saved the model to %s\n", path.c_str());
}

}  // namespace

void add_example_command(CLI::App& app) {
  CLI::App* example = app.add_subcommand("example", "Small end-to-end trainings (Fashion-MNIST)");
  example->require_subcommand(1);
  auto options = std::make_shared<ExampleOptions>();
  for (const char* name : {"fashion-mlp", "fashion-cnn"}) {
    bool cnn = std::string(name) == "fashion-cnn";
    CLI::App* sub = example->add_subcommand(
        name, cnn ? "Conv2d + GroupNorm classifier on Fashion-MNIST (Keras-like API)"
                  : "784-128-10 MLP on Fashion-MNIST (Keras-like API)");
    sub->add_option("--epochs", options->epochs, "Epochs")->capture_default_str()->check(CLI::NonNegativeNumber);
    sub->add_option("--batch-size", options->batch_size, "Samples per step")->capture_default_str()->check(CLI::PositiveNumber);
    sub->add_option("--optimizer", options->optimizer, "Optimizer")
        ->capture_default_str()
        ->check(CLI::IsMember({"adamw", "adamw8bit", "sgd"}));
    sub->add_option("--lr", options->lr, "Learning rate (the peak of the schedule)")->capture_default_str();
    sub->add_option("--schedule", options->schedule, "Learning-rate schedule over the whole run (constant, cosine, ...)")
        ->capture_default_str();
    sub->add_option("--seed", options->seed, "Seed of the initialization and of the shuffles")->capture_default_str();
    sub->add_option("--out", options->out, cnn ? "Output folder (default output/fashion_cnn)"
                                               : "Output folder (default output/fashion_mlp)");
    sub->add_option("--limit", options->limit, "Use only the first N training and test images (0: all)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    std::string sub_name = name;
    sub->callback([options, sub_name] { run_example(sub_name, *options); });
  }
}

}  // namespace wick::launch
