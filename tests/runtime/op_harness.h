// The table-driven op harness: every runtime op is one OpCase entry, checked on the CPU against a
// float64 reference written independently in the entry, and on CUDA (when a GPU is present)
// against the CPU result, for every dtype the entry lists.
//
//   static std::vector<OpCase> my_cases() {
//     return {{.name = "exp",
//              .inputs = {{.shape = {3, 5}, .low = -2, .high = 2}},
//              .run = [](const Inputs& x) { return Outputs{exp(x[0])}; },
//              .reference = [](const RefInputs& x) { return RefOutputs{map(x[0], [](double v) { return std::exp(v); })}; }}};
//   }
//   WICK_REGISTER_OP_CASES(my_cases);
//
// Inputs are drawn uniformly from [low, high) (rounded to integers for integer specs), cast to the
// dtype under test (or the spec's fixed dtype), and the reference sees exactly those rounded values.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace wick::testing {

// A float64 host tensor for references.
struct RefTensor {
  Shape shape;
  std::vector<double> values;

  int64_t numel() const { return static_cast<int64_t>(values.size()); }
  double& at(int64_t i) { return values[static_cast<size_t>(i)]; }
  double at(int64_t i) const { return values[static_cast<size_t>(i)]; }
};

using Inputs = std::vector<Tensor>;
using Outputs = std::vector<Tensor>;
using RefInputs = std::vector<RefTensor>;
using RefOutputs = std::vector<RefTensor>;

struct InputSpec {
  Shape shape;
  double low = -1.0, high = 1.0;
  bool integer = false;                  // draw whole numbers in [low, high)
  std::optional<DType> dtype = std::nullopt;  // fixed dtype (e.g. I64 indices); else the dtype under test
  // Makes the input a non-contiguous view of the same values (a transposed copy viewed back).
  bool non_contiguous = false;
};

struct Tolerance {
  double atol = 1e-5, rtol = 1e-5;
};

struct OpCase {
  std::string name;
  std::vector<InputSpec> inputs;
  std::function<Outputs(const Inputs&)> run;
  std::function<RefOutputs(const RefInputs&)> reference;
  std::vector<DType> dtypes = {DType::F32, DType::BF16, DType::F16};
  // CPU vs float64 reference, per dtype; unlisted dtypes use defaults_for(dtype).
  std::vector<std::pair<DType, Tolerance>> cpu_tolerance = {};
  // CUDA vs CPU, per dtype; unlisted dtypes use defaults_for(dtype).
  std::vector<std::pair<DType, Tolerance>> cuda_tolerance = {};
  // Compare outputs as exact integers (argmax, indices).
  bool exact = false;
};

Tolerance defaults_for(DType dtype);

// ---- helpers for references ----
RefTensor ref_like(const Shape& shape, double fill = 0.0);
RefTensor map(const RefTensor& x, const std::function<double(double)>& fn);
// Broadcasting binary map over two references (NumPy rules).
RefTensor zip(const RefTensor& a, const RefTensor& b, const std::function<double(double, double)>& fn);
// Element index of `coords` in a row-major tensor of `shape`.
int64_t linear_index(const Shape& shape, const std::vector<int64_t>& coords);
std::vector<int64_t> coords_of(const Shape& shape, int64_t linear);
RefTensor to_ref(const Tensor& tensor);
// Rounds each value as the dtype would store it (so references see what wick sees).
double round_to(DType dtype, double value);

// Registry.
void register_op_cases(const std::string& family, std::vector<OpCase> (*make)());
std::vector<std::pair<std::string, std::vector<OpCase> (*)()>>& op_case_registry();

struct OpCaseRegistrar {
  OpCaseRegistrar(const char* family, std::vector<OpCase> (*make)()) { register_op_cases(family, make); }
};

}  // namespace wick::testing

#define WICK_REGISTER_OP_CASES(make) \
  static ::wick::testing::OpCaseRegistrar wick_op_case_registrar_##make(#make, &make)
