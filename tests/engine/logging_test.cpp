// The trainer's outputs besides checkpoints: CRC-32C and the TensorBoard event file (parsed back by a
// small reader written here), PNG round trips through libpng, labelled image grids, the loss curve,
// and metrics.jsonl.
//
// WICK_LOGGING_EXPORT=DIR keeps copies of the files written (an event file, a sample grid, loss curves)
// in DIR, e.g. for tests/reference/read_tensorboard_events.py or to look at the images.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <png.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/data/idx.h"
#include "engine/logging/font.h"
#include "engine/logging/image.h"
#include "engine/logging/metrics_log.h"
#include "engine/logging/plot.h"
#include "engine/logging/tensorboard.h"
#include "runtime/atomic_file.h"

namespace wick {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A fresh empty directory per test.
std::string fresh_dir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("wick_logging_" + std::to_string(getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

void export_copy(const std::string& path, const std::string& name) {
  if (const char* dir = std::getenv("WICK_LOGGING_EXPORT")) {
    fs::create_directories(dir);
    fs::copy_file(path, fs::path(dir) / name, fs::copy_options::overwrite_existing);
  }
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// ---- CRC-32C ----

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(crc32c(std::string_view("123456789")), 0xE3069283u);
  EXPECT_EQ(crc32c(std::string_view("")), 0x00000000u);
  EXPECT_EQ(crc32c(std::string_view("a")), 0xC1D04330u);
  // RFC 3720 (iSCSI) B.4 vectors: 32 zero bytes, 32 0xFF bytes, 32 incrementing, 32 decrementing.
  std::string zeros(32, '\0'), ones(32, '\xFF'), up(32, '\0'), down(32, '\0');
  for (int i = 0; i < 32; ++i) up[i] = static_cast<char>(i), down[i] = static_cast<char>(31 - i);
  EXPECT_EQ(crc32c(zeros), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones), 0x62A8AB43u);
  EXPECT_EQ(crc32c(up), 0x46DD794Eu);
  EXPECT_EQ(crc32c(down), 0x113FDB5Cu);
  // Continuation: crc(a + b) == crc(b, crc(a)).
  EXPECT_EQ(crc32c(std::string_view("56789"), crc32c(std::string_view("1234"))), 0xE3069283u);
}

TEST(Crc32c, MaskMatchesTheTfRecordFormula) {
  for (uint32_t crc : {0u, 1u, 0xE3069283u, 0xFFFFFFFFu}) {
    const uint32_t rotated = (crc >> 15) | (crc << 17);
    EXPECT_EQ(mask_crc32c(crc), static_cast<uint32_t>(rotated + 0xa282ead8u));
  }
  EXPECT_EQ(mask_crc32c(0), 0xa282ead8u);
}

// ---- a minimal TFRecord + protobuf reader, independent of the writer ----

uint32_t test_crc32c(const uint8_t* data, size_t n) {  // bitwise, no table
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    crc ^= data[i];
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}
uint32_t test_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

template <typename T>
T load_le(const uint8_t* p) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) value |= static_cast<T>(static_cast<T>(p[i]) << (8 * i));
  return value;
}

// Splits a file into records, checking both CRCs of each.
std::vector<std::string> read_tfrecords(const std::string& bytes) {
  std::vector<std::string> records;
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  size_t at = 0;
  while (at < bytes.size()) {
    EXPECT_GE(bytes.size() - at, 12u) << "truncated header at " << at;
    if (bytes.size() - at < 12) break;
    const uint64_t length = load_le<uint64_t>(p + at);
    EXPECT_EQ(load_le<uint32_t>(p + at + 8), test_mask(test_crc32c(p + at, 8))) << "length CRC at " << at;
    EXPECT_LE(at + 12 + length + 4, bytes.size()) << "truncated record at " << at;
    if (at + 12 + length + 4 > bytes.size()) break;
    const uint8_t* data = p + at + 12;
    EXPECT_EQ(load_le<uint32_t>(data + length), test_mask(test_crc32c(data, length))) << "data CRC at " << at;
    records.emplace_back(reinterpret_cast<const char*>(data), length);
    at += 12 + length + 4;
  }
  return records;
}

struct Field {
  uint32_t number = 0, wire_type = 0;
  uint64_t varint = 0;  // wire types 0, 1 (raw 64 bits), 5 (raw 32 bits)
  std::string bytes;    // wire type 2
};

