// Op-harness entries for runtime/ops/join.h: concat, stack, split, chunk, pad.
#include <gtest/gtest.h>

#include <algorithm>

#include "runtime/ops/join.h"
#include "tests/runtime/op_harness.h"

// InputSpec::dtype (a std::optional without a default member initializer) makes GCC flag every
// designated initializer that leaves it out; leaving it out is the intended use.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace wick::testing {
namespace {

RefTensor ref_concat(const std::vector<RefTensor>& parts, int64_t axis) {
  Shape shape = parts[0].shape;
  shape[static_cast<size_t>(axis)] = 0;
  for (const RefTensor& p : parts) shape[static_cast<size_t>(axis)] += p.shape[static_cast<size_t>(axis)];
  RefTensor out = ref_like(shape);
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto coords = coords_of(shape, i);
    int64_t at = coords[static_cast<size_t>(axis)];
    for (const RefTensor& p : parts) {
      int64_t extent = p.shape[static_cast<size_t>(axis)];
      if (at < extent) {
        coords[static_cast<size_t>(axis)] = at;
        out.at(i) = p.at(linear_index(p.shape, coords));
        break;
      }
      at -= extent;
    }
  }
  return out;
}

// The piece [start, start + length) of x along axis.
RefTensor ref_piece(const RefTensor& x, int64_t axis, int64_t start, int64_t length) {
  Shape shape = x.shape;
  shape[static_cast<size_t>(axis)] = length;
  RefTensor out = ref_like(shape);
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto coords = coords_of(shape, i);
    coords[static_cast<size_t>(axis)] += start;
    out.at(i) = x.at(linear_index(x.shape, coords));
  }
  return out;
}

enum class RefPad { Constant, Reflect, Replicate };

// Pads given as torch does: last axis first, (before, after) pairs.
RefTensor ref_pad(const RefTensor& x, const std::vector<int64_t>& pads, RefPad mode, double value) {
  Shape shape = x.shape;
  size_t rank = shape.size();
  std::vector<int64_t> before(rank, 0);
  for (size_t k = 0; k < pads.size() / 2; ++k) {
    before[rank - 1 - k] = pads[2 * k];
    shape[rank - 1 - k] += pads[2 * k] + pads[2 * k + 1];
  }
  RefTensor out = ref_like(shape);
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto coords = coords_of(shape, i);
    bool inside = true;
    for (size_t d = 0; d < rank; ++d) {
      int64_t n = x.shape[d], c = coords[d] - before[d];
      if (c < 0 || c >= n) {
        if (mode == RefPad::Constant) inside = false;
        if (mode == RefPad::Reflect) c = c < 0 ? -c : 2 * (n - 1) - c;
        if (mode == RefPad::Replicate) c = c < 0 ? 0 : n - 1;
      }
      coords[d] = c;
    }
    out.at(i) = inside ? x.at(linear_index(x.shape, coords)) : value;
  }
  return out;
}

