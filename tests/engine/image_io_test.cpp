// Decoding training images (JPEG, PNG, WebP), resizing, and the folder walker, checked against the
// pixels Pillow and OpenCV give for the same files (tests/reference/make_image_fixtures.py writes
// tests/data/images/), and against real photographs from Debian packages.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "engine/data/buckets.h"
#include "engine/data/image_decode.h"
#include "engine/data/image_folder.h"
#include "engine/data/image_resize.h"
#include "tests/test_data.h"

namespace wick {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

std::string fixture(const std::string& name) { return testing::test_data_dir() + "/images/" + name; }
std::string expected(const std::string& name) { return fixture("expected/" + name); }

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A reference PNG as RGB (load_png keeps gray PNGs gray).
Image load_reference(const std::string& path) {
  Image image = load_png(path);
  if (image.channels == 3) return image;
  Image rgb(image.height, image.width, 3);
  for (size_t i = 0; i < image.pixels.size(); ++i)
    for (size_t c = 0; c < 3; ++c) rgb.pixels[i * 3 + c] = image.pixels[i];
  return rgb;
}

// The largest |a - b| over all samples, or -1 when the shapes differ; `border` pixels at each edge
// are left out.
int max_difference(const Image& a, const Image& b, int64_t border = 0) {
  if (a.height != b.height || a.width != b.width || a.channels != b.channels) return -1;
  int worst = 0;
  for (int64_t y = border; y < a.height - border; ++y)
    for (int64_t x = border; x < a.width - border; ++x)
      for (int64_t c = 0; c < a.channels; ++c)
        worst = std::max(worst, std::abs(static_cast<int>(a.at(y, x, c)) - static_cast<int>(b.at(y, x, c))));
  return worst;
}

double mean_difference(const Image& a, const Image& b) {
  double sum = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i) sum += std::abs(static_cast<int>(a.pixels[i]) - b.pixels[i]);
  return sum / static_cast<double>(a.pixels.size());
}

// The WickError a call throws, with its kind; "" when it throws none.
template <typename Fn>
std::string data_error_of(Fn&& fn) {
  try {
    fn();
  } catch (const WickError& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Data) << error.what();
    return error.what();
  }
  return "";
}

// ---- decoding, against Pillow ----

struct DecodeCase {
  const char* file;
  const char* reference;  // under expected/
  AlphaMode alpha;
  int tolerance;          // largest |wick - reference| allowed
  const char* color;      // ImageHeader::color
  bool has_alpha;
};

