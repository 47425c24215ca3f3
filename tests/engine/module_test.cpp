// Module tree, parameter names, trainable-or-frozen in place, loading zero-copy from safetensors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/error_of.h"

#include "engine/autograd/node.h"
#include "engine/module.h"
#include "runtime/safetensors.h"

namespace wick {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class Dense : public Module {
 public:
  Dense(int64_t in, int64_t out) {
    register_parameter("weight", &weight_, Tensor::from_vector<float>(std::vector<float>(in * out, 0.5f), {out, in}));
    register_parameter("bias", &bias_, Tensor::from_vector<float>(std::vector<float>(out, 0.0f), {out}));
  }
  std::string type_name() const override { return "Dense"; }
  Tensor weight_, bias_;
};

class Block : public Module {
 public:
  Block() {
    qkv_ = register_module("qkv", std::make_shared<Dense>(4, 12));
    proj_ = register_module("proj", std::make_shared<Dense>(4, 4));
  }
  std::shared_ptr<Dense> qkv_, proj_;
};

class Net : public Module {
 public:
  Net() {
    for (int i = 0; i < 2; ++i) register_module(std::to_string(i), std::make_shared<Block>());
    register_parameter("scale", &scale_, Tensor::from_vector<float>({1.0f}, {1}), /*trainable=*/false);
  }
  Tensor scale_;
};

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> out;
  for (const auto& [name, tensor] : named) out.push_back(name);
  return out;
}

using wick::testing::error_of;

TEST(Module, HierarchicalNamesInRegistrationOrder) {
  auto net = std::make_shared<Net>();
  EXPECT_THAT(names_of(net->named_parameters()),
              ElementsAre("scale", "0.qkv.weight", "0.qkv.bias", "0.proj.weight", "0.proj.bias", "1.qkv.weight",
                          "1.qkv.bias", "1.proj.weight", "1.proj.bias"));
  EXPECT_EQ(net->n_parameters(), 1 + 2 * (48 + 12 + 16 + 4));
  EXPECT_EQ(net->n_parameters(/*trainable_only=*/true), 2 * (48 + 12 + 16 + 4));
  std::vector<std::string> modules;
  for (auto& [name, module] : net->named_modules()) modules.push_back(name);
  EXPECT_THAT(modules, ElementsAre("", "0", "0.qkv", "0.proj", "1", "1.qkv", "1.proj"));
  EXPECT_THAT(error_of([&] { net->parameter("0.qkv.weigth"); }), HasSubstr("0.qkv.weight"));
}

TEST(Module, SetTrainableByPatternIsInPlace) {
  auto net = std::make_shared<Net>();
  net->set_all_trainable(false);
  EXPECT_TRUE(net->trainable_parameters().empty());
  Tensor& weight = net->parameter("1.qkv.weight");
  void* data = weight.data();
  uint64_t id = weight.id();
  EXPECT_EQ(net->set_trainable({"*.qkv.weight"}, true), 2);
  EXPECT_THAT(names_of(net->trainable_parameters()), ElementsAre("0.qkv.weight", "1.qkv.weight"));
  EXPECT_EQ(weight.data(), data);
  EXPECT_EQ(weight.id(), id);
  EXPECT_TRUE(autograd::requires_grad(weight));
}

TEST(Module, GlobMatching) {
  EXPECT_TRUE(glob_match("*", "a.b"));
  EXPECT_TRUE(glob_match("blocks.*.attn.*", "blocks.3.attn.qkv.weight"));
  EXPECT_FALSE(glob_match("blocks.*.attn", "blocks.3.attn.qkv"));
  EXPECT_TRUE(glob_match("a?c", "abc"));
  EXPECT_FALSE(glob_match("a?c", "ac"));
}

