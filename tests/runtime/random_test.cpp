// Philox streams and the random ops: known answers, statistics, determinism, offsets, the portable
// elementary functions, and CPU/CUDA bitwise equality.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "runtime/ops/random.h"
#include "runtime/philox.h"

namespace wick {
namespace {

using ::testing::HasSubstr;

// ---- the block function ----
// Random123's kat_vectors for philox4x32_10 (counter words, key words -> output words).
TEST(RandomPhilox, KnownAnswerVectors) {
  struct Kat {
    PhiloxBlock counter;
    PhiloxKey key;
    uint32_t expected[4];
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, {{0, 0}}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, {{0xffffffff, 0xffffffff}},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, {{0xa4093822, 0x299f31d0}},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& kat : kats) {
    PhiloxBlock out = philox4x32_10(kat.counter, kat.key);
    for (int w = 0; w < 4; ++w) EXPECT_EQ(out.word[w], kat.expected[w]) << "word " << w;
  }
}

TEST(RandomPhilox, StreamBlockLayout) {
  // Block b of stream (key, stream) is philox(counter = {b lo, b hi, stream lo, stream hi}, key = {lo, hi}).
  RngStream s{0x299f31d0a4093822ull, 0x0370734413198a2eull};
  PhiloxBlock out = stream_block(s, 0x85a308d3243f6a88ull);
  const uint32_t expected[4] = {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1};
  for (int w = 0; w < 4; ++w) EXPECT_EQ(out.word[w], expected[w]);
  // Element i is word i % 4 of block i / 4.
  PhiloxBlock block1 = stream_block(s, 1);
  EXPECT_EQ(stream_uniform(s, 6), static_cast<float>(block1.word[2] >> 8) * 0x1p-24f);
}

TEST(RandomPhilox, DeriveStreamIsFrozenAndSeparatesPurposes) {
  RngStream a = derive_stream(42, 7, 3, RngPurpose::Noise);
  EXPECT_EQ(a.key, 42u);
  // The mix is part of wick's reproducibility contract: pin one value.
  EXPECT_EQ(a.stream, mix64(mix64(mix64(0) ^ 3) ^ 7));
  EXPECT_EQ(mix64(0), 0xe220a8397b1dcdafull);  // splitmix64's first output for state 0
  std::set<uint64_t> streams;
  for (uint32_t purpose = 0; purpose < 8; ++purpose)
    for (uint64_t sample = 0; sample < 16; ++sample)
      for (uint64_t epoch = 0; epoch < 4; ++epoch) streams.insert(derive_stream(1, sample, epoch, purpose).stream);
  EXPECT_EQ(streams.size(), 8u * 16u * 4u);
}

// ---- portable elementary functions vs double ----
double ulps(float got, double want) {
  float rounded = static_cast<float>(want);
  double ulp = std::nextafter(std::fabs(rounded), INFINITY) - std::fabs(rounded);
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

TEST(RandomPortableMath, LogWithinOneUlpOnTheUniformGridAndBeyond) {
  double worst = 0;
  for (uint32_t j = 1; j <= (1u << 24); j += 3) {  // every third u1 the generator can produce
    float u = static_cast<float>(j) * 0x1p-24f;
    worst = std::max(worst, ulps(portable_log(u), std::log(static_cast<double>(u))));
  }
  for (uint32_t bits = 0x00800000u; bits < 0x7f800000u; bits += 997) {  // positive normal floats
    float x;
    std::memcpy(&x, &bits, 4);
    double want = std::log(static_cast<double>(x));
    if (want == 0) continue;
    worst = std::max(worst, ulps(portable_log(x), want));
  }
  EXPECT_LT(worst, 1.0);
  EXPECT_EQ(portable_log(1.0f), 0.0f);
}

TEST(RandomPortableMath, SinCosTurnsWithinTwoUlpOnTheUniformGrid) {
  double worst_sin = 0, worst_cos = 0;
  for (uint32_t j = 0; j < (1u << 24); j += 3) {
    float t = static_cast<float>(j) * 0x1p-24f;
    float s, c;
    portable_sincos_turns(t, s, c);
    // Reference: exact reduction to r = t - n/4, then double sin/cos of 2 pi r.
    double n = std::floor(4.0 * t + 0.5), r = t - n / 4;
    double sr = std::sin(2 * M_PI * r), cr = std::cos(2 * M_PI * r);
    int q = static_cast<int>(n) & 3;
    double want_sin = q == 0 ? sr : q == 1 ? cr : q == 2 ? -sr : -cr;
    double want_cos = q == 0 ? cr : q == 1 ? -sr : q == 2 ? -cr : sr;
    if (want_sin == 0) EXPECT_EQ(s, 0.0f); else worst_sin = std::max(worst_sin, ulps(s, want_sin));
    if (want_cos == 0) EXPECT_EQ(c, 0.0f); else worst_cos = std::max(worst_cos, ulps(c, want_cos));
  }
  EXPECT_LT(worst_sin, 2.0);
  EXPECT_LT(worst_cos, 2.0);
  float s, c;
  portable_sincos_turns(0.25f, s, c);
  EXPECT_EQ(s, 1.0f);
  EXPECT_EQ(c, 0.0f);
}

// ---- statistics ----
TEST(RandomOps, RandIsUniformInRange) {
  const int64_t n = 1000000;
  std::vector<float> u = rand({n}, derive_stream(1, 0, 0, RngPurpose::Test)).to_vector<float>();
  double sum = 0;
  for (float v : u) {
    ASSERT_GE(v, 0.0f);
    ASSERT_LT(v, 1.0f);
    sum += v;
  }
  // mean 1/2, sd of the mean sqrt(1/12/n): 5 sigma.
  EXPECT_NEAR(sum / n, 0.5, 5 * std::sqrt(1.0 / 12 / n));
  // Kolmogorov–Smirnov against U(0, 1): sqrt(n) D < 1.95 (alpha = 0.001).
  std::sort(u.begin(), u.end());
  double d = 0;
  for (int64_t i = 0; i < n; ++i)
    d = std::max({d, std::fabs((i + 1.0) / n - u[i]), std::fabs(u[i] - static_cast<double>(i) / n)});
  EXPECT_LT(std::sqrt(static_cast<double>(n)) * d, 1.95);
}

TEST(RandomOps, RandnHasStandardNormalMomentsAndCdf) {
  const int64_t n = 1000000;
  std::vector<float> z = randn({n}, derive_stream(2, 0, 0, RngPurpose::Test)).to_vector<float>();
  double sum = 0, sum_sq = 0;
  for (float v : z) {
    ASSERT_TRUE(std::isfinite(v));
    sum += v;
    sum_sq += static_cast<double>(v) * v;
  }
  double mean = sum / n, var = sum_sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 5 / std::sqrt(static_cast<double>(n)));
  EXPECT_NEAR(var, 1.0, 5 * std::sqrt(2.0 / n));
  std::sort(z.begin(), z.end());
  double d = 0;
  for (int64_t i = 0; i < n; ++i) {
    double cdf = 0.5 * std::erfc(-z[i] / std::sqrt(2.0));
    d = std::max({d, std::fabs((i + 1.0) / n - cdf), std::fabs(cdf - static_cast<double>(i) / n)});
  }
  EXPECT_LT(std::sqrt(static_cast<double>(n)) * d, 1.95);
  // Box–Muller's largest radius is sqrt(-2 log 2^-24) = 5.77.
  EXPECT_LE(std::max(-z.front(), z.back()), 5.8f);
}

TEST(RandomOps, UniformNormalAndBernoulliTransforms) {
  RngStream s = derive_stream(3, 1, 2, RngPurpose::Test);
  const int64_t n = 4097;
  std::vector<float> u = rand({n}, s).to_vector<float>();
  std::vector<float> z = randn({n}, s).to_vector<float>();
  std::vector<float> a = uniform({n}, -2.0, 6.0, s).to_vector<float>();
  std::vector<float> b = normal({n}, 1.5, 0.25, s).to_vector<float>();
  std::vector<uint8_t> m = bernoulli_mask({n}, 0.3, s).to_vector<uint8_t>();
  int64_t ones = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(a[i], std::fma(u[i], 8.0f, -2.0f));
    ASSERT_EQ(b[i], std::fma(z[i], 0.25f, 1.5f));
    ASSERT_EQ(m[i], u[i] < 0.3f ? 1 : 0);
    ones += m[i];
  }
  EXPECT_NEAR(static_cast<double>(ones) / n, 0.3, 5 * std::sqrt(0.3 * 0.7 / n));
  std::vector<uint8_t> all = bernoulli_mask({100}, 1.0, s).to_vector<uint8_t>();
  std::vector<uint8_t> none = bernoulli_mask({100}, 0.0, s).to_vector<uint8_t>();
  EXPECT_EQ(std::count(all.begin(), all.end(), 1), 100);
  EXPECT_EQ(std::count(none.begin(), none.end(), 0), 100);
}

// ---- determinism, offsets, dtypes ----
TEST(RandomOps, SameStreamSameBitsDifferentPurposeDifferentBits) {
  std::vector<float> a = randn({3, 333}, derive_stream(9, 5, 1, RngPurpose::Noise)).to_vector<float>();
  std::vector<float> b = randn({999}, derive_stream(9, 5, 1, RngPurpose::Noise)).to_vector<float>();
  std::vector<float> c = randn({999}, derive_stream(9, 5, 1, RngPurpose::Dropout)).to_vector<float>();
  std::vector<float> d = randn({999}, derive_stream(10, 5, 1, RngPurpose::Noise)).to_vector<float>();
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  int64_t same_c = 0, same_d = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    same_c += b[i] == c[i];
    same_d += b[i] == d[i];
  }
  EXPECT_LT(same_c, 5);
  EXPECT_LT(same_d, 5);
}

