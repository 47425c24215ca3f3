#include "models/clip/clip_text_normalize.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/ucnv.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>
#include <unicode/utf8.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

#include "runtime/error.h"

namespace wick::clip {
namespace {

bool is_ascii(std::u32string_view text) {
  return std::all_of(text.begin(), text.end(), [](char32_t c) { return c < 0x80; });
}

const icu::Normalizer2& nfc() {
  static const icu::Normalizer2* instance = [] {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(status);
    WICK_CHECK_KIND(Runtime, U_SUCCESS(status) && n, "ICU: no NFC normalizer (", u_errorName(status), ")");
    return n;
  }();
  return *instance;
}

std::u32string to_u32(const icu::UnicodeString& s) {
  std::u32string out;
  out.reserve(static_cast<size_t>(s.length()));
  for (int32_t i = 0; i < s.length();) {
    UChar32 c = s.char32At(i);
    out.push_back(static_cast<char32_t>(c));
    i += U16_LENGTH(c);
  }
  return out;
}

icu::UnicodeString to_unicode_string(std::u32string_view text) {
  return icu::UnicodeString::fromUTF32(reinterpret_cast<const UChar32*>(text.data()), static_cast<int32_t>(text.size()));
}

std::u32string nfc_normalize(std::u32string_view text) {
  if (is_ascii(text)) return std::u32string(text);
  UErrorCode status = U_ZERO_ERROR;
  icu::UnicodeString out = nfc().normalize(to_unicode_string(text), status);
  WICK_CHECK_KIND(Runtime, U_SUCCESS(status), "ICU: NFC normalization failed (", u_errorName(status), ")");
  return to_u32(out);
}

bool is_white_space(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE);
}

// Python's str.isspace(): bidirectional class WS, B or S, or general category Zs.
bool is_python_space(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  UCharDirection d = u_charDirection(static_cast<UChar32>(c));
  return d == U_WHITE_SPACE_NEUTRAL || d == U_BLOCK_SEPARATOR || d == U_SEGMENT_SEPARATOR ||
         u_charType(static_cast<UChar32>(c)) == U_SPACE_SEPARATOR;
}

// The full lowercase mapping of a string (ICU's root locale: SpecialCasing's unconditional mappings
// plus the Final_Sigma condition).
void append_lower(std::u32string_view text, std::u32string& out) {
  icu::UnicodeString s = to_unicode_string(text);
  s.toLower(icu::Locale::getRoot());
  std::u32string lowered = to_u32(s);
  out += lowered;
}

// Python's html.unescape numeric reference rules (the HTML standard's "numeric character reference
// end state"): 0x80-0x9F are read as windows-1252, NUL -> U+FFFD, CR kept, surrogates and values past
// U+10FFFF -> U+FFFD, other C0/C1 controls and non-characters removed.
void append_numeric_reference(uint64_t value, bool overflow, std::u32string& out) {
  if (overflow || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) {
    out.push_back(U'\uFFFD');
    return;
  }
  char32_t c = static_cast<char32_t>(value);
  if (c == 0) {
    out.push_back(U'\uFFFD');
    return;
  }
  if (c == 0x0D) {
    out.push_back(c);
    return;
  }
  if (c >= 0x80 && c <= 0x9F) {
    // windows-1252 from ICU's converter; its five unassigned bytes stay the C1 control (as Python).
    static const std::array<char32_t, 32> cp1252 = [] {
      std::array<char32_t, 32> table{};
      UErrorCode status = U_ZERO_ERROR;
      UConverter* converter = ucnv_open("windows-1252", &status);
      WICK_CHECK_KIND(Runtime, U_SUCCESS(status), "ICU: no windows-1252 converter (", u_errorName(status), ")");
      for (int b = 0; b < 32; ++b) {
        char byte = static_cast<char>(0x80 + b);
        UChar decoded[4];
        status = U_ZERO_ERROR;
        int32_t n = ucnv_toUChars(converter, decoded, 4, &byte, 1, &status);
        table[b] = (U_SUCCESS(status) && n == 1 && decoded[0] != 0xFFFD && decoded[0] != 0x1A)
                       ? decoded[0] : static_cast<char32_t>(0x80 + b);
      }
      ucnv_close(converter);
      return table;
    }();
    out.push_back(cp1252[c - 0x80]);
    return;
  }
  bool control = (c >= 0x01 && c <= 0x08) || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F;
  bool noncharacter = (c >= 0xFDD0 && c <= 0xFDEF) || (c & 0xFFFE) == 0xFFFE;
  if (!control && !noncharacter) out.push_back(c);
}

struct NamedReference {
  const char* name;
  uint32_t first, second;
};
constexpr NamedReference kNamedReferences[] = {
#include "models/clip/html_entities.inc"
};

const NamedReference* find_named_reference(std::string_view name) {
  auto it = std::lower_bound(std::begin(kNamedReferences), std::end(kNamedReferences), name,
                             [](const NamedReference& r, std::string_view n) { return std::string_view(r.name) < n; });
  if (it != std::end(kNamedReferences) && std::string_view(it->name) == name) return it;
  return nullptr;
}

bool is_ascii_digit(char32_t c) { return c >= '0' && c <= '9'; }
bool is_ascii_hex(char32_t c) { return is_ascii_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
int hex_value(char32_t c) { return is_ascii_digit(c) ? int(c - '0') : (c >= 'a' ? int(c - 'a') + 10 : int(c - 'A') + 10); }

// One reference at text[i] == '&' following Python's pattern
//   &(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)
// Appends the replacement and returns the index after the match, or returns i when nothing matches.
size_t unescape_one(std::u32string_view text, size_t i, std::u32string& out) {
  size_t n = text.size(), j = i + 1;
  if (j < n && text[j] == '#') {
    size_t k = j + 1;
    bool hex = k < n && (text[k] == 'x' || text[k] == 'X');
    if (hex) ++k;
    size_t digits_begin = k;
    uint64_t value = 0;
    bool overflow = false;
    while (k < n && (hex ? is_ascii_hex(text[k]) : is_ascii_digit(text[k]))) {
      value = value * (hex ? 16 : 10) + static_cast<uint64_t>(hex ? hex_value(text[k]) : int(text[k] - '0'));
      if (value > 0x10FFFF) overflow = true, value = 0x110000;
      ++k;
    }
    if (k == digits_begin) return i;  // '#' cannot start a name either
    if (k < n && text[k] == ';') ++k;
    append_numeric_reference(value, overflow, out);
    return k;
  }
  size_t k = j;
  while (k < n && k - j < 32 && text[k] != '\t' && text[k] != '\n' && text[k] != '\f' && text[k] != ' ' &&
         text[k] != '<' && text[k] != '&' && text[k] != '#' && text[k] != ';')
    ++k;
  if (k == j) return i;
  if (k < n && text[k] == ';') ++k;
  std::u32string_view name = text.substr(j, k - j);
  // Names are ASCII: a name with other characters is matched only by its ASCII prefix.
  std::string ascii;
  for (char32_t c : name) {
    if (c >= 0x80) break;
    ascii.push_back(static_cast<char>(c));
  }
  auto emit = [&](const NamedReference* r, size_t used) {
    out.push_back(r->first);
    if (r->second) out.push_back(r->second);
    out.append(name.substr(used));
    return k;
  };
  if (ascii.size() == name.size())
    if (const NamedReference* r = find_named_reference(ascii)) return emit(r, name.size());
  for (size_t x = std::min(ascii.size(), name.size() - 1); x >= 2; --x)
    if (const NamedReference* r = find_named_reference(std::string_view(ascii).substr(0, x))) return emit(r, x);
  out.push_back('&');
  out.append(name);
  return k;
}

bool fold_equal(char32_t a, char32_t b) {
  return a == b || u_foldCase(static_cast<UChar32>(a), U_FOLD_CASE_DEFAULT) ==
                       u_foldCase(static_cast<UChar32>(b), U_FOLD_CASE_DEFAULT);
}

// Length of `pattern` matched at text[i], or 0.
size_t match_literal(std::u32string_view text, size_t i, std::u32string_view pattern, bool ignore_case) {
  if (text.size() - i < pattern.size()) return 0;
  for (size_t k = 0; k < pattern.size(); ++k) {
    char32_t c = text[i + k];
    if (!(c == pattern[k] || (ignore_case && fold_equal(c, pattern[k])))) return 0;
  }
  return pattern.size();
}

}  // namespace

std::u32string decode_utf8(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
  int32_t length = static_cast<int32_t>(text.size());
  WICK_CHECK(text.size() < (size_t(1) << 31), "CLIP tokenizer: a caption of ", text.size(), " bytes is too long");
  for (int32_t i = 0; i < length;) {
    UChar32 c;
    U8_NEXT_OR_FFFD(bytes, i, length, c);
    out.push_back(static_cast<char32_t>(c));
  }
  return out;
}

std::string encode_utf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) {
    uint8_t buffer[4];
    int32_t n = 0;
    U8_APPEND_UNSAFE(buffer, n, static_cast<UChar32>(c));
    out.append(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
  }
  return out;
}