std::vector<Field> parse_message(const std::string& message) {
  std::vector<Field> fields;
  size_t at = 0;
  auto varint = [&]() {
    uint64_t value = 0;
    for (int shift = 0; at < message.size(); shift += 7) {
      const auto byte = static_cast<uint8_t>(message[at++]);
      value |= uint64_t{byte & 0x7Fu} << shift;
      if (!(byte & 0x80)) break;
    }
    return value;
  };
  const auto* p = reinterpret_cast<const uint8_t*>(message.data());
  while (at < message.size()) {
    const uint64_t key = varint();
    Field field;
    field.number = static_cast<uint32_t>(key >> 3), field.wire_type = static_cast<uint32_t>(key & 7);
    if (field.wire_type == 0) {
      field.varint = varint();
    } else if (field.wire_type == 1) {
      field.varint = load_le<uint64_t>(p + at), at += 8;
    } else if (field.wire_type == 5) {
      field.varint = load_le<uint32_t>(p + at), at += 4;
    } else if (field.wire_type == 2) {
      const uint64_t length = varint();
      field.bytes = message.substr(at, length), at += length;
    } else {
      ADD_FAILURE() << "unexpected wire type " << field.wire_type;
      break;
    }
    fields.push_back(field);
  }
  EXPECT_EQ(at, message.size()) << "message overran its length";
  return fields;
}

double as_double(uint64_t bits) {
  double value;
  std::memcpy(&value, &bits, 8);
  return value;
}
float as_float(uint64_t bits) {
  const auto low = static_cast<uint32_t>(bits);
  float value;
  std::memcpy(&value, &low, 4);
  return value;
}

// Test-side libpng decode (libpng's simplified API), independent of wick's decode_png.
struct Decoded {
  uint32_t width = 0, height = 0, channels = 0;
  std::vector<uint8_t> pixels;
};
Decoded libpng_decode(const std::string& bytes) {
  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  Decoded out;
  if (!png_image_begin_read_from_memory(&png, bytes.data(), bytes.size())) {
    ADD_FAILURE() << "libpng: " << png.message;
    return out;
  }
  out.channels = (png.format & PNG_FORMAT_FLAG_COLOR) ? 3 : 1;
  png.format = out.channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  out.width = png.width, out.height = png.height;
  out.pixels.resize(PNG_IMAGE_SIZE(png));
  EXPECT_TRUE(png_image_finish_read(&png, nullptr, out.pixels.data(), 0, nullptr)) << png.message;
  return out;
}

Image test_pattern(int64_t height, int64_t width, int64_t channels) {
  Image image(height, width, channels);
  for (int64_t y = 0; y < height; ++y)
    for (int64_t x = 0; x < width; ++x)
      for (int64_t c = 0; c < channels; ++c) image.at(y, x, c) = static_cast<uint8_t>((y * 31 + x * 7 + c * 85) % 256);
  return image;
}

// ---- TensorBoard ----

