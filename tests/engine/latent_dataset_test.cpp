// The cached-latent dataset: writer -> reader round trip, an h5py-written fixture
// (tests/reference/make_dataset_fixture.py), bad-input errors, the distributed sampler, the
// prefetcher and packing Fashion-MNIST.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "engine/data/distributed_sampler.h"
#include "engine/data/fashion_pack.h"
#include "engine/data/hashed_text_encoder.h"
#include "engine/data/idx.h"
#include "engine/data/latent_dataset.h"
#include "engine/data/prefetcher.h"
#include "tests/error_of.h"
#include "tests/test_data.h"

namespace wick {
namespace {

using ::testing::HasSubstr;
using wick::testing::error_of;

std::string fixture(const std::string& name) { return wick::testing::test_data_dir() + "/dataset/" + name; }
std::string temp(const std::string& name) { return ::testing::TempDir() + "/" + name; }

std::string open_error(const std::string& path) {
  try {
    LatentDataset::open(path);
  } catch (const WickError& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Data);
    return error.what();
  }
  return "";
}

LatentSamples make_samples(int64_t n, int64_t h, int64_t w, float base) {
  LatentSamples s;
  std::vector<float> latents(static_cast<size_t>(n * 4 * h * w)), embeds(static_cast<size_t>(n * 3 * 5)),
      pooled(static_cast<size_t>(n * 5));
  for (size_t i = 0; i < latents.size(); ++i) latents[i] = base + static_cast<float>(i % 97) * 0.25f;
  for (size_t i = 0; i < embeds.size(); ++i) embeds[i] = -static_cast<float>(i % 13) * 0.125f;
  for (size_t i = 0; i < pooled.size(); ++i) pooled[i] = static_cast<float>(i) * 0.5f;
  s.latents = Tensor::from_vector(latents, {n, 4, h, w});
  s.text_embeds = Tensor::from_vector(embeds, {n, 3, 5});
  s.text_pooled = Tensor::from_vector(pooled, {n, 5});
  std::vector<uint8_t> mask(static_cast<size_t>(n * 3));
  for (size_t i = 0; i < mask.size(); ++i) mask[i] = i % 3 != 2;
  s.text_mask = Tensor::from_vector(mask, {n, 3});
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < n; ++i) {
    s.captions.push_back("caption " + std::to_string(i) + " ü");
    labels.push_back(i % 2);
  }
  s.labels = Tensor::from_vector(labels, {n});
  return s;
}

TEST(LatentDataset, WriterReaderRoundTrip) {
  std::string path = temp("roundtrip.h5");
  LatentSamples a = make_samples(3, 2, 2, 1.0f), b = make_samples(2, 4, 2, -3.0f), c = make_samples(2, 2, 2, 7.0f);
  {
    LatentDatasetWriter writer(path, {.model_family = "flux", .latent_channels = 4, .vae_scaling_factor = 0.3611,
                                      .vae_shift_factor = 0.1159, .text_encoder = "t5",
                                      .text_embeds_encoder = "t5-xxl", .text_pooled_encoder = "clip-l",
                                      .text_max_length = 512, .label_names = {"x", "y"}});
    EXPECT_EQ(writer.append(a), (std::vector<int64_t>{0, 1, 2}));
    EXPECT_EQ(writer.append(b), (std::vector<int64_t>{3, 4}));
    EXPECT_EQ(writer.append(c), (std::vector<int64_t>{5, 6}));
  }
  auto ds = LatentDataset::open(path);
  EXPECT_EQ(ds->attributes().model_family, "flux");
  EXPECT_DOUBLE_EQ(ds->attributes().vae_scaling_factor, 0.3611);
  EXPECT_DOUBLE_EQ(ds->attributes().vae_shift_factor, 0.1159);
  EXPECT_EQ(ds->attributes().text_encoder, "t5");
  EXPECT_EQ(ds->attributes().text_embeds_encoder, "t5-xxl");
  EXPECT_EQ(ds->attributes().text_pooled_encoder, "clip-l");
  EXPECT_EQ(ds->attributes().text_max_length, 512);
  EXPECT_EQ(ds->attributes().label_names, (std::vector<std::string>{"x", "y"}));
  ASSERT_EQ(ds->size(), 7);
  ASSERT_EQ(ds->buckets().size(), 2u);
  EXPECT_EQ(ds->buckets()[0].name, "2x2");
  EXPECT_EQ(ds->buckets()[0].n_samples, 5);
  EXPECT_EQ(ds->buckets()[1].name, "4x2");
  EXPECT_EQ(ds->bucket_of(5), 0);
  EXPECT_EQ(ds->row_of(5), 3);
  LatentSamples back = ds->read({6, 1});
  EXPECT_EQ(back.latents.shape(), Shape({2, 4, 2, 2}));
  // Values are exact in f16.
  auto expect_rows = [](const Tensor& got, int64_t got_row, const Tensor& want, int64_t want_row) {
    std::vector<float> g = got.select(0, got_row).contiguous().to_vector<float>();
    std::vector<float> w = want.select(0, want_row).contiguous().to_vector<float>();
    EXPECT_EQ(g, w);
  };
  expect_rows(back.latents, 0, c.latents, 1);
  expect_rows(back.latents, 1, a.latents, 1);
  expect_rows(back.text_embeds, 0, c.text_embeds, 1);
  expect_rows(back.text_pooled, 1, a.text_pooled, 1);
  EXPECT_EQ(back.text_mask.to_vector<uint8_t>(), (std::vector<uint8_t>{1, 1, 0, 1, 1, 0}));
  EXPECT_EQ(back.captions, (std::vector<std::string>{"caption 1 ü", "caption 1 ü"}));
  EXPECT_EQ(back.labels.to_vector<int64_t>(), (std::vector<int64_t>{1, 1}));
  EXPECT_THROW(ds->read({0, 3}), WickError);  // two buckets in one read
  ValidationReport report = ds->validate();
  EXPECT_TRUE(report.ok()) << (report.errors.empty() ? "" : report.errors[0]);
  EXPECT_EQ(report.n_samples, 7);
}

