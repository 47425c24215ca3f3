#include "tests/engine/gradcheck.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>

#include "engine/autograd/backward.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/reduce.h"

namespace wick::testing {
namespace {

using Registry = std::vector<std::pair<std::string, std::vector<GradCase> (*)()>>;
Registry& registry() {
  static Registry entries;
  return entries;
}

std::vector<Tensor> make_inputs(const GradCase& c, DType float_dtype, Device device) {
  std::mt19937_64 rng(std::hash<std::string>{}(c.name));
  std::vector<Tensor> inputs;
  for (const GradInput& spec : c.inputs) {
    std::uniform_real_distribution<double> uniform(spec.low, spec.high);
    std::vector<double> values(static_cast<size_t>(numel(spec.shape)));
    for (double& v : values) v = spec.integer ? std::floor(uniform(rng)) : uniform(rng);
    Tensor t = Tensor::from_vector<double>(values, spec.shape).to(spec.dtype.value_or(float_dtype)).to(device);
    if (spec.differentiable) autograd::set_requires_grad(t, true);
    inputs.push_back(t);
  }
  return inputs;
}

// Fixed random weights for each output, same on every device.
std::vector<Tensor> projection_weights(const std::vector<Tensor>& outputs, DType dtype, Device device) {
  std::mt19937_64 rng(12345);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<Tensor> weights;
  for (const Tensor& out : outputs) {
    std::vector<double> values(static_cast<size_t>(out.numel()));
    for (double& v : values) v = uniform(rng);
    weights.push_back(Tensor::from_vector<double>(values, out.shape()).to(dtype).to(device));
  }
  return weights;
}

double scalar_loss(const std::vector<Tensor>& outputs, const std::vector<Tensor>& weights) {
  double total = 0;
  for (size_t k = 0; k < outputs.size(); ++k) {
    std::vector<double> o = outputs[k].to_vector<double>(), w = weights[k].to_vector<double>();
    for (size_t i = 0; i < o.size(); ++i) total += o[i] * w[i];
  }
  return total;
}

// Analytic gradients of L = sum_k sum(out_k * w_k) for every differentiable input.
// weight_dtype: the projection weights are drawn in `dtype` (rounded) and cast to weight_dtype.
std::vector<Tensor> analytic_gradients(const GradCase& c, const std::vector<Tensor>& inputs, DType dtype, Device device,
                                       std::optional<DType> weight_dtype = std::nullopt) {
  std::vector<Tensor> outputs = c.fn(inputs);
  std::vector<Tensor> weights = projection_weights(outputs, dtype, device);
  if (weight_dtype)
    for (Tensor& w : weights) w = w.to(*weight_dtype);
  std::vector<Tensor> roots, seeds;
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (!autograd::requires_grad(outputs[k])) continue;
    roots.push_back(outputs[k]);
    seeds.push_back(weights[k].to(outputs[k].dtype()));
  }
  autograd::GradientStore store;
  if (!roots.empty()) autograd::backward(roots, seeds, store);
  std::vector<Tensor> grads;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (c.inputs[i].differentiable) grads.push_back(store.get(inputs[i]));
  return grads;
}

std::string compare(const std::vector<double>& got, const std::vector<double>& want, double atol, double rtol) {
  std::ostringstream report;
  int n_bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]) && std::isfinite(got[i])) continue;
    if (n_bad++ < 5) report << "  [" << i << "] got " << got[i] << " want " << want[i] << "\n";
  }
  if (n_bad == 0) return "";
  return std::to_string(n_bad) + " of " + std::to_string(got.size()) + " elements off:\n" + report.str();
}

// ||got - want|| / ||want|| (0 when both are zero).
double relative_norm_error(const std::vector<double>& got, const std::vector<double>& want) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    ref += want[i] * want[i];
  }
  if (ref == 0) return diff == 0 ? 0 : INFINITY;
  return std::sqrt(diff / ref);
}

// Rounds floating-point tensors to `dtype` and back to f32 (indices and masks unchanged).
std::vector<Tensor> rounded_through(const std::vector<Tensor>& tensors, DType dtype) {
  std::vector<Tensor> out;
  for (const Tensor& t : tensors) out.push_back(is_floating(t.dtype()) ? t.to(dtype).to(DType::F32) : t);
  return out;
}

class GradCaseTest : public ::testing::Test {
 public:
  // half: std::nullopt = the f32 checks; BF16/F16 = the 16-bit check on `cuda` or the CPU.
  GradCaseTest(GradCase c, bool cuda, std::optional<DType> half) : case_(std::move(c)), cuda_(cuda), half_(half) {}

  void TestBody() override {
    if (cuda_) {
      if (!case_.run_cuda) GTEST_SKIP() << "CPU-only op";
      if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: CUDA gradient test not run on this machine";
    }
    if (half_) {
      if (!case_.run_half) GTEST_SKIP() << "no 16-bit path";
      run_half(cuda_ ? Device::cuda(0) : Device::cpu());
    } else if (cuda_) {
      run_cuda();
    } else {
      run_finite_differences();
    }
  }