// JPEG: Debian's libjpeg-turbo 2.1.5 and Pillow's bundled 3.2.0 run the same integer IDCT (ISLOW) and
// the same fancy upsampling, so the pixels agree exactly; a different IDCT would differ by 1-2.
// PNG and lossless WebP are exact by construction. Lossy WebP: libwebp 1.2.4 against Pillow's 1.6.0.
const DecodeCase decode_cases[] = {
    {"rgb.png", "resize_source.png", AlphaMode::Composite, 0, "rgb", false},
    {"interlaced.png", "resize_source.png", AlphaMode::Composite, 0, "rgb", false},
    {"rgb.jpg", "rgb_jpg.png", AlphaMode::Composite, 0, "ycbcr", false},
    {"progressive.jpg", "progressive_jpg.png", AlphaMode::Composite, 0, "ycbcr", false},
    {"gray.jpg", "gray_jpg.png", AlphaMode::Composite, 0, "gray", false},
    {"cmyk.jpg", "cmyk_jpg.png", AlphaMode::Composite, 0, "cmyk", false},
    {"ycck.jpg", "ycck_jpg.png", AlphaMode::Composite, 0, "ycck", false},
    {"gray.png", "gray.png", AlphaMode::Composite, 0, "gray", false},
    {"gray2.png", "gray2.png", AlphaMode::Composite, 0, "gray", false},
    {"gray16.png", "gray16.png", AlphaMode::Composite, 0, "gray16", false},
    {"rgb16.png", "rgb16.png", AlphaMode::Composite, 0, "rgb16", false},
    {"palette.png", "palette.png", AlphaMode::Composite, 0, "palette", false},
    {"rgba.png", "rgba_over_white.png", AlphaMode::Composite, 0, "rgba", true},
    {"rgba.png", "rgba_discard.png", AlphaMode::Discard, 0, "rgba", true},
    {"rgba16.png", "rgba16_over_white.png", AlphaMode::Composite, 0, "rgba16", true},
    {"rgba16.png", "rgba16_discard.png", AlphaMode::Discard, 0, "rgba16", true},
    {"gray_alpha.png", "gray_alpha_over_white.png", AlphaMode::Composite, 0, "gray+alpha", true},
    {"gray_alpha.png", "gray_alpha_discard.png", AlphaMode::Discard, 0, "gray+alpha", true},
    {"palette_trns.png", "palette_trns_over_white.png", AlphaMode::Composite, 0, "palette", true},
    {"palette_trns.png", "palette_trns_discard.png", AlphaMode::Discard, 0, "palette", true},
    {"lossless.webp", "resize_source.png", AlphaMode::Composite, 0, "rgb (lossless)", false},
    {"lossy.webp", "lossy.png", AlphaMode::Composite, 0, "rgb (lossy)", false},
    {"alpha.webp", "alpha_webp_over_white.png", AlphaMode::Composite, 0, "rgba (lossless)", true},
    {"alpha.webp", "alpha_webp_discard.png", AlphaMode::Discard, 0, "rgba (lossless)", true},
};

TEST(ImageDecode, MatchesPillowForEveryColourType) {
  for (const DecodeCase& c : decode_cases) {
    SCOPED_TRACE(std::string(c.file) + " vs " + c.reference);
    const Image reference = load_reference(expected(c.reference));
    const Image decoded = load_image(fixture(c.file), {.alpha = c.alpha});
    ASSERT_EQ(decoded.channels, 3);
    EXPECT_LE(max_difference(decoded, reference), c.tolerance);
    EXPECT_GE(max_difference(decoded, reference), 0) << "shape " << decoded.height << "x" << decoded.width;
    const ImageHeader header = probe_image_file(fixture(c.file));
    EXPECT_EQ(header.color, c.color);
    EXPECT_EQ(header.has_alpha, c.has_alpha);
    EXPECT_EQ(header.height, reference.height);
    EXPECT_EQ(header.width, reference.width);
  }
}

TEST(ImageDecode, CompositesOverAnyBackground) {
  // rgba.png: alpha rises along x, alpha(x) = round(255 x / 63); out = round((c a + bg (255 - a)) / 255).
  const Image colour = load_image(fixture("rgba.png"), {.alpha = AlphaMode::Discard});
  const Rgb background = {10, 200, 90};
  const Image over = load_image(fixture("rgba.png"), {.background = background});
  for (int64_t y = 0; y < colour.height; ++y)
    for (int64_t x = 0; x < colour.width; ++x) {
      const int alpha = static_cast<int>(std::lround(255.0 * static_cast<double>(x) / 63.0));
      for (int64_t c = 0; c < 3; ++c) {
        const double exact = (colour.at(y, x, c) * alpha + background[c] * (255 - alpha)) / 255.0;
        ASSERT_EQ(over.at(y, x, c), static_cast<int>(std::lround(exact))) << y << "," << x << "," << c;
      }
    }
}

TEST(ImageDecode, FormatComesFromTheBytesNotTheName) {
  const std::string renamed = ::testing::TempDir() + "/wick_jpeg_named.png";
  fs::copy_file(fixture("rgb.jpg"), renamed, fs::copy_options::overwrite_existing);
  EXPECT_EQ(probe_image_file(renamed).format, ImageFormat::Jpeg);
  EXPECT_EQ(max_difference(load_image(renamed), load_image(fixture("rgb.jpg"))), 0);
  const std::vector<uint8_t> webp = read_bytes(fixture("lossy.webp"));
  EXPECT_EQ(detect_image_format(webp.data(), webp.size()), ImageFormat::Webp);
  EXPECT_EQ(detect_image_format(webp.data(), 11), ImageFormat::Unknown);
  EXPECT_THAT(data_error_of([] { load_image(fixture("gif_named.png")); }), HasSubstr("a GIF file"));
}