// The optional per-sample members (latents_logvar, original_size, crop, flipped, source) and /sample_prompts:
// written, read back exactly (f16 values), validated, delivered by the prefetcher; misuse is refused.
LatentSamples with_optional_members(LatentSamples s, float logvar_base) {
  const int64_t n = s.size();
  std::vector<float> logvar(static_cast<size_t>(s.latents.numel()));
  for (size_t i = 0; i < logvar.size(); ++i) logvar[i] = logvar_base - static_cast<float>(i % 7) * 0.5f;
  s.latents_logvar = Tensor::from_vector(logvar, s.latents.shape());
  std::vector<int64_t> original, crop;
  std::vector<uint8_t> flipped;
  for (int64_t i = 0; i < n; ++i) {
    original.insert(original.end(), {600 + i, 512 - i});
    crop.insert(crop.end(), {5 * i, 3 * i + 1});
    flipped.push_back(static_cast<uint8_t>(i % 2));
    s.sources.push_back("sub/image_" + std::to_string(i) + "_é.jpg");
  }
  s.original_size = Tensor::from_vector(original, {n, 2});
  s.crop = Tensor::from_vector(crop, {n, 2});
  s.flipped = Tensor::from_vector(flipped, {n});
  s.labels = Tensor();
  return s;
}

TEST(LatentDataset, OptionalMembersAndSamplePromptsRoundTrip) {
  const std::string path = temp("optional_members.h5");
  const LatentSamples a = with_optional_members(make_samples(3, 2, 2, 1.0f), -1.0f);
  const LatentSamples b = with_optional_members(make_samples(2, 4, 2, -3.0f), 2.0f);
  std::vector<float> prompt_embeds(2 * 3 * 5), prompt_pooled(2 * 5);
  for (size_t i = 0; i < prompt_embeds.size(); ++i) prompt_embeds[i] = static_cast<float>(i) * 0.125f - 1.0f;
  for (size_t i = 0; i < prompt_pooled.size(); ++i) prompt_pooled[i] = static_cast<float>(i) * 0.25f;
  const SamplePrompts prompts{.captions = {"ohwx on the moon", "a café"},
                              .embeds = Tensor::from_vector(prompt_embeds, {2, 3, 5}),
                              .pooled = Tensor::from_vector(prompt_pooled, {2, 5}),
                              .mask = Tensor::from_vector<uint8_t>({1, 1, 0, 1, 0, 0}, {2, 3})};
  {
    LatentDatasetWriter writer(path, {.model_family = "flux", .latent_channels = 4});
    writer.set_sample_prompts(prompts);  // before any sample: the shapes are checked at the first append
    EXPECT_THROW(writer.set_sample_prompts(prompts), WickError);  // once
    writer.append(a);
    writer.append(b);
    LatentSamples missing = make_samples(1, 2, 2, 0.0f);  // no optional members: refused
    missing.labels = Tensor();
    EXPECT_THAT(error_of([&] { writer.append(missing); }), HasSubstr("latents_logvar must be given in every append or in none"));
    LatentSamples bad = with_optional_members(make_samples(1, 2, 2, 0.0f), 0.0f);
    bad.crop = Tensor::from_vector<int64_t>({1, 2, 3}, {1, 3});
    EXPECT_THROW(writer.append(bad), WickError);
  }
  auto ds = LatentDataset::open(path);
  EXPECT_TRUE(ds->has_logvar() && ds->has_original_size() && ds->has_crop() && ds->has_flipped() && ds->has_sources());
  EXPECT_FALSE(ds->has_labels());
  ASSERT_EQ(ds->size(), 5);
  const LatentSamples back = ds->read({4, 3});  // b's rows 1 and 0
  auto row = [](const Tensor& t, int64_t i) { return t.select(0, i).contiguous().to_vector<float>(); };
  EXPECT_EQ(row(back.latents_logvar, 0), row(b.latents_logvar, 1));
  EXPECT_EQ(row(back.latents_logvar, 1), row(b.latents_logvar, 0));
  EXPECT_EQ(row(back.latents, 0), row(b.latents, 1));
  EXPECT_EQ(row(ds->read({1}).latents_logvar, 0), row(a.latents_logvar, 1));
  EXPECT_EQ(back.original_size.to_vector<int64_t>(), (std::vector<int64_t>{601, 511, 600, 512}));
  EXPECT_EQ(back.crop.to_vector<int64_t>(), (std::vector<int64_t>{5, 4, 0, 1}));
  EXPECT_EQ(back.flipped.to_vector<uint8_t>(), (std::vector<uint8_t>{1, 0}));
  EXPECT_EQ(back.sources, (std::vector<std::string>{"sub/image_1_é.jpg", "sub/image_0_é.jpg"}));
  const std::optional<SamplePrompts> p = ds->sample_prompts();
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->captions, prompts.captions);
  EXPECT_EQ(p->embeds.to_vector<float>(), prompt_embeds);
  EXPECT_EQ(p->pooled.to_vector<float>(), prompt_pooled);
  EXPECT_EQ(p->mask.to_vector<uint8_t>(), prompts.mask.to_vector<uint8_t>());
  const ValidationReport report = ds->validate();
  EXPECT_TRUE(report.ok()) << (report.errors.empty() ? "" : report.errors[0]);
  EXPECT_THAT(report.dtypes, ::testing::Contains("buckets/2x2/latents_logvar: f16"));
  EXPECT_THAT(report.dtypes, ::testing::Contains("buckets/4x2/source: string"));
  EXPECT_THAT(report.dtypes, ::testing::Contains("sample_prompts/embeds: f16"));

  // The prefetcher hands every member over.
  std::vector<int64_t> ids = select_ids(*ds, {}), buckets;
  for (int64_t id : ids) buckets.push_back(ds->bucket_of(id));
  SamplerOptions options{.seed = 1, .rank = 0, .world = 1, .batch_size = 2};
  DistributedSampler reference(ids, buckets, options);
  Prefetcher loader(ds, DistributedSampler(ids, buckets, options), {.depth = 2});
  for (int step = 0; step < 4; ++step) {
    std::vector<int64_t> want;
    reference.next(want);
    const Batch got = loader.next();
    const LatentSamples direct = ds->read(want);
    ASSERT_TRUE(got.latents_logvar.defined());
    EXPECT_EQ(got.latents_logvar.to_vector<float>(), direct.latents_logvar.to_vector<float>());
    EXPECT_EQ(got.latents.to_vector<float>(), direct.latents.to_vector<float>());
    EXPECT_EQ(got.original_size.to_vector<int64_t>(), direct.original_size.to_vector<int64_t>());
    EXPECT_EQ(got.crop.to_vector<int64_t>(), direct.crop.to_vector<int64_t>());
    EXPECT_EQ(got.flipped.to_vector<uint8_t>(), direct.flipped.to_vector<uint8_t>());
    EXPECT_EQ(got.sources, direct.sources);
  }
  if (cuda_device_count() > 0) {  // the pinned staging buffer and the copies carry the logvar too
    Prefetcher gpu(ds, DistributedSampler(ids, buckets, options), {.depth = 2, .device = Device::cuda(0)});
    DistributedSampler again(ids, buckets, options);
    for (int step = 0; step < 4; ++step) {
      std::vector<int64_t> want;
      again.next(want);
      const Batch got = gpu.next();
      const LatentSamples direct = ds->read(want);
      EXPECT_TRUE(got.latents_logvar.device().is_cuda());
      EXPECT_EQ(got.latents_logvar.to(Device::cpu()).to_vector<float>(), direct.latents_logvar.to_vector<float>());
      EXPECT_EQ(got.text_embeds.to(Device::cpu()).to_vector<float>(), direct.text_embeds.to_vector<float>());
      EXPECT_EQ(got.text_mask.to(Device::cpu()).to_vector<uint8_t>(), direct.text_mask.to_vector<uint8_t>());
    }
  }

  // Prompts whose widths are not the samples' are refused; a file without the members reads as before.
  {
    LatentDatasetWriter writer(temp("bad_prompts.h5"), {.model_family = "flux", .latent_channels = 4});
    writer.append(a);
    SamplePrompts wide = prompts;
    wide.embeds = Tensor::from_vector(std::vector<float>(36, 0.0f), {2, 3, 6});
    EXPECT_THAT(error_of([&] { writer.set_sample_prompts(wide); }), HasSubstr("sample prompts have L=3 D=6"));
  }
  auto plain = LatentDataset::open(fixture("fixture.h5"));
  EXPECT_FALSE(plain->has_logvar() || plain->has_original_size() || plain->has_sources());
  EXPECT_FALSE(plain->sample_prompts().has_value());
  const LatentSamples old = plain->read({0});
  EXPECT_FALSE(old.latents_logvar.defined() || old.original_size.defined() || old.crop.defined());
  EXPECT_TRUE(old.sources.empty());
}