 private:
  void run_finite_differences() {
    std::vector<Tensor> inputs = make_inputs(case_, DType::F64, Device::cpu());
    std::vector<Tensor> analytic = analytic_gradients(case_, inputs, DType::F64, Device::cpu());
    autograd::NoGradGuard no_grad;
    std::vector<Tensor> weights = projection_weights(case_.fn(inputs), DType::F64, Device::cpu());
    size_t k = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!case_.inputs[i].differentiable) continue;
      Tensor x = inputs[i];
      ASSERT_TRUE(x.is_contiguous());
      double* data = x.data_as<double>();
      std::vector<double> numeric(static_cast<size_t>(x.numel()));
      for (int64_t j = 0; j < x.numel(); ++j) {
        double saved = data[j];
        data[j] = saved + case_.eps;
        double plus = scalar_loss(case_.fn(inputs), weights);
        data[j] = saved - case_.eps;
        double minus = scalar_loss(case_.fn(inputs), weights);
        data[j] = saved;
        numeric[static_cast<size_t>(j)] = (plus - minus) / (2 * case_.eps);
      }
      const Tensor& grad = analytic[k++];
      ASSERT_TRUE(grad.defined()) << case_.name << ": input " << i << " received no gradient";
      ASSERT_EQ(grad.shape(), x.shape());
      std::string problem = compare(grad.to_vector<double>(), numeric, case_.atol, case_.rtol);
      EXPECT_TRUE(problem.empty()) << case_.name << ": input " << i << " analytic vs finite differences: " << problem;
    }
  }

  void run_cuda() {
    std::vector<Tensor> cpu_inputs = make_inputs(case_, DType::F32, Device::cpu());
    std::vector<Tensor> cuda_inputs = make_inputs(case_, DType::F32, Device::cuda(0));
    std::vector<Tensor> cpu = analytic_gradients(case_, cpu_inputs, DType::F32, Device::cpu());
    std::vector<Tensor> gpu = analytic_gradients(case_, cuda_inputs, DType::F32, Device::cuda(0));
    ASSERT_EQ(cpu.size(), gpu.size());
    for (size_t k = 0; k < cpu.size(); ++k) {
      ASSERT_TRUE(gpu[k].defined()) << case_.name << ": CUDA gradient " << k << " missing";
      std::string problem =
          compare(gpu[k].to_vector<double>(), cpu[k].to_vector<double>(), case_.cuda_atol, case_.cuda_rtol);
      EXPECT_TRUE(problem.empty()) << case_.name << ": gradient " << k << " CUDA vs CPU: " << problem;
    }
  }

  // Gradients with every floating input, weight and seed in the 16-bit type vs the CPU's f32 gradients
  // of the same rounded values.
  void run_half(Device device) {
    DType dtype = *half_;
    std::vector<Tensor> base = make_inputs(case_, DType::F32, Device::cpu());
    std::vector<Tensor> ref_inputs = rounded_through(base, dtype), half_inputs;
    for (size_t i = 0; i < base.size(); ++i) {
      Tensor t = is_floating(base[i].dtype()) ? base[i].to(dtype) : base[i];
      t = t.to(device);
      if (case_.inputs[i].differentiable) {
        autograd::set_requires_grad(ref_inputs[i], true);
        autograd::set_requires_grad(t, true);
      }
      half_inputs.push_back(t);
    }
    // Projection weights are drawn in f64 and rounded to the 16-bit type on both sides.
    std::vector<Tensor> ref = analytic_gradients(case_, ref_inputs, dtype, Device::cpu(), DType::F32);
    std::vector<Tensor> got = analytic_gradients(case_, half_inputs, dtype, device, dtype);
    double tol = dtype == DType::BF16 ? case_.bf16_tol : case_.f16_tol;
    ASSERT_EQ(ref.size(), got.size());
    for (size_t k = 0; k < ref.size(); ++k) {
      ASSERT_TRUE(got[k].defined()) << case_.name << ": " << dtype_name(dtype) << " gradient " << k << " missing";
      ASSERT_EQ(got[k].shape(), ref[k].shape());
      double err = relative_norm_error(got[k].to_vector<double>(), ref[k].to_vector<double>());
      EXPECT_LE(err, tol) << case_.name << ": " << dtype_name(dtype) << " gradient " << k << " on " << device.str()
                          << " vs f32: relative norm error " << err;
    }
  }

  GradCase case_;
  bool cuda_;
  std::optional<DType> half_;
};

}  // namespace

void register_grad_cases(const std::string& family, std::vector<GradCase> (*make)()) {
  registry().emplace_back(family, make);
}

void register_grad_tests() {
  for (const auto& [family, make] : registry()) {
    for (const GradCase& c : make()) {
      for (bool cuda : {false, true}) {
        std::string suite = std::string(cuda ? "GradCuda." : "GradCheck.") + family;
        ::testing::RegisterTest(suite.c_str(), c.name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                                [c, cuda]() -> ::testing::Test* { return new GradCaseTest(c, cuda, std::nullopt); });
        for (DType half : {DType::BF16, DType::F16}) {
          std::string half_suite = std::string(cuda ? "GradCuda" : "GradCpu") + (half == DType::BF16 ? "Bf16." : "F16.") + family;
          ::testing::RegisterTest(half_suite.c_str(), c.name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                                  [c, cuda, half]() -> ::testing::Test* { return new GradCaseTest(c, cuda, half); });
        }
      }
    }
  }
}

}  // namespace wick::testing
