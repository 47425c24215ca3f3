// Op-harness entries for runtime/ops/rope.h, checked against a complex-number formulation in
// double: pair (x[2i], x[2i+1]) as z = x[2i] + i x[2i+1], rotated to z * exp(i * angle).
#include <gtest/gtest.h>

#include <cmath>
#include <complex>

#include "runtime/ops/rope.h"
#include "tests/runtime/op_harness.h"

// InputSpec::dtype (a std::optional without a default member initializer) makes GCC flag every
// designated initializer that leaves it out; leaving it out is the intended use.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace wick::testing {
namespace {

// Angles [rows, D/2] for positions [rows, n_axes], Flux's EmbedND frequencies.
std::vector<double> ref_angles(const std::vector<double>& positions, const std::vector<int64_t>& axes_dims,
                               double theta) {
  size_t n_axes = axes_dims.size(), rows = positions.size() / n_axes;
  std::vector<double> angles;
  for (size_t row = 0; row < rows; ++row)
    for (size_t k = 0; k < n_axes; ++k)
      for (int64_t j = 0; j < axes_dims[k] / 2; ++j)
        angles.push_back(positions[row * n_axes + k] * std::pow(theta, -2.0 * j / axes_dims[k]));
  return angles;
}

// x [batches..., L, D] rotated by angles [table_batches, L, D/2], where the table batch of a row is
// `table_batch_of(outer index)`.
RefTensor ref_rope(const RefTensor& x, const std::vector<double>& angles, int64_t seq,
                   const std::function<int64_t(int64_t)>& table_batch_of) {
  int64_t d = x.shape.back(), half = d / 2;
  RefTensor out = ref_like(x.shape);
  int64_t n_rows = x.numel() / d;
  for (int64_t row = 0; row < n_rows; ++row) {
    int64_t l = row % seq, outer = row / seq;
    int64_t table_row = table_batch_of(outer) * seq + l;
    for (int64_t i = 0; i < half; ++i) {
      std::complex<double> z(x.at(row * d + 2 * i), x.at(row * d + 2 * i + 1));
      std::complex<double> rotated = z * std::polar(1.0, angles[static_cast<size_t>(table_row * half + i)]);
      out.at(row * d + 2 * i) = rotated.real();
      out.at(row * d + 2 * i + 1) = rotated.imag();
    }
  }
  return out;
}

// Positions for a text-then-image sequence as Flux builds them: (0, 0, 0) for text tokens and
// (0, row, column) for image tokens of a `rows` x `columns` grid.
std::vector<double> flux_positions(int64_t n_text, int64_t rows, int64_t columns) {
  std::vector<double> positions;
  for (int64_t t = 0; t < n_text; ++t) positions.insert(positions.end(), {0, 0, 0});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < columns; ++c) positions.insert(positions.end(), {0, double(r), double(c)});
  return positions;
}

// f64 inputs get f64 tables, so the f64 entries check the rotation to 1e-12.
DType table_dtype_for(const Tensor& x) { return x.dtype() == DType::F64 ? DType::F64 : DType::F32; }