// The unknown-format message names a format only when the file has that format's whole signature: signatures with
// NUL bytes (TIFF "MM\0*", JPEG XL's container) are compared in full, not up to their first NUL.
TEST(ImageDecode, UnknownFormatsNamedOnlyByTheirWholeSignature) {
  const auto message_of = [](const std::string& text) {
    const std::vector<uint8_t> bytes(text.begin(), text.end());
    return data_error_of([&] { decode_image(bytes, {}, "named.jpg"); });
  };
  using namespace std::string_literals;
  const std::string text = message_of("a caption saved under an image's name\n");
  EXPECT_THAT(text, Not(HasSubstr("JPEG XL")));
  EXPECT_THAT(text, HasSubstr("a file starting with 61 20 63 61"));
  EXPECT_THAT(message_of("MMxx and more bytes"), Not(HasSubstr("TIFF")));
  EXPECT_THAT(message_of("MM\0*\0\0\0\x08 rest"s), HasSubstr("a TIFF file"));
  EXPECT_THAT(message_of("II*\0\x08\0\0\0 rest"s), HasSubstr("a TIFF file"));
  EXPECT_THAT(message_of("\0\0\0\x0cJXL \x0d\x0a\x87\x0a rest"s), HasSubstr("a JPEG XL file"));
  EXPECT_THAT(message_of("\0\0\0\x0cJXK \x0d\x0a\x87\x0a rest"s), Not(HasSubstr("JPEG XL")));
  EXPECT_THAT(message_of("\xff\x0a codestream"s), HasSubstr("a JPEG XL file"));
}

TEST(ImageTensor, ScalesToMinusOneOneChannelsFirst) {
  Image image(1, 2, 3);
  image.pixels = {0, 128, 255, 255, 0, 51};
  const Tensor x = image_to_tensor(image);
  EXPECT_EQ(x.shape(), (Shape{3, 1, 2}));
  const std::vector<float> v = x.to_vector<float>();
  const float mid = (128.0f / 255.0f - 0.5f) / 0.5f;
  EXPECT_EQ(v, (std::vector<float>{-1.0f, 1.0f, mid, -1.0f, 1.0f, (51.0f / 255.0f - 0.5f) / 0.5f}));
}

// ---- EXIF orientation ----

TEST(ImageOrientation, AllEightJpegOrientationsDisplayLikePillow) {
  const Image displayed = load_reference(expected("orientation_displayed.png"));
  for (int orientation = 1; orientation <= 8; ++orientation) {
    SCOPED_TRACE("orientation " + std::to_string(orientation));
    const std::string file = fixture("orientation_" + std::to_string(orientation) + ".jpg");
    const ImageHeader header = probe_image_file(file);
    EXPECT_EQ(header.orientation, orientation);
    EXPECT_EQ(header.height, 24);
    EXPECT_EQ(header.width, 32);
    EXPECT_EQ(header.stored_height, orientation >= 5 ? 32 : 24);
    const Image image = load_image(file);
    const std::string reference = expected("orientation_" + std::to_string(orientation) + ".png");
    EXPECT_EQ(max_difference(image, load_reference(reference)), 0);
    // Quadrant centres, whatever the JPEG's chroma does at the edges.
    for (auto [y, x] : {std::pair{5, 7}, {5, 24}, {18, 7}, {18, 24}})
      for (int c = 0; c < 3; ++c) EXPECT_NEAR(image.at(y, x, c), displayed.at(y, x, c), 12) << y << "," << x;
    const Image stored = load_image(file, {.apply_orientation = false});
    EXPECT_EQ(stored.height, header.stored_height);
  }
}

