#include "tests/runtime/op_harness.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <sstream>

namespace wick::testing {

Tolerance defaults_for(DType dtype) {
  switch (dtype) {
    case DType::F64: return {1e-12, 1e-12};
    case DType::F32: return {1e-5, 1e-5};
    case DType::BF16: return {1e-2, 1e-2};
    case DType::F16: return {2e-3, 2e-3};
    default: return {0, 0};
  }
}

RefTensor ref_like(const Shape& shape, double fill) {
  return {shape, std::vector<double>(static_cast<size_t>(wick::numel(shape)), fill)};
}

RefTensor map(const RefTensor& x, const std::function<double(double)>& fn) {
  RefTensor out = x;
  for (double& v : out.values) v = fn(v);
  return out;
}

int64_t linear_index(const Shape& shape, const std::vector<int64_t>& coords) {
  int64_t at = 0;
  for (size_t i = 0; i < shape.size(); ++i) at = at * shape[i] + coords[i];
  return at;
}

std::vector<int64_t> coords_of(const Shape& shape, int64_t linear) {
  std::vector<int64_t> coords(shape.size());
  for (size_t i = shape.size(); i-- > 0;) {
    coords[i] = linear % shape[i];
    linear /= shape[i];
  }
  return coords;
}

RefTensor zip(const RefTensor& a, const RefTensor& b, const std::function<double(double, double)>& fn) {
  Shape shape = broadcast_shapes(a.shape, b.shape, "zip");
  RefTensor out = ref_like(shape);
  auto source_index = [&](const Shape& source, const std::vector<int64_t>& coords) {
    std::vector<int64_t> c(source.size());
    size_t lead = shape.size() - source.size();
    for (size_t i = 0; i < source.size(); ++i) c[i] = source[i] == 1 ? 0 : coords[lead + i];
    return linear_index(source, c);
  };
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto coords = coords_of(shape, i);
    out.at(i) = fn(a.at(source_index(a.shape, coords)), b.at(source_index(b.shape, coords)));
  }
  return out;
}

RefTensor to_ref(const Tensor& tensor) { return {tensor.shape(), tensor.to_vector<double>()}; }

double round_to(DType dtype, double value) {
  switch (dtype) {
    case DType::F32: return static_cast<float>(value);
    case DType::BF16: return bf16_to_f32(f32_to_bf16(static_cast<float>(value)));
    case DType::F16: return f16_to_f32(f32_to_f16(static_cast<float>(value)));
    default: return value;
  }
}

std::vector<std::pair<std::string, std::vector<OpCase> (*)()>>& op_case_registry() {
  static std::vector<std::pair<std::string, std::vector<OpCase> (*)()>> registry;
  return registry;
}

void register_op_cases(const std::string& family, std::vector<OpCase> (*make)()) {
  op_case_registry().emplace_back(family, make);
}

namespace {

Tolerance tolerance_for(const std::vector<std::pair<DType, Tolerance>>& table, DType dtype) {
  for (const auto& [d, t] : table)
    if (d == dtype) return t;
  return defaults_for(dtype);
}

// Builds one input in `dtype`, and its float64 reference holding exactly the stored values.
std::pair<Tensor, RefTensor> make_input(const InputSpec& spec, DType dtype, std::mt19937_64& rng) {
  int64_t n = wick::numel(spec.shape);
  std::uniform_real_distribution<double> uniform(spec.low, spec.high);
  std::vector<double> values(static_cast<size_t>(n));
  for (double& v : values) {
    v = uniform(rng);
    if (spec.integer) v = std::floor(v);
    v = round_to(dtype, v);
  }
  Tensor tensor;
  if (spec.non_contiguous && n > 0) {
    // Interleave with poison so any read of the gaps shows up as NaN (or a huge integer).
    std::vector<double> padded(static_cast<size_t>(2 * n), is_floating(dtype) ? std::nan("") : 1e6);
    for (int64_t i = 0; i < n; ++i) padded[static_cast<size_t>(2 * i)] = values[static_cast<size_t>(i)];
    Tensor buffer = Tensor::from_vector<double>(padded, {2 * n}).to(dtype);
    tensor = buffer.slice(0, 0, 2 * n, 2).view(spec.shape);
  } else {
    tensor = Tensor::from_vector<double>(values, spec.shape).to(dtype);
  }
  return {tensor, RefTensor{spec.shape, values}};
}

std::string compare(const Shape& got_shape, const std::vector<double>& got, const RefTensor& want, Tolerance tol,
                    bool exact) {
  std::ostringstream report;
  if (got_shape != want.shape) {
    report << "shape " << shape_string(got_shape) << " != expected " << shape_string(want.shape);
    return report.str();
  }
  int64_t n_bad = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double g = got[i], w = want.values[i];
    bool ok;
    if (std::isnan(w))
      ok = std::isnan(g);
    else if (std::isinf(w))
      ok = g == w;
    else if (exact)
      ok = g == w;
    else
      ok = std::fabs(g - w) <= tol.atol + tol.rtol * std::fabs(w);
    if (!ok) {
      if (n_bad < 5)
        report << "  [" << shape_string(coords_of(want.shape, static_cast<int64_t>(i))) << "] got " << g
               << " want " << w << "\n";
      ++n_bad;
    }
    if (std::isfinite(g) && std::isfinite(w)) worst = std::max(worst, std::fabs(g - w));
  }
  if (n_bad == 0) return "";
  std::ostringstream header;
  header << n_bad << " of " << got.size() << " elements off (atol " << tol.atol << ", rtol " << tol.rtol
         << ", max |diff| " << worst << "):\n";
  return header.str() + report.str();
}