std::vector<OpCase> rope_cases() {
  const std::vector<DType> floats = {DType::F32, DType::BF16, DType::F16, DType::F64};
  std::vector<OpCase> cases;
  // Small axes {2, 2, 4} (D = 8) with arbitrary positions.
  static const std::vector<double> small_positions = {0, 0, 0, 1, 2, 3, 0, 5, 1, 7, 1, 4, 2, 2, 9};
  cases.push_back(
      {.name = "apply_rope_small_axes",
       .inputs = {{.shape = {2, 3, 5, 8}, .non_contiguous = true}},
       .run =
           [](const Inputs& x) {
             Tensor positions = Tensor::from_vector<double>(small_positions, {5, 3}, x[0].device());
             RopeTables t = rope_frequencies(positions, {2, 2, 4}, 10000.0, table_dtype_for(x[0]));
             return Outputs{apply_rope(x[0], t.cos, t.sin)};
           },
       .reference =
           [](const RefInputs& x) {
             return RefOutputs{ref_rope(x[0], ref_angles(small_positions, {2, 2, 4}, 10000.0), 5,
                                        [](int64_t) { return 0; })};
           },
       .dtypes = floats});
  // Flux: axes {16, 56, 56}, 2 text tokens then a 2x3 image grid, theta 1e4, head dim 128.
  cases.push_back(
      {.name = "apply_rope_flux_axes",
       .inputs = {{.shape = {1, 2, 8, 128}, .low = -3, .high = 3}},
       .run =
           [](const Inputs& x) {
             Tensor ids = Tensor::from_vector<double>(flux_positions(2, 2, 3), {8, 3}).to(DType::I64).to(x[0].device());
             RopeTables t = rope_frequencies(ids, {16, 56, 56}, 10000.0, table_dtype_for(x[0]));
             return Outputs{apply_rope(x[0], t.cos, t.sin)};
           },
       .reference =
           [](const RefInputs& x) {
             return RefOutputs{ref_rope(x[0], ref_angles(flux_positions(2, 2, 3), {16, 56, 56}, 10000.0), 8,
                                        [](int64_t) { return 0; })};
           },
       .dtypes = floats,
       .cpu_tolerance = {{DType::F32, {2e-5, 1e-5}}}});
  // Tables with a batch axis: positions [2, L, 3] -> cos [2, L, D/2] -> [2, 1, L, D/2] for x [2, H, L, D].
  static const std::vector<double> batched_positions = {0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 1, 1,
                                                        3, 0, 0, 3, 2, 5, 3, 4, 4, 3, 6, 2};
  cases.push_back(
      {.name = "apply_rope_batched_tables",
       .inputs = {{.shape = {2, 3, 4, 8}}},
       .run =
           [](const Inputs& x) {
             Tensor positions = Tensor::from_vector<double>(batched_positions, {2, 4, 3}, x[0].device());
             RopeTables t = rope_frequencies(positions, {2, 2, 4}, 100.0, table_dtype_for(x[0]));
             return Outputs{apply_rope(x[0], t.cos.unsqueeze(1), t.sin.unsqueeze(1))};
           },
       .reference =
           [](const RefInputs& x) {
             // outer index = b * H + h; the table batch is b.
             return RefOutputs{ref_rope(x[0], ref_angles(batched_positions, {2, 2, 4}, 100.0), 4,
                                        [](int64_t outer) { return outer / 3; })};
           },
       .dtypes = floats});
  // 3 * 4 * 64 * 128 / 2 pairs: crosses the threading threshold.
  cases.push_back(
      {.name = "apply_rope_large",
       .inputs = {{.shape = {3, 4, 64, 128}}},
       .run =
           [](const Inputs& x) {
             Tensor ids = Tensor::from_vector<double>(flux_positions(0, 8, 8), {64, 3}, x[0].device());
             RopeTables t = rope_frequencies(ids, {16, 56, 56}, 10000.0);
             return Outputs{apply_rope(x[0], t.cos, t.sin)};
           },
       .reference =
           [](const RefInputs& x) {
             return RefOutputs{ref_rope(x[0], ref_angles(flux_positions(0, 8, 8), {16, 56, 56}, 10000.0), 64,
                                        [](int64_t) { return 0; })};
           }});
  cases.push_back(
      {.name = "rope_frequencies_f64_tables",
       .inputs = {{.shape = {5, 2}, .low = -30, .high = 30}},
       .run =
           [](const Inputs& x) {
             RopeTables t = rope_frequencies(x[0], {6, 4}, 500.0, DType::F64);
             return Outputs{t.cos, t.sin};
           },
       .reference =
           [](const RefInputs& x) {
             std::vector<double> angles = ref_angles(x[0].values, {6, 4}, 500.0);
             RefTensor c = ref_like({5, 5}), s = ref_like({5, 5});
             for (size_t i = 0; i < angles.size(); ++i) {
               c.values[i] = std::cos(angles[i]);
               s.values[i] = std::sin(angles[i]);
             }
             return RefOutputs{c, s};
           },
       .dtypes = {DType::F64}});
  cases.push_back(
      {.name = "rope_frequencies_tables",
       .inputs = {{.shape = {6, 3}, .low = 0, .high = 40, .integer = true, .dtype = DType::I64}},
       .run =
           [](const Inputs& x) {
             RopeTables t = rope_frequencies(x[0], {4, 6, 2}, 10000.0);
             return Outputs{t.cos, t.sin};
           },
       .reference =
           [](const RefInputs& x) {
             std::vector<double> angles = ref_angles(x[0].values, {4, 6, 2}, 10000.0);
             RefTensor c = ref_like({6, 6}), s = ref_like({6, 6});
             for (size_t i = 0; i < angles.size(); ++i) {
               c.values[i] = std::cos(angles[i]);
               s.values[i] = std::sin(angles[i]);
             }
             return RefOutputs{c, s};
           },
       .dtypes = {DType::F32}});
  return cases;
}
WICK_REGISTER_OP_CASES(rope_cases);

TEST(ShapesRope, ZeroPositionIsIdentity) {
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8}, {1, 1, 1, 8});
  RopeTables t = rope_frequencies(Tensor::from_vector<int64_t>({0, 0, 0}, {1, 3}), {2, 2, 4});
  EXPECT_EQ(t.cos.dtype(), DType::F32);
  EXPECT_EQ(t.cos.shape(), (Shape{1, 4}));
  EXPECT_EQ(apply_rope(x, t.cos, t.sin).to_vector<float>(), x.to_vector<float>());
}

TEST(ShapesRope, QuarterTurnRotatesPair) {
  // One axis of dim 2: omega = 1, so position pi/2 turns (x0, x1) into (-x1, x0).
  Tensor x = Tensor::from_vector<double>({3, 5}, {1, 1, 1, 2});
  RopeTables t = rope_frequencies(Tensor::from_vector<double>({M_PI / 2}, {1, 1}), {2});
  std::vector<double> y = apply_rope(x, t.cos, t.sin).to_vector<double>();
  EXPECT_NEAR(y[0], -5.0, 1e-6);
  EXPECT_NEAR(y[1], 3.0, 1e-6);
}

}  // namespace
}  // namespace wick::testing