// Expected fixture values (the formulas in make_dataset_fixture.py).
TEST(LatentDataset, ReadsTheH5pyFixture) {
  auto ds = LatentDataset::open(fixture("fixture.h5"));
  EXPECT_EQ(ds->attributes().model_family, "test-family");
  EXPECT_EQ(ds->attributes().latent_channels, 4);
  EXPECT_DOUBLE_EQ(ds->attributes().vae_scaling_factor, 0.5);
  EXPECT_DOUBLE_EQ(ds->attributes().vae_shift_factor, 0.25);
  EXPECT_EQ(ds->attributes().label_names, (std::vector<std::string>{"zero", "one", "two"}));
  ASSERT_EQ(ds->size(), 8);
  EXPECT_EQ(ds->text_length(), 3);
  EXPECT_EQ(ds->text_dim(), 5);
  EXPECT_EQ(ds->pooled_dim(), 6);
  // id order [0, 5, 1, 6, 2, 7, 3, 4] over the index (4x4 rows 0..4, then 2x6 rows 0..2).
  const std::vector<std::pair<int64_t, int64_t>> where = {{0, 0}, {1, 0}, {0, 1}, {1, 1}, {0, 2}, {1, 2}, {0, 3}, {0, 4}};
  const std::vector<std::string> captions = {"a shoe", "café ☕", "Ankle boot", "", "x y z w"};
  for (int64_t id = 0; id < 8; ++id) {
    auto [b, n] = where[static_cast<size_t>(id)];
    ASSERT_EQ(ds->bucket_of(id), b);
    ASSERT_EQ(ds->row_of(id), n);
    LatentSamples s = ds->read({id});
    int64_t H = b == 0 ? 4 : 2, W = b == 0 ? 4 : 6;
    ASSERT_EQ(s.latents.shape(), Shape({1, 4, H, W}));
    std::vector<float> latents = s.latents.to_vector<float>();
    for (int64_t c = 0; c < 4; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w)
          EXPECT_FLOAT_EQ(latents[static_cast<size_t>((c * H + h) * W + w)],
                          static_cast<float>((b * 100 + n * 10 + c + 0.25 * h + 0.125 * w) / 64));
    std::vector<float> embeds = s.text_embeds.to_vector<float>();
    for (int64_t l = 0; l < 3; ++l)
      for (int64_t d = 0; d < 5; ++d)
        EXPECT_FLOAT_EQ(embeds[static_cast<size_t>(l * 5 + d)], static_cast<float>((b - n + 0.5 * l - 0.25 * d) / 8));
    std::vector<float> pooled = s.text_pooled.to_vector<float>();
    for (int64_t p = 0; p < 6; ++p) EXPECT_FLOAT_EQ(pooled[static_cast<size_t>(p)], static_cast<float>((n + p) / 16.0));
    std::vector<uint8_t> mask = s.text_mask.to_vector<uint8_t>();
    for (int64_t l = 0; l < 3; ++l) EXPECT_EQ(mask[static_cast<size_t>(l)], l <= n % 3 ? 1 : 0);
    EXPECT_EQ(s.captions[0], captions[static_cast<size_t>((b + n) % 5)]);
    EXPECT_EQ(s.labels.to_vector<int64_t>()[0], (b * 7 + n) % 3);
    EXPECT_EQ(ds->label_of(id), (b * 7 + n) % 3);
  }
  EXPECT_TRUE(ds->validate().ok());
}