TEST(TensorBoard, EventFileParsesBackWithFramingCrcsAndFields) {
  const std::string dir = fresh_dir("tensorboard");
  std::string path;
  const Image image = test_pattern(9, 13, 3);
  {
    TensorBoardWriter writer(dir);
    path = writer.path();
    writer.add_scalars(10, {{"train/loss", 0.25}, {"train/lr", 1e-4}});
    writer.add_scalar("train/loss", 0.125, 20);
    writer.add_scalar("train/loss", -3.5, -1);  // a negative step encodes as a 10-byte varint
    writer.add_image("samples", image, 20);
  }
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  EXPECT_THAT(fs::path(path).filename().string(), ::testing::StartsWith("events.out.tfevents."));
  EXPECT_THAT(fs::path(path).filename().string(), ::testing::EndsWith(std::string(".") + host));
  export_copy(path, fs::path(path).filename().string());

  const std::vector<std::string> records = read_tfrecords(read_bytes(path));
  ASSERT_EQ(records.size(), 5u);

  // Record 0: wall_time (1, double), file_version (3).
  std::vector<Field> first = parse_message(records[0]);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].number, 1u);
  EXPECT_EQ(first[0].wire_type, 1u);
  EXPECT_NEAR(as_double(first[0].varint), static_cast<double>(std::time(nullptr)), 60.0);
  EXPECT_EQ(first[1].number, 3u);
  EXPECT_EQ(first[1].bytes, "brain.Event:2");

  // Scalars: Event{1 wall_time, 2 step, 5 summary{1 value{1 tag, 2 simple_value}}}.
  auto scalars_of = [](const std::string& record, int64_t& step) {
    std::vector<std::pair<std::string, float>> values;
    for (const Field& field : parse_message(record)) {
      if (field.number == 2) step = static_cast<int64_t>(field.varint);
      if (field.number != 5) continue;
      for (const Field& value : parse_message(field.bytes)) {
        EXPECT_EQ(value.number, 1u);
        std::string tag;
        float simple = NAN;
        for (const Field& part : parse_message(value.bytes)) {
          if (part.number == 1) tag = part.bytes;
          if (part.number == 2) {
            EXPECT_EQ(part.wire_type, 5u);
            simple = as_float(part.varint);
          }
        }
        values.emplace_back(tag, simple);
      }
    }
    return values;
  };
  int64_t step = 0;
  auto values = scalars_of(records[1], step);
  EXPECT_EQ(step, 10);
  ASSERT_EQ(values.size(), 2u);
  EXPECT_EQ(values[0].first, "train/loss");
  EXPECT_EQ(values[0].second, 0.25f);
  EXPECT_EQ(values[1].first, "train/lr");
  EXPECT_EQ(values[1].second, 1e-4f);
  values = scalars_of(records[2], step);
  EXPECT_EQ(step, 20);
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(values[0].second, 0.125f);
  values = scalars_of(records[3], step);
  EXPECT_EQ(step, -1);
  EXPECT_EQ(values.at(0).second, -3.5f);

  // Image: value{1 tag, 4 image{1 height, 2 width, 3 colorspace, 4 PNG}}.
  std::map<uint32_t, Field> image_fields;
  std::string tag;
  for (const Field& field : parse_message(records[4]))
    if (field.number == 5)
      for (const Field& value : parse_message(field.bytes))
        for (const Field& part : parse_message(value.bytes)) {
          if (part.number == 1) tag = part.bytes;
          if (part.number == 4)
            for (const Field& image_field : parse_message(part.bytes)) image_fields[image_field.number] = image_field;
        }
  EXPECT_EQ(tag, "samples");
  EXPECT_EQ(image_fields[1].varint, 9u);
  EXPECT_EQ(image_fields[2].varint, 13u);
  EXPECT_EQ(image_fields[3].varint, 3u);
  const Decoded png = libpng_decode(image_fields[4].bytes);
  EXPECT_EQ(png.height, 9u);
  EXPECT_EQ(png.width, 13u);
  EXPECT_EQ(png.pixels, image.pixels);
}

TEST(TensorBoard, ResumeWritesASessionStartAtTheFirstNewStep) {
  const std::string dir = fresh_dir("tensorboard_resume");
  std::string first_path, second_path;
  {
    TensorBoardWriter interrupted(dir);
    first_path = interrupted.path();
    for (int64_t step = 1; step <= 5; ++step) interrupted.add_scalar("train/loss", 1.0 / step, step);
  }
  {
    TensorBoardWriter resumed(dir);  // resumed from the step-3 checkpoint
    second_path = resumed.path();
    resumed.mark_resumed(4);
    for (int64_t step = 4; step <= 6; ++step) resumed.add_scalar("train/loss", 10.0 * step, step);
  }
  if (const char* export_dir = std::getenv("WICK_LOGGING_EXPORT")) {  // a run directory for the reader
    fs::create_directories(fs::path(export_dir) / "resumed_run");
    for (const auto& path : {first_path, second_path})
      fs::copy_file(path, fs::path(export_dir) / "resumed_run" / fs::path(path).filename(),
                    fs::copy_options::overwrite_existing);
  }
  const std::vector<std::string> records = read_tfrecords(read_bytes(second_path));
  ASSERT_EQ(records.size(), 5u);
  const std::vector<Field> fields = parse_message(records[1]);
  ASSERT_EQ(fields.size(), 3u);
  EXPECT_EQ(fields[1].number, 2u);
  EXPECT_EQ(fields[1].varint, 4u);
  EXPECT_EQ(fields[2].number, 7u);  // session_log (6 is the deprecated log_message)
  const std::vector<Field> session_log = parse_message(fields[2].bytes);
  ASSERT_EQ(session_log.size(), 1u);
  EXPECT_EQ(session_log[0].number, 1u);
  EXPECT_EQ(session_log[0].varint, 1u);  // START
}

