// Op-harness entries for runtime/ops/layout.h: pixel_shuffle, pixel_unshuffle, patchify, unpatchify.
#include <gtest/gtest.h>

#include "runtime/ops/layout.h"
#include "tests/runtime/op_harness.h"

// InputSpec::dtype (a std::optional without a default member initializer) makes GCC flag every
// designated initializer that leaves it out; leaving it out is the intended use.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace wick::testing {
namespace {

// out[n, c, h*r + i, w*r + j] = x[n, c*r*r + i*r + j, h, w]
RefTensor ref_pixel_shuffle(const RefTensor& x, int64_t r) {
  int64_t n = x.shape[0], channels = x.shape[1], height = x.shape[2], width = x.shape[3], c_out = channels / (r * r);
  RefTensor out = ref_like({n, c_out, height * r, width * r});
  for (int64_t b = 0; b < n; ++b)
    for (int64_t c = 0; c < c_out; ++c)
      for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j < r; ++j)
          for (int64_t h = 0; h < height; ++h)
            for (int64_t w = 0; w < width; ++w)
              out.at(linear_index(out.shape, {b, c, h * r + i, w * r + j})) =
                  x.at(linear_index(x.shape, {b, c * r * r + i * r + j, h, w}));
  return out;
}

RefTensor ref_pixel_unshuffle(const RefTensor& x, int64_t r) {
  int64_t n = x.shape[0], c_in = x.shape[1], height = x.shape[2] / r, width = x.shape[3] / r;
  RefTensor out = ref_like({n, c_in * r * r, height, width});
  for (int64_t b = 0; b < n; ++b)
    for (int64_t c = 0; c < c_in; ++c)
      for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j < r; ++j)
          for (int64_t h = 0; h < height; ++h)
            for (int64_t w = 0; w < width; ++w)
              out.at(linear_index(out.shape, {b, c * r * r + i * r + j, h, w})) =
                  x.at(linear_index(x.shape, {b, c, h * r + i, w * r + j}));
  return out;
}

// "b c (h ph) (w pw) -> b (h w) (c ph pw)"
RefTensor ref_patchify(const RefTensor& x, int64_t p) {
  int64_t batch = x.shape[0], channels = x.shape[1], h_patches = x.shape[2] / p, w_patches = x.shape[3] / p;
  RefTensor out = ref_like({batch, h_patches * w_patches, channels * p * p});
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t h = 0; h < h_patches; ++h)
        for (int64_t ph = 0; ph < p; ++ph)
          for (int64_t w = 0; w < w_patches; ++w)
            for (int64_t pw = 0; pw < p; ++pw)
              out.at(linear_index(out.shape, {b, h * w_patches + w, c * p * p + ph * p + pw})) =
                  x.at(linear_index(x.shape, {b, c, h * p + ph, w * p + pw}));
  return out;
}

RefTensor ref_unpatchify(const RefTensor& tokens, int64_t p, int64_t height, int64_t width) {
  int64_t batch = tokens.shape[0], channels = tokens.shape[2] / (p * p), w_patches = width / p;
  RefTensor out = ref_like({batch, channels, height, width});
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t y = 0; y < height; ++y)
        for (int64_t x = 0; x < width; ++x)
          out.at(linear_index(out.shape, {b, c, y, x})) = tokens.at(linear_index(
              tokens.shape, {b, (y / p) * w_patches + x / p, c * p * p + (y % p) * p + x % p}));
  return out;
}

