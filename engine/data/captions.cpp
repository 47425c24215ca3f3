#include "engine/data/captions.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include "runtime/error.h"

namespace wick {
namespace {

// Caption files are a few hundred bytes; anything this large is not a caption.
constexpr uintmax_t max_caption_file_bytes = 1 << 20;

struct LinesName {
  CaptionLines lines;
  const char* name;
};
constexpr LinesName lines_names[] = {
    {CaptionLines::Join, "join"},
    {CaptionLines::FirstLine, "first-line"},
    {CaptionLines::Split, "split"},
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::string trim(const std::string& text) {
  size_t begin = 0, end = text.size();
  while (begin < end && is_space(text[begin])) ++begin;
  while (end > begin && is_space(text[end - 1])) --end;
  return text.substr(begin, end - begin);
}

// The byte offset of the first invalid UTF-8 sequence (overlong forms, surrogates and code points past
// U+10FFFF are invalid), or npos.
size_t first_invalid_utf8(const std::string& text) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char lead = bytes[i];
    int length = 0;
    uint32_t code = 0, minimum = 0;
    if (lead < 0x80) {
      ++i;
      continue;
    } else if ((lead & 0xE0) == 0xC0) {
      length = 2, code = lead & 0x1F, minimum = 0x80;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3, code = lead & 0x0F, minimum = 0x800;
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4, code = lead & 0x07, minimum = 0x10000;
    } else {
      return i;
    }
    if (i + static_cast<size_t>(length) > n) return i;
    for (int k = 1; k < length; ++k) {
      if ((bytes[i + k] & 0xC0) != 0x80) return i;
      code = (code << 6) | (bytes[i + k] & 0x3F);
    }
    if (code < minimum || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return i;
    i += static_cast<size_t>(length);
  }
  return std::string::npos;
}

std::string with_dot(const std::string& extension) {
  return extension.empty() || extension[0] == '.' ? extension : "." + extension;
}

}  // namespace

const char* caption_lines_name(CaptionLines lines) {
  for (const auto& entry : lines_names)
    if (entry.lines == lines) return entry.name;
  return "unknown";
}

CaptionLines parse_caption_lines(const std::string& name) {
  std::string valid;
  for (const auto& entry : lines_names) {
    if (name == entry.name) return entry.lines;
    valid += valid.empty() ? "" : ", ";
    valid += entry.name;
  }
  WICK_FAIL(Config, "unknown caption_lines '", name, "' (valid: ", valid, ")");
}

std::string read_caption_file(const std::string& path) {
  std::error_code error;
  const uintmax_t size = std::filesystem::file_size(path, error);
  WICK_CHECK_KIND(Data, !error, path, ": cannot read the caption file (", error.message(), ")");
  WICK_CHECK_KIND(Data, size <= max_caption_file_bytes, path, ": a ", size, "-byte caption file (over ",
                  max_caption_file_bytes, " bytes: not a caption)");
  std::ifstream in(path, std::ios::binary);
  WICK_CHECK_KIND(Data, in.good(), path, ": cannot open the caption file");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  WICK_CHECK_KIND(Data, !in.bad(), path, ": read error");
  if (text.size() >= 2 && ((text[0] == '\xFF' && text[1] == '\xFE') || (text[0] == '\xFE' && text[1] == '\xFF')))
    WICK_FAIL(Data, path, ": the caption file is UTF-16; save it as UTF-8");
  if (text.size() >= 3 && text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.erase(0, 3);
  const size_t bad = first_invalid_utf8(text);
  WICK_CHECK_KIND(Data, bad == std::string::npos, path, ": the caption file is not UTF-8 (invalid byte 0x", std::hex,
                  static_cast<int>(static_cast<unsigned char>(text[bad == std::string::npos ? 0 : bad])), std::dec,
                  " at offset ", bad, "); save it as UTF-8");
  return text;
}

std::vector<std::string> split_caption_lines(const std::string& text, CaptionLines lines) {
  std::vector<std::string> kept;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = trim(text.substr(start, end - start));
    if (!line.empty()) kept.push_back(std::move(line));
    start = end + 1;
  }
  if (kept.empty()) return {};
  switch (lines) {
    case CaptionLines::Split: return kept;
    case CaptionLines::FirstLine: return {kept.front()};
    case CaptionLines::Join: break;
  }
  std::string joined = kept.front();
  for (size_t i = 1; i < kept.size(); ++i) joined += " " + kept[i];
  return {joined};
}

std::string apply_trigger(const std::string& caption, const std::string& trigger, bool prepend) {
  std::string out = caption;
  for (const std::string placeholder : {"[trigger]", "[name]"}) {
    size_t at = 0;
    while ((at = out.find(placeholder, at)) != std::string::npos) {
      out.replace(at, placeholder.size(), trigger);
      at += trigger.size();
    }
  }
  if (prepend && !trim(trigger).empty() && out.find(trigger) == std::string::npos) out = trigger + " " + out;
  return trim(out);
}

Caption load_caption(const std::string& image_path, const CaptionOptions& options) {
  Caption caption;
  std::vector<std::string> extensions = {with_dot(options.extension)};
  for (const auto& extension : options.fallback_extensions) extensions.push_back(with_dot(extension));
  std::vector<std::string> texts;
  for (const auto& extension : extensions) {
    if (extension.empty()) continue;
    const std::string path = std::filesystem::path(image_path).replace_extension(extension).string();
    std::error_code error;
    if (!std::filesystem::is_regular_file(path, error)) continue;
    caption.source = path;
    texts = split_caption_lines(read_caption_file(path), options.lines);
    break;
  }
  if (texts.empty()) {
    caption.source.clear();
    texts = split_caption_lines(options.default_caption, options.lines);
  }
  if (texts.empty()) texts = {""};
  for (auto& text : texts) caption.texts.push_back(apply_trigger(text, options.trigger_word, options.prepend_trigger));
  return caption;
}

}  // namespace wick