TEST(TensorBoard, NeverOverwritesAnEventFile) {
  const std::string dir = fresh_dir("tensorboard_two");
  TensorBoardWriter first(dir), second(dir);  // likely the same second: the second gets a suffix
  EXPECT_NE(first.path(), second.path());
  EXPECT_TRUE(fs::exists(first.path()));
  EXPECT_TRUE(fs::exists(second.path()));
}

TEST(TensorBoard, UnwritableDirectoryNamesThePath) {
  const std::string dir = fresh_dir("tensorboard_blocked");
  std::ofstream(dir + "/file") << "x";
  try {
    TensorBoardWriter writer(dir + "/file/sub");
    FAIL() << "expected a WickError";
  } catch (const WickError& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Data);
    EXPECT_THAT(error.what(), HasSubstr(dir + "/file/sub"));
  }
}

// ---- PNG ----

TEST(Png, RoundTripsGrayAndRgbThroughLibpng) {
  const std::string dir = fresh_dir("png");
  for (int64_t channels : {1, 3}) {
    const Image image = test_pattern(17, 23, channels);
    const std::string path = dir + "/pattern" + std::to_string(channels) + ".png";
    save_png(image, path);
    EXPECT_FALSE(fs::exists(atomic_temporary_path(path)));
    const Decoded decoded = libpng_decode(read_bytes(path));
    EXPECT_EQ(decoded.width, 23u);
    EXPECT_EQ(decoded.height, 17u);
    EXPECT_EQ(decoded.channels, static_cast<uint32_t>(channels));
    EXPECT_EQ(decoded.pixels, image.pixels);
    const Image back = load_png(path);  // wick's own decoder agrees
    EXPECT_EQ(back.channels, channels);
    EXPECT_EQ(back.pixels, image.pixels);
  }
}

TEST(Png, RejectsBadInput) {
  EXPECT_THROW(decode_png({1, 2, 3, 4}), WickError);
  Image broken;
  broken.height = 2, broken.width = 2, broken.channels = 2, broken.pixels.resize(8);
  EXPECT_THROW(encode_png(broken), WickError);
  try {
    save_png(test_pattern(2, 2, 1), "/nonexistent_dir_wick/x.png");
    FAIL() << "expected a WickError";
  } catch (const WickError& error) {
    EXPECT_THAT(error.what(), HasSubstr("/nonexistent_dir_wick/x.png"));
  }
}

// ---- font and grids ----

TEST(Font, CoversPrintableAsciiWithDistinctGlyphs) {
  std::map<std::array<uint8_t, 7>, char> seen;
  for (int code = 33; code < 127; ++code) {
    const auto& rows = glyph_rows(static_cast<char>(code));
    int bits = 0;
    for (uint8_t row : rows) {
      EXPECT_EQ(row & ~0x1Fu, 0u) << "glyph '" << static_cast<char>(code) << "' wider than 5 columns";
      bits += __builtin_popcount(row);
    }
    EXPECT_GT(bits, 0) << "glyph '" << static_cast<char>(code) << "' is empty";
    const auto [it, inserted] = seen.emplace(rows, static_cast<char>(code));
    EXPECT_TRUE(inserted) << "'" << static_cast<char>(code) << "' looks like '" << it->second << "'";
  }
  EXPECT_EQ(glyph_rows('\x01'), glyph_rows('?'));
  EXPECT_EQ(text_width("ab", 1), 11);
  EXPECT_EQ(text_width("ab", 2), 22);
}

TEST(Font, DrawsTheGlyphBits) {
  Image image(10, 20, 1, {255, 255, 255});
  draw_text(image, 1, 1, "L", {0, 0, 0});
  // 'L': the left column is set on every row, the bottom row across all five columns.
  for (int64_t row = 0; row < 7; ++row) EXPECT_EQ(image.at(1 + row, 1), 0);
  for (int64_t column = 0; column < 5; ++column) EXPECT_EQ(image.at(7, 1 + column), 0);
  EXPECT_EQ(image.at(1, 2), 255);
  // 'g' sits one row lower: its tail (rows' last entry 0x0E) lands in the cell's spacing row.
  Image low(10, 10, 1, {255, 255, 255});
  draw_text(low, 0, 0, "g", {0, 0, 0});
  EXPECT_TRUE(glyph_descends('g'));
  EXPECT_FALSE(glyph_descends('a'));
  EXPECT_EQ(low.at(7, 1), 0);    // 0x0E: columns 1..3 of row 7
  EXPECT_EQ(low.at(7, 0), 255);
  for (int64_t x = 0; x < 5; ++x) EXPECT_EQ(low.at(0, x), 255);  // nothing on the top row
}