TEST(RandomOps, OffsetSelectsTheTailOfTheStream) {
  RngStream s = derive_stream(11, 0, 0, RngPurpose::Test);
  for (uint64_t k : {1u, 2u, 3u, 4u, 5u, 6u, 7u, 13u}) {
    for (int64_t n : {1, 2, 3, 5, 8, 37}) {
      std::vector<float> whole = randn({n + static_cast<int64_t>(k)}, s).to_vector<float>();
      std::vector<float> tail = randn({n}, s, DType::F32, Device::cpu(), k).to_vector<float>();
      std::vector<float> whole_u = rand({n + static_cast<int64_t>(k)}, s).to_vector<float>();
      std::vector<float> tail_u = rand({n}, s, DType::F32, Device::cpu(), k).to_vector<float>();
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(tail[i], whole[k + i]) << "k " << k << " n " << n << " i " << i;
        ASSERT_EQ(tail_u[i], whole_u[k + i]) << "k " << k << " n " << n << " i " << i;
        ASSERT_EQ(tail[i], stream_normal(s, k + i));
      }
    }
  }
  // A parallel fill (> the CPU grain) agrees with the scalar stream functions.
  std::vector<float> big = randn({200003}, s, DType::F32, Device::cpu(), 3).to_vector<float>();
  for (int64_t i : {0, 1, 50000, 131071, 200002}) ASSERT_EQ(big[i], stream_normal(s, 3 + i));
}

