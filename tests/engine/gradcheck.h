// The table-driven gradient check: every differentiable op is one GradCase entry. On the CPU the
// analytic gradients (autograd, float64) are compared with central finite differences in float64;
// on CUDA (when a GPU is present) the analytic f32 gradients are compared with the CPU's; in bf16 and
// f16 (on the CPU, and on CUDA when a GPU is present) the analytic gradients are compared with the
// CPU's f32 gradients of the same rounded inputs by relative norm error, since every op rounds its
// output to the 16-bit type.
//
//   static std::vector<GradCase> my_grad_cases() {
//     return {{.name = "exp", .inputs = {{.shape = {3, 4}}},
//              .fn = [](const Inputs& x) { return Outputs{autograd::exp(x[0])}; }}};
//   }
//   WICK_REGISTER_GRAD_CASES(my_grad_cases);
//
// The scalar differentiated is L = sum_k sum(output_k * r_k) with fixed random r_k, so every
// output element's gradient path is exercised with a distinct weight.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace wick::testing {

struct GradInput {
  Shape shape;
  double low = -1.0, high = 1.0;
  bool differentiable = true;          // false: a constant input (indices, masks); not perturbed
  bool integer = false;                // whole numbers in [low, high) (for indices)
  std::optional<DType> dtype = std::nullopt;  // fixed dtype (I64 indices, U8 masks); else float64/f32
};

struct GradCase {
  std::string name;
  std::vector<GradInput> inputs;
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> fn;
  double eps = 1e-6;              // finite-difference step (float64)
  double atol = 1e-7, rtol = 1e-6;  // analytic vs numeric, float64
  double cuda_atol = 1e-4, cuda_rtol = 1e-3;  // CUDA f32 vs CPU f32 analytic gradients
  double bf16_tol = 2e-2, f16_tol = 3e-3;     // ||g16 - g32|| / ||g32||, per gradient
  bool run_cuda = true;
  bool run_half = true;           // false: the op has no bf16/f16 path
};

void register_grad_cases(const std::string& family, std::vector<GradCase> (*make)());
void register_grad_tests();

struct GradCaseRegistrar {
  GradCaseRegistrar(const char* family, std::vector<GradCase> (*make)()) { register_grad_cases(family, make); }
};

}  // namespace wick::testing

#define WICK_REGISTER_GRAD_CASES(make) \
  static ::wick::testing::GradCaseRegistrar wick_grad_case_registrar_##make(#make, &make)