std::u32string normalize_like_transformers(std::u32string_view text) {
  std::u32string composed = nfc_normalize(text);
  std::u32string out;
  out.reserve(composed.size());
  for (size_t i = 0; i < composed.size();) {
    char32_t c = composed[i];
    if (is_white_space(c)) {
      out.push_back(' ');
      while (i < composed.size() && is_white_space(composed[i])) ++i;
      continue;
    }
    if (c < 0x80) {
      out.push_back(c >= 'A' && c <= 'Z' ? c + 32 : c);
    } else if (u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_CHANGES_WHEN_LOWERCASED)) {
      append_lower(std::u32string_view(&composed[i], 1), out);  // alone: no Final_Sigma context
    } else {
      out.push_back(c);
    }
    ++i;
  }
  return out;
}

std::u32string html_unescape(std::u32string_view text) {
  if (text.find(U'&') == std::u32string_view::npos) return std::u32string(text);
  std::u32string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text[i] == '&') {
      size_t next = unescape_one(text, i, out);
      if (next != i) {
        i = next;
        continue;
      }
    }
    out.push_back(text[i++]);
  }
  return out;
}

std::u32string clean_like_open_clip(std::u32string_view text) {
  // ftfy.fix_text's last step (its default normalization="NFC") is the one step of it done here.
  std::u32string unescaped = html_unescape(html_unescape(nfc_normalize(text)));
  std::u32string joined;
  joined.reserve(unescaped.size());
  for (size_t i = 0; i < unescaped.size();) {
    if (is_python_space(unescaped[i])) {
      ++i;
      continue;
    }
    if (!joined.empty()) joined.push_back(' ');
    while (i < unescaped.size() && !is_python_space(unescaped[i])) joined.push_back(unescaped[i++]);
  }
  if (is_ascii(joined)) {
    for (char32_t& c : joined)
      if (c >= 'A' && c <= 'Z') c += 32;
    return joined;
  }
  std::u32string out;
  append_lower(joined, out);
  return out;
}

