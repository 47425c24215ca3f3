// UTF-8 checks for text that came from files: configs must be UTF-8, and messages that quote bytes of a damaged file
// (a safetensors header, a manifest) must stay printable UTF-8 on a terminal or in a log.
//
//   size_t at = invalid_utf8_at(text);          // npos when every sequence is well-formed
//   std::fprintf(stderr, "%s\n", printable_utf8(error.what()).c_str());   // "\xff" for a stray byte
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace wick {

// Offset of the first byte of `text` that does not begin a well-formed UTF-8 sequence (no overlong forms, surrogates
// or code points past U+10FFFF), or npos.
size_t invalid_utf8_at(std::string_view text);

// `text` with every byte that is not part of a well-formed UTF-8 sequence, and every ASCII control character but
// tab and newline, written as \xNN (a backslash stays a backslash): valid UTF-8, one line per line of the input.
std::string printable_utf8(std::string_view text);

}  // namespace wick
