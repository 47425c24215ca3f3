// Caption sidecars: UTF-8 and BOM, trimming, multi-line files, defaults and ai-toolkit's trigger rule.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "engine/data/captions.h"
#include "runtime/error.h"

namespace wick {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using Texts = std::vector<std::string>;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("wick_captions_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string write(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
  return path.string();
}

std::string data_error_of(const std::string& path) {
  try {
    read_caption_file(path);
  } catch (const WickError& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Data);
    return error.what();
  }
  return "(no error)";
}

struct LinesCase {
  const char* text;
  Texts join, first_line, split;
};

const LinesCase lines_cases[] = {
    {"a cat", {"a cat"}, {"a cat"}, {"a cat"}},
    {"  a cat \t\r\n", {"a cat"}, {"a cat"}, {"a cat"}},
    {"a cat,\r\n  on a sofa\r\n\r\n  \nred", {"a cat, on a sofa red"}, {"a cat,"}, {"a cat,", "on a sofa", "red"}},
    {"\n\n first \n", {"first"}, {"first"}, {"first"}},
    {" \r\n\t ", {}, {}, {}},
    {"", {}, {}, {}},
};

TEST(Captions, LinesJoinFirstOrSplit) {
  for (const LinesCase& c : lines_cases) {
    SCOPED_TRACE(c.text);
    EXPECT_EQ(split_caption_lines(c.text, CaptionLines::Join), c.join);
    EXPECT_EQ(split_caption_lines(c.text, CaptionLines::FirstLine), c.first_line);
    EXPECT_EQ(split_caption_lines(c.text, CaptionLines::Split), c.split);
  }
  EXPECT_EQ(parse_caption_lines("first-line"), CaptionLines::FirstLine);
  try {
    parse_caption_lines("lines");
    FAIL() << "no error";
  } catch (const WickError& error) {
    EXPECT_EQ(error.kind(), ErrorKind::Config);
    EXPECT_THAT(error.what(), HasSubstr("valid: join, first-line, split"));
  }
}

struct TriggerCase {
  const char* caption;
  const char* trigger;
  bool prepend;
  const char* out;
};

// ai-toolkit's inject_trigger_into_prompt (toolkit/prompt_utils.py).
const TriggerCase trigger_cases[] = {
    {"a photo of [trigger] on a beach", "ohwx", true, "a photo of ohwx on a beach"},
    {"[name] and [trigger]", "sks dog", true, "sks dog and sks dog"},
    {"a photo of a dog", "ohwx", true, "ohwx a photo of a dog"},
    {"a photo of a dog", "ohwx", false, "a photo of a dog"},
    {"ohwx, smiling", "ohwx", true, "ohwx, smiling"},           // already there: not added again
    {"[trigger] smiling", "", true, "smiling"},                 // no trigger: placeholders removed
    {"", "ohwx", true, "ohwx"},
    {"", "", true, ""},
    {"a [TRIGGER]", "ohwx", false, "a [TRIGGER]"},              // placeholders are case-sensitive
};

TEST(Captions, TriggerWordRule) {
  for (const TriggerCase& c : trigger_cases)
    EXPECT_EQ(apply_trigger(c.caption, c.trigger, c.prepend), c.out) << c.caption << " / " << c.trigger;
}

TEST(Captions, Utf8BomAndBadEncodings) {
  const fs::path dir = fresh_dir("encodings");
  EXPECT_EQ(read_caption_file(write(dir / "bom.txt", "\xEF\xBB\xBF" "café ☕ 𝄞\n")), "café ☕ 𝄞\n");
  EXPECT_EQ(read_caption_file(write(dir / "empty.txt", "")), "");
  const std::pair<const char*, const char*> bad[] = {
      {"latin1.txt", "caf\xE9"},        // Latin-1 é
      {"overlong.txt", "a\xC0\x80"},    // overlong NUL
      {"surrogate.txt", "\xED\xA0\x80"},
      {"cut.txt", "ab\xE2\x98"},        // a 3-byte sequence cut short
      {"beyond.txt", "\xF4\x90\x80\x80"},  // past U+10FFFF
  };
  for (const auto& [name, bytes] : bad)
    EXPECT_THAT(data_error_of(write(dir / name, bytes)), HasSubstr("is not UTF-8")) << name;
  EXPECT_THAT(data_error_of(write(dir / "latin1b.txt", "caf\xE9")), HasSubstr("offset 3"));
  EXPECT_THAT(data_error_of(write(dir / "utf16.txt", std::string("\xFF\xFE" "a\0", 4))), HasSubstr("UTF-16"));
  EXPECT_THAT(data_error_of((dir / "absent.txt").string()), HasSubstr("cannot read the caption file"));
}

TEST(Captions, SidecarFallbackAndDefault) {
  const fs::path dir = fresh_dir("sidecars");
  write(dir / "both.txt", "from txt");
  write(dir / "both.caption", "from caption");
  write(dir / "kohya.caption", "from caption");
  write(dir / "blank.txt", "  \n ");
  write(dir / "lines.txt", "one\ntwo [trigger]\n");
  const auto load = [&](const char* image, const CaptionOptions& options) {
    return load_caption((dir / image).string(), options);
  };
  const CaptionOptions plain;
  EXPECT_EQ(load("both.jpg", plain).texts, Texts{"from txt"});
  EXPECT_EQ(load("both.jpg", plain).source, (dir / "both.txt").string());
  EXPECT_EQ(load("kohya.png", plain).texts, Texts{"from caption"});
  EXPECT_EQ(load("both.webp", {.extension = "caption"}).texts, Texts{"from caption"});  // the dot is optional
  EXPECT_EQ(load("kohya.png", {.fallback_extensions = {}}).texts, Texts{""});
  const Caption missing = load("missing.jpg", {.default_caption = "a photo of [trigger]", .trigger_word = "ohwx"});
  EXPECT_EQ(missing.texts, Texts{"a photo of ohwx"});
  EXPECT_EQ(missing.source, "");
  EXPECT_EQ(load("blank.jpg", {.default_caption = "a photo"}).texts, Texts{"a photo"});
  EXPECT_EQ(load("blank.jpg", {.default_caption = "a photo"}).source, "");
  EXPECT_EQ(load("lines.jpg", {.trigger_word = "ohwx", .lines = CaptionLines::Split}).texts,
            (Texts{"ohwx one", "two ohwx"}));
  EXPECT_EQ(load("lines.jpg", {.trigger_word = "ohwx"}).texts, Texts{"one two ohwx"});
  EXPECT_EQ(load("lines.jpg", {.trigger_word = "ohwx", .lines = CaptionLines::FirstLine}).texts, Texts{"ohwx one"});
}

}  // namespace
}  // namespace wick