TEST(RandomOps, OtherDtypesAreTheF32ValuesCast) {
  RngStream s = derive_stream(12, 0, 0, RngPurpose::Test);
  std::vector<float> f = randn({1000}, s).to_vector<float>();
  std::vector<double> d = randn({1000}, s, DType::F64).to_vector<double>();
  Tensor h = randn({1000}, s, DType::BF16);
  Tensor g = randn({1000}, s, DType::F16);
  const bf16* hb = h.data_as<bf16>();
  const f16* gb = g.data_as<f16>();
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(d[i], static_cast<double>(f[i]));
    ASSERT_EQ(hb[i].bits, f32_to_bf16(f[i]));
    ASSERT_EQ(gb[i].bits, f32_to_f16(f[i]));
  }
  EXPECT_EQ(randn({0, 5}, s).numel(), 0);
  EXPECT_EQ(rand({}, s).dim(), 0);
}

TEST(RandomOps, ErrorsNameTheOp) {
  RngStream s;
  auto message = [](auto&& fn) {
    try {
      fn();
    } catch (const WickError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(message([&] { rand({3}, s, DType::I32); }), HasSubstr("rand: dtype"));
  EXPECT_THAT(message([&] { uniform({3}, 1.0, 1.0, s); }), HasSubstr("uniform"));
  EXPECT_THAT(message([&] { normal({3}, 0.0, -1.0, s); }), HasSubstr("normal"));
  EXPECT_THAT(message([&] { bernoulli_mask({3}, 1.5, s); }), HasSubstr("bernoulli_mask"));
  EXPECT_THAT(message([&] { randn({-1}, s); }), HasSubstr("randn"));
}

// ---- CUDA ----
TEST(RandomCuda, CpuAndGpuAreBitwiseEqual) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  Device gpu = Device::cuda(0);
  RngStream s = derive_stream(123, 4, 5, RngPurpose::Noise);
  for (uint64_t offset : {0u, 1u, 3u, 1000001u}) {
    for (int64_t n : {1, 7, 1 << 20}) {
      std::vector<float> cpu_u = rand({n}, s, DType::F32, Device::cpu(), offset).to_vector<float>();
      std::vector<float> gpu_u = rand({n}, s, DType::F32, gpu, offset).to_vector<float>();
      std::vector<float> cpu_z = randn({n}, s, DType::F32, Device::cpu(), offset).to_vector<float>();
      std::vector<float> gpu_z = randn({n}, s, DType::F32, gpu, offset).to_vector<float>();
      EXPECT_EQ(0, std::memcmp(cpu_u.data(), gpu_u.data(), cpu_u.size() * 4)) << "rand n " << n << " offset " << offset;
      EXPECT_EQ(0, std::memcmp(cpu_z.data(), gpu_z.data(), cpu_z.size() * 4)) << "randn n " << n << " offset " << offset;
    }
  }
  std::vector<uint8_t> cpu_m = bernoulli_mask({100001}, 0.37, s).to_vector<uint8_t>();
  std::vector<uint8_t> gpu_m = bernoulli_mask({100001}, 0.37, s, gpu).to_vector<uint8_t>();
  EXPECT_EQ(cpu_m, gpu_m);
  Tensor cpu_h = normal({4099}, 0.5, 2.0, s, DType::BF16);
  Tensor gpu_h = normal({4099}, 0.5, 2.0, s, DType::BF16, gpu).to(Device::cpu());
  EXPECT_EQ(0, std::memcmp(cpu_h.data(), gpu_h.data(), cpu_h.nbytes()));
}

}  // namespace
}  // namespace wick