TEST(LatentDataset, BadInputsNameTheFileAndObject) {
  EXPECT_THAT(open_error(temp("no_such.h5")), HasSubstr("no_such.h5: no such file"));
  std::string text = temp("not_hdf5.h5");
  std::ofstream(text) << "hello, not HDF5\n";
  EXPECT_THAT(open_error(text), HasSubstr("not_hdf5.h5: not an HDF5 file"));
  std::string message = open_error(fixture("bad_wrong_format.h5"));
  EXPECT_THAT(message, HasSubstr("bad_wrong_format.h5"));
  EXPECT_THAT(message, HasSubstr("'format' is 'not-wick'"));
  EXPECT_THAT(open_error(fixture("bad_wrong_version.h5")), HasSubstr("'format_version' is 2"));
  message = open_error(fixture("bad_missing_dataset.h5"));
  EXPECT_THAT(message, HasSubstr("bad_missing_dataset.h5: missing dataset /buckets/2x6/text/pooled"));
  message = open_error(fixture("bad_wrong_shape.h5"));
  EXPECT_THAT(message, HasSubstr("/buckets/4x4/latents has shape [5, 4, 4, 3]"));
  // NaN: opens (the structure is fine), validate reports it.
  auto ds = LatentDataset::open(fixture("bad_nan_latents.h5"));
  ValidationReport report = ds->validate();
  ASSERT_FALSE(report.ok());
  EXPECT_THAT(report.errors[0], HasSubstr("/buckets/2x6/latents row 1 holds a non-finite value (NaN)"));
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

// libhdf5_segv.h5 is fixture.h5 with 8 bytes changed (a random mutation): libhdf5 1.10.8 dies of
// SIGSEGV on it when wick reads it in-process (WICK_DATASET_CHECK=0).
TEST(LatentDataset, AFileThatCrashesLibhdf5IsRefused) {
  const std::string message = open_error(fixture("hostile/libhdf5_segv.h5"));
#if defined(__SANITIZE_ADDRESS__)
  // Before it crashes, libhdf5 copies overlapping memory, which AddressSanitizer reports in the child.
  EXPECT_THAT(message, HasSubstr("libhdf5_segv.h5: reading the file ended in a memory error (AddressSanitizer: "));
#else
  EXPECT_THAT(message, HasSubstr("libhdf5_segv.h5: libhdf5 crashed (SIGSEGV) reading the file"));
#endif
  EXPECT_THAT(message, HasSubstr("child process"));
}

// Inputs the fuzzer found (bench/results/2026-11-25-fuzz.md) that break libhdf5 1.10.8 itself: open
// reads them in a child process first and refuses them without this process touching them.
// libhdf5_oom.h5 (19 KB) makes libhdf5 allocate 1.9 GB for /label_names: the child's address-space
// limit turns that into an allocation failure, and this process's peak memory stays small.
TEST(LatentDataset, AFileThatMakesLibhdf5AllocateGigabytesIsRefused) {
  const std::string message = open_error(fixture("hostile/libhdf5_oom.h5"));
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer's malloc does not return null at the limit: its out-of-memory report ends the child.
  EXPECT_THAT(message, HasSubstr("libhdf5_oom.h5: reading the file needed more than"));
#else
  EXPECT_THAT(message, HasSubstr("libhdf5_oom.h5: /label_names: H5Dread failed (memory allocation failed"));
#endif
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  EXPECT_LT(usage.ru_maxrss, 1024 * 1024) << "peak resident KiB of the test process";
}

// libhdf5_hang.h5 crashes libhdf5 (SIGSEGV in H5HG__protect) in the clang build and, in the gcc build,
// mostly spins forever (the child is killed at WICK_DATASET_CHECK_TIMEOUT) but now and then reads a
// garbage bucket name and fails validation instead (libhdf5 reads memory it never wrote). Whichever it
// does, the open ends within the limit with a Data error naming the file; the time limit itself is
// checked deterministically by ChildCheck.AHangIsKilledAtTheTimeLimit.
TEST(LatentDataset, AHangInLibhdf5IsCutByTheTimeLimit) {
  ScopedEnv timeout("WICK_DATASET_CHECK_TIMEOUT", "2");
  const auto start = std::chrono::steady_clock::now();
  const std::string message = open_error(fixture("hostile/libhdf5_hang.h5"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const bool stopped = message.find("libhdf5_hang.h5: libhdf5 did not finish reading the file within 2 s") !=
                       std::string::npos;
  const bool crashed = message.find("libhdf5_hang.h5: libhdf5 crashed (SIG") != std::string::npos;
  const bool garbage = message.find("libhdf5_hang.h5: bucket name") != std::string::npos;
  EXPECT_TRUE(stopped || crashed || garbage) << message;
  if (stopped || crashed) {
    EXPECT_THAT(message, HasSubstr("child process"));
  }
  EXPECT_LT(seconds, 30.0);
}

// The check's settings are validated; valid files open with the check on and with it off.
TEST(LatentDataset, ChildCheckSettings) {
  {
    ScopedEnv bad("WICK_DATASET_CHECK_TIMEOUT", "soon");
    try {
      LatentDataset::open(fixture("fixture.h5"));
      ADD_FAILURE() << "a timeout of 'soon' was accepted";
    } catch (const WickError& error) {
      EXPECT_EQ(error.kind(), ErrorKind::Config);
      EXPECT_THAT(error.what(), HasSubstr("WICK_DATASET_CHECK_TIMEOUT='soon' must be a positive number"));
    }
  }
  {
    ScopedEnv off("WICK_DATASET_CHECK", "0");
    EXPECT_EQ(LatentDataset::open(fixture("fixture.h5"))->size(), 8);
  }
  EXPECT_EQ(LatentDataset::open(fixture("fixture.h5"))->size(), 8);
}

TEST(LatentDataset, ValidateFindsNonFiniteLatentsWrittenByWick) {
  std::string path = temp("inf.h5");
  LatentSamples s = make_samples(3, 2, 2, 0.0f);
  s.latents.data_as<float>()[4 * 2 * 2 + 3] = INFINITY;
  {
    LatentDatasetWriter writer(path, {.model_family = "flux", .latent_channels = 4});
    writer.append(s);
  }
  ValidationReport report = LatentDataset::open(path)->validate();
  ASSERT_EQ(report.errors.size(), 1u);
  EXPECT_THAT(report.errors[0], HasSubstr("latents row 1 holds a non-finite value (Inf)"));
}

TEST(LatentDataset, PerChannelNormalizationRoundTripsAndIsValidated) {
  struct Case {
    const char* name;
    std::vector<double> mean, std;
    const char* error;  // "" = valid
  };
  const std::vector<Case> cases = {
      {"absent", {}, {}, ""},
      {"both", {-0.7571, 0.5, 0.0, 1.5508}, {2.8184, 1.0, 0.5, 1.916}, ""},
      {"mean_only", {0.1, 0.2, 0.3, 0.4}, {}, "'vae_latents_mean' is given without 'vae_latents_std'"},
      {"std_only", {}, {1, 1, 1, 1}, "'vae_latents_std' is given without 'vae_latents_mean'"},
      {"short_mean", {0.1, 0.2, 0.3}, {1, 1, 1, 1}, "'vae_latents_mean' has 3 values, latent_channels is 4"},
      {"long_std", {0.1, 0.2, 0.3, 0.4}, {1, 1, 1, 1, 1}, "'vae_latents_std' has 5 values, latent_channels is 4"},
      {"zero_std", {0.1, 0.2, 0.3, 0.4}, {1, 0, 1, 1}, "'vae_latents_std' is 0.000000 at channel 1"},
      {"nan_mean", {0.1, NAN, 0.3, 0.4}, {1, 1, 1, 1}, "'vae_latents_mean' is not finite at channel 1"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = temp(std::string("channel_norm_") + c.name + ".h5");
    {
      LatentDatasetWriter writer(
          path,
          {.model_family = "qwenimage", .latent_channels = 4, .vae_latents_mean = c.mean, .vae_latents_std = c.std});
      writer.append(make_samples(2, 2, 2, 0.5f));
    }
    auto ds = LatentDataset::open(path);  // opens whatever they hold: validate() judges them
    EXPECT_EQ(ds->attributes().vae_latents_mean.size(), c.mean.size());
    EXPECT_EQ(ds->attributes().vae_latents_std, c.std);
    if (!c.mean.empty() && !std::isnan(c.mean[1])) {
      EXPECT_EQ(ds->attributes().vae_latents_mean, c.mean);
    }
    const ValidationReport report = ds->validate();
    if (std::string(c.error).empty()) {
      EXPECT_TRUE(report.ok()) << report.errors.front();
    } else {
      ASSERT_EQ(report.errors.size(), 1u);
      EXPECT_THAT(report.errors[0], HasSubstr(c.error));
    }
  }
}

TEST(LatentDataset, ClassFilter) {
  auto ds = LatentDataset::open(fixture("fixture.h5"));
  std::vector<int64_t> all = select_ids(*ds, {});
  EXPECT_EQ(all.size(), 8u);
  std::vector<int64_t> twos = select_ids(*ds, {.include = resolve_labels(*ds, {"TWO"})});
  std::vector<int64_t> no_twos = select_ids(*ds, {.exclude = {2}});
  EXPECT_EQ(twos.size() + no_twos.size(), 8u);
  for (int64_t id : twos) EXPECT_EQ(ds->label_of(id), 2);
  for (int64_t id : no_twos) EXPECT_NE(ds->label_of(id), 2);
  EXPECT_THROW(resolve_labels(*ds, {"ankle boot"}), WickError);
}

std::vector<int64_t> buckets_of(const std::vector<int64_t>& ids) {
  std::vector<int64_t> out;
  for (int64_t id : ids) out.push_back(id % 3 == 0 ? 1 : 0);  // two buckets of different sizes
  return out;
}

TEST(DistributedSampler, RanksCoverEverySampleDisjointly) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 47; ++i) ids.push_back(i * 2 + 1);
  for (int world : {1, 2, 3}) {
    std::multiset<int64_t> seen;
    int64_t batches = -1;
    for (int rank = 0; rank < world; ++rank) {
      DistributedSampler sampler(ids, buckets_of(ids), {.seed = 5, .rank = rank, .world = world, .batch_size = 4});
      if (batches < 0) batches = sampler.batches_per_epoch();
      EXPECT_EQ(sampler.batches_per_epoch(), batches);
      for (int64_t b = 0; b < batches; ++b) {
        std::vector<int64_t> batch = sampler.rank_batch(0, b);
        ASSERT_EQ(batch.size(), 4u);
        std::set<int64_t> bucket_set;
        for (int64_t id : batch) bucket_set.insert(id % 3 == 0);
        EXPECT_EQ(bucket_set.size(), 1u) << "a batch mixes buckets";
        seen.insert(batch.begin(), batch.end());
      }
    }
    // Every id at least once; the extra ones are the wrap padding (< world * batch per bucket).
    for (int64_t id : ids) EXPECT_GE(seen.count(id), 1u) << "world " << world << " id " << id;
    int64_t padded = static_cast<int64_t>(seen.size()) - static_cast<int64_t>(ids.size());
    EXPECT_GE(padded, 0);
    EXPECT_LT(padded, 2 * world * 4);
    // Disjoint ranks: global batch positions are split, so the total is exactly batches * world * 4.
    EXPECT_EQ(static_cast<int64_t>(seen.size()), batches * world * 4);
  }
}

// train.global_batch_size: the same global batches, in the same order, on any number of ranks; the
// ranks' shares differ by one at most and together are the 1-rank batch.
TEST(DistributedSampler, GlobalBatchIsTheSameOnAnyNumberOfRanks) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 53; ++i) ids.push_back(i);
  struct Case {
    int64_t global;
    int world;
    std::vector<int64_t> shares;  // per rank
  };
  const std::vector<Case> cases = {{10, 1, {10}},       {10, 2, {5, 5}},       {10, 3, {4, 3, 3}},
                                   {10, 4, {3, 3, 2, 2}}, {5, 2, {3, 2}},      {7, 7, {1, 1, 1, 1, 1, 1, 1}},
                                   {6, 4, {2, 2, 1, 1}}};
  for (const Case& c : cases) {
    DistributedSampler one(ids, buckets_of(ids), {.seed = 9, .rank = 0, .world = 1, .global_batch_size = c.global});
    std::vector<DistributedSampler> ranks;
    for (int rank = 0; rank < c.world; ++rank)
      ranks.emplace_back(ids, buckets_of(ids),
                         SamplerOptions{.seed = 9, .rank = rank, .world = c.world, .global_batch_size = c.global});
    for (int rank = 0; rank < c.world; ++rank) {
      EXPECT_EQ(rank_share(c.global, rank, c.world), c.shares[static_cast<size_t>(rank)]);
      EXPECT_EQ(ranks[static_cast<size_t>(rank)].rank_batch_size(), c.shares[static_cast<size_t>(rank)]);
      EXPECT_EQ(ranks[static_cast<size_t>(rank)].batches_per_epoch(), one.batches_per_epoch());
      EXPECT_EQ(ranks[static_cast<size_t>(rank)].epoch_order(2), one.epoch_order(2));
    }
    for (int64_t b = 0; b < one.batches_per_epoch(); ++b) {
      std::multiset<int64_t> whole, joined;
      for (int64_t id : one.rank_batch(1, b)) whole.insert(id);
      for (int rank = 0; rank < c.world; ++rank) {
        std::vector<int64_t> part = ranks[static_cast<size_t>(rank)].rank_batch(1, b);
        EXPECT_EQ(static_cast<int64_t>(part.size()), c.shares[static_cast<size_t>(rank)]);
        joined.insert(part.begin(), part.end());
      }
      EXPECT_EQ(joined, whole) << "global " << c.global << " on " << c.world << " ranks, batch " << b;
    }
  }
  // A global batch smaller than the ranks leaves a rank without a sample: a Config error.
  EXPECT_THROW(DistributedSampler(ids, buckets_of(ids), {.seed = 9, .rank = 0, .world = 4, .global_batch_size = 3}),
               WickError);
}

