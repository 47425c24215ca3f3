// The text side of the CLIP tokenizer: UTF-8 in and out, the two references' cleaning, and the
// pre-token split. Unicode data (categories, White_Space, case mappings, NFC) comes from ICU.
//
//   std::u32string text = decode_utf8(caption);               // ill-formed bytes -> U+FFFD
//   std::u32string clean = normalize_like_transformers(text);  // NFC, \s+ -> ' ', lowercase
//   for (std::u32string_view piece : split_pre_tokens(clean, {}, false)) bpe(encode_utf8(piece));
//
// The tokenizer (clip_tokenizer.h) is the public entry point; these are separate so that tests can
// sweep every code point through them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace wick::clip {

// UTF-8 -> code points. Each maximal ill-formed subsequence becomes one U+FFFD (Unicode's
// recommended practice; what Python's bytes.decode("utf-8", "replace") does).
std::u32string decode_utf8(std::string_view text);
std::string encode_utf8(std::u32string_view text);

// transformers' CLIPTokenizer normalizer (tokenizers' NFC, Replace(\s+, " "), Lowercase): NFC, then
// every run of White_Space characters -> one space, then each code point's full lowercase mapping
// without context (so U+0130 -> "i\u0307" and a final capital sigma -> U+03C3, never U+03C2).
// Leading and trailing spaces stay; the pre-token split drops them.
std::u32string normalize_like_transformers(std::u32string_view text);

// open_clip's cleaning with only ftfy's NFC step of ftfy.fix_text (see docs/text_encoders.md): NFC,
// html.unescape twice, Python's
// " ".join(text.split()) (str.isspace: bidi class WS, B or S, or category Zs), then Python's
// str.lower() (full lowercase with the Final_Sigma rule).
std::u32string clean_like_open_clip(std::u32string_view text);

// Python's html.unescape: numeric references (&#NNN; &#xHH;, the semicolon optional) with the HTML
// standard's replacements for 0x80-0x9F, NUL, surrogates and non-characters, and the HTML standard's
// 2,231 named references (with and without the semicolon, longest prefix for the legacy names).
std::u32string html_unescape(std::u32string_view text);

// The CLIP pre-token pattern, applied as a left-to-right scan of leftmost-first alternatives:
//   [literals...] | 's | 't | 're | 've | 'm | 'll | 'd | \p{L}+ | \p{N} | [^\s\p{L}\p{N}]+
// White_Space between matches is dropped. `literals` are tried first at each position (open_clip's
// "<start_of_text>" / "<end_of_text>", transformers' "<|startoftext|>" / "<|endoftext|>"). ignore_case
// compares literals and contractions by simple case folding (Python regex's IGNORECASE: "'ſ" matches
// 's); transformers' pattern is case-sensitive (its text is lowercase already).
std::vector<std::u32string_view> split_pre_tokens(std::u32string_view text, const std::vector<std::u32string>& literals,
                                                  bool ignore_case);

// The pre-token pattern's character classes, from ICU: \p{L}, \p{N}, \s (White_Space), the rest.
enum class CharClass { Letter, Number, Space, Other };
CharClass char_class(char32_t c);

}  // namespace wick::clip
