// Op-harness entries for creation ops (runtime/ops/creation.h). The single input only carries the
// dtype and device under test (and the shape for the *_like ops); its values are not used.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/ops/creation.h"
#include "tests/runtime/op_harness.h"

// InputSpec::dtype (a std::optional without a default member initializer) makes GCC flag every
// designated initializer that leaves it out; leaving it out is the intended use.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace wick::testing {
namespace {

const std::vector<DType> all_dtypes = {DType::F32, DType::F64, DType::BF16, DType::F16,
                                       DType::I32, DType::I64, DType::U8,   DType::I8};
const std::vector<DType> floats = {DType::F32, DType::BF16, DType::F16, DType::F64};

InputSpec one_element() {
  InputSpec spec;
  spec.shape = {1};
  return spec;
}

OpCase creation_case(std::string name, std::function<Tensor(const Tensor&)> run, std::function<RefTensor()> ref,
                     std::vector<DType> dtypes, InputSpec like = one_element()) {
  return {.name = std::move(name),
          .inputs = {std::move(like)},
          .run = [run](const Inputs& x) { return Outputs{run(x[0])}; },
          .reference = [ref](const RefInputs&) { return RefOutputs{ref()}; },
          .dtypes = std::move(dtypes),
          .exact = true};
}

RefTensor ref_values(Shape shape, std::vector<double> values) { return {std::move(shape), std::move(values)}; }

std::vector<OpCase> creation() {
  return {
      creation_case("zeros", [](const Tensor& x) { return zeros({3, 4}, x.dtype(), x.device()); },
                    [] { return ref_like({3, 4}, 0.0); }, all_dtypes),
      creation_case("ones", [](const Tensor& x) { return ones({2, 1, 5}, x.dtype(), x.device()); },
                    [] { return ref_like({2, 1, 5}, 1.0); }, all_dtypes),
      creation_case("ones_scalar_shape", [](const Tensor& x) { return ones({}, x.dtype(), x.device()); },
                    [] { return ref_like({}, 1.0); }, all_dtypes),
      // 2.75 is exact in every float dtype.
      creation_case("full_float", [](const Tensor& x) { return full({7}, -2.75, x.dtype(), x.device()); },
                    [] { return ref_like({7}, -2.75); }, floats),
      // Float values truncate toward zero into integer dtypes.
      creation_case("full_int_truncates", [](const Tensor& x) { return full({2, 3}, -7.9, x.dtype(), x.device()); },
                    [] { return ref_like({2, 3}, -7.0); }, {DType::I32, DType::I64, DType::I8}),
      creation_case("full_large", [](const Tensor& x) { return full({200, 200}, 3.0, x.dtype(), x.device()); },
                    [] { return ref_like({200, 200}, 3.0); }, all_dtypes),
      creation_case("arange_int_step", [](const Tensor& x) { return arange(0, 10, 3, x.dtype(), x.device()); },
                    [] { return ref_values({4}, {0, 3, 6, 9}); }, all_dtypes),
      creation_case("arange_fractional", [](const Tensor& x) { return arange(-1, 1, 0.25, x.dtype(), x.device()); },
                    [] { return ref_values({8}, {-1, -0.75, -0.5, -0.25, 0, 0.25, 0.5, 0.75}); }, floats),
      creation_case("arange_negative_step", [](const Tensor& x) { return arange(5, 0, -1.5, x.dtype(), x.device()); },
                    [] { return ref_values({4}, {5, 3.5, 2, 0.5}); }, floats),
      creation_case("arange_empty", [](const Tensor& x) { return arange(3, 3, 1, x.dtype(), x.device()); },
                    [] { return ref_values({0}, {}); }, all_dtypes),
      creation_case("arange_large", [](const Tensor& x) { return arange(0, 40000, 1, x.dtype(), x.device()); },
                    [] {
                      RefTensor r = ref_like({40000});
                      for (int64_t i = 0; i < r.numel(); ++i) r.at(i) = static_cast<double>(i);
                      return r;
                    },
                    {DType::F32, DType::F64, DType::I32, DType::I64}),
      creation_case("zeros_like_strided", [](const Tensor& x) { return zeros_like(x); },
                    [] { return ref_like({3, 5}, 0.0); }, all_dtypes, {.shape = {3, 5}, .non_contiguous = true}),
      creation_case("ones_like", [](const Tensor& x) { return ones_like(x); }, [] { return ref_like({2, 3, 2}, 1.0); },
                    all_dtypes, {.shape = {2, 3, 2}}),
      creation_case("full_like", [](const Tensor& x) { return full_like(x, 5.0); }, [] { return ref_like({4, 1}, 5.0); },
                    all_dtypes, {.shape = {4, 1}}),
  };
}

}  // namespace
WICK_REGISTER_OP_CASES(creation);

TEST(creation, empty_like_keeps_shape_dtype_device) {
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}).transpose(0, 1).to(DType::BF16);
  Tensor e = empty_like(x);
  EXPECT_EQ(e.shape(), (Shape{3, 2}));
  EXPECT_EQ(e.dtype(), DType::BF16);
  EXPECT_TRUE(e.device().is_cpu());
  EXPECT_TRUE(e.is_contiguous());
  EXPECT_NE(e.storage(), x.storage());
}

}  // namespace wick::testing