TEST(DistributedSampler, DeterministicDifferentPerEpochAndResumable) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 100; ++i) ids.push_back(i);
  SamplerOptions options{.seed = 9, .rank = 1, .world = 2, .batch_size = 3};
  DistributedSampler a(ids, buckets_of(ids), options), b(ids, buckets_of(ids), options);
  EXPECT_EQ(a.epoch_order(0), b.epoch_order(0));
  EXPECT_NE(a.epoch_order(0), a.epoch_order(1));
  SamplerOptions other_seed = options;
  other_seed.seed = 10;
  EXPECT_NE(a.epoch_order(0), DistributedSampler(ids, buckets_of(ids), other_seed).epoch_order(0));
  // Consume 1.5 epochs, saving the state half-way through epoch 1.
  std::vector<std::vector<int64_t>> rest;
  std::vector<int64_t> batch;
  int64_t per_epoch = a.batches_per_epoch();
  for (int64_t i = 0; i < per_epoch + per_epoch / 2; ++i) a.next(batch);
  SamplerState saved = a.state();
  EXPECT_EQ(saved.epoch, 1);
  EXPECT_EQ(saved.position, per_epoch / 2);
  for (int64_t i = 0; i < per_epoch; ++i) {
    a.next(batch);
    rest.push_back(batch);
  }
  DistributedSampler resumed(ids, buckets_of(ids), options);
  resumed.load_state(saved);
  for (int64_t i = 0; i < per_epoch; ++i) {
    resumed.next(batch);
    EXPECT_EQ(batch, rest[static_cast<size_t>(i)]) << "batch " << i << " after resume";
  }
  // The order does not depend on the order the ids were given in.
  std::vector<int64_t> reversed(ids.rbegin(), ids.rend());
  EXPECT_EQ(DistributedSampler(reversed, buckets_of(reversed), options).epoch_order(3), b.epoch_order(3));
}

