// Float8 e4m3 weights (runtime/float8.h, runtime/ops/float8.h): the conversions bit for bit against
// PyTorch's float8_e4m3fn (every code, ~22,000 values: tests/reference/make_float8_fixtures.py), the
// quantizer's codes and scales against torch's, dequantization, float8_linear against linear on the
// dequantized weight, the errors; CUDA against the CPU bit for bit (skipped without a GPU); and the
// op-harness entry of float8_linear (f64 reference; CUDA vs CPU).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "runtime/float8.h"
#include "runtime/ops/float8.h"
#include "runtime/ops/matmul.h"
#include "runtime/ops/random.h"
#include "runtime/safetensors.h"
#include "tests/runtime/op_harness.h"
#include "tests/test_data.h"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace wick {
namespace {

using ::testing::HasSubstr;

const SafetensorsFile& fixture() {
  static const SafetensorsFile file =
      SafetensorsFile::open(wick::testing::test_data_dir() + "/float8/conversion.safetensors");
  return file;
}

std::vector<uint32_t> bits_of(const std::string& name) {
  std::vector<int32_t> ints = fixture().get(name).to_vector<int32_t>();
  return std::vector<uint32_t>(ints.begin(), ints.end());
}

std::vector<uint8_t> bytes_of(const Tensor& t) { return t.contiguous().to(Device::cpu()).to_vector<uint8_t>(); }

std::vector<uint32_t> float_bits_of(const Tensor& t) {
  std::vector<float> values = t.to(Device::cpu()).to(DType::F32).to_vector<float>();
  std::vector<uint32_t> out;
  for (float v : values) out.push_back(float_bits(v));
  return out;
}

std::vector<uint16_t> half_bits_of(const Tensor& t) {
  Tensor c = t.contiguous().to(Device::cpu());
  std::vector<uint16_t> out(static_cast<size_t>(c.numel()));
  std::memcpy(out.data(), c.data(), out.size() * 2);
  return out;
}

TEST(Float8, EveryCodeDecodesAsTorch) {
  const std::vector<uint32_t> expected = bits_of("decoded");
  ASSERT_EQ(expected.size(), 256u);
  for (int code = 0; code < 256; ++code)
    EXPECT_EQ(float_bits(e4m3_to_f32(static_cast<uint8_t>(code))), expected[static_cast<size_t>(code)])
        << "code 0x" << std::hex << code;
}

TEST(Float8, ConversionEqualsTorchOnEveryValue) {
  const std::vector<uint32_t> values = bits_of("values");
  const std::vector<uint8_t> plain = fixture().get("plain").to_vector<uint8_t>();
  const std::vector<uint8_t> saturated = fixture().get("saturated").to_vector<uint8_t>();
  ASSERT_EQ(values.size(), plain.size());
  ASSERT_GT(values.size(), 20000u);
  int64_t mismatches = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    const uint8_t code = f32_to_e4m3(bits_float(values[i]));
    if (code != plain[i] || code != saturated[i]) {
      if (++mismatches < 10)
        ADD_FAILURE() << "value bits 0x" << std::hex << values[i] << " (" << bits_float(values[i]) << "): wick 0x"
                      << int(code) << ", torch 0x" << int(plain[i]) << " / clamped 0x" << int(saturated[i]);
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(Float8, ConversionEdges) {
  EXPECT_EQ(f32_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_e4m3(448.0f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(470.0f), 0x7e);  // saturated (c10's unclamped routine would give NaN)
  EXPECT_EQ(detail::f32_to_e4m3_unclamped(470.0f), 0x7f);
  EXPECT_EQ(f32_to_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_EQ(f32_to_e4m3(0.001953125f), 0x01);     // 2^-9, the smallest subnormal
  EXPECT_EQ(f32_to_e4m3(0.0009765625f), 0x00);    // 2^-10: the tie rounds to even (zero)
  EXPECT_EQ(f32_to_e4m3(0.0029296875f), 0x02);    // 1.5 * 2^-9: the tie rounds to even (2 * 2^-9)
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0xff)));
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(e4m3_scale(0.0f), 1.0f);
  EXPECT_EQ(e4m3_scale(896.0f), 2.0f);
}

struct QuantizeCase {
  const char* source;       // fixture weight
  Float8Scaling scaling;
  const char* codes;        // expected codes
  const char* scale;        // expected scales
};

TEST(Float8, QuantizerEqualsTorch) {
  for (const QuantizeCase& c : {QuantizeCase{"weight", Float8Scaling::PerRow, "row_codes", "row_scale"},
                                QuantizeCase{"weight", Float8Scaling::PerTensor, "tensor_codes", "tensor_scale"},
                                QuantizeCase{"weight_bf16", Float8Scaling::PerRow, "row_codes_bf16", "row_scale_bf16"}}) {
    SCOPED_TRACE(std::string(c.source) + " " + float8_scaling_name(c.scaling));
    Float8Weight q = quantize_float8(fixture().get(c.source), c.scaling);
    EXPECT_EQ(q.codes.dtype(), DType::U8);
    EXPECT_EQ(q.codes.shape(), (Shape{37, 53}));
    EXPECT_EQ(bytes_of(q.codes), fixture().get(c.codes).to_vector<uint8_t>());
    EXPECT_EQ(float_bits_of(q.scale), float_bits_of(fixture().get(c.scale)));
  }
}

TEST(Float8, DequantizeEqualsTorch) {
  const Tensor codes = fixture().get("row_codes"), scale = fixture().get("row_scale");
  EXPECT_EQ(float_bits_of(dequantize_float8(codes, scale, DType::F32)),
            float_bits_of(fixture().get("row_dequant_f32")));
  EXPECT_EQ(half_bits_of(dequantize_float8(codes, scale, DType::BF16)),
            half_bits_of(fixture().get("row_dequant_bf16")));
  // The scale's shape does not matter, its count does: [rows, 1] as [rows].
  EXPECT_EQ(float_bits_of(dequantize_float8(codes, scale.reshape({37, 1}), DType::F32)),
            float_bits_of(fixture().get("row_dequant_f32")));
  // F64 holds the f32 products exactly.
  EXPECT_EQ(float_bits_of(dequantize_float8(codes, scale, DType::F64)),
            float_bits_of(fixture().get("row_dequant_f32")));
}

TEST(Float8, LinearEqualsLinearOnTheDequantizedWeight) {
  const Tensor codes = fixture().get("row_codes"), scale = fixture().get("row_scale");
  for (DType dtype : {DType::F32, DType::BF16}) {
    Tensor x = uniform({2, 3, 53}, -1.0, 1.0, derive_stream(7, 0, 0, RngPurpose::Noise), dtype);
    Tensor bias = uniform({37}, -1.0, 1.0, derive_stream(8, 0, 0, RngPurpose::Noise), dtype);
    Tensor expected = linear(x, dequantize_float8(codes, scale, dtype), bias);
    EXPECT_EQ(half_bits_of(float8_linear(x, codes, scale, bias).to(DType::F32)),
              half_bits_of(expected.to(DType::F32)))
        << dtype_name(dtype);
  }
}

TEST(Float8, Errors) {
  Tensor w = Tensor::from_vector<float>({1.0f, NAN, 2.0f, 3.0f}, {2, 2});
  try {
    quantize_float8(w, Float8Scaling::PerRow);
    FAIL() << "NaN weight accepted";
  } catch (const WickError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Data);
    EXPECT_THAT(e.what(), HasSubstr("row 0"));
  }
  Tensor codes = Tensor::from_vector<uint8_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_THROW(dequantize_float8(codes, Tensor::from_vector<float>({1, 2, 3}, {3}), DType::F32), WickError);
  EXPECT_THROW(dequantize_float8(codes, Tensor::from_vector<double>({1, 2}, {2}), DType::F32), WickError);
  EXPECT_THROW(dequantize_float8(codes, Tensor(), DType::I32), WickError);
  EXPECT_THROW(quantize_float8(Tensor::from_vector<float>({1, 2}, {2}), Float8Scaling::PerRow), WickError);
  EXPECT_THROW(float8_linear(Tensor::from_vector<float>({1, 2, 3, 4}, {1, 4}), codes, Tensor()), WickError);
  // An undefined scale means 1: the codes' own values.
  Tensor decoded = dequantize_float8(codes, Tensor(), DType::F32);
  EXPECT_EQ(decoded.to_vector<float>()[5], e4m3_to_f32(6));
}

// ---- CUDA ----
TEST(Float8Cuda, QuantizeAndDequantizeEqualTheCpuBitwise) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Device gpu = Device::cuda(0);
  // Every code, through the dequantize kernels (packed: 256 columns; scalar: 255).
  std::vector<uint8_t> all(256);
  for (int i = 0; i < 256; ++i) all[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
  Tensor codes = Tensor::from_vector<uint8_t>(all, {1, 256});
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    EXPECT_EQ(half_bits_of(dequantize_float8(codes.to(gpu), Tensor(), dtype).to(DType::F32)),
              half_bits_of(dequantize_float8(codes, Tensor(), dtype).to(DType::F32)));
    Tensor odd = codes.narrow(1, 0, 255).contiguous();
    EXPECT_EQ(half_bits_of(dequantize_float8(odd.to(gpu), Tensor(), dtype).to(DType::F32)),
              half_bits_of(dequantize_float8(odd, Tensor(), dtype).to(DType::F32)));
  }
  // Every fixture value through the quantizer with scale 1 (a [1, N] weight whose amax is clamped
  // to 448 would rescale it: divide by the per-tensor scale on both sides instead).
  std::vector<uint32_t> value_bits = bits_of("values");
  std::vector<float> values;
  for (uint32_t b : value_bits)
    if (!std::isnan(bits_float(b)) && !std::isinf(bits_float(b))) values.push_back(bits_float(b));
  Tensor w = Tensor::from_vector<float>(values, {1, static_cast<int64_t>(values.size())});
  for (Float8Scaling scaling : {Float8Scaling::PerRow, Float8Scaling::PerTensor}) {
    Float8Weight cpu = quantize_float8(w, scaling), cuda = quantize_float8(w.to(gpu), scaling);
    EXPECT_EQ(bytes_of(cuda.codes), bytes_of(cpu.codes));
    EXPECT_EQ(float_bits_of(cuda.scale), float_bits_of(cpu.scale));
  }
  for (const char* source : {"weight", "weight_bf16"}) {
    Tensor weight = fixture().get(source);
    for (Float8Scaling scaling : {Float8Scaling::PerRow, Float8Scaling::PerTensor}) {
      Float8Weight cpu = quantize_float8(weight, scaling), cuda = quantize_float8(weight.to(gpu), scaling);
      EXPECT_EQ(bytes_of(cuda.codes), bytes_of(cpu.codes)) << source;
      EXPECT_EQ(float_bits_of(cuda.scale), float_bits_of(cpu.scale)) << source;
      for (DType dtype : {DType::F32, DType::BF16, DType::F16})
        EXPECT_EQ(half_bits_of(dequantize_float8(cuda.codes, cuda.scale, dtype).to(DType::F32)),
                  half_bits_of(dequantize_float8(cpu.codes, cpu.scale, dtype).to(DType::F32)));
    }
  }
}

}  // namespace