std::vector<OpCase> layout_cases() {
  const std::vector<DType> floats = {DType::F32, DType::BF16, DType::F16, DType::F64};
  std::vector<OpCase> cases;
  cases.push_back({.name = "pixel_shuffle",
                   .inputs = {{.shape = {2, 12, 3, 5}, .non_contiguous = true}},
                   .run = [](const Inputs& x) { return Outputs{pixel_shuffle(x[0], 2)}; },
                   .reference = [](const RefInputs& x) { return RefOutputs{ref_pixel_shuffle(x[0], 2)}; },
                   .dtypes = floats});
  cases.push_back({.name = "pixel_shuffle_r3_integers",
                   .inputs = {{.shape = {1, 18, 2, 3}, .low = 0, .high = 100, .integer = true}},
                   .run = [](const Inputs& x) { return Outputs{pixel_shuffle(x[0], 3)}; },
                   .reference = [](const RefInputs& x) { return RefOutputs{ref_pixel_shuffle(x[0], 3)}; },
                   .dtypes = {DType::I32, DType::U8},
                   .exact = true});
  cases.push_back({.name = "pixel_unshuffle",
                   .inputs = {{.shape = {2, 3, 6, 10}, .non_contiguous = true}},
                   .run = [](const Inputs& x) { return Outputs{pixel_unshuffle(x[0], 2)}; },
                   .reference = [](const RefInputs& x) { return RefOutputs{ref_pixel_unshuffle(x[0], 2)}; },
                   .dtypes = floats});
  cases.push_back({.name = "patchify",
                   .inputs = {{.shape = {2, 3, 4, 6}, .non_contiguous = true}},
                   .run = [](const Inputs& x) { return Outputs{patchify(x[0], 2)}; },
                   .reference = [](const RefInputs& x) { return RefOutputs{ref_patchify(x[0], 2)}; },
                   .dtypes = floats});
  cases.push_back({.name = "patchify_large",  // a Flux-like latent: 16 channels, 64x64, p = 2
                   .inputs = {{.shape = {1, 16, 64, 64}}},
                   .run = [](const Inputs& x) { return Outputs{patchify(x[0], 2)}; },
                   .reference = [](const RefInputs& x) { return RefOutputs{ref_patchify(x[0], 2)}; }});
  cases.push_back({.name = "unpatchify",
                   .inputs = {{.shape = {2, 6, 12}, .non_contiguous = true}},
                   .run = [](const Inputs& x) { return Outputs{unpatchify(x[0], 2, 4, 6)}; },
                   .reference = [](const RefInputs& x) { return RefOutputs{ref_unpatchify(x[0], 2, 4, 6)}; },
                   .dtypes = floats});
  // Copies through each CUDA copy kernel: a permute of the last two axes (shared-memory tiles, with
  // partial tiles and a batch axis), a head permute that keeps the last axis (rows), a broadcast of
  // one row (rows, stride 0) and a dtype cast of dense data (vectors plus a tail).
  auto permuted = [](const RefTensor& x, const std::vector<int64_t>& order) {
    Shape shape;
    for (int64_t a : order) shape.push_back(x.shape[static_cast<size_t>(a)]);
    RefTensor out = ref_like(shape);
    for (int64_t i = 0; i < out.numel(); ++i) {
      std::vector<int64_t> at = coords_of(shape, i), from(at.size());
      for (size_t a = 0; a < order.size(); ++a) from[static_cast<size_t>(order[a])] = at[a];
      out.at(i) = x.at(linear_index(x.shape, from));
    }
    return out;
  };
  cases.push_back({.name = "copy_transpose_tiles",
                   .inputs = {{.shape = {3, 100, 70}}},
                   .run = [](const Inputs& x) { return Outputs{x[0].transpose(1, 2).contiguous()}; },
                   .reference = [permuted](const RefInputs& x) { return RefOutputs{permuted(x[0], {0, 2, 1})}; },
                   .dtypes = floats});
  cases.push_back({.name = "copy_head_permute_rows",
                   .inputs = {{.shape = {2, 64, 6, 32}}},
                   .run = [](const Inputs& x) { return Outputs{x[0].permute({0, 2, 1, 3}).contiguous()}; },
                   .reference = [permuted](const RefInputs& x) { return RefOutputs{permuted(x[0], {0, 2, 1, 3})}; },
                   .dtypes = floats});
  cases.push_back({.name = "copy_broadcast_row",
                   .inputs = {{.shape = {1, 300}}},
                   .run = [](const Inputs& x) { return Outputs{x[0].expand({257, 300}).contiguous()}; },
                   .reference = [](const RefInputs& x) {
                     RefTensor out = ref_like({257, 300});
                     for (int64_t i = 0; i < out.numel(); ++i) out.at(i) = x[0].at(i % 300);
                     return RefOutputs{out};
                   },
                   .dtypes = floats});
  cases.push_back({.name = "copy_cast_dense",
                   .inputs = {{.shape = {(1 << 16) + 3}}},
                   .run = [](const Inputs& x) {
                     return Outputs{x[0].to(x[0].dtype() == DType::F32 ? DType::BF16 : DType::F32)};
                   },
                   .reference = [](const RefInputs& x) { return RefOutputs{x[0]}; },
                   .dtypes = {DType::F32, DType::BF16},
                   .cpu_tolerance = {{DType::F32, {1e-2, 8e-3}}},  // f32 -> bf16 rounds
                   .cuda_tolerance = {{DType::F32, {1e-2, 8e-3}}}});
  return cases;
}
WICK_REGISTER_OP_CASES(layout_cases);

Tensor iota(const Shape& shape) {
  std::vector<float> values(static_cast<size_t>(numel(shape)));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  return Tensor::from_vector<float>(values, shape);
}

TEST(ShapesLayout, PixelShuffleInvertsPixelUnshuffle) {
  Tensor x = iota({2, 3, 6, 9});
  Tensor down = pixel_unshuffle(x, 3);
  EXPECT_EQ(down.shape(), (Shape{2, 27, 2, 3}));
  Tensor back = pixel_shuffle(down, 3);
  EXPECT_EQ(back.shape(), x.shape());
  EXPECT_EQ(back.to_vector<float>(), x.to_vector<float>());
  EXPECT_EQ(pixel_unshuffle(pixel_shuffle(down, 3), 3).to_vector<float>(), down.to_vector<float>());
}

TEST(ShapesLayout, UnpatchifyInvertsPatchify) {
  Tensor x = iota({2, 4, 6, 10});
  Tensor tokens = patchify(x, 2);
  EXPECT_EQ(tokens.shape(), (Shape{2, 15, 16}));
  EXPECT_TRUE(tokens.is_contiguous());
  Tensor back = unpatchify(tokens, 2, 6, 10);
  EXPECT_EQ(back.shape(), x.shape());
  EXPECT_EQ(back.to_vector<float>(), x.to_vector<float>());
}

TEST(ShapesLayout, PatchifyTokenOrderIsRowMajorOverPatches) {
  // Token 1 is the patch right of token 0; its first feature is x[0, 0, 0, p].
  Tensor x = iota({1, 1, 4, 4});
  std::vector<float> tokens = patchify(x, 2).to_vector<float>();
  EXPECT_EQ((std::vector<float>(tokens.begin(), tokens.begin() + 8)), (std::vector<float>{0, 1, 4, 5, 2, 3, 6, 7}));
}

}  // namespace
}  // namespace wick::testing
