#include "runtime/utf8.h"

#include <cstdint>
#include <cstdio>

namespace wick {
namespace {

// Length of the well-formed UTF-8 sequence at text[i] (1-4), or 0 when it is not one.
size_t sequence_at(std::string_view text, size_t i) {
  const auto c = static_cast<unsigned char>(text[i]);
  if (c < 0x80) return 1;
  size_t n = 0;
  uint32_t code = 0;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 1, code = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 2, code = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 3, code = c & 0x07;
  } else {
    return 0;
  }
  if (i + n >= text.size()) return 0;
  for (size_t k = 1; k <= n; ++k) {
    const auto next = static_cast<unsigned char>(text[i + k]);
    if ((next & 0xC0) != 0x80) return 0;
    code = (code << 6) | (next & 0x3F);
  }
  const bool overlong_or_surrogate = n == 2 && (code < 0x800 || (code >= 0xD800 && code <= 0xDFFF));
  if (overlong_or_surrogate || (n == 3 && (code < 0x10000 || code > 0x10FFFF))) return 0;
  return n + 1;
}

}  // namespace

size_t invalid_utf8_at(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = sequence_at(text, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

std::string printable_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = sequence_at(text, i);
    const auto c = static_cast<unsigned char>(text[i]);
    if (n == 0 || (n == 1 && ((c < 0x20 && c != '\t' && c != '\n') || c == 0x7F))) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
      out += escaped;
      ++i;
      continue;
    }
    out.append(text.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace wick