std::vector<OpCase> join_cases() {
  const std::vector<DType> floats = {DType::F32, DType::BF16, DType::F16, DType::F64};
  std::vector<OpCase> cases;
  cases.push_back({.name = "concat_axis1",
                   .inputs = {{.shape = {2, 3, 4}}, {.shape = {2, 1, 4}, .non_contiguous = true}, {.shape = {2, 5, 4}}},
                   .run =
                       [](const Inputs& x) {
                         return Outputs{concat({x[0], x[1], x[2]}, 1)};
                       },
                   .reference =
                       [](const RefInputs& x) {
                         return RefOutputs{ref_concat({x[0], x[1], x[2]}, 1)};
                       },
                   .dtypes = floats});
  cases.push_back({.name = "concat_last_axis_with_empty",
                   .inputs = {{.shape = {3, 2}}, {.shape = {3, 0}}, {.shape = {3, 7}, .non_contiguous = true}},
                   .run =
                       [](const Inputs& x) {
                         return Outputs{concat({x[0], x[1], x[2]}, -1)};
                       },
                   .reference =
                       [](const RefInputs& x) {
                         return RefOutputs{ref_concat({x[0], x[1], x[2]}, 1)};
                       }});
  cases.push_back({.name = "concat_large_integers",
                   .inputs = {{.shape = {200, 100}, .low = -100, .high = 100, .integer = true},
                              {.shape = {150, 100}, .low = -100, .high = 100, .integer = true}},
                   .run =
                       [](const Inputs& x) {
                         return Outputs{concat({x[0], x[1]}, 0)};
                       },
                   .reference =
                       [](const RefInputs& x) {
                         return RefOutputs{ref_concat({x[0], x[1]}, 0)};
                       },
                   .dtypes = {DType::F32, DType::I32, DType::I64},
                   .exact = true});
  cases.push_back({.name = "stack_axis0",
                   .inputs = {{.shape = {2, 3}}, {.shape = {2, 3}, .non_contiguous = true}},
                   .run =
                       [](const Inputs& x) {
                         return Outputs{stack({x[0], x[1]}, 0)};
                       },
                   .reference =
                       [](const RefInputs& x) {
                         RefTensor a = x[0], b = x[1];
                         a.shape = b.shape = {1, 2, 3};
                         return RefOutputs{ref_concat({a, b}, 0)};
                       },
                   .dtypes = floats});
  cases.push_back({.name = "stack_new_last_axis",
                   .inputs = {{.shape = {4, 5}}, {.shape = {4, 5}}, {.shape = {4, 5}}},
                   .run =
                       [](const Inputs& x) {
                         return Outputs{stack({x[0], x[1], x[2]}, -1)};
                       },
                   .reference =
                       [](const RefInputs& x) {
                         std::vector<RefTensor> parts = {x[0], x[1], x[2]};
                         for (RefTensor& p : parts) p.shape = {4, 5, 1};
                         return RefOutputs{ref_concat(parts, 2)};
                       }});
  cases.push_back(
      {.name = "split_sizes",
       .inputs = {{.shape = {3, 6, 2}, .non_contiguous = true}},
       .run =
           [](const Inputs& x) {
             return split(x[0], std::vector<int64_t>{1, 3, 2}, 1);
           },
       .reference =
           [](const RefInputs& x) {
             return RefOutputs{ref_piece(x[0], 1, 0, 1), ref_piece(x[0], 1, 1, 3), ref_piece(x[0], 1, 4, 2)};
           },
       .dtypes = floats});
  cases.push_back(
      {.name = "split_size_uneven",
       .inputs = {{.shape = {5, 3}}},
       .run = [](const Inputs& x) { return split(x[0], int64_t{2}, 0); },
       .reference =
           [](const RefInputs& x) {
             return RefOutputs{ref_piece(x[0], 0, 0, 2), ref_piece(x[0], 0, 2, 2), ref_piece(x[0], 0, 4, 1)};
           }});
  cases.push_back(
      {.name = "chunk_last_axis",
       .inputs = {{.shape = {2, 7}}},
       .run = [](const Inputs& x) { return chunk(x[0], 3, -1); },
       .reference =
           [](const RefInputs& x) {
             return RefOutputs{ref_piece(x[0], 1, 0, 3), ref_piece(x[0], 1, 3, 3), ref_piece(x[0], 1, 6, 1)};
           }});
  cases.push_back({.name = "pad_constant",
                   .inputs = {{.shape = {2, 3, 5}, .non_contiguous = true}},
                   .run =
                       [](const Inputs& x) {
                         return Outputs{pad(x[0], {1, 2, 0, 3}, PadMode::Constant, 0.5)};
                       },
                   .reference =
                       [](const RefInputs& x) {
                         return RefOutputs{ref_pad(x[0], {1, 2, 0, 3}, RefPad::Constant, 0.5)};
                       },
                   .dtypes = floats});
  cases.push_back({.name = "pad_constant_all_axes_integer",
                   .inputs = {{.shape = {2, 2, 3}, .low = -9, .high = 9, .integer = true}},
                   .run =
                       [](const Inputs& x) {
                         return Outputs{pad(x[0], {1, 0, 0, 2, 1, 1}, PadMode::Constant, -7)};
                       },
                   .reference =
                       [](const RefInputs& x) {
                         return RefOutputs{ref_pad(x[0], {1, 0, 0, 2, 1, 1}, RefPad::Constant, -7)};
                       },
                   .dtypes = {DType::I32, DType::I64, DType::F32},
                   .exact = true});
  cases.push_back({.name = "pad_reflect",
                   .inputs = {{.shape = {2, 3, 5}, .non_contiguous = true}},
                   .run =
                       [](const Inputs& x) {
                         return Outputs{pad(x[0], {2, 4, 1, 2}, PadMode::Reflect)};
                       },
                   .reference =
                       [](const RefInputs& x) {
                         return RefOutputs{ref_pad(x[0], {2, 4, 1, 2}, RefPad::Reflect, 0)};
                       },
                   .dtypes = floats});
  cases.push_back({.name = "pad_reflect_three_axes",
                   .inputs = {{.shape = {3, 4, 5}}},
                   .run =
                       [](const Inputs& x) {
                         return Outputs{pad(x[0], {1, 1, 3, 0, 2, 1}, PadMode::Reflect)};
                       },
                   .reference =
                       [](const RefInputs& x) {
                         return RefOutputs{ref_pad(x[0], {1, 1, 3, 0, 2, 1}, RefPad::Reflect, 0)};
                       }});
  cases.push_back({.name = "pad_replicate",
                   .inputs = {{.shape = {2, 3, 5}, .non_contiguous = true}},
                   .run =
                       [](const Inputs& x) {
                         return Outputs{pad(x[0], {3, 1, 2, 0}, PadMode::Replicate)};
                       },
                   .reference =
                       [](const RefInputs& x) {
                         return RefOutputs{ref_pad(x[0], {3, 1, 2, 0}, RefPad::Replicate, 0)};
                       },
                   .dtypes = floats});
  cases.push_back({.name = "pad_replicate_large",  // 4 * 102 * 102 elements: crosses the threading threshold
                   .inputs = {{.shape = {4, 100, 100}}},
                   .run =
                       [](const Inputs& x) {
                         return Outputs{pad(x[0], {1, 1, 1, 1}, PadMode::Replicate)};
                       },
                   .reference =
                       [](const RefInputs& x) {
                         return RefOutputs{ref_pad(x[0], {1, 1, 1, 1}, RefPad::Replicate, 0)};
                       }});
  cases.push_back({.name = "pad_reflect_single_axis_of_one",  // extent 1 with zero pad, next axis padded
                   .inputs = {{.shape = {1, 4}}},
                   .run =
                       [](const Inputs& x) {
                         return Outputs{pad(x[0], {3, 3}, PadMode::Reflect)};
                       },
                   .reference =
                       [](const RefInputs& x) {
                         return RefOutputs{ref_pad(x[0], {3, 3}, RefPad::Reflect, 0)};
                       }});
  return cases;
}
WICK_REGISTER_OP_CASES(join_cases);

