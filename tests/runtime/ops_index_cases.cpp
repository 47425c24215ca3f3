// Op-harness entries for runtime/ops/index.h: embedding, index_select, gather, scatter_add.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "runtime/ops/index.h"
#include "tests/runtime/op_harness.h"

// InputSpec::dtype (a std::optional without a default member initializer) makes GCC flag every
// designated initializer that leaves it out; leaving it out is the intended use.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace wick::testing {
namespace {

InputSpec indices(Shape shape, int64_t extent, DType dtype = DType::I64) {
  return {.shape = std::move(shape), .low = 0, .high = static_cast<double>(extent), .integer = true, .dtype = dtype};
}

// out[*, i, *] = x[*, index[i], *] along `axis`, written directly from the definition.
RefTensor ref_index_select(const RefTensor& x, int64_t axis, const RefTensor& index) {
  Shape shape = x.shape;
  shape[static_cast<size_t>(axis)] = index.numel();
  RefTensor out = ref_like(shape);
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto coords = coords_of(shape, i);
    coords[static_cast<size_t>(axis)] = static_cast<int64_t>(index.at(coords[static_cast<size_t>(axis)]));
    out.at(i) = x.at(linear_index(x.shape, coords));
  }
  return out;
}

RefTensor ref_gather(const RefTensor& x, int64_t axis, const RefTensor& index) {
  RefTensor out = ref_like(index.shape);
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto coords = coords_of(index.shape, i);
    coords[static_cast<size_t>(axis)] = static_cast<int64_t>(index.at(i));
    out.at(i) = x.at(linear_index(x.shape, coords));
  }
  return out;
}

RefTensor ref_scatter_add(const RefTensor& x, int64_t axis, const RefTensor& index, const RefTensor& src) {
  RefTensor out = x;
  for (int64_t i = 0; i < index.numel(); ++i) {
    auto coords = coords_of(index.shape, i);
    double value = src.at(linear_index(src.shape, coords));
    coords[static_cast<size_t>(axis)] = static_cast<int64_t>(index.at(i));
    out.at(linear_index(x.shape, coords)) += value;
  }
  return out;
}

// out = x; out[*, index[i], *] += src[*, i, *] along `axis`.
RefTensor ref_index_add(const RefTensor& x, int64_t axis, const RefTensor& index, const RefTensor& src) {
  RefTensor out = x;
  for (int64_t i = 0; i < src.numel(); ++i) {
    auto coords = coords_of(src.shape, i);
    coords[static_cast<size_t>(axis)] = static_cast<int64_t>(index.at(coords[static_cast<size_t>(axis)]));
    out.at(linear_index(x.shape, coords)) += src.at(i);
  }
  return out;
}