// PNG's eXIf chunk (before and after the image data) and WebP's EXIF chunk.
TEST(ImageOrientation, PngExifAndWebpExifChunks) {
  const Image displayed = load_reference(expected("orientation_displayed.png"));
  for (const char* file : {"orientation_6.png", "orientation_6_late.png", "orientation_8.webp"}) {
    SCOPED_TRACE(file);
    const ImageHeader header = probe_image_file(fixture(file));
    EXPECT_EQ(header.orientation, file[12] - '0');
    EXPECT_EQ(header.height, 24);
    EXPECT_EQ(max_difference(load_image(fixture(file)), displayed), 0);
  }
}

TEST(ImageOrientation, RotationsByHand) {
  // 2 x 3, one gray level per pixel: a b c / d e f.
  Image image(2, 3, 1);
  image.pixels = {1, 2, 3, 4, 5, 6};
  const auto pixels = [](const Image& i) { return std::vector<int>(i.pixels.begin(), i.pixels.end()); };
  EXPECT_EQ(pixels(apply_exif_orientation(image, 2)), (std::vector<int>{3, 2, 1, 6, 5, 4}));
  EXPECT_EQ(pixels(apply_exif_orientation(image, 3)), (std::vector<int>{6, 5, 4, 3, 2, 1}));
  EXPECT_EQ(pixels(apply_exif_orientation(image, 4)), (std::vector<int>{4, 5, 6, 1, 2, 3}));
  EXPECT_EQ(pixels(apply_exif_orientation(image, 5)), (std::vector<int>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(pixels(apply_exif_orientation(image, 6)), (std::vector<int>{4, 1, 5, 2, 6, 3}));  // 90° clockwise
  EXPECT_EQ(pixels(apply_exif_orientation(image, 7)), (std::vector<int>{6, 3, 5, 2, 4, 1}));
  EXPECT_EQ(pixels(apply_exif_orientation(image, 8)), (std::vector<int>{3, 6, 2, 5, 1, 4}));  // 90° counter-clockwise
  EXPECT_EQ(apply_exif_orientation(image, 6).height, 3);
}

// ---- bad input ----

struct BrokenCase {
  const char* file;
  const char* reason;  // a part of the message
  bool header_too;     // probe_image_file fails as well
};

const BrokenCase broken_cases[] = {
    {"truncated.jpg", "truncated JPEG", false},
    {"truncated_header.jpg", "not a readable JPEG", true},
    {"truncated.png", "truncated file", false},
    {"truncated.webp", "truncated", false},
    {"empty.jpg", "empty file (0 bytes)", true},
    {"text.jpg", "not a JPEG, PNG or WebP image", true},
    {"garbage.jpg", "not a readable JPEG", true},
    {"bad_crc.png", "CRC", false},
    {"bomb.png", "100000 x 100000 = 10000000000 pixels, over the limit of 178956970", true},
    {"bomb.jpg", "60000 x 60000 = 3600000000 pixels, over the limit", true},
    {"gif_named.png", "a GIF file", true},
};

TEST(ImageBroken, EveryBadFileIsADataErrorNamingTheFile) {
  for (const BrokenCase& c : broken_cases) {
    SCOPED_TRACE(c.file);
    const std::string message = data_error_of([&] { load_image(fixture(c.file)); });
    EXPECT_THAT(message, HasSubstr(fixture(c.file)));
    EXPECT_THAT(message, HasSubstr(c.reason));
    const std::string header_message = data_error_of([&] { probe_image_file(fixture(c.file)); });
    EXPECT_EQ(!header_message.empty(), c.header_too) << header_message;
  }
  EXPECT_THAT(data_error_of([] { load_image(fixture("absent.jpg")); }), HasSubstr("cannot open"));
}

TEST(ImageBroken, PixelLimitIsConfigurable) {
  EXPECT_EQ(default_max_image_pixels, 2 * 89'478'485);  // Pillow: 2 * Image.MAX_IMAGE_PIXELS
  EXPECT_THAT(data_error_of([] { load_image(fixture("rgb.png"), {.max_pixels = 48 * 64 - 1}); }),
              HasSubstr("64 x 48 = 3072 pixels, over the limit of 3071"));
  EXPECT_EQ(load_image(fixture("rgb.png"), {.max_pixels = 48 * 64}).height, 48);
  EXPECT_EQ(load_image(fixture("rgb.png"), {.max_pixels = 0}).height, 48);
  for (const char* file : {"rgb.jpg", "lossy.webp"})
    EXPECT_THAT(data_error_of([&] { load_image(fixture(file), {.max_pixels = 100}); }), HasSubstr("over the limit"));
}

// Every prefix (in steps) and many one-byte corruptions of every valid file: each either decodes to an
// image or throws WickError (Data); nothing crashes, hangs or throws anything else.
TEST(ImageBroken, DamagedCopiesNeverCrash) {
  int64_t n_decoded = 0, n_refused = 0;
  for (const char* file : {"rgb.jpg", "progressive.jpg", "cmyk.jpg", "ycck.jpg", "orientation_6.jpg", "rgb.png",
                           "interlaced.png", "palette_trns.png", "rgba16.png", "gray2.png", "orientation_6.png",
                           "orientation_6_late.png",
                           "lossy.webp", "alpha.webp", "orientation_8.webp"}) {
    const std::vector<uint8_t> bytes = read_bytes(fixture(file));
    const auto attempt = [&](const std::vector<uint8_t>& damaged) {
      try {
        const Image image = decode_image(damaged, {}, file);
        EXPECT_EQ(image.pixels.size(), static_cast<size_t>(image.height * image.width * 3)) << file;
        ++n_decoded;
      } catch (const WickError& error) {
        EXPECT_EQ(error.kind(), ErrorKind::Data) << error.what();
        ++n_refused;
      }
    };
    const size_t step = std::max<size_t>(1, bytes.size() / 60);
    for (size_t length = 0; length < bytes.size(); length += step)
      attempt(std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(length)));
    for (size_t at = 0; at < bytes.size(); at += step) {
      std::vector<uint8_t> damaged = bytes;
      damaged[at] ^= static_cast<uint8_t>(0x5A + at);
      attempt(damaged);
    }
  }
  EXPECT_GT(n_refused, 100);
  EXPECT_GT(n_decoded, 50);
}

// ---- resizing ----

TEST(ImageResize, AreaMatchesOpenCvInterArea) {
  const Image source = load_reference(expected("resize_source.png"));  // 48 x 64
  // Factor 2: each output pixel is the mean of 2 x 2 inputs in both; rounding may differ by one.
  const Image half = resize_image(source, 24, 32, {.filter = ResizeFilter::Area});
  EXPECT_LE(max_difference(half, load_reference(expected("resize_area_24x32.png"))), 1);
  // Factor 2.4: both weight each input by the area it covers.
  const Image odd = resize_image(source, 20, 27);  // Auto shrinks with Area
  const Image reference = load_reference(expected("resize_area_20x27.png"));
  EXPECT_LE(max_difference(odd, reference), 1);
  EXPECT_LT(mean_difference(odd, reference), 0.01);  // measured: 0.0006 (one sample in 1,620 off by one)
}

TEST(ImageResize, CatmullRomMatchesPillowBicubicInside) {
  // Pillow's BICUBIC is the a = -0.5 cubic (Catmull-Rom) with the support scaled when shrinking, as stb
  // does. At the edges Pillow renormalizes the cut kernel where stb repeats the edge pixel.
  const Image source = load_reference(expected("resize_source.png"));
  const Image down = resize_image(source, 20, 27, {.filter = ResizeFilter::CatmullRom});
  const Image down_reference = load_reference(expected("resize_bicubic_20x27.png"));
  EXPECT_LE(max_difference(down, down_reference, 2), 1);  // measured: 1 inside, 2 at the border
  EXPECT_LT(mean_difference(down, down_reference), 0.25);
  const Image up = resize_image(source, 80, 100);  // Auto enlarges with Catmull-Rom
  const Image up_reference = load_reference(expected("resize_bicubic_80x100.png"));
  EXPECT_LE(max_difference(up, up_reference, 2), 1);  // measured: 1 inside, 3 at the border
  EXPECT_LT(mean_difference(up, up_reference), 0.25);
}

TEST(ImageResize, LinearLightAveragesLightNotCodes) {
  Image checker(2, 2, 1);
  checker.pixels = {0, 255, 255, 0};
  EXPECT_NEAR(resize_image(checker, 1, 1, {.filter = ResizeFilter::Area}).pixels[0], 128, 1);
  // Half black, half white is 0.5 in linear light: sRGB code 188.
  EXPECT_NEAR(resize_image(checker, 1, 1, {.filter = ResizeFilter::Area, .linear_light = true}).pixels[0], 188, 1);
}

TEST(ImageResize, CropFlipAndFilterNames) {
  Image image(2, 3, 1);
  image.pixels = {1, 2, 3, 4, 5, 6};
  const Image window = crop_image(image, 1, 1, 1, 2);
  EXPECT_EQ(std::vector<int>(window.pixels.begin(), window.pixels.end()), (std::vector<int>{5, 6}));
  const Image mirrored = flip_horizontal(image);
  EXPECT_EQ(std::vector<int>(mirrored.pixels.begin(), mirrored.pixels.end()), (std::vector<int>{3, 2, 1, 6, 5, 4}));
  EXPECT_EQ(max_difference(resize_image(image, 2, 3), image), 0);
  EXPECT_THROW(crop_image(image, 1, 2, 1, 2), WickError);
  EXPECT_EQ(parse_resize_filter("catmull-rom"), ResizeFilter::CatmullRom);
  try {
    parse_resize_filter("lanczos");
    FAIL() << "no error";
  } catch (const WickError& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Config);
    EXPECT_THAT(error.what(), HasSubstr("valid: auto, area, catmull-rom, mitchell, triangle"));
  }
}

