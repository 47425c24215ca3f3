// The regex pre-split of the byte-level BPE tokenizers (Qwen's and Mistral Tekken's), with ICU's regex
// engine, and the text steps around it: UTF-8 repair and NFC.
//
//   PreTokenizer split(kQwenPattern, "vocab.json");          // throws WickError (Data) for a bad pattern
//   for (std::string_view piece : split.split("don't stop")) ...  // "don", "'t", " stop"
//   std::string text = nfc_utf8(well_formed_utf8(caption));
//
// The patterns come from tokenizers (Oniguruma) and tiktoken (fancy-regex), whose \s is Unicode's
// White_Space; ICU's \s is [\t\n\f\r\p{Z}], so the pattern is rewritten with White_Space spelled out.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <unicode/uversion.h>

U_NAMESPACE_BEGIN
class RegexPattern;
U_NAMESPACE_END

namespace wick::bpe {

// Qwen2's pre-token pattern (transformers' Qwen2Tokenizer PRETOKENIZE_REGEX), used when a folder has
// vocab.json + merges.txt and no tokenizer.json. \p{N} matches one digit; the contractions ignore case.
inline constexpr std::string_view kQwenPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

class PreTokenizer {
 public:
  // `pattern` in Oniguruma / Rust-regex syntax; `source` names the file it came from (for errors).
  PreTokenizer(std::string_view pattern, const std::string& source);
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  // The pieces of well-formed UTF-8 `text`, views into it, in order. keep_gaps: text between matches
  // is a piece too (tokenizers' Split "isolated"); otherwise it is dropped (tiktoken's find_iter). The
  // Qwen and Tekken patterns match every character, so both give the same pieces there.
  std::vector<std::string_view> split(std::string_view text, bool keep_gaps) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  std::unique_ptr<icu::RegexPattern> compiled_;
};

// Ill-formed UTF-8 sequences replaced by U+FFFD (as Python's decode(errors="replace")); a well-formed
// string comes back unchanged.
std::string well_formed_utf8(std::string_view text);
// Unicode NFC of well-formed UTF-8 (tokenizers' NFC normalizer).
std::string nfc_utf8(std::string_view text);

}  // namespace wick::bpe