TEST(Module, LoadIsZeroCopyFrozenAndCanBeMadeTrainableInPlace) {
  auto source = std::make_shared<Net>();
  source->parameter("0.proj.weight").copy_from(Tensor::scalar(3.0));
  std::string path = ::testing::TempDir() + "/net.safetensors";
  save_parameters(*source, path);

  auto net = std::make_shared<Net>();
  SafetensorsFile file = SafetensorsFile::open(path);
  LoadReport report = load_parameters(*net, file);
  EXPECT_EQ(report.loaded.size(), 9u);
  Tensor& weight = net->parameter("0.proj.weight");
  EXPECT_FALSE(weight.storage()->owned()) << "same-dtype load must view the file mapping, not copy";
  const uint8_t* begin = file.mapped_data();
  auto* at = static_cast<const uint8_t*>(weight.data());
  EXPECT_TRUE(at >= begin && at < begin + file.mapped_bytes());
  EXPECT_FALSE(autograd::requires_grad(weight)) << "loaded weights are frozen by default";
  EXPECT_FLOAT_EQ(static_cast<float>(weight.to_vector<float>()[0]), 3.0f);

  void* data = weight.data();
  net->set_trainable({"0.proj.weight"}, true);
  EXPECT_TRUE(autograd::requires_grad(weight));
  EXPECT_EQ(weight.data(), data) << "making a loaded parameter trainable must not copy it";
  weight.copy_from(Tensor::scalar(5.0));  // an optimizer update writes in place (copy-on-write page)
  EXPECT_EQ(weight.data(), data);
  EXPECT_FLOAT_EQ(SafetensorsFile::open(path).get("0.proj.weight").to_vector<float>()[0], 3.0f);
}

TEST(Module, LoadReportsMissingUnexpectedAndShapeErrors) {
  std::string path = ::testing::TempDir() + "/partial.safetensors";
  save_safetensors(path, {{"0.qkv.weight", Tensor::from_vector<float>(std::vector<float>(48, 1.0f), {12, 4})},
                          {"extra", Tensor::from_vector<float>({1.0f}, {1})}}, {});
  auto net = std::make_shared<Net>();
  SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_THAT(error_of([&] { load_parameters(*net, file); }), HasSubstr("missing"));
  LoadReport report = load_parameters(*net, file, /*strict=*/false);
  EXPECT_THAT(report.loaded, ElementsAre("0.qkv.weight"));
  EXPECT_THAT(report.unexpected, ElementsAre("extra"));
  EXPECT_EQ(report.missing.size(), 8u);

  std::string bad = ::testing::TempDir() + "/bad_shape.safetensors";
  save_safetensors(bad, {{"0.qkv.weight", Tensor::from_vector<float>(std::vector<float>(48, 1.0f), {4, 12})}}, {});
  EXPECT_THAT(error_of([&] { load_parameters(*net, SafetensorsFile::open(bad), false); }), HasSubstr("expects [12, 4]"));
}

TEST(Module, CastingLoadCopiesAndConverts) {
  std::string path = ::testing::TempDir() + "/bf16.safetensors";
  save_safetensors(path, {{"weight", Tensor::from_vector<float>(std::vector<float>(8, 1.5f), {2, 4}).to(DType::BF16)},
                          {"bias", Tensor::from_vector<float>({1, 2}, {2})}}, {});
  auto dense = std::make_shared<Dense>(4, 2);
  load_parameters(*dense, SafetensorsFile::open(path));
  EXPECT_EQ(dense->weight_.dtype(), DType::F32);
  EXPECT_TRUE(dense->weight_.storage()->owned());
  EXPECT_FLOAT_EQ(dense->weight_.to_vector<float>()[7], 1.5f);
}

TEST(Module, TrainEvalPropagates) {
  auto net = std::make_shared<Net>();
  net->eval();
  for (auto& [name, module] : net->named_modules()) EXPECT_FALSE(module->is_training()) << name;
  net->train();
  EXPECT_TRUE(net->child("1")->child("qkv")->is_training());
}

}  // namespace
}  // namespace wick
