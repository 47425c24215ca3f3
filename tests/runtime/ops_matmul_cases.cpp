// Op-harness entries for matmul and linear, against a naive float64 triple loop.
#include <algorithm>

#include "runtime/ops/matmul.h"
#include "tests/runtime/op_harness.h"

namespace wick::testing {
namespace {

// torch.matmul in float64: 1-d operands gain an axis that the result drops, batch axes broadcast.
RefTensor ref_matmul(RefTensor a, RefTensor b) {
  bool vector_a = a.shape.size() == 1, vector_b = b.shape.size() == 1;
  if (vector_a) a.shape.insert(a.shape.begin(), 1);
  if (vector_b) b.shape.push_back(1);
  int64_t m = a.shape[a.shape.size() - 2], k = a.shape.back(), n = b.shape.back();
  Shape batch_a(a.shape.begin(), a.shape.end() - 2), batch_b(b.shape.begin(), b.shape.end() - 2);
  Shape batch = broadcast_shapes(batch_a, batch_b, "ref_matmul");
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  RefTensor out = ref_like(out_shape);
  auto source_batch = [&](const Shape& source, const std::vector<int64_t>& coords) {
    std::vector<int64_t> c(source.size());
    size_t lead = batch.size() - source.size();
    for (size_t i = 0; i < source.size(); ++i) c[i] = source[i] == 1 ? 0 : coords[lead + i];
    return source.empty() ? 0 : linear_index(source, c);
  };
  int64_t n_batch = wick::numel(batch);
  for (int64_t bi = 0; bi < n_batch; ++bi) {
    std::vector<int64_t> coords = batch.empty() ? std::vector<int64_t>{} : coords_of(batch, bi);
    int64_t ab = source_batch(batch_a, coords), bb = source_batch(batch_b, coords);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p) sum += a.at((ab * m + i) * k + p) * b.at((bb * k + p) * n + j);
        out.at((bi * m + i) * n + j) = sum;
      }
  }
  Shape final_shape = out_shape;
  if (vector_b) final_shape.pop_back();
  if (vector_a) final_shape.erase(final_shape.end() - (vector_b ? 1 : 2));
  out.shape = final_shape;
  return out;
}

// The last two axes swapped (a reference for transposed operands).
RefTensor ref_transpose_last(const RefTensor& x) {
  size_t rank = x.shape.size();
  Shape shape = x.shape;
  std::swap(shape[rank - 1], shape[rank - 2]);
  RefTensor out = ref_like(shape);
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto coords = coords_of(shape, i);
    std::swap(coords[rank - 1], coords[rank - 2]);
    out.at(i) = x.at(linear_index(x.shape, coords));
  }
  return out;
}

// An input drawn from [-1, 1).
InputSpec spec(Shape shape, bool non_contiguous = false) {
  InputSpec input;
  input.shape = std::move(shape);
  input.non_contiguous = non_contiguous;
  return input;
}

const std::vector<DType> all_float = {DType::F32, DType::F64, DType::BF16, DType::F16};
// Inputs in [-1, 1), K up to 70: bf16 keeps ~3 significant digits, f16 ~3.5.
const std::vector<std::pair<DType, Tolerance>> gemm_tolerance = {
    {DType::F32, {2e-5, 2e-5}}, {DType::BF16, {2e-2, 2e-2}}, {DType::F16, {4e-3, 4e-3}}};

OpCase matmul_case(std::string name, Shape a, Shape b, bool non_contiguous = false) {
  return {.name = std::move(name),
          .inputs = {spec(a, non_contiguous), spec(b, non_contiguous)},
          .run = [](const Inputs& x) { return Outputs{matmul(x[0], x[1])}; },
          .reference = [](const RefInputs& x) { return RefOutputs{ref_matmul(x[0], x[1])}; },
          .dtypes = all_float,
          .cpu_tolerance = gemm_tolerance,
          .cuda_tolerance = gemm_tolerance};
}