std::vector<OpCase> index_cases() {
  const std::vector<DType> floats = {DType::F32, DType::BF16, DType::F16, DType::F64};
  std::vector<OpCase> cases;
  cases.push_back({.name = "embedding",
                   .inputs = {{.shape = {11, 7}}, indices({3, 5}, 11)},
                   .run = [](const Inputs& x) { return Outputs{embedding(x[0], x[1])}; },
                   .reference =
                       [](const RefInputs& x) {
                         RefTensor rows = ref_index_select(x[0], 0, {{x[1].numel()}, x[1].values});
                         rows.shape = {3, 5, 7};
                         return RefOutputs{rows};
                       },
                   .dtypes = floats});
  cases.push_back({.name = "embedding_i32_ids_noncontiguous_weight",
                   .inputs = {{.shape = {9, 4}, .non_contiguous = true}, indices({6}, 9, DType::I32)},
                   .run = [](const Inputs& x) { return Outputs{embedding(x[0], x[1])}; },
                   .reference = [](const RefInputs& x) { return RefOutputs{ref_index_select(x[0], 0, x[1])}; },
                   .dtypes = floats});
  cases.push_back({.name = "embedding_large",  // 64 * 700 elements: crosses the threading threshold
                   .inputs = {{.shape = {50, 700}}, indices({64}, 50)},
                   .run = [](const Inputs& x) { return Outputs{embedding(x[0], x[1])}; },
                   .reference = [](const RefInputs& x) { return RefOutputs{ref_index_select(x[0], 0, x[1])}; }});
  cases.push_back({.name = "index_select_axis1_negative",
                   .inputs = {{.shape = {4, 9, 3}, .non_contiguous = true}, indices({6}, 9)},
                   .run = [](const Inputs& x) { return Outputs{index_select(x[0], -2, x[1])}; },
                   .reference = [](const RefInputs& x) { return RefOutputs{ref_index_select(x[0], 1, x[1])}; },
                   .dtypes = floats});
  cases.push_back({.name = "index_select_last_axis_integers",
                   .inputs = {{.shape = {3, 5}, .low = -50, .high = 50, .integer = true}, indices({7}, 5, DType::I32)},
                   .run = [](const Inputs& x) { return Outputs{index_select(x[0], 1, x[1])}; },
                   .reference = [](const RefInputs& x) { return RefOutputs{ref_index_select(x[0], 1, x[1])}; },
                   .dtypes = {DType::I32, DType::I64, DType::I8},
                   .exact = true});
  cases.push_back({.name = "gather_axis1",
                   .inputs = {{.shape = {5, 8}}, indices({5, 4}, 8)},
                   .run = [](const Inputs& x) { return Outputs{gather(x[0], 1, x[1])}; },
                   .reference = [](const RefInputs& x) { return RefOutputs{ref_gather(x[0], 1, x[1])}; },
                   .dtypes = floats});
  cases.push_back({.name = "gather_axis0_smaller_index_noncontiguous",
                   .inputs = {{.shape = {4, 6, 3}, .non_contiguous = true}, indices({7, 5, 2}, 4)},
                   .run = [](const Inputs& x) { return Outputs{gather(x[0], 0, x[1])}; },
                   .reference = [](const RefInputs& x) { return RefOutputs{ref_gather(x[0], 0, x[1])}; },
                   .dtypes = floats});
  cases.push_back({.name = "gather_large",
                   .inputs = {{.shape = {40, 1000}}, indices({40, 900}, 1000, DType::I32)},
                   .run = [](const Inputs& x) { return Outputs{gather(x[0], -1, x[1])}; },
                   .reference = [](const RefInputs& x) { return RefOutputs{ref_gather(x[0], 1, x[1])}; }});
  cases.push_back({.name = "scatter_add_axis0",
                   .inputs = {{.shape = {6, 5}}, indices({4, 5}, 6), {.shape = {4, 5}}},
                   .run = [](const Inputs& x) { return Outputs{scatter_add(x[0], 0, x[1], x[2])}; },
                   .reference = [](const RefInputs& x) { return RefOutputs{ref_scatter_add(x[0], 0, x[1], x[2])}; },
                   .dtypes = floats});
  cases.push_back({.name = "scatter_add_last_axis_larger_src",  // src larger than index; repeated targets
                   .inputs = {{.shape = {2, 3, 4}, .non_contiguous = true},
                              indices({2, 2, 9}, 4, DType::I32),
                              {.shape = {3, 3, 10}, .non_contiguous = true}},
                   .run = [](const Inputs& x) { return Outputs{scatter_add(x[0], -1, x[1], x[2])}; },
                   .reference = [](const RefInputs& x) { return RefOutputs{ref_scatter_add(x[0], 2, x[1], x[2])}; },
                   .dtypes = floats,
                   .cpu_tolerance = {{DType::BF16, {2e-2, 1e-2}}},
                   .cuda_tolerance = {{DType::F32, {1e-5, 1e-5}}, {DType::BF16, {2e-2, 1e-2}}}});
  cases.push_back({.name = "scatter_add_integers",
                   .inputs = {{.shape = {5, 3}, .low = -9, .high = 9, .integer = true},
                              indices({6, 3}, 5),
                              {.shape = {6, 3}, .low = -9, .high = 9, .integer = true}},
                   .run = [](const Inputs& x) { return Outputs{scatter_add(x[0], 0, x[1], x[2])}; },
                   .reference = [](const RefInputs& x) { return RefOutputs{ref_scatter_add(x[0], 0, x[1], x[2])}; },
                   .dtypes = {DType::I32, DType::I64},
                   .exact = true});
  cases.push_back({.name = "index_add_rows_repeated",  // the embedding-gradient shape: [V, D] += rows
                   .inputs = {{.shape = {6, 5}}, indices({9}, 6), {.shape = {9, 5}}},
                   .run = [](const Inputs& x) { return Outputs{index_add(x[0], 0, x[1], x[2])}; },
                   .reference = [](const RefInputs& x) { return RefOutputs{ref_index_add(x[0], 0, x[1], x[2])}; },
                   .dtypes = floats,
                   .cpu_tolerance = {{DType::BF16, {2e-2, 1e-2}}},
                   .cuda_tolerance = {{DType::BF16, {2e-2, 1e-2}}}});
  cases.push_back({.name = "index_add_middle_axis_noncontiguous",
                   .inputs = {{.shape = {3, 4, 5}, .non_contiguous = true},
                              indices({7}, 4, DType::I32),
                              {.shape = {3, 7, 5}, .non_contiguous = true}},
                   .run = [](const Inputs& x) { return Outputs{index_add(x[0], -2, x[1], x[2])}; },
                   .reference = [](const RefInputs& x) { return RefOutputs{ref_index_add(x[0], 1, x[1], x[2])}; },
                   .dtypes = floats,
                   .cpu_tolerance = {{DType::BF16, {2e-2, 1e-2}}},
                   .cuda_tolerance = {{DType::BF16, {2e-2, 1e-2}}}});
  cases.push_back({.name = "index_add_last_axis",
                   .inputs = {{.shape = {4, 3}}, indices({5}, 3), {.shape = {4, 5}}},
                   .run = [](const Inputs& x) { return Outputs{index_add(x[0], 1, x[1], x[2])}; },
                   .reference = [](const RefInputs& x) { return RefOutputs{ref_index_add(x[0], 1, x[1], x[2])}; },
                   .dtypes = {DType::F32, DType::F64}});
  cases.push_back({.name = "index_add_large",  // 50 * 700 columns: crosses the threading threshold
                   .inputs = {{.shape = {30, 700}}, indices({64}, 30), {.shape = {64, 700}}},
                   .run = [](const Inputs& x) { return Outputs{index_add(x[0], 0, x[1], x[2])}; },
                   .reference = [](const RefInputs& x) { return RefOutputs{ref_index_add(x[0], 0, x[1], x[2])}; }});
  cases.push_back({.name = "index_add_integers",
                   .inputs = {{.shape = {5, 3}, .low = -9, .high = 9, .integer = true},
                              indices({8}, 5),
                              {.shape = {8, 3}, .low = -9, .high = 9, .integer = true}},
                   .run = [](const Inputs& x) { return Outputs{index_add(x[0], 0, x[1], x[2])}; },
                   .reference = [](const RefInputs& x) { return RefOutputs{ref_index_add(x[0], 0, x[1], x[2])}; },
                   .dtypes = {DType::I32, DType::I64},
                   .exact = true});
  return cases;
}
WICK_REGISTER_OP_CASES(index_cases);