class OpCaseTest : public ::testing::Test {
 public:
  OpCaseTest(OpCase op_case, DType dtype, bool on_cuda) : case_(std::move(op_case)), dtype_(dtype), cuda_(on_cuda) {}

  void TestBody() override {
    if (cuda_ && cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: CUDA op test not run on this machine";
    std::mt19937_64 rng(std::hash<std::string>{}(case_.name) ^ static_cast<uint64_t>(dtype_));
    Inputs inputs;
    RefInputs refs;
    for (const InputSpec& spec : case_.inputs) {
      auto [tensor, ref] = make_input(spec, spec.dtype.value_or(dtype_), rng);
      inputs.push_back(tensor);
      refs.push_back(ref);
    }
    Outputs cpu_out = case_.run(inputs);
    if (!cuda_) {
      RefOutputs want = case_.reference(refs);
      ASSERT_EQ(cpu_out.size(), want.size()) << "number of outputs";
      Tolerance tol = tolerance_for(case_.cpu_tolerance, dtype_);
      for (size_t k = 0; k < want.size(); ++k) {
        std::string problem = compare(cpu_out[k].shape(), cpu_out[k].to_vector<double>(), want[k], tol, case_.exact);
        EXPECT_TRUE(problem.empty()) << case_.name << " (" << dtype_name(dtype_) << ") output " << k
                                     << " vs float64 reference: " << problem;
      }
      return;
    }
    Inputs device_inputs;
    for (const Tensor& t : inputs) {
      // Keep the layout under test: a strided input stays strided on the GPU.
      Tensor on_device;
      if (t.is_contiguous() || t.numel() == 0) {
        on_device = t.to(Device::cuda(0));
      } else {
        Tensor wide = Tensor::empty({2 * t.numel()}, t.dtype(), Device::cuda(0));
        on_device = wide.slice(0, 0, 2 * t.numel(), 2).view(t.shape());
        on_device.copy_from(t);
      }
      device_inputs.push_back(on_device);
    }
    Outputs cuda_out = case_.run(device_inputs);
    ASSERT_EQ(cuda_out.size(), cpu_out.size());
    Tolerance tol = tolerance_for(case_.cuda_tolerance, dtype_);
    for (size_t k = 0; k < cpu_out.size(); ++k) {
      EXPECT_TRUE(cuda_out[k].device().is_cuda()) << "output " << k << " left the GPU";
      std::string problem = compare(cuda_out[k].shape(), cuda_out[k].to_vector<double>(), to_ref(cpu_out[k]), tol,
                                    case_.exact);
      EXPECT_TRUE(problem.empty()) << case_.name << " (" << dtype_name(dtype_) << ") output " << k
                                   << " CUDA vs CPU: " << problem;
    }
  }

 private:
  OpCase case_;
  DType dtype_;
  bool cuda_;
};

}  // namespace

void register_op_tests() {
  for (const auto& [family, make] : op_case_registry()) {
    for (const OpCase& op_case : make()) {
      for (DType dtype : op_case.dtypes) {
        for (bool on_cuda : {false, true}) {
          std::string suite = std::string(on_cuda ? "OpsCuda." : "OpsCpu.") + family;
          std::string name = op_case.name + "." + dtype_name(dtype);
          ::testing::RegisterTest(suite.c_str(), name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                                  [op_case, dtype, on_cuda]() -> ::testing::Test* {
                                    return new OpCaseTest(op_case, dtype, on_cuda);
                                  });
        }
      }
    }
  }
}

}  // namespace wick::testing
