// Dropout (engine/autograd/ops_dropout.h) and the thread's random cursor (rng_state.h).
#include <gtest/gtest.h>

#include <cmath>

#include "engine/autograd/backward.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops_dropout.h"
#include "engine/autograd/rng_state.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/random.h"
#include "tests/engine/gradcheck.h"

namespace wick::autograd {
namespace {

RngStream test_stream(uint64_t step = 7) { return derive_stream(1234, step, 0, RngPurpose::Dropout); }

Tensor random_input(const Shape& shape, DType dtype = DType::F32) {
  return randn(shape, derive_stream(99, 0, 0, RngPurpose::Noise), dtype);
}

TEST(Dropout, MaskIsReproducibleFromTheStreamAndOffset) {
  Tensor x = random_input({64, 33});
  const double p = 0.25;
  Tensor a = dropout(x, p, test_stream(), 100, true);
  Tensor b = dropout(x, p, test_stream(), 100, true);
  Tensor keep = bernoulli_mask(x.shape(), 1.0 - p, test_stream(), Device::cpu(), 100);
  std::vector<float> va = a.to_vector<float>(), vb = b.to_vector<float>(), vx = x.to_vector<float>();
  std::vector<uint8_t> vk = keep.to_vector<uint8_t>();
  for (size_t i = 0; i < va.size(); ++i) {
    ASSERT_EQ(va[i], vb[i]) << i;
    ASSERT_FLOAT_EQ(va[i], vk[i] ? vx[i] / float(1.0 - p) : 0.0f) << i;
  }
  // Another offset or another stream gives another mask.
  EXPECT_NE(dropout(x, p, test_stream(), 101, true).to_vector<float>(), va);
  EXPECT_NE(dropout(x, p, test_stream(8), 100, true).to_vector<float>(), va);
}

TEST(Dropout, KeepRateMatchesProbability) {
  const int64_t n = 200000;
  for (double p : {0.1, 0.5, 0.9}) {
    Tensor y = dropout(wick::ones({n}), p, test_stream(), 0, true);
    std::vector<float> v = y.to_vector<float>();
    int64_t kept = 0;
    for (float value : v) {
      if (value != 0.0f) {
        ++kept;
        ASSERT_FLOAT_EQ(value, float(1.0 / (1.0 - p)));
      }
    }
    double rate = double(kept) / double(n), sigma = std::sqrt(p * (1 - p) / double(n));
    EXPECT_NEAR(rate, 1.0 - p, 5 * sigma) << "p = " << p;
  }
}

TEST(Dropout, GradientIsMaskTimesScaleTimesOutputGradient) {
  Tensor x = random_input({17, 9}, DType::F64);
  set_requires_grad(x, true);
  const double p = 0.3;
  Tensor y = dropout(x, p, test_stream(), 5, true);
  ASSERT_TRUE(requires_grad(y));
  Tensor seed = random_input({17, 9}, DType::F64);
  Tensor grad = backward(y, seed).get(x);
  ASSERT_TRUE(grad.defined());
  std::vector<uint8_t> keep = bernoulli_mask(x.shape(), 1.0 - p, test_stream(), Device::cpu(), 5).to_vector<uint8_t>();
  std::vector<double> g = grad.to_vector<double>(), s = seed.to_vector<double>();
  int n_kept = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_DOUBLE_EQ(g[i], keep[i] ? s[i] / (1.0 - p) : 0.0) << i;
    n_kept += keep[i];
  }
  EXPECT_GT(n_kept, 0);
  EXPECT_LT(n_kept, int(g.size()));
}

TEST(Dropout, ZeroProbabilityAndEvalModeAreIdentity) {
  Tensor x = random_input({4, 5});
  set_requires_grad(x, true);
  for (auto [p, training] : {std::pair{0.0, true}, std::pair{0.5, false}}) {
    RngCursor before = current_rng();
    Tensor y = dropout(x, p, test_stream(), 0, training);
    Tensor z = dropout(x, p, training);  // the cursor is not advanced: nothing was drawn
    EXPECT_EQ(current_rng().offset, before.offset);
    EXPECT_EQ(y.to_vector<float>(), x.to_vector<float>());
    EXPECT_EQ(z.to_vector<float>(), x.to_vector<float>());
    Tensor seed = random_input({4, 5});
    EXPECT_EQ(backward(y, seed).get(x).to_vector<float>(), seed.to_vector<float>());
  }
}

TEST(Dropout, ProbabilityOneDropsEverything) {
  Tensor x = random_input({3, 4});
  set_requires_grad(x, true);
  Tensor y = dropout(x, 1.0, test_stream(), 0, true);
  for (float v : y.to_vector<float>()) EXPECT_EQ(v, 0.0f);
  for (float v : backward(y, wick::ones({3, 4})).get(x).to_vector<float>()) EXPECT_EQ(v, 0.0f);
}

TEST(Dropout, RejectsBadArguments) {
  Tensor x = random_input({3});
  RngCursor before = current_rng();
  EXPECT_THROW(dropout(x, 1.5, test_stream(), 0, true), WickError);
  EXPECT_THROW(dropout(x, -0.1, true), WickError);
  EXPECT_THROW(dropout(wick::zeros({3}, DType::I64), 0.5, true), WickError);
  EXPECT_EQ(current_rng().offset, before.offset);
}

TEST(Dropout, BF16KeepsDTypeAndMask) {
  Tensor x = random_input({8, 8}, DType::BF16);
  Tensor y = dropout(x, 0.5, test_stream(), 3, true);
  EXPECT_EQ(y.dtype(), DType::BF16);
  std::vector<uint8_t> keep = bernoulli_mask(x.shape(), 0.5, test_stream(), Device::cpu(), 3).to_vector<uint8_t>();
  std::vector<float> vy = y.to_vector<float>(), vx = x.to_vector<float>();
  for (size_t i = 0; i < vy.size(); ++i) EXPECT_EQ(vy[i], keep[i] ? 2.0f * vx[i] : 0.0f) << i;
}

TEST(RngCursor, TakeAdvancesAndImplicitDropoutUsesTheCursor) {
  RngCursorGuard restore;  // leave the thread's cursor as it was for other tests
  current_rng() = RngCursor{test_stream(3), 40};
  RngSpan first = take(10);
  EXPECT_EQ(first.offset, 40u);
  EXPECT_EQ(current_rng().offset, 50u);
  EXPECT_THROW(take(-1), WickError);

  Tensor x = random_input({6, 7});
  Tensor implicit = dropout(x, 0.4, true);  // elements [50, 92) of the stream
  EXPECT_EQ(current_rng().offset, 92u);
  EXPECT_EQ(implicit.to_vector<float>(), dropout(x, 0.4, test_stream(3), 50, true).to_vector<float>());
  Tensor next = dropout(x, 0.4, true);  // a fresh mask: [92, 134)
  EXPECT_NE(next.to_vector<float>(), implicit.to_vector<float>());
}

TEST(RngCursor, GuardReplaysASnapshotAndRestores) {
  RngCursorGuard restore;
  current_rng() = RngCursor{test_stream(4), 0};
  Tensor x = random_input({5, 5});
  RngCursor snapshot = current_rng();                     // as gradient checkpointing would
  Tensor first = dropout(x, 0.5, true);
  Tensor second = dropout(x, 0.5, true);
  RngCursor after = current_rng();
  {
    RngCursorGuard replay(snapshot);
    EXPECT_EQ(dropout(x, 0.5, true).to_vector<float>(), first.to_vector<float>());
    EXPECT_EQ(dropout(x, 0.5, true).to_vector<float>(), second.to_vector<float>());
  }
  EXPECT_EQ(current_rng().offset, after.offset);
  EXPECT_EQ(current_rng().stream.stream, after.stream.stream);
}

// Rows [begin, begin + count) of x, contiguous.
Tensor rows_of(const Tensor& x, int64_t begin, int64_t count) { return x.narrow(0, begin, count).contiguous(); }

TEST(Dropout, RowStreamsGiveEachRowItsOwnMask) {
  Tensor x = random_input({3, 4, 5});
  std::vector<RngStream> streams = {test_stream(20), test_stream(21), test_stream(22)};
  Tensor y = dropout(x, 0.5, streams, 7, true);
  for (int64_t b = 0; b < 3; ++b)
    EXPECT_EQ(rows_of(y, b, 1).to_vector<float>(),
              dropout(rows_of(x, b, 1), 0.5, streams[b], 7, true).to_vector<float>()) << "row " << b;
  EXPECT_THROW(dropout(x, 0.5, std::vector<RngStream>{test_stream(20)}, 0, true), WickError);  // 1 stream, 3 rows
}

// The property the trainer relies on: a sample's masks depend on its own stream and the sequence of
// draws, not on the other samples of its batch. One batch of 4 and two batches of 2 draw the same.
TEST(RngCursor, PerSampleDrawsDoNotDependOnTheBatch) {
  RngCursorGuard restore;
  const std::vector<int64_t> ids = {11, 5, 42, 7};
  Tensor h1 = random_input({4, 6, 8}), h2 = random_input({4, 3});
  auto run = [&](int64_t begin, int64_t count) {  // two dropouts, as two LoRA layers of one forward
    current_rng() = RngCursor{test_stream(30), 0};
    set_sample_streams(per_sample_streams(9, std::vector<int64_t>(ids.begin() + begin, ids.begin() + begin + count), 2,
                                          RngPurpose::Dropout));
    Tensor a = dropout(rows_of(h1, begin, count), 0.5, true);
    Tensor b = dropout(rows_of(h2, begin, count), 0.5, true);
    EXPECT_EQ(current_rng().sample_offset, uint64_t{6 * 8 + 3});  // numel / B per draw
    EXPECT_EQ(current_rng().offset, 0u);                          // the shared stream was not used
    return std::pair{a, b};
  };
  auto [whole_a, whole_b] = run(0, 4);
  auto [first_a, first_b] = run(0, 2);
  auto [second_a, second_b] = run(2, 2);
  EXPECT_EQ(rows_of(whole_a, 0, 2).to_vector<float>(), first_a.to_vector<float>());
  EXPECT_EQ(rows_of(whole_a, 2, 2).to_vector<float>(), second_a.to_vector<float>());
  EXPECT_EQ(rows_of(whole_b, 0, 2).to_vector<float>(), first_b.to_vector<float>());
  EXPECT_EQ(rows_of(whole_b, 2, 2).to_vector<float>(), second_b.to_vector<float>());
  // Row b is sample b's stream: elements [0, 48) for the first draw, [48, 51) for the second.
  RngStream s42 = derive_stream(9, 42, 2, RngPurpose::Dropout);
  EXPECT_EQ(rows_of(whole_a, 2, 1).to_vector<float>(), dropout(rows_of(h1, 2, 1), 0.5, s42, 0, true).to_vector<float>());
  EXPECT_EQ(rows_of(whole_b, 2, 1).to_vector<float>(), dropout(rows_of(h2, 2, 1), 0.5, s42, 48, true).to_vector<float>());
}

TEST(RngCursor, OtherLeadingSizesDrawFromTheSharedStream) {
  RngCursorGuard restore;
  current_rng() = RngCursor{test_stream(31), 5};
  set_sample_streams(per_sample_streams(9, {1, 2}, 0, RngPurpose::Dropout));
  Tensor x = random_input({3, 4});  // 3 rows, 2 sample streams: the shared stream's [5, 17)
  Tensor y = dropout(x, 0.5, true);
  EXPECT_EQ(y.to_vector<float>(), dropout(x, 0.5, test_stream(31), 5, true).to_vector<float>());
  EXPECT_EQ(current_rng().offset, 17u);
  EXPECT_EQ(current_rng().sample_offset, 0u);
  set_sample_streams({});  // none: every draw is shared
  EXPECT_FALSE(draws_per_sample(2));
  EXPECT_EQ(dropout(random_input({2, 4}), 0.5, true).dim(), 2);
  EXPECT_EQ(current_rng().offset, 25u);
}

TEST(RngCursor, GuardReplaysPerSampleDraws) {
  RngCursorGuard restore;
  current_rng() = RngCursor{test_stream(32), 0};
  set_sample_streams(per_sample_streams(3, {4, 8}, 1, RngPurpose::Dropout));
  Tensor x = random_input({2, 9});
  RngCursor snapshot = current_rng();
  Tensor first = dropout(x, 0.5, true);
  Tensor second = dropout(x, 0.5, true);
  EXPECT_NE(first.to_vector<float>(), second.to_vector<float>());
  set_sample_streams(per_sample_streams(3, {5, 6}, 1, RngPurpose::Dropout));  // the next micro-batch
  {
    RngCursorGuard replay(snapshot);
    EXPECT_EQ(dropout(x, 0.5, true).to_vector<float>(), first.to_vector<float>());
    EXPECT_EQ(dropout(x, 0.5, true).to_vector<float>(), second.to_vector<float>());
  }
  EXPECT_EQ(current_rng().sample_streams.size(), 2u);
  EXPECT_EQ(current_rng().sample_streams[0].stream, derive_stream(3, 5, 1, RngPurpose::Dropout).stream);
  EXPECT_EQ(current_rng().sample_offset, 0u);
}

}  // namespace
}  // namespace wick::autograd

namespace wick::testing {
namespace {

std::vector<GradCase> dropout_grad_cases() {
  return {
      {.name = "dropout_fixed_stream", .inputs = {{.shape = {6, 7}}},
       .fn = [](const std::vector<Tensor>& x) {
         return std::vector<Tensor>{
             autograd::dropout(x[0], 0.3, derive_stream(5, 0, 0, RngPurpose::Dropout), 11, true)};
       }},
  };
}
WICK_REGISTER_GRAD_CASES(dropout_grad_cases);

}  // namespace
}  // namespace wick::testing