TEST(ShapesIndex, IndexAddRejectsBadArguments) {
  Tensor x = Tensor::from_vector<float>({0, 0, 0, 0, 0, 0}, {3, 2});
  Tensor index = Tensor::from_vector<int64_t>({0, 2}, {2});
  auto message_of = [](const std::function<void()>& fn) {
    try {
      fn();
    } catch (const WickError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // src extent at the axis must equal the index length; other extents must match x.
  EXPECT_NE(message_of([&] { index_add(x, 0, index, Tensor::empty({3, 2}, DType::F32)); }).find("index_add"),
            std::string::npos);
  EXPECT_NE(message_of([&] { index_add(x, 0, index, Tensor::empty({2, 3}, DType::F32)); }).find("index_add"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              index_add(x, 0, Tensor::from_vector<int64_t>({0, 3}, {2}), Tensor::empty({2, 2}, DType::F32));
            }).find("out of range"),
            std::string::npos);
  EXPECT_NE(message_of([&] { index_add(x, 0, index.to(DType::F32), Tensor::empty({2, 2}, DType::F32)); })
                .find("index_add"),
            std::string::npos);
}

TEST(ShapesIndex, IndexAddRepeatedIndexSumsInOrder) {
  Tensor x = Tensor::from_vector<float>({1, 1, 1}, {3});
  Tensor index = Tensor::from_vector<int64_t>({2, 2, 0, 2}, {4});
  Tensor src = Tensor::from_vector<float>({1, 2, 3, 4}, {4});
  EXPECT_EQ(index_add(x, 0, index, src).to_vector<float>(), (std::vector<float>{4, 1, 8}));
}

TEST(ShapesIndex, EmbeddingOfEmptyIdsIsEmpty) {
  Tensor weight = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  Tensor out = embedding(weight, Tensor::empty({0}, DType::I64));
  EXPECT_EQ(out.shape(), (Shape{0, 2}));
}

TEST(ShapesIndex, ScatterAddRepeatedIndexSums) {
  Tensor x = Tensor::from_vector<float>({0, 0, 0}, {3});
  Tensor index = Tensor::from_vector<int64_t>({2, 2, 0, 2}, {4});
  Tensor src = Tensor::from_vector<float>({1, 2, 4, 8}, {4});
  EXPECT_EQ(scatter_add(x, 0, index, src).to_vector<float>(), (std::vector<float>{4, 0, 11}));
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{0, 0, 0})) << "scatter_add must not modify x";
}

}  // namespace
}  // namespace wick::testing