std::vector<OpCase> matmul_cases() {
  std::vector<OpCase> cases = {
      matmul_case("matmul_square", {16, 16}, {16, 16}),
      matmul_case("matmul_1x7x33", {1, 7}, {7, 33}),
      matmul_case("matmul_65x17x3", {65, 17}, {17, 3}),
      matmul_case("matmul_k64", {9, 64}, {64, 12}),
      matmul_case("matmul_batched", {4, 70, 70}, {4, 70, 70}),
      matmul_case("matmul_small_batch", {6, 3, 5}, {6, 5, 2}),
      matmul_case("matmul_broadcast_batch", {2, 1, 5, 4}, {3, 4, 6}),
      matmul_case("matmul_broadcast_matrix", {2, 3, 5, 4}, {4, 6}),
      matmul_case("matmul_vector_matrix", {7}, {7, 5}),
      matmul_case("matmul_matrix_vector", {4, 7}, {7}),
      matmul_case("matmul_vector_vector", {33}, {33}),
      matmul_case("matmul_batched_vector", {3, 4, 7}, {7}),
      matmul_case("matmul_strided", {2, 5, 9}, {9, 4}, /*non_contiguous=*/true),
      matmul_case("matmul_empty_k", {3, 0}, {0, 4}),
      // Large enough for the CPU's AVX-512 tiles (14 x 32) where the CPU has them, with partial tiles.
      matmul_case("matmul_tiles_45x40x70", {45, 70}, {70, 40}),
      matmul_case("matmul_tiles_batched", {3, 29, 16}, {16, 64}),
  };
  cases.push_back({.name = "matmul_transpose_a",
                   .inputs = {spec({9, 6}), spec({9, 5})},
                   .run = [](const Inputs& x) { return Outputs{matmul(x[0], x[1], true, false)}; },
                   .reference = [](const RefInputs& x) { return RefOutputs{ref_matmul(ref_transpose_last(x[0]), x[1])}; },
                   .dtypes = all_float,
                   .cpu_tolerance = gemm_tolerance,
                   .cuda_tolerance = gemm_tolerance});
  cases.push_back({.name = "matmul_transpose_both_batched",
                   .inputs = {spec({3, 8, 5}), spec({3, 7, 8})},
                   .run = [](const Inputs& x) { return Outputs{matmul(x[0], x[1], true, true)}; },
                   .reference =
                       [](const RefInputs& x) {
                         return RefOutputs{ref_matmul(ref_transpose_last(x[0]), ref_transpose_last(x[1]))};
                       },
                   .dtypes = all_float,
                   .cpu_tolerance = gemm_tolerance,
                   .cuda_tolerance = gemm_tolerance});
  // A transposed view (permute, not the flag) of a batch: column-major matrices used in place.
  cases.push_back({.name = "matmul_permuted_view",
                   .inputs = {spec({2, 6, 5}), spec({6, 4})},
                   .run = [](const Inputs& x) { return Outputs{matmul(x[0].transpose(1, 2), x[1])}; },
                   .reference = [](const RefInputs& x) { return RefOutputs{ref_matmul(ref_transpose_last(x[0]), x[1])}; },
                   .dtypes = all_float,
                   .cpu_tolerance = gemm_tolerance,
                   .cuda_tolerance = gemm_tolerance});
  auto ref_linear = [](const RefTensor& x, const RefTensor& w, const RefTensor* bias) {
    RefTensor y = ref_matmul(x, ref_transpose_last(w));
    if (bias)
      for (int64_t i = 0; i < y.numel(); ++i) y.at(i) += bias->at(i % bias->numel());
    return y;
  };
  cases.push_back({.name = "linear_bias",
                   .inputs = {spec({2, 3, 8}), spec({5, 8}), spec({5})},
                   .run = [](const Inputs& x) { return Outputs{linear(x[0], x[1], x[2])}; },
                   .reference = [ref_linear](const RefInputs& x) { return RefOutputs{ref_linear(x[0], x[1], &x[2])}; },
                   .dtypes = all_float,
                   .cpu_tolerance = gemm_tolerance,
                   .cuda_tolerance = gemm_tolerance});
  cases.push_back({.name = "linear_bias_tiles",
                   .inputs = {spec({3, 20, 24}), spec({40, 24}), spec({40})},
                   .run = [](const Inputs& x) { return Outputs{linear(x[0], x[1], x[2])}; },
                   .reference = [ref_linear](const RefInputs& x) { return RefOutputs{ref_linear(x[0], x[1], &x[2])}; },
                   .dtypes = all_float,
                   .cpu_tolerance = gemm_tolerance,
                   .cuda_tolerance = gemm_tolerance});
  cases.push_back({.name = "matmul_transpose_a_tiles",
                   .inputs = {spec({70, 45}), spec({70, 33})},
                   .run = [](const Inputs& x) { return Outputs{matmul(x[0], x[1], true, false)}; },
                   .reference = [](const RefInputs& x) { return RefOutputs{ref_matmul(ref_transpose_last(x[0]), x[1])}; },
                   .dtypes = all_float,
                   .cpu_tolerance = gemm_tolerance,
                   .cuda_tolerance = gemm_tolerance});
  cases.push_back({.name = "linear_no_bias",
                   .inputs = {spec({7, 33}), spec({17, 33})},
                   .run = [](const Inputs& x) { return Outputs{linear(x[0], x[1])}; },
                   .reference = [ref_linear](const RefInputs& x) { return RefOutputs{ref_linear(x[0], x[1], nullptr)}; },
                   .dtypes = all_float,
                   .cpu_tolerance = gemm_tolerance,
                   .cuda_tolerance = gemm_tolerance});
  cases.push_back({.name = "linear_vector_strided",
                   .inputs = {spec({12}, true), spec({3, 12}), spec({3})},
                   .run = [](const Inputs& x) { return Outputs{linear(x[0], x[1], x[2])}; },
                   .reference =
                       [ref_linear](const RefInputs& x) {
                         RefTensor y = ref_linear(x[0], x[1], &x[2]);
                         return RefOutputs{y};
                       },
                   .dtypes = all_float,
                   .cpu_tolerance = gemm_tolerance,
                   .cuda_tolerance = gemm_tolerance});
  return cases;
}

}  // namespace

WICK_REGISTER_OP_CASES(matmul_cases);

}  // namespace wick::testing