TEST(ImageGrid, SizeValuesAndLabelPixels) {
  // 5 gray 4x6 images in [-1, 1]: image i is constant (i - 2) / 2 -> -1, -0.5, 0, 0.5, 1.
  std::vector<float> values;
  for (int i = 0; i < 5; ++i) values.insert(values.end(), 4 * 6, (i - 2) / 2.0f);
  const Tensor images = Tensor::from_vector(values, {5, 1, 4, 6});
  ImageGridOptions options{.n_columns = 3, .padding = 2, .scale = 2};
  Image plain = make_image_grid(images, options);
  EXPECT_EQ(plain.channels, 1);
  EXPECT_EQ(plain.width, 3 * (6 * 2 + 2) + 2);
  EXPECT_EQ(plain.height, 2 * (4 * 2 + 2) + 2);
  EXPECT_EQ(plain.at(2, 2), 0);                            // image 0: -1 -> black
  EXPECT_EQ(plain.at(2 + 10 + 1, 2 + 1), 191);             // image 3 (row 1, column 0): 0.5 -> 191
  EXPECT_EQ(plain.at(2 + 10 + 1, 2 + 14 + 1), 255);        // image 4 (row 1, column 1): 1 -> 255
  EXPECT_EQ(plain.at(2 + 10 + 1, 2 + 28 + 1), 255);        // no image 5: background
  EXPECT_EQ(plain.at(0, 0), 255);                          // padding is background

  options.labels = {"Bag", "Coat", "Ankle boot", "T-shirt/top", "7"};
  options.scale = 4;  // cells 24 px wide: 4 characters a line
  Image labelled = make_image_grid(images, options);
  const int64_t label_height = grid_label_height(options.labels, 24, 1);
  EXPECT_EQ(label_height, 4 * kLineHeight + 1);  // "T-shirt/top" wraps to "T-", "shir", "t/", "top"
  EXPECT_EQ(labelled.height, 2 * (4 * 4 + label_height + 2) + 2);
  // Dark label pixels under the first image (the label band of cell 0), none in the padding rows.
  int64_t dark = 0;
  for (int64_t y = 2 + 16; y < 2 + 16 + label_height; ++y)
    for (int64_t x = 2; x < 2 + 24; ++x) dark += labelled.at(y, x) < 128;
  EXPECT_GT(dark, 10);
}

TEST(ImageGrid, WrapsLabelsAtSeparators) {
  EXPECT_EQ(wrap_label("Ankle boot", 6), (std::vector<std::string>{"Ankle", "boot"}));
  EXPECT_EQ(wrap_label("T-shirt/top", 8), (std::vector<std::string>{"T-shirt/", "top"}));
  EXPECT_EQ(wrap_label("Sneaker", 4), (std::vector<std::string>{"Snea", "ker"}));
  EXPECT_EQ(wrap_label("Bag", 10), (std::vector<std::string>{"Bag"}));
}

TEST(ImageGrid, RgbAndAbove) {
  const Tensor images = Tensor::from_vector(std::vector<float>(2 * 3 * 5 * 5, 1.0f), {2, 3, 5, 5});
  Image grid = make_image_grid(images, {.n_columns = 4, .padding = 1, .value_min = 0.0f, .value_max = 1.0f,
                                        .labels = {"a", "b"}, .label_position = LabelPosition::Above});
  EXPECT_EQ(grid.channels, 3);
  EXPECT_EQ(grid.width, 2 * (5 + 1) + 1);  // n_columns capped at N
  const int64_t label_height = grid_label_height({"a", "b"}, 5, 1);
  EXPECT_EQ(grid.height, 5 + label_height + 2);
  EXPECT_EQ(grid.at(1 + label_height, 1, 0), 255);  // the image starts below the label
}