// ---- the folder walker ----

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("wick_images_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

TEST(ImageFolder, SortedRecursiveSkipsHiddenAndWarnsOnBadFiles) {
  const fs::path root = fresh_dir("walk");
  const auto put = [&](const char* source, const std::string& relative) {
    fs::create_directories((root / relative).parent_path());
    fs::copy_file(fixture(source), root / relative);
  };
  put("rgb.jpg", "b/photo.jpg");
  put("orientation_6.jpg", "a/rotated.JPG");
  put("lossy.webp", "z.webp");
  put("gray.png", "b/sub/gray.png");
  put("truncated.jpg", "b/cut.jpg");       // header fine, pixels cut: only verify finds it
  put("text.jpg", "c/not_an_image.jpg");   // always a warning
  put("rgb.jpg", ".hidden/skipped.jpg");
  put("rgb.jpg", "b/.skipped.jpg");
  write_text(root / "b/notes.md", "not an image");
  write_text(root / "b/photo.txt", "\xEF\xBB\xBF  a photo,\r\n of waves  \r\n\r\n");
  write_text(root / "z.caption", "a webp");
  write_text(root / "b/sub/gray.txt", "bad \xC3\x28 utf-8");

  const ImageFolderScan scan = scan_image_folder(root.string(), {.captions = {.default_caption = "[trigger]",
                                                                               .trigger_word = "ohwx"}});
  std::vector<std::string> paths;
  for (const auto& entry : scan.images) paths.push_back(entry.relative_path);
  EXPECT_EQ(paths, (std::vector<std::string>{"a/rotated.JPG", "b/cut.jpg", "b/photo.jpg", "z.webp"}));
  ASSERT_EQ(scan.images.size(), 4u);
  EXPECT_EQ(scan.n_skipped, 2);
  ASSERT_EQ(scan.warnings.size(), 2u);
  EXPECT_THAT(scan.warnings[0], HasSubstr("gray.txt: the caption file is not UTF-8"));
  EXPECT_THAT(scan.warnings[1], HasSubstr("not_an_image.jpg: not a JPEG, PNG or WebP image"));
  EXPECT_EQ(scan.images[0].header.height, 24);  // orientation 6 applied: stored 32 x 24
  EXPECT_EQ(scan.images[0].caption.texts, (std::vector<std::string>{"ohwx"}));
  EXPECT_EQ(scan.images[2].caption.texts, (std::vector<std::string>{"ohwx a photo, of waves"}));
  EXPECT_EQ(scan.images[2].caption.source, (root / "b/photo.txt").string());
  EXPECT_EQ(scan.images[3].caption.texts, (std::vector<std::string>{"ohwx a webp"}));
  EXPECT_EQ(scan.images[3].path, (root / "z.webp").string());

  const ImageFolderScan verified = scan_image_folder(root.string(), {.verify = true});
  EXPECT_EQ(verified.images.size(), 3u);
  EXPECT_EQ(verified.n_skipped, 3);
  const ImageFolderScan top = scan_image_folder(root.string(), {.recursive = false});
  ASSERT_EQ(top.images.size(), 1u);
  EXPECT_EQ(top.images[0].relative_path, "z.webp");
  EXPECT_THAT(data_error_of([&] { scan_image_folder((root / "absent").string()); }), HasSubstr("not a folder"));
}

// A symlink named like an image whose target is gone is a skipped image with a warning, not a silent drop; a link to a
// folder named like an image likewise. Images without a caption are counted (scan.uncaptioned) unless a default
// caption or trigger word stands in.
TEST(ImageFolder, DanglingSymlinksWarnAndUncaptionedImagesAreCounted) {
  const fs::path root = fresh_dir("links");
  fs::copy_file(fixture("rgb.jpg"), root / "kept.jpg");
  fs::copy_file(fixture("rgb.jpg"), root / "captioned.jpg");
  write_text(root / "captioned.txt", "a cat");
  write_text(root / "blank.txt", "  \n");
  fs::copy_file(fixture("rgb.jpg"), root / "blank.jpg");
  fs::create_symlink(root / "kept.jpg", root / "linked.jpg");
  fs::create_symlink(root / "moved_away.jpg", root / "dangling.jpg");
  fs::create_directories(root / "folder");
  fs::create_directory_symlink(root / "folder", root / "folder_link.png");

  const ImageFolderScan scan = scan_image_folder(root.string());
  std::vector<std::string> paths;
  for (const auto& entry : scan.images) paths.push_back(entry.relative_path);
  EXPECT_EQ(paths, (std::vector<std::string>{"blank.jpg", "captioned.jpg", "kept.jpg", "linked.jpg"}));
  EXPECT_EQ(scan.n_skipped, 2);
  ASSERT_EQ(scan.warnings.size(), 2u);
  EXPECT_THAT(scan.warnings[0], HasSubstr("dangling.jpg: a symbolic link to "));
  EXPECT_THAT(scan.warnings[0], HasSubstr("moved_away.jpg, which does not exist"));
  EXPECT_THAT(scan.warnings[1], HasSubstr("folder_link.png: a symbolic link to "));
  EXPECT_THAT(scan.warnings[1], HasSubstr("which is not a file"));
  EXPECT_EQ(scan.uncaptioned, (std::vector<std::string>{"blank.jpg", "kept.jpg", "linked.jpg"}));

  const ImageFolderScan with_default = scan_image_folder(root.string(), {.captions = {.default_caption = "a photo"}});
  EXPECT_TRUE(with_default.uncaptioned.empty());
  const ImageFolderScan with_trigger = scan_image_folder(root.string(), {.captions = {.trigger_word = "ohwx"}});
  EXPECT_TRUE(with_trigger.uncaptioned.empty());
}

// ---- real photographs (Debian's python-matplotlib-data and xplanet-images) ----

TEST(ImageRealPhotos, DecodeLikePillowAndFitLikeKohya) {
  std::ifstream in(fixture("real_photos.json"));
  const nlohmann::json photos = nlohmann::json::parse(in);
  for (const auto& photo : photos)
    if (!fs::exists(photo["path"].get<std::string>()))
      GTEST_SKIP() << photo["path"].get<std::string>()
                   << " is missing (scripts/install_deps.sh --tests installs python-matplotlib-data and "
                      "xplanet-images)";

  // A folder of them, with captions, walked and bucketed at 512 as kohya would.
  const fs::path root = fresh_dir("photos");
  for (const auto& photo : photos) {
    const fs::path source = photo["path"].get<std::string>();
    fs::copy_file(source, root / source.filename());
    write_text(root / source.filename().replace_extension(".txt"), source.stem().string() + ", a photograph");
  }
  const ImageFolderScan scan = scan_image_folder(root.string(), {.verify = true});
  ASSERT_EQ(scan.images.size(), photos.size());
  EXPECT_EQ(scan.n_skipped, 0);

  const auto check_summary = [](const Image& image, const nlohmann::json& summary, double mean_tolerance,
                                int sample_tolerance) {
    ASSERT_EQ(image.height, summary["height"].get<int64_t>());
    ASSERT_EQ(image.width, summary["width"].get<int64_t>());
    for (int c = 0; c < 3; ++c) {
      double sum = 0;
      for (int64_t i = 0; i < image.height * image.width; ++i) sum += image.pixels[static_cast<size_t>(i * 3 + c)];
      EXPECT_NEAR(sum / static_cast<double>(image.height * image.width), summary["mean"][c].get<double>(),
                  mean_tolerance);
    }
    for (const auto& sample : summary["samples"]) {
      const int64_t y = sample[0], x = sample[1];
      for (int c = 0; c < 3; ++c) EXPECT_NEAR(image.at(y, x, c), sample[2 + c].get<int>(), sample_tolerance);
    }
  };

  for (const auto& photo : photos) {
    const std::string name = fs::path(photo["path"].get<std::string>()).filename().string();
    SCOPED_TRACE(name);
    const Image decoded = load_image((root / name).string());
    check_summary(decoded, photo["decoded"], 1e-9, 0);  // the same libjpeg-turbo algorithms as Pillow
    for (const auto& fit : photo["kohya"]) {
      SCOPED_TRACE("resolution " + std::to_string(fit["resolution"].get<int>()));
      const BucketPlanner planner({.resolution = fit["resolution"].get<int64_t>(), .divisor = 16});
      const BucketPlacement placement = planner.place(decoded.height, decoded.width);
      EXPECT_EQ(placement.bucket, (Bucket{fit["bucket"][0], fit["bucket"][1]}));
      EXPECT_EQ(placement.resized_height, fit["resized"][0].get<int64_t>());
      EXPECT_EQ(placement.resized_width, fit["resized"][1].get<int64_t>());
      EXPECT_EQ(placement.crop_top, fit["crop"][0].get<int64_t>());
      EXPECT_EQ(placement.crop_left, fit["crop"][1].get<int64_t>());
      // Shrinking: stb's area filter against cv2.INTER_AREA. Enlarging: Catmull-Rom against kohya's
      // Pillow LANCZOS (stb has no Lanczos): close on average, apart at sharp edges.
      const bool area = fit["filter"] == "area";
      // Measured: area means within 0.008 and samples within 1; Lanczos samples within 7.
      check_summary(fit_to_bucket(decoded, placement), fit["fitted"], area ? 0.02 : 0.05, area ? 1 : 8);
    }
  }
}

}  // namespace
}  // namespace wick
