// Captions from sidecar text files, with ai-toolkit's trigger-word rule (docs/dataset.md "Captions").
//
//   CaptionOptions options{.trigger_word = "ohwx", .default_caption = "a photo of [trigger]"};
//   Caption c = load_caption("photos/cat_01.jpg", options);   // reads photos/cat_01.txt (else .caption)
//   c.texts[0];                                                // "ohwx a cat on a sofa"
//   std::string t = apply_trigger("a photo of [name]", "ohwx", true);   // "a photo of ohwx"
//
// Files are UTF-8 (a byte-order mark is skipped; other encodings are refused), whitespace is trimmed and
// a missing or empty file gives the default caption.
#pragma once

#include <string>
#include <vector>

namespace wick {

// What a caption file with several non-empty lines becomes.
enum class CaptionLines {
  Join,       // one caption: the trimmed lines joined by one space (tokenizers see the same words as in
              // ai-toolkit, which keeps the file whole)
  FirstLine,  // the first non-empty line only (kohya without --enable_wildcard)
  Split,      // one caption per line (SimpleTuner's textfile strategy)
};

// "join", "first-line", "split"; parse_caption_lines throws WickError (Config) listing them.
const char* caption_lines_name(CaptionLines lines);
CaptionLines parse_caption_lines(const std::string& name);

struct CaptionOptions {
  std::string extension = ".txt";                    // the sidecar: <image path without extension><extension>
  std::vector<std::string> fallback_extensions = {".caption"};  // tried in order when it is missing (kohya's default)
  std::string default_caption;                       // when no sidecar exists or it holds only whitespace
  std::string trigger_word;                          // replaces [trigger] and [name]; "" removes them
  bool prepend_trigger = true;                       // put "<trigger> " in front when the caption lacks it
  CaptionLines lines = CaptionLines::Join;
};

struct Caption {
  std::vector<std::string> texts;  // one caption, or one per line with CaptionLines::Split
  std::string source;              // the sidecar read, or "" when the default caption was used
};

// The sidecar's text, UTF-8 checked, BOM removed, not trimmed. WickError (Data) naming the file when it
// cannot be read or is not UTF-8.
std::string read_caption_file(const std::string& path);
// The caption(s) in `text` by `lines`: each line trimmed (ASCII whitespace, CR of CRLF included), empty
// lines dropped. An all-blank text gives no captions.
std::vector<std::string> split_caption_lines(const std::string& text, CaptionLines lines);
// ai-toolkit's inject_trigger_into_prompt: every "[trigger]" and "[name]" becomes `trigger`; then, when
// `trigger` is not empty, the caption does not contain it and `prepend`, "<trigger> " goes in front.
// The result is trimmed.
std::string apply_trigger(const std::string& caption, const std::string& trigger, bool prepend);
// The captions of the image at `image_path` (sidecar or default, lines, trigger).
Caption load_caption(const std::string& image_path, const CaptionOptions& options = {});

}  // namespace wick
