// The work folder of `wick dataset encode` (models/data/encode_chunks.h): a latent chunk's per-channel
// normalization round-trips, and a chunk without one is recorded with exactly the fields it had before they existed
// (so that work folders written before resume, and the chunk files of the AutoencoderKL models stay the same).
#include "models/data/encode_chunks.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/safetensors.h"

namespace wick::encode {
namespace {

LatentChunk one_sample_chunk() {
  LatentChunk chunk;
  chunk.samples.push_back({.image = 0, .source = "a.png", .caption = "a cat", .placement = {}});
  chunk.mean.push_back(Tensor::from_vector<float>({0.5f, -1.0f}, {2, 1, 1}).to(DType::F16));
  chunk.latent_channels = 2;
  chunk.scaling_factor = 0.5;
  chunk.shift_factor = 0.25;
  return chunk;
}

nlohmann::json record_of(const std::string& file) {
  return nlohmann::json::parse(SafetensorsFile::open(file).metadata().at("wick_encode_latents"));
}

TEST(EncodeChunks, PerChannelNormalizationRoundTripsAndIsAbsentWhenNone) {
  const std::string path = ::testing::TempDir() + "/encode_chunks_norm.partial";
  std::filesystem::remove_all(path);
  EncodeWorkDir dir(path);
  dir.create();
  LatentChunk with = one_sample_chunk();
  with.channel_mean = {-0.7571, 0.1075};
  with.channel_std = {2.8184, 1.916};
  dir.write_latents(0, with);
  const std::optional<LatentChunk> back = dir.read_latents(0);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->channel_mean, with.channel_mean);
  EXPECT_EQ(back->channel_std, with.channel_std);
  EXPECT_EQ(back->scaling_factor, 0.5);

  dir.write_latents(1, one_sample_chunk());
  const nlohmann::json record = record_of(dir.latents_file(1));
  std::vector<std::string> keys;
  for (const auto& [key, value] : record.items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"latent_channels", "logvar", "samples", "scaling_factor", "shift_factor",
                                            "skipped"}));
  const std::optional<LatentChunk> plain = dir.read_latents(1);
  ASSERT_TRUE(plain.has_value());
  EXPECT_TRUE(plain->channel_mean.empty() && plain->channel_std.empty());
  dir.remove();
}

}  // namespace
}  // namespace wick::encode
