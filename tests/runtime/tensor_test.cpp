// Tensor handles, views, copies, casts and memory accounting.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/error_of.h"

#include <cmath>
#include <limits>

#include "runtime/memory.h"
#include "runtime/ops/copy.h"
#include "runtime/tensor.h"

namespace wick {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Tensor iota(const Shape& shape) {
  std::vector<float> values(static_cast<size_t>(numel(shape)));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  return Tensor::from_vector<float>(values, shape);
}

using wick::testing::error_of;

TEST(Tensor, FromVectorRoundTrip) {
  Tensor x = iota({2, 3});
  EXPECT_EQ(x.shape(), (Shape{2, 3}));
  EXPECT_EQ(x.strides(), (Strides{3, 1}));
  EXPECT_EQ(x.dtype(), DType::F32);
  EXPECT_TRUE(x.device().is_cpu());
  EXPECT_TRUE(x.is_contiguous());
  EXPECT_THAT(x.to_vector<float>(), ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_EQ(x.describe(), "f32[2, 3] cpu");
}

TEST(Tensor, TransposeIsAViewAndContiguousCopies) {
  Tensor x = iota({2, 3});
  Tensor t = x.transpose(0, 1);
  EXPECT_EQ(t.storage().get(), x.storage().get());
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(t.strides(), (Strides{1, 3}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_THAT(t.to_vector<float>(), ElementsAre(0, 3, 1, 4, 2, 5));
  Tensor c = t.contiguous();
  EXPECT_NE(c.storage().get(), x.storage().get());
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_THAT(c.to_vector<float>(), ElementsAre(0, 3, 1, 4, 2, 5));
  EXPECT_TRUE(x.contiguous().same(x)) << "contiguous() of a contiguous tensor must not copy";
}

TEST(Tensor, ViewAndReshape) {
  Tensor x = iota({2, 3, 4});
  Tensor v = x.view({6, -1});
  EXPECT_EQ(v.shape(), (Shape{6, 4}));
  EXPECT_EQ(v.storage().get(), x.storage().get());
  // A permuted tensor cannot be viewed flat, but can be reshaped (copy).
  Tensor p = x.permute({2, 0, 1});
  EXPECT_THAT(error_of([&] { p.view({24}); }), HasSubstr("view"));
  Tensor r = p.reshape({24});
  EXPECT_NE(r.storage().get(), x.storage().get());
  EXPECT_FLOAT_EQ(r.to_vector<float>()[1], 4.0f);  // p[0,0,1] = x[0,1,0]
  // Splitting one axis of a permuted tensor is still a view.
  Tensor split = p.view({2, 2, 2, 3});
  EXPECT_EQ(split.storage().get(), x.storage().get());
  EXPECT_EQ(split.to_vector<float>(), p.contiguous().view({2, 2, 2, 3}).to_vector<float>());
  EXPECT_EQ(x.flatten(1).shape(), (Shape{2, 12}));
  EXPECT_THAT(error_of([&] { x.view({5, -1}); }), HasSubstr("view"));
}

TEST(Tensor, NarrowSliceSelect) {
  Tensor x = iota({4, 5});
  Tensor n = x.narrow(1, 1, 3);
  EXPECT_EQ(n.shape(), (Shape{4, 3}));
  EXPECT_EQ(n.offset(), 1);
  EXPECT_FLOAT_EQ(n.to_vector<float>()[3], 6.0f);
  Tensor s = x.slice(0, 0, 4, 2);
  EXPECT_THAT(s.select(1, -1).to_vector<float>(), ElementsAre(4, 14));
  EXPECT_THAT(x.slice(1, -2, 5).select(0, 0).to_vector<float>(), ElementsAre(3, 4));
  EXPECT_THAT(error_of([&] { x.narrow(0, 3, 2); }), HasSubstr("narrow"));
  EXPECT_THAT(error_of([&] { x.select(0, 4); }), HasSubstr("select"));
}

TEST(Tensor, ExpandSqueezeUnsqueeze) {
  Tensor x = iota({3, 1});
  Tensor e = x.expand({2, 3, 4});
  EXPECT_EQ(e.strides(), (Strides{0, 1, 0}));
  EXPECT_EQ(e.storage().get(), x.storage().get());
  std::vector<float> values = e.to_vector<float>();
  EXPECT_EQ(values.size(), 24u);
  EXPECT_FLOAT_EQ(values[4 + 3], 1.0f);  // e[0, 1, 3] = x[1, 0]
  EXPECT_FLOAT_EQ(values[12 + 8], 2.0f);
  EXPECT_THAT(error_of([&] { x.expand({3, 2, 2}); }), HasSubstr("expand"));
  EXPECT_EQ(x.squeeze().shape(), (Shape{3}));
  EXPECT_EQ(x.squeeze(0).shape(), (Shape{3, 1}));
  EXPECT_EQ(x.unsqueeze(0).shape(), (Shape{1, 3, 1}));
  EXPECT_EQ(x.unsqueeze(-1).shape(), (Shape{3, 1, 1}));
}

TEST(Tensor, CastRoundsToNearestEven) {
  // 1 + 2^-8 lies halfway between two bf16 values (1 and 1 + 2^-7): ties go to the even one (1).
  // 1 + 3*2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: ties go to 1 + 2^-6.
  Tensor x = Tensor::from_vector<float>({1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -2.5f, 65520.0f, 1e-8f}, {5});
  std::vector<float> b = x.to(DType::BF16).to_vector<float>();
  EXPECT_FLOAT_EQ(b[0], 1.0f);
  EXPECT_FLOAT_EQ(b[1], 1.0f + 4.0f / 256);
  EXPECT_FLOAT_EQ(b[2], -2.5f);
  std::vector<float> h = x.to(DType::F16).to_vector<float>();
  EXPECT_FLOAT_EQ(h[2], -2.5f);
  EXPECT_TRUE(std::isinf(h[3])) << "65520 rounds up to infinity in f16";
  EXPECT_FLOAT_EQ(h[4], 0.0f);
  // f16 subnormal: 2^-24 is the smallest.
  Tensor tiny = Tensor::from_vector<float>({5.9604645e-8f, 8.940697e-8f}, {2});
  std::vector<float> t = tiny.to(DType::F16).to_vector<float>();
  EXPECT_FLOAT_EQ(t[0], 5.9604645e-8f);
  EXPECT_FLOAT_EQ(t[1], 1.1920929e-7f);  // 1.5 * 2^-24 ties to even: 2 * 2^-24
}

TEST(Tensor, CastToIntegersTruncatesAndSaturates) {
  Tensor x = Tensor::from_vector<float>({-1.7f, 2.9f, 300.0f, -300.0f, std::nanf("")}, {5});
  EXPECT_THAT(x.to(DType::I32).to_vector<int32_t>(), ElementsAre(-1, 2, 300, -300, 0));
  EXPECT_THAT(x.to(DType::I8).to_vector<int8_t>(), ElementsAre(-1, 2, 127, -128, 0));
  EXPECT_THAT(x.to(DType::U8).to_vector<uint8_t>(), ElementsAre(0, 2, 255, 0, 0));
}

TEST(Tensor, AllDTypesRoundTrip) {
  for (DType dtype : {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I32, DType::I64, DType::U8, DType::I8}) {
    Tensor x = Tensor::from_vector<double>({0, 1, 2, 3, 100, 7}, {2, 3}).to(dtype);
    EXPECT_EQ(x.dtype(), dtype);
    EXPECT_EQ(x.nbytes(), static_cast<size_t>(6 * dtype_size(dtype)));
    EXPECT_THAT(x.transpose(0, 1).to_vector<double>(), ElementsAre(0, 3, 1, 100, 2, 7)) << dtype_name(dtype);
  }
}

TEST(Tensor, CopyIntoStridedViewBroadcasts) {
  Tensor out = Tensor::from_vector<float>(std::vector<float>(12, 0.0f), {3, 4});
  out.narrow(1, 1, 2).copy_from(Tensor::from_vector<double>({5, 6}, {2}));
  EXPECT_THAT(out.to_vector<float>(), ElementsAre(0, 5, 6, 0, 0, 5, 6, 0, 0, 5, 6, 0));
  EXPECT_THAT(error_of([&] { out.copy_from(iota({3})); }), HasSubstr("expand"));
}

TEST(Tensor, ScalarAndItem) {
  Tensor s = Tensor::scalar(2.5, DType::BF16);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_DOUBLE_EQ(s.item(), 2.5);
  EXPECT_THAT(error_of([&] { iota({2}).item(); }), HasSubstr("item"));
}

TEST(Tensor, FromStorageChecksBounds) {
  auto storage = Storage::allocate(Device::cpu(), 16);
  EXPECT_NO_THROW(Tensor::from_storage(storage, {2, 2}, {2, 1}, 0, DType::F32));
  EXPECT_THAT(error_of([&] { Tensor::from_storage(storage, {2, 2}, {2, 1}, 1, DType::F32); }),
              HasSubstr("outside"));
  EXPECT_THAT(error_of([&] { Tensor::from_storage(storage, {3}, {1}, 0, DType::F64); }), HasSubstr("outside"));
}

TEST(Tensor, WrappedStorageIsBorrowedAndNotFreed) {
  std::vector<float> host = {1, 2, 3, 4};
  auto keepalive = std::make_shared<int>(0);
  {
    auto storage = Storage::wrap(host.data(), host.size() * sizeof(float), Device::cpu(), keepalive);
    EXPECT_FALSE(storage->owned());
    EXPECT_EQ(keepalive.use_count(), 2);
    Tensor x = Tensor::from_storage(storage, {2, 2}, {2, 1}, 0, DType::F32);
    EXPECT_EQ(x.data(), static_cast<void*>(host.data()));
    EXPECT_THAT(x.transpose(0, 1).to_vector<float>(), ElementsAre(1, 3, 2, 4));
  }
  EXPECT_EQ(keepalive.use_count(), 1);
}

TEST(Tensor, IdsAreUniquePerTensorAndSharedByHandles) {
  Tensor x = iota({2});
  Tensor alias = x;
  Tensor view = x.view({2});
  EXPECT_EQ(alias.id(), x.id());
  EXPECT_TRUE(alias.same(x));
  EXPECT_NE(view.id(), x.id());
}

TEST(Tensor, UndefinedTensorUseThrows) {
  Tensor undefined;
  EXPECT_FALSE(undefined.defined());
  EXPECT_THAT(error_of([&] { (void)undefined.shape(); }), HasSubstr("undefined"));
}

TEST(Memory, AccountingTracksCurrentAndPeak) {
  reset_peak_memory(Device::cpu());
  MemoryStats before = memory_stats(Device::cpu());
  {
    Tensor big = Tensor::empty({1 << 20}, DType::F32);
    MemoryStats during = memory_stats(Device::cpu());
    EXPECT_EQ(during.current_bytes - before.current_bytes, 4 << 20);
    EXPECT_GE(during.peak_bytes, during.current_bytes);
    EXPECT_EQ(during.n_allocations, before.n_allocations + 1);
  }
  MemoryStats after = memory_stats(Device::cpu());
  EXPECT_EQ(after.current_bytes, before.current_bytes);
  EXPECT_GE(after.peak_bytes, before.current_bytes + (4 << 20));
}

TEST(Memory, PinnedBufferIsMoveOnly) {
  PinnedBuffer a(1024);
  ASSERT_NE(a.data(), nullptr);
  void* data = a.data();
  PinnedBuffer b = std::move(a);
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(b.bytes(), 1024u);
}

TEST(Device, ParseAndErrors) {
  EXPECT_TRUE(parse_device("cpu").is_cpu());
  EXPECT_EQ(parse_device("cuda:3").index, 3);
  EXPECT_THAT(error_of([] { parse_device("tpu"); }), HasSubstr("cpu, cuda, cuda:N"));
  EXPECT_THAT(error_of([] { parse_dtype("float8"); }), HasSubstr("valid names"));
  EXPECT_EQ(parse_dtype("bfloat16"), DType::BF16);
  EXPECT_EQ(promote_types(DType::BF16, DType::F16), DType::F32);
  EXPECT_EQ(promote_types(DType::I32, DType::BF16), DType::BF16);
}

TEST(Cuda, DeviceTensorsRoundTrip) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: CUDA copy test not run on this machine";
  Tensor x = iota({3, 4});
  Tensor g = x.to(Device::cuda(0));
  EXPECT_TRUE(g.device().is_cuda());
  EXPECT_EQ(g.to_vector<float>(), x.to_vector<float>());
  // Strided device copy with a cast, and a strided device view written from the host.
  Tensor t = g.transpose(0, 1).to(DType::BF16).contiguous();
  EXPECT_EQ(t.to_vector<float>(), x.transpose(0, 1).contiguous().to_vector<float>());
  Tensor out = Tensor::empty({3, 4}, DType::F32, Device::cuda(0));
  out.copy_from(Tensor::scalar(0));
  out.narrow(1, 2, 2).copy_from(Tensor::from_vector<float>({7, 8}, {2}));
  std::vector<float> v = out.to_vector<float>();
  EXPECT_FLOAT_EQ(v[2], 7.0f);
  EXPECT_FLOAT_EQ(v[11], 8.0f);
  MemoryStats stats = memory_stats(Device::cuda(0));
  EXPECT_GT(stats.peak_bytes, 0);
}

}  // namespace
}  // namespace wick

namespace wick {
namespace {

TEST(Memory, LargeHostBlocksAreReusedFromTheCache) {
  release_cached_memory(Device::cpu());
#if defined(__SANITIZE_ADDRESS__)
  // An ASan build (WICK_SANITIZE) caches nothing, so that ASan sees uses of freed tensor storage.
  { Tensor big = Tensor::empty({3 << 20}, DType::F32); }
  EXPECT_EQ(memory_stats(Device::cpu()).cached_bytes, 0) << "the host cache kept a block in an ASan build";
  GTEST_SKIP() << "AddressSanitizer build: the host cache is off (runtime/cpu/host_cache.h)";
#endif
  void* first = nullptr;
  {
    Tensor big = Tensor::empty({3 << 20}, DType::F32);  // 12 MiB
    first = big.data();
  }
  EXPECT_GE(memory_stats(Device::cpu()).cached_bytes, 12 << 20);
  Tensor again = Tensor::empty({3 << 20}, DType::F32);
  EXPECT_EQ(again.data(), first) << "a freed block of the same size should be handed out again";
  EXPECT_EQ(memory_stats(Device::cpu()).cached_bytes, 0);
  release_cached_memory(Device::cpu());
}

}  // namespace
}  // namespace wick
