// Helpers for the weights tests: a module whose parameters are given by dotted name, scratch
// folders, and tensors whose values make float arithmetic exact.
//
//   auto model = TensorTree::with_shapes({{"blocks.0.qkv.weight", {12, 4}}}, DType::F32);
//   std::filesystem::path dir = scratch_dir("weight_source");        // fresh, under the test tmp dir
//   Tensor a = dyadic({4, 8}, 7);   // multiples of 1/8 in [-1, 1]: sums of products are exact in f32
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/module.h"
#include "runtime/tensor.h"

namespace wick::testing {

class TensorTree : public Module {
 public:
  std::string type_name() const override { return "TensorTree"; }
  // A parameter at `dotted` ("a.b.weight"), creating the children on the way.
  void add(const std::string& dotted, Tensor initial) {
    const size_t dot = dotted.find('.');
    if (dot == std::string::npos) {
      slots_.push_back(std::make_unique<Tensor>());
      register_parameter(dotted, slots_.back().get(), std::move(initial), /*trainable=*/false);
      return;
    }
    const std::string head = dotted.substr(0, dot);
    auto node = std::dynamic_pointer_cast<TensorTree>(child(head));
    if (!node) node = register_module(head, std::make_shared<TensorTree>());
    node->add(dotted.substr(dot + 1), std::move(initial));
  }
  // Zero-filled parameters of the given shapes.
  static std::shared_ptr<TensorTree> with_shapes(const std::map<std::string, Shape>& shapes, DType dtype) {
    auto tree = std::make_shared<TensorTree>();
    for (const auto& [name, shape] : shapes) {
      Tensor t = Tensor::empty(shape, dtype);
      t.copy_from(Tensor::scalar(0.0));
      tree->add(name, t);
    }
    return tree;
  }

 private:
  std::vector<std::unique_ptr<Tensor>> slots_;
};

inline std::filesystem::path scratch_dir(const std::string& name) {
  std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / ("wick_weights_" + std::to_string(::getpid())) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Values k/8 for k in [-8, 8] from a small LCG: products and their sums stay exact in f32.
inline Tensor dyadic(const Shape& shape, uint64_t seed, DType dtype = DType::F32) {
  std::vector<float> values(static_cast<size_t>(numel(shape)));
  uint64_t state = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (float& v : values) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    v = static_cast<float>(static_cast<int64_t>((state >> 33) % 17) - 8) / 8.0f;
  }
  return Tensor::from_vector<float>(values, shape).to(dtype);
}

// Bitwise equality of shape, dtype and bytes.
inline bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data(), y.data(), x.nbytes()) == 0;
}

}  // namespace wick::testing