// Regularization ids mixed into every batch: 3 of 8 per rank, over an epoch of the training ids, on
// every rank (world 1 and 2), and after a resume; each regularization id drawn equally often.
TEST(DistributedSampler, MixesRegularizationAtTheRatioAcrossRanksAndResume) {
  std::vector<int64_t> ids, reg_ids;
  for (int64_t i = 0; i < 50; ++i) ids.push_back(i);
  for (int64_t i = 100; i < 130; ++i) reg_ids.push_back(i);
  const std::vector<int64_t> one_bucket(ids.size(), 0), reg_bucket(reg_ids.size(), 0);
  auto is_reg = [](int64_t id) { return id >= 100; };
  for (int world : {1, 2}) {
    std::multiset<int64_t> train_seen, reg_seen;
    for (int rank = 0; rank < world; ++rank) {
      SamplerOptions options{.seed = 3, .rank = rank, .world = world, .batch_size = 8, .reg_per_batch = 3};
      DistributedSampler sampler(ids, one_bucket, reg_ids, reg_bucket, options);
      // An epoch is a pass over the 50 training ids, 5 per rank batch: ceil(50 / (5 * world)) batches.
      EXPECT_EQ(sampler.batches_per_epoch(), (50 + 5 * world - 1) / (5 * world));
      EXPECT_EQ(sampler.rank_batch_size(), 8);
      std::vector<int64_t> batch;
      for (int64_t b = 0; b < sampler.batches_per_epoch(); ++b) {
        sampler.next(batch);
        ASSERT_EQ(batch.size(), 8u);
        for (size_t i = 0; i < batch.size(); ++i) {
          EXPECT_EQ(is_reg(batch[i]), i >= 5) << "world " << world << " batch " << b << " position " << i;
          (is_reg(batch[i]) ? reg_seen : train_seen).insert(batch[i]);
        }
      }
      EXPECT_EQ(sampler.state(), (SamplerState{.epoch = 0, .position = sampler.batches_per_epoch()}));
    }
    // The ratio over the epoch on all ranks: 3 of 8, and every training id at least once.
    EXPECT_EQ(reg_seen.size() * 5, train_seen.size() * 3) << "world " << world;
    for (int64_t id : ids) EXPECT_GE(train_seen.count(id), 1u);
    // The regularization ids cycle through their own epochs: none drawn twice more often than another.
    size_t fewest = reg_seen.size(), most = 0;
    for (int64_t id : reg_ids) fewest = std::min(fewest, reg_seen.count(id)), most = std::max(most, reg_seen.count(id));
    EXPECT_LE(most - fewest, 1u) << "world " << world;
  }
  // Resume: a sampler restored from the state after 13 batches continues with the same batches.
  SamplerOptions options{.seed = 3, .rank = 1, .world = 2, .batch_size = 8, .reg_per_batch = 3};
  DistributedSampler a(ids, one_bucket, reg_ids, reg_bucket, options);
  DistributedSampler resumed(ids, one_bucket, reg_ids, reg_bucket, options);
  std::vector<int64_t> batch, again;
  for (int i = 0; i < 13; ++i) a.next(batch);
  resumed.load_state(a.state());
  for (int i = 0; i < 20; ++i) {
    a.next(batch);
    resumed.next(again);
    EXPECT_EQ(again, batch) << "batch " << i << " after resume";
  }
  // The training ids' order is the plain sampler's with batch_size 5 (same seed and streams).
  DistributedSampler plain(ids, one_bucket, {.seed = 3, .rank = 0, .world = 1, .batch_size = 5});
  DistributedSampler mixed(ids, one_bucket, reg_ids, reg_bucket,
                           {.seed = 3, .rank = 0, .world = 1, .batch_size = 8, .reg_per_batch = 3});
  EXPECT_EQ(mixed.epoch_order(2), plain.epoch_order(2));
  // Refusals: two buckets, a split with no training or no regularization sample.
  std::vector<int64_t> two_buckets = one_bucket;
  two_buckets[7] = 1;
  EXPECT_THROW(DistributedSampler(ids, two_buckets, reg_ids, reg_bucket, options), WickError);
  for (int64_t n_reg : {0, 8})
    EXPECT_THROW(DistributedSampler(ids, one_bucket, reg_ids, reg_bucket,
                                    {.seed = 3, .rank = 0, .world = 1, .batch_size = 8, .reg_per_batch = n_reg}),
                 WickError);
}