TEST(ImageGrid, RejectsBadShapesAndLabelCounts) {
  const Tensor images = Tensor::from_vector(std::vector<float>(2 * 2 * 3 * 3, 0.0f), {2, 2, 3, 3});
  try {
    make_image_grid(images);
    FAIL() << "expected a WickError";
  } catch (const WickError& error) {
    EXPECT_THAT(error.what(), HasSubstr("make_image_grid"));
  }
  const Tensor gray = Tensor::from_vector(std::vector<float>(2 * 9, 0.0f), {2, 1, 3, 3});
  EXPECT_THROW(make_image_grid(gray, {.labels = {"only one"}}), WickError);
}

TEST(ImageGrid, FashionMnistSampleGrid) {
  FashionMnist data;
  try {
    data = load_fashion_mnist("test");
  } catch (const WickError&) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  // The first two of each class, labelled with the class name.
  std::vector<float> values;
  std::vector<std::string> labels;
  const std::vector<float> pixels = data.images.to_vector<float>();
  const std::vector<int64_t> classes = data.labels.to_vector<int64_t>();
  for (int64_t wanted = 0; wanted < 10; ++wanted)
    for (int64_t i = 0, taken = 0; i < static_cast<int64_t>(classes.size()) && taken < 2; ++i)
      if (classes[i] == wanted) {
        values.insert(values.end(), pixels.begin() + i * 784, pixels.begin() + (i + 1) * 784);
        labels.emplace_back(fashion_mnist_class_names()[wanted]);
        ++taken;
      }
  const Tensor images = Tensor::from_vector(values, {20, 1, 28, 28});
  const Image grid = make_image_grid(images, {.n_columns = 5, .padding = 4, .scale = 3, .value_min = 0.0f,
                                              .value_max = 1.0f, .labels = labels});
  EXPECT_EQ(grid.width, 5 * (84 + 4) + 4);
  EXPECT_EQ(grid.height, 4 * (84 + grid_label_height(labels, 84, 1) + 4) + 4);
  const std::string path = fresh_dir("fashion") + "/step_0.png";
  save_png(grid, path);
  export_copy(path, "fashion_grid.png");
  EXPECT_EQ(load_png(path).pixels, grid.pixels);
}

// ---- loss curve ----

std::pair<std::vector<int64_t>, std::vector<double>> synthetic_losses(int n) {
  std::vector<int64_t> steps;
  std::vector<double> losses;
  uint32_t state = 12345;
  for (int i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    const double noise = (state >> 8) / static_cast<double>(1 << 24) - 0.5;
    steps.push_back(i + 1);
    losses.push_back(0.08 + 0.9 * std::exp(-i / 60.0) + 0.12 * noise * (0.3 + std::exp(-i / 200.0)));
  }
  losses[10] = NAN;  // a skipped step is left out
  return {steps, losses};
}

TEST(LossCurve, ValidPngWithCurvesInsideTheAxes) {
  const auto [steps, losses] = synthetic_losses(500);
  const std::string dir = fresh_dir("plot");
  for (bool log_scale : {false, true}) {
    const std::string path = dir + (log_scale ? "/loss_log.png" : "/loss.png");
    save_loss_curve(path, steps, losses, {.log_scale = log_scale});
    export_copy(path, log_scale ? "loss_log.png" : "loss.png");
    const Decoded png = libpng_decode(read_bytes(path));
    ASSERT_EQ(png.channels, 3u);
    EXPECT_EQ(png.width, 720u);
    EXPECT_EQ(png.height, 440u);

    const LossCurvePlot plot = plot_loss_curve(steps, losses, {.log_scale = log_scale});
    EXPECT_EQ(png.pixels, plot.image.pixels);
    // Inside the box (borders excluded): count curve-coloured pixels (not white, not grid gray).
    int64_t smoothed = 0, raw = 0;
    for (int64_t y = plot.plot_top + 1; y < plot.plot_bottom; ++y)
      for (int64_t x = plot.plot_left + 1; x < plot.plot_right; ++x) {
        const uint8_t r = plot.image.at(y, x, 0), b = plot.image.at(y, x, 2);
        smoothed += (r > 150 && b < 100);  // the orange EMA line
        raw += (b > r + 30);               // the blue raw points/line
      }
    EXPECT_GT(smoothed, plot.plot_right - plot.plot_left) << "log_scale " << log_scale;
    EXPECT_GT(raw, plot.plot_right - plot.plot_left) << "log_scale " << log_scale;
    // The axis line is dark.
    EXPECT_LT(plot.image.at(plot.plot_bottom, (plot.plot_left + plot.plot_right) / 2, 0), 100);
  }
}