CharClass char_class(char32_t c) {
  if (c < 0x80) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return CharClass::Letter;
    if (c >= '0' && c <= '9') return CharClass::Number;
    if (c == ' ' || (c >= 0x09 && c <= 0x0D)) return CharClass::Space;
    return CharClass::Other;
  }
  uint32_t mask = U_GET_GC_MASK(static_cast<UChar32>(c));
  if (mask & U_GC_L_MASK) return CharClass::Letter;
  if (mask & U_GC_N_MASK) return CharClass::Number;
  if (u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE)) return CharClass::Space;
  return CharClass::Other;
}

std::vector<std::u32string_view> split_pre_tokens(std::u32string_view text, const std::vector<std::u32string>& literals,
                                                  bool ignore_case) {
  static const std::u32string_view kContractions[] = {U"'s", U"'t", U"'re", U"'ve", U"'m", U"'ll", U"'d"};
  std::vector<std::u32string_view> pieces;
  size_t n = text.size();
  for (size_t i = 0; i < n;) {
    size_t length = 0;
    for (const std::u32string& literal : literals)
      if ((length = match_literal(text, i, literal, ignore_case))) break;
    if (!length && text[i] == '\'')
      for (std::u32string_view contraction : kContractions)
        if ((length = match_literal(text, i, contraction, ignore_case))) break;
    if (!length) {
      CharClass first = char_class(text[i]);
      if (first == CharClass::Space) {
        ++i;
        continue;
      }
      length = 1;
      if (first == CharClass::Letter) {
        while (i + length < n && char_class(text[i + length]) == CharClass::Letter) ++length;
      } else if (first == CharClass::Other) {
        while (i + length < n && char_class(text[i + length]) == CharClass::Other) ++length;
      }
    }
    pieces.push_back(text.substr(i, length));
    i += length;
  }
  return pieces;
}

}  // namespace wick::clip