// With a global batch size: the global batch of 11 (8 training ids, then 3 regularization ids) is the same
// on 1, 2, 3 and 4 ranks, each rank taking its strided slice of it (shares differ by at most one; a rank may
// hold no regularization id); the per-rank form (batch_size, reg_per_batch per rank) is the global form of
// ranks x batch_size with ranks x reg_per_batch; too few training ids for the ranks is a Config error.
TEST(DistributedSampler, MixesRegularizationIntoOneGlobalBatchOnAnyNumberOfRanks) {
  std::vector<int64_t> ids, reg_ids;
  for (int64_t i = 0; i < 50; ++i) ids.push_back(i);
  for (int64_t i = 100; i < 113; ++i) reg_ids.push_back(i);
  const std::vector<int64_t> one_bucket(ids.size(), 0), reg_bucket(reg_ids.size(), 0);
  auto global_batches = [&](int world, int64_t n_batches) {  // rank batches woven back into global order
    std::vector<std::vector<int64_t>> out(static_cast<size_t>(n_batches));
    std::vector<DistributedSampler> ranks;
    for (int rank = 0; rank < world; ++rank)
      ranks.emplace_back(ids, one_bucket, reg_ids, reg_bucket,
                         SamplerOptions{.seed = 5, .rank = rank, .world = world, .global_batch_size = 11,
                                        .reg_per_batch = 3});
    for (int64_t b = 0; b < n_batches; ++b) {
      std::vector<std::vector<int64_t>> parts(static_cast<size_t>(world));
      int64_t n_reg = 0;
      for (int rank = 0; rank < world; ++rank) {
        DistributedSampler& sampler = ranks[static_cast<size_t>(rank)];
        sampler.next(parts[static_cast<size_t>(rank)]);
        const std::vector<int64_t>& part = parts[static_cast<size_t>(rank)];
        EXPECT_EQ(static_cast<int64_t>(part.size()), sampler.rank_batch_size());
        EXPECT_EQ(sampler.rank_batch_size(), rank_share(11, rank, world));
        for (size_t i = 0; i < part.size(); ++i)  // regularization ids last, reg_count() of them
          EXPECT_EQ(part[i] >= 100, static_cast<int64_t>(i) >= sampler.rank_batch_size() - sampler.reg_count());
        n_reg += sampler.reg_count();
      }
      EXPECT_EQ(n_reg, 3);
      for (size_t k = 0; k < 11; ++k) out[static_cast<size_t>(b)].push_back(parts[k % world][k / world]);
    }
    return out;
  };
  const int64_t n_batches = 17;  // past the end of an epoch of each set (7 and 5 batches)
  const auto one = global_batches(1, n_batches);
  for (const auto& batch : one)
    for (size_t k = 0; k < batch.size(); ++k) EXPECT_EQ(batch[k] >= 100, k >= 8);
  for (int world : {2, 3, 4}) EXPECT_EQ(global_batches(world, n_batches), one) << "world " << world;
  // The per-rank form is the global one: 2 ranks x (5 + 3) = a global batch of 16 with 6 regularization ids.
  for (int rank = 0; rank < 2; ++rank) {
    DistributedSampler per_rank(ids, one_bucket, reg_ids, reg_bucket,
                                {.seed = 5, .rank = rank, .world = 2, .batch_size = 8, .reg_per_batch = 3});
    DistributedSampler global(ids, one_bucket, reg_ids, reg_bucket,
                              {.seed = 5, .rank = rank, .world = 2, .global_batch_size = 16, .reg_per_batch = 6});
    std::vector<int64_t> a, b;
    for (int i = 0; i < 12; ++i) {
      per_rank.next(a);
      global.next(b);
      EXPECT_EQ(a, b) << "rank " << rank << " batch " << i;
    }
  }
  // 11 with 9 regularization ids leaves 2 training ids for 3 ranks: a Config error saying so.
  try {
    DistributedSampler(ids, one_bucket, reg_ids, reg_bucket,
                       {.seed = 5, .rank = 0, .world = 3, .global_batch_size = 11, .reg_per_batch = 9});
    ADD_FAILURE() << "no error";
  } catch (const WickError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Config);
    EXPECT_THAT(e.what(), HasSubstr("leaves 2 training samples per global batch, fewer than the 3 ranks"));
  }
}

TEST(Prefetcher, DeliversTheSameBatchesAsDirectReads) {
  auto ds = LatentDataset::open(fixture("fixture.h5"));
  std::vector<int64_t> ids = select_ids(*ds, {});
  std::vector<int64_t> buckets;
  for (int64_t id : ids) buckets.push_back(ds->bucket_of(id));
  SamplerOptions options{.seed = 3, .rank = 0, .world = 1, .batch_size = 2};
  DistributedSampler reference(ids, buckets, options);
  Prefetcher loader(ds, DistributedSampler(ids, buckets, options), {.depth = 3});
  for (int step = 0; step < 12; ++step) {  // crosses an epoch boundary
    std::vector<int64_t> want;
    reference.next(want);
    Batch got = loader.next();
    ASSERT_EQ(got.ids, want);
    LatentSamples direct = ds->read(want);
    EXPECT_EQ(got.latents.to_vector<float>(), direct.latents.to_vector<float>());
    EXPECT_EQ(got.text_embeds.to_vector<float>(), direct.text_embeds.to_vector<float>());
    EXPECT_EQ(got.text_pooled.to_vector<float>(), direct.text_pooled.to_vector<float>());
    EXPECT_EQ(got.text_mask.to_vector<uint8_t>(), direct.text_mask.to_vector<uint8_t>());
    EXPECT_EQ(got.labels.to_vector<int64_t>(), direct.labels.to_vector<int64_t>());
    EXPECT_EQ(got.captions, direct.captions);
    EXPECT_EQ(loader.state(), reference.state());
  }
}

