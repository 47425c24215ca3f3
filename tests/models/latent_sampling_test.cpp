// Training from the cached VAE distribution (models/diffusion/objective.h training_latents): a sample's latent is
// mean + exp(logvar / 2) * eps with eps from the Philox stream (seed, sample id, epoch, LatentSample), so it does
// not depend on the batch it is in, its position, the rank or a resume; `mean` and files without logvar give the
// stored latents.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/data/prefetcher.h"
#include "models/diffusion/objective.h"
#include "runtime/philox.h"

namespace wick {
namespace {

constexpr int64_t C = 2, H = 3, W = 4, kRow = C * H * W;

// Sample `id`'s mean and logvar: values that differ per sample and element (logvar from -3 to 1).
std::vector<float> mean_of(int64_t id) {
  std::vector<float> v(kRow);
  for (int64_t e = 0; e < kRow; ++e) v[static_cast<size_t>(e)] = 0.1f * static_cast<float>(id) - 0.03f * static_cast<float>(e);
  return v;
}
std::vector<float> logvar_of(int64_t id) {
  std::vector<float> v(kRow);
  for (int64_t e = 0; e < kRow; ++e)
    v[static_cast<size_t>(e)] = -3.0f + 4.0f * static_cast<float>((e * 7 + id) % kRow) / static_cast<float>(kRow);
  return v;
}

Batch batch_of(const std::vector<int64_t>& ids, bool with_logvar = true) {
  std::vector<float> mean, logvar;
  for (int64_t id : ids) {
    const auto m = mean_of(id), l = logvar_of(id);
    mean.insert(mean.end(), m.begin(), m.end());
    logvar.insert(logvar.end(), l.begin(), l.end());
  }
  const auto n = static_cast<int64_t>(ids.size());
  Batch b;
  b.ids = ids;
  b.latents = Tensor::from_vector(mean, {n, C, H, W});
  if (with_logvar) b.latents_logvar = Tensor::from_vector(logvar, {n, C, H, W});
  return b;
}

std::vector<float> row(const Tensor& t, int64_t i) { return t.select(0, i).contiguous().to_vector<float>(); }

TEST(LatentSampling, MeanPlusStdTimesTheSamplesOwnPhiloxNormals) {
  const uint64_t seed = 5;
  const int64_t epoch = 2;
  const Tensor z = training_latents(batch_of({7, 3}), LatentSampling::Sample, seed, epoch);
  ASSERT_EQ(z.shape(), Shape({2, C, H, W}));
  EXPECT_EQ(z.dtype(), DType::F32);
  double worst = 0;
  for (int64_t b = 0; b < 2; ++b) {
    const int64_t id = b == 0 ? 7 : 3;
    const RngStream stream = derive_stream(seed, static_cast<uint64_t>(id), epoch, RngPurpose::LatentSample);
    const std::vector<float> got = row(z, b), mean = mean_of(id), logvar = logvar_of(id);
    for (int64_t e = 0; e < kRow; ++e) {
      const double want = mean[static_cast<size_t>(e)] + std::exp(0.5 * logvar[static_cast<size_t>(e)]) *
                                                             stream_normal(stream, static_cast<uint64_t>(e));
      worst = std::max(worst, std::abs(got[static_cast<size_t>(e)] - want));
    }
  }
  EXPECT_LT(worst, 2e-6);  // f32 exp and one multiply-add
}

TEST(LatentSampling, DeterministicPerSeedIdAndEpochWhateverTheBatch) {
  const Tensor both = training_latents(batch_of({7, 3}), LatentSampling::Sample, 5, 2);
  const Tensor swapped = training_latents(batch_of({3, 7}), LatentSampling::Sample, 5, 2);
  const Tensor alone = training_latents(batch_of({3}), LatentSampling::Sample, 5, 2);
  EXPECT_EQ(row(both, 0), row(swapped, 1));  // bitwise: position in the batch does not matter
  EXPECT_EQ(row(both, 1), row(swapped, 0));
  EXPECT_EQ(row(both, 1), row(alone, 0));    // nor the other samples (so neither the rank)
  EXPECT_EQ(row(both, 1), row(training_latents(batch_of({3}), LatentSampling::Sample, 5, 2), 0));  // repeatable
  EXPECT_NE(row(both, 1), row(training_latents(batch_of({3}), LatentSampling::Sample, 5, 3), 0));  // next epoch
  EXPECT_NE(row(both, 1), row(training_latents(batch_of({3}), LatentSampling::Sample, 6, 2), 0));  // other seed
  EXPECT_NE(row(both, 1), mean_of(3));
  // Each epoch's draw is a different standard normal: over many epochs the mean of (z - mean) / std is ~0, its
  // variance ~1.
  double sum = 0, squares = 0;
  const int epochs = 400;
  const std::vector<float> mean = mean_of(3), logvar = logvar_of(3);
  for (int epoch = 0; epoch < epochs; ++epoch) {
    const std::vector<float> z = row(training_latents(batch_of({3}), LatentSampling::Sample, 5, epoch), 0);
    for (int64_t e = 0; e < kRow; ++e) {
      const double eps = (z[static_cast<size_t>(e)] - mean[static_cast<size_t>(e)]) /
                         std::exp(0.5 * logvar[static_cast<size_t>(e)]);
      sum += eps;
      squares += eps * eps;
    }
  }
  const double n = static_cast<double>(epochs * kRow), m = sum / n;
  EXPECT_NEAR(m, 0.0, 0.03);
  EXPECT_NEAR(squares / n - m * m, 1.0, 0.05);
}

TEST(LatentSampling, MeanOptionAndFilesWithoutLogvarTrainOnTheStoredLatents) {
  const Batch b = batch_of({7, 3});
  EXPECT_EQ(training_latents(b, LatentSampling::Mean, 5, 2).to_vector<float>(), b.latents.to_vector<float>());
  const Batch plain = batch_of({7, 3}, /*with_logvar=*/false);
  EXPECT_EQ(training_latents(plain, LatentSampling::Sample, 5, 2).to_vector<float>(), plain.latents.to_vector<float>());
  EXPECT_EQ(std::string(latent_sampling_name(LatentSampling::Sample)), "sample");
  EXPECT_EQ(std::string(latent_sampling_name(LatentSampling::Mean)), "mean");
}

}  // namespace
}  // namespace wick