TEST(ShapesJoin, SplitAndChunkReturnViews) {
  Tensor x = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {2, 5});
  std::vector<Tensor> parts = split(x, std::vector<int64_t>{2, 3}, 1);
  ASSERT_EQ(parts.size(), 2u);
  for (const Tensor& p : parts) EXPECT_EQ(p.storage().get(), x.storage().get());
  EXPECT_EQ(parts[1].data(), static_cast<char*>(x.data()) + 2 * sizeof(float));
  EXPECT_EQ(parts[1].shape(), (Shape{2, 3}));
  std::vector<Tensor> chunks = chunk(x, 2, 0);
  ASSERT_EQ(chunks.size(), 2u);
  for (const Tensor& c : chunks) EXPECT_EQ(c.storage().get(), x.storage().get());
  EXPECT_EQ(chunks[1].to_vector<float>(), (std::vector<float>{5, 6, 7, 8, 9}));
  // Writing through a view changes x: no copy was made.
  chunks[1].copy_from(Tensor::scalar(-1.0));
  EXPECT_EQ(x.to_vector<float>()[9], -1.0f);
}

TEST(ShapesJoin, ChunkMayReturnFewerPieces) {
  Tensor x = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {6});
  std::vector<Tensor> pieces = chunk(x, 4, 0);  // ceil(6 / 4) = 2 per piece -> 3 pieces, as torch
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[2].to_vector<float>(), (std::vector<float>{4, 5}));
}

TEST(ShapesJoin, ConcatPromotesDtypes) {
  Tensor a = Tensor::from_vector<int64_t>({1, 2}, {2});
  Tensor b = Tensor::from_vector<float>({0.5f}, {1});
  Tensor c = concat({a, b}, 0);
  EXPECT_EQ(c.dtype(), DType::F32);
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{1, 2, 0.5f}));
}

}  // namespace
}  // namespace wick::testing