// Polls `loader.ready()` until it equals `want` (true) or 10 s pass (false).
bool reaches(const Prefetcher& loader, int want) {
  for (int i = 0; i < 1000; ++i) {
    if (loader.ready() == want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(Prefetcher, KeepsDepthBatchesReadyAndNoMore) {
  auto ds = LatentDataset::open(fixture("fixture.h5"));
  std::vector<int64_t> ids = select_ids(*ds, {});
  std::vector<int64_t> buckets;
  for (int64_t id : ids) buckets.push_back(ds->bucket_of(id));
  SamplerOptions options{.seed = 3, .rank = 0, .world = 1, .batch_size = 2};
  for (int depth : {2, 3}) {
    Prefetcher loader(ds, DistributedSampler(ids, buckets, options), {.depth = depth});
    EXPECT_TRUE(reaches(loader, depth)) << "depth " << depth << ": ready " << loader.ready();
    for (int step = 0; step < 4; ++step) {
      loader.next();
      EXPECT_TRUE(reaches(loader, depth)) << "after next() " << step << ": ready " << loader.ready();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(loader.ready(), depth);  // it stops there
  }
  EXPECT_THROW(Prefetcher(ds, DistributedSampler(ids, buckets, options), {.depth = 1}), WickError);
}

TEST(Prefetcher, CudaBatchesEqualCpuBatches) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto ds = LatentDataset::open(fixture("fixture.h5"));
  std::vector<int64_t> ids = select_ids(*ds, {});
  std::vector<int64_t> buckets;
  for (int64_t id : ids) buckets.push_back(ds->bucket_of(id));
  SamplerOptions options{.seed = 4, .rank = 0, .world = 1, .batch_size = 2};
  Prefetcher cpu(ds, DistributedSampler(ids, buckets, options), {.depth = 2});
  Prefetcher gpu(ds, DistributedSampler(ids, buckets, options), {.depth = 2, .device = Device::cuda(0)});
  for (int step = 0; step < 8; ++step) {
    Batch a = cpu.next(), b = gpu.next();
    ASSERT_EQ(a.ids, b.ids);
    EXPECT_TRUE(b.latents.device().is_cuda());
    EXPECT_EQ(a.latents.to_vector<float>(), b.latents.to(Device::cpu()).to_vector<float>());
    EXPECT_EQ(a.text_embeds.to_vector<float>(), b.text_embeds.to(Device::cpu()).to_vector<float>());
    EXPECT_EQ(a.text_pooled.to_vector<float>(), b.text_pooled.to(Device::cpu()).to_vector<float>());
    EXPECT_EQ(a.text_mask.to_vector<uint8_t>(), b.text_mask.to(Device::cpu()).to_vector<uint8_t>());
  }
}

TEST(HashedTextEncoder, WordsMaskAndPooling) {
  EXPECT_EQ(HashedTextEncoder::words("T-shirt/top"), (std::vector<std::string>{"t", "shirt", "top"}));
  EXPECT_EQ(HashedTextEncoder::words("Ankle boot"), (std::vector<std::string>{"ankle", "boot"}));
  HashedTextEncoder encoder;
  TextEncoding e = encoder.encode({"Ankle boot", "ankle  BOOT", "", "a b c d e f g h i j"});
  std::vector<float> embeds = e.embeds.to_vector<float>();
  std::vector<uint8_t> mask = e.mask.to_vector<uint8_t>();
  EXPECT_EQ(std::vector<float>(embeds.begin(), embeds.begin() + 512),
            std::vector<float>(embeds.begin() + 512, embeds.begin() + 1024));  // case and spaces ignored
  EXPECT_EQ(std::vector<uint8_t>(mask.begin(), mask.begin() + 8), (std::vector<uint8_t>{1, 1, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(std::vector<uint8_t>(mask.begin() + 16, mask.begin() + 24), std::vector<uint8_t>(8, 0));
  EXPECT_EQ(std::vector<uint8_t>(mask.begin() + 24, mask.end()), std::vector<uint8_t>(8, 1));  // truncated to 8
  std::vector<float> ankle = encoder.word_vector("ankle"), boot = encoder.word_vector("boot");
  std::vector<float> pooled = e.pooled.to_vector<float>();
  double norm = 0;
  for (int i = 0; i < 64; ++i) {
    EXPECT_FLOAT_EQ(pooled[static_cast<size_t>(i)], (ankle[static_cast<size_t>(i)] + boot[static_cast<size_t>(i)]) / 2);
    EXPECT_EQ(pooled[static_cast<size_t>(128 + i)], 0.0f);
    norm += ankle[static_cast<size_t>(i)] * ankle[static_cast<size_t>(i)];
  }
  EXPECT_NEAR(std::sqrt(norm), 1.0, 0.35);
  EXPECT_NE(ankle, boot);
}

TEST(FashionPack, PacksTwoByTwoAndInspects) {
  Tensor image = Tensor::empty({1, 784}, DType::F32);
  for (int i = 0; i < 784; ++i) image.data_as<float>()[i] = static_cast<float>(i) / 1000.0f;
  std::vector<float> packed = pack_images_2x2(image).to_vector<float>();
  // latent[dy*2 + dx, i, j] = 2 * image[2i + dy, 2j + dx] - 1
  for (int c = 0; c < 4; ++c)
    for (int i = 0; i < 14; ++i)
      for (int j = 0; j < 14; ++j) {
        int dy = c / 2, dx = c % 2;
        EXPECT_FLOAT_EQ(packed[static_cast<size_t>((c * 14 + i) * 14 + j)],
                        static_cast<float>((2 * i + dy) * 28 + 2 * j + dx) / 1000.0f * 2.0f - 1.0f);
      }

  if (!std::filesystem::exists(fashion_mnist_dir() + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  std::string out = temp("packed/fashion.h5");
  std::filesystem::remove(out);
  PackSummary summary = pack_fashion_mnist({.out = out, .split = "train", .limit = 200, .progress = false});
  EXPECT_EQ(summary.n_samples, 200);
  EXPECT_THROW(pack_fashion_mnist({.out = out, .limit = 10, .progress = false}), WickError);  // exists, no --force
  auto ds = LatentDataset::open(out);
  EXPECT_EQ(ds->size(), 200);
  EXPECT_EQ(ds->attributes().model_family, "fashion-dit");
  EXPECT_EQ(ds->attributes().text_encoder, "wick-hashed-words-v1");
  ASSERT_EQ(ds->buckets().size(), 1u);
  EXPECT_EQ(ds->buckets()[0].name, "14x14");
  ValidationReport report = ds->validate();
  EXPECT_TRUE(report.ok());
  EXPECT_GT(report.latent_std, 0.3);
  EXPECT_LT(report.latent_mean, 0.0);  // Fashion-MNIST is mostly black background
  FashionMnist raw = load_fashion_mnist("train");
  LatentSamples s = ds->read({17});
  Tensor expected = pack_images_2x2(raw.images.narrow(0, 17, 1));
  std::vector<float> got = s.latents.to_vector<float>(), want = expected.to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-3);  // f16 storage
  int64_t label = raw.labels.to_vector<int64_t>()[17];
  EXPECT_EQ(ds->label_of(17), label);
  EXPECT_EQ(s.captions[0], fashion_mnist_class_names()[static_cast<size_t>(label)]);
  TextEncoding text = HashedTextEncoder().encode({s.captions[0]});
  EXPECT_EQ(s.text_mask.to_vector<uint8_t>(), text.mask.to_vector<uint8_t>());
}

}  // namespace
}  // namespace wick