TEST(LossCurve, EmptyAndSinglePointDoNotFail) {
  const LossCurvePlot empty = plot_loss_curve({}, {});
  EXPECT_EQ(empty.image.width, 720);
  const LossCurvePlot one = plot_loss_curve({5}, {0.3});
  EXPECT_EQ(one.image.height, 440);
  EXPECT_THROW(plot_loss_curve({1, 2}, {0.3}), WickError);
}

TEST(LossCurve, NiceTicks) {
  EXPECT_EQ(nice_ticks(0.0, 1.0, 5), (std::vector<double>{0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0}));
  const std::vector<double> ticks = nice_ticks(3.0, 997.0, 6);
  ASSERT_EQ(ticks.size(), 4u);  // spacing 200: 200 .. 800 inside [3, 997]
  EXPECT_DOUBLE_EQ(ticks.front(), 200.0);
  EXPECT_DOUBLE_EQ(ticks.back(), 800.0);
  EXPECT_EQ(format_tick(0.05), "0.05");
  EXPECT_EQ(format_tick(12000), "1.2e+04");
}

// ---- metrics.jsonl ----

TEST(MetricsLog, LinesAreJsonWithTheFieldsAndResumeAppends) {
  const std::string path = fresh_dir("metrics") + "/run/metrics.jsonl";
  {
    MetricsLog log(path);
    for (int64_t step = 1; step <= 3; ++step)
      log.write({.step = step, .loss = 1.0 / static_cast<double>(step), .lr = 1e-4, .grad_norm = 0.5,
                 .samples_per_s = 100.0, .it_per_s = 4.0, .memory_bytes = int64_t{1} << 30, .elapsed_s = 1.5 * step,
                 .extra = {{"loss_ema", 0.9}}});
    // Flushed per write: the file already holds three lines while the log is open.
    std::ifstream in(path);
    EXPECT_EQ(std::count(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>(), '\n'), 3);
  }
  std::ofstream(path, std::ios::app) << R"({"step":4,"loss":0.)";  // a crash mid-line
  {
    MetricsLog resumed(path);  // resumed from the step-2 checkpoint: steps 3 and 4 come again
    resumed.write({.step = 3, .loss = 0.3});
    resumed.write({.step = 4, .loss = NAN});  // a skipped step: loss null
  }
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  std::string text;
  int64_t broken = 0;
  while (std::getline(in, text)) {
    const nlohmann::json line = nlohmann::json::parse(text, nullptr, false);
    if (line.is_discarded()) {
      ++broken;
      continue;
    }
    lines.push_back(line);
  }
  EXPECT_EQ(broken, 1);
  ASSERT_EQ(lines.size(), 5u);
  for (const char* field : {"step", "loss", "lr", "grad_norm", "samples_per_s", "it_per_s", "memory_bytes", "time",
                            "elapsed_s", "loss_ema"})
    EXPECT_TRUE(lines[0].contains(field)) << field;
  EXPECT_EQ(lines[1]["step"], 2);
  EXPECT_DOUBLE_EQ(lines[1]["loss"].get<double>(), 0.5);
  EXPECT_EQ(lines[1]["memory_bytes"], int64_t{1} << 30);
  EXPECT_NEAR(lines[0]["time"].get<double>(), static_cast<double>(std::time(nullptr)), 60.0);
  EXPECT_FALSE(lines[3].contains("lr"));  // unset fields are left out
  EXPECT_TRUE(lines[4]["loss"].is_null());

  // The reader keeps the last line of each step.
  const std::vector<MetricsRecord> records = read_metrics(path);
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records[2].step, 3);
  EXPECT_DOUBLE_EQ(records[2].loss, 0.3);
  EXPECT_FALSE(records[2].lr.has_value());
  EXPECT_TRUE(std::isnan(records[3].loss));
  ASSERT_EQ(records[0].extra.size(), 1u);
  EXPECT_EQ(records[0].extra[0].first, "loss_ema");
  EXPECT_EQ(records[0].memory_bytes, int64_t{1} << 30);
}

TEST(MetricsLog, RejectsExtraNamesThatShadowFields) {
  EXPECT_THROW(metrics_json_line({.step = 1, .loss = 1.0, .extra = {{"loss", 2.0}}}), WickError);
  EXPECT_TRUE(read_metrics("/nonexistent_wick/metrics.jsonl").empty());
}

}  // namespace
}  // namespace wick
