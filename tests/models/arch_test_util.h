// Helpers of the tables over the architectures (arch_parity_test.cpp, arch_weights_test.cpp,
// arch_sampler_test.cpp) and of the tests that only one architecture has: the error metrics the tests print,
// the adapter paths of a PEFT fixture, the fixtures' folder.
//
//   double e = relative_to_max(out, file.get("output"));   // max |got - want| / max |want|
//   std::vector<std::string> paths = lora_paths(file, "bfl.");   // "bfl.<path>.lora_down" -> "<path>", sorted
//   std::string p = data_path("flux/dev_bfl.safetensors");        // under tests/data
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/autograd/backward.h"
#include "engine/autograd/node.h"
#include "runtime/ops/creation.h"
#include "runtime/safetensors.h"
#include "runtime/tensor.h"
#include "tests/test_data.h"

namespace wick::testing {

inline std::string data_path(const std::string& name) { return test_data_dir() + "/" + name; }

// max_i |got_i - want_i| / max_i |want_i| (the absolute maximum when want is all zeros); 1e9 and a failure when
// the shapes differ.
inline double relative_to_max(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  if (got.shape() != want.shape()) return 1e9;
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double worst = 0, scale = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    worst = std::max(worst, std::fabs(g[i] - w[i]));
    scale = std::max(scale, std::fabs(w[i]));
  }
  return scale > 0 ? worst / scale : worst;
}

// max_i |got_i - want_i|; 1e9 and a failure when the shapes differ.
inline double max_abs_difference(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.shape(), want.shape());
  if (got.shape() != want.shape()) return 1e9;
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::fabs(g[i] - w[i]));
  return worst;
}

// The module paths of a PEFT parity fixture's adapters: "<prefix><path>.lora_down" -> "<path>", sorted.
inline std::vector<std::string> lora_paths(const SafetensorsFile& file, const std::string& prefix) {
  std::vector<std::string> paths;
  const std::string suffix = ".lora_down";
  for (const std::string& name : file.names())
    if (name.rfind(prefix, 0) == 0 && name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      paths.push_back(name.substr(prefix.size(), name.size() - prefix.size() - suffix.size()));
  std::sort(paths.begin(), paths.end());
  return paths;
}

// Writes `value` (reshaped) into a parameter slot, outside autograd.
inline void copy_into_slot(Tensor& slot, const Tensor& value) {
  autograd::detach(slot).copy_from(value.reshape(slot.shape()));
}

// Every tensor's shape by name (a SafetensorsFile or a WeightSource).
template <typename Source>
std::map<std::string, Shape> file_shapes(const Source& source) {
  std::map<std::string, Shape> out;
  for (const std::string& name : source.names()) out[name] = source.info(name).shape;
  return out;
}

// An adapter factor's gradient: a factor that no path from the loss reaches (Qwen-Image's last block's text-only
// Linears: only the image stream is output) gets none, or zeros from a checkpoint's recomputation; both read as zeros
// of the factor's shape, so that runs with and without checkpointing compare equal.
inline Tensor gradient_or_zeros(const autograd::GradientStore& grads, const Tensor& slot) {
  const Tensor grad = grads.get(slot);
  return grad.defined() ? grad : zeros_like(autograd::detach(slot));
}

// max-relative error of an adapter gradient against the reference's `key` (reshaped to it). A reference without
// `key` (PEFT's fixtures store none for a factor the loss does not reach) wants exactly zero: 0 if so, else 1e9 and a
// failure.
inline double gradient_error(const Tensor& grad, const SafetensorsFile& reference, const std::string& key) {
  if (!reference.contains(key)) {
    const double largest = max_abs_difference(grad, zeros_like(grad));
    EXPECT_EQ(largest, 0.0) << key << ": the reference has no gradient (the loss does not reach it)";
    return largest == 0.0 ? 0.0 : 1e9;
  }
  const Tensor want = reference.get(key);
  return relative_to_max(grad.reshape(want.shape()), want);
}

// Whether t's data lies in file's memory mapping (a zero-copy view of it).
inline bool in_mapping(const Tensor& t, const SafetensorsFile& file) {
  auto* data = static_cast<const uint8_t*>(t.data());
  return data >= file.mapped_data() && data < file.mapped_data() + file.mapped_bytes();
}

}  // namespace wick::testing