// ---- op harness: float8_linear against an f64 reference (and CUDA against the CPU) ----
namespace testing {
namespace {

std::vector<OpCase> float8_cases() {
  auto reference = [](const RefInputs& x) {
    const RefTensor &in = x[0], &codes = x[1], &scale = x[2], &bias = x[3];
    const int64_t n_out = codes.shape[0], n_in = codes.shape[1], rows = in.numel() / n_in;
    Shape shape = in.shape;
    shape.back() = n_out;
    RefTensor out = ref_like(shape);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < n_out; ++o) {
        // The dense weight is the f32 product, rounded to the compute dtype by the op; the
        // tolerance covers that rounding in bf16 / f16.
        double sum = bias.at(o);
        for (int64_t i = 0; i < n_in; ++i)
          sum += in.at(r * n_in + i) *
                 double(e4m3_to_f32(static_cast<uint8_t>(codes.at(o * n_in + i))) * float(scale.at(o)));
        out.at(r * n_out + o) = sum;
      }
    return RefOutputs{out};
  };
  return {{.name = "float8_linear",
           .inputs = {{.shape = {2, 3, 24}},
                      {.shape = {16, 24}, .low = 0, .high = 255, .integer = true, .dtype = DType::U8},
                      {.shape = {16}, .low = 0.001, .high = 0.01, .dtype = DType::F32},
                      {.shape = {16}}},
           .run = [](const Inputs& x) {
             // Codes 0x7f and 0xff are NaN: map them to zero so outputs stay finite.
             std::vector<uint8_t> codes = x[1].to(Device::cpu()).to_vector<uint8_t>();
             for (uint8_t& c : codes)
               if ((c & 0x7f) == 0x7f) c = 0;
             Tensor clean = Tensor::from_vector<uint8_t>(codes, x[1].shape(), x[1].device());
             return Outputs{float8_linear(x[0], clean, x[2], x[3])};
           },
           .reference = [reference](const RefInputs& x) {
             RefInputs clean = x;
             for (double& c : clean[1].values)
               if ((static_cast<int>(c) & 0x7f) == 0x7f) c = 0;
             return reference(clean);
           },
           .cpu_tolerance = {{DType::F32, {1e-5, 1e-5}}, {DType::BF16, {5e-2, 2e-2}}, {DType::F16, {5e-3, 5e-3}}}}};
}
WICK_REGISTER_OP_CASES(float8_cases);

}  // namespace
}  // namespace testing
}  // namespace wick
