// IDX reading and the Fashion-MNIST set from Debian's dataset-fashion-mnist package.
#include <filesystem>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <fstream>

#include "engine/data/idx.h"
#include "runtime/ops/reduce.h"

namespace wick {
namespace {

using ::testing::HasSubstr;

std::string write_file(const std::string& name, const std::vector<uint8_t>& bytes, bool gzip) {
  std::string path = ::testing::TempDir() + "/" + name;
  if (gzip) {
    gzFile file = gzopen(path.c_str(), "wb");
    gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(file);
  } else {
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
  return path;
}

std::string error_of(const std::string& path) {
  try {
    read_idx(path);
  } catch (const WickError& error) {
    return error.what();
  }
  return "";
}

TEST(Idx, ReadsU8AndBigEndianI32PlainAndGzipped) {
  std::vector<uint8_t> u8 = {0, 0, 0x08, 2, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 4, 5, 6};
  for (bool gzip : {false, true}) {
    Tensor t = read_idx(write_file(gzip ? "u8.idx.gz" : "u8.idx", u8, gzip));
    EXPECT_EQ(t.dtype(), DType::U8);
    EXPECT_EQ(t.shape(), (Shape{2, 3}));
    EXPECT_EQ(t.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  }
  std::vector<uint8_t> i32 = {0, 0, 0x0C, 1, 0, 0, 0, 2, 0, 0, 1, 2, 0xff, 0xff, 0xff, 0xfe};
  EXPECT_EQ(read_idx(write_file("i32.idx", i32, false)).to_vector<int32_t>(), (std::vector<int32_t>{258, -2}));
}

TEST(Idx, RejectsMalformedFiles) {
  EXPECT_THAT(error_of(write_file("short.idx", {0, 0}, false)), HasSubstr("too short"));
  EXPECT_THAT(error_of(write_file("magic.idx", {1, 0, 8, 1, 0, 0, 0, 1, 7}, false)), HasSubstr("not an IDX"));
  EXPECT_THAT(error_of(write_file("type.idx", {0, 0, 0x77, 1, 0, 0, 0, 1, 7}, false)), HasSubstr("element type"));
  EXPECT_THAT(error_of(write_file("trunc.idx", {0, 0, 8, 1, 0, 0, 0, 3, 7}, false)), HasSubstr("expected 11"));
  EXPECT_THAT(error_of(::testing::TempDir() + "/absent.idx"), HasSubstr("cannot open"));
}

TEST(FashionMnist, LoadsTheDebianPackage) {
  if (!std::filesystem::exists(fashion_mnist_dir() + "/t10k-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  FashionMnist test = load_fashion_mnist("test");
  EXPECT_EQ(test.images.shape(), (Shape{10000, 784}));
  EXPECT_EQ(test.labels.shape(), (Shape{10000}));
  std::vector<int64_t> labels = test.labels.to_vector<int64_t>();
  std::vector<int> counts(10, 0);
  for (int64_t label : labels) {
    ASSERT_GE(label, 0);
    ASSERT_LT(label, 10);
    ++counts[label];
  }
  for (int c = 0; c < 10; ++c) EXPECT_EQ(counts[c], 1000) << "class " << fashion_mnist_class_names()[c];
  double mean = wick::mean(test.images).item();
  EXPECT_GT(mean, 0.25);  // Fashion-MNIST's mean pixel is about 0.286
  EXPECT_LT(mean, 0.32);
  EXPECT_LE(wick::max(test.images).item(), 1.0);
  EXPECT_STREQ(fashion_mnist_class_names()[9], "Ankle boot");
}

}  // namespace
}  // namespace wick
