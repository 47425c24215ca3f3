#include "models/bpe/pre_tokenizer.h"

#include <unicode/normalizer2.h>
#include <unicode/regex.h>
#include <unicode/unistr.h>
#include <unicode/utext.h>

#include "models/clip/clip_text_normalize.h"
#include "runtime/error.h"

namespace wick::bpe {
namespace {

// Unicode's White_Space (Oniguruma's and Rust regex's \s) as ICU set members: \p{Z} misses the
// controls 9..D and U+0085.
constexpr std::string_view kWhiteSpaceMembers = R"(\t\n\x{0B}\f\r\x{85}\p{Z})";

// The pattern with \s and \S rewritten for ICU: outside a bracket expression as a set of their own,
// inside one as members (\S inside brackets is refused: neither pattern uses it).
std::string to_icu_pattern(std::string_view pattern, const std::string& source) {
  std::string out;
  int depth = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      char next = pattern[++i];
      if (next == 's' || next == 'S') {
        WICK_CHECK_KIND(Data, depth == 0 || next == 's', "BPE tokenizer: ", source,
                        ": the pre-token pattern uses \\S inside a character class, which wick cannot translate");
        if (depth > 0) out += kWhiteSpaceMembers;
        else out += std::string(next == 's' ? "[" : "[^") + std::string(kWhiteSpaceMembers) + "]";
      } else {
        out += c;
        out += next;
      }
      continue;
    }
    if (c == '[') ++depth;
    else if (c == ']' && depth > 0) --depth;
    out += c;
  }
  return out;
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

}  // namespace

PreTokenizer::PreTokenizer(std::string_view pattern, const std::string& source) : pattern_(pattern) {
  std::string icu_pattern = to_icu_pattern(pattern, source);
  UParseError where{};
  UErrorCode status = U_ZERO_ERROR;
  compiled_.reset(icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(icu_pattern), 0, where, status));
  WICK_CHECK_KIND(Data, U_SUCCESS(status) && compiled_, "BPE tokenizer: ", source, ": the pre-token pattern \"",
                  std::string(pattern), "\" does not compile (", u_errorName(status), " at offset ", where.offset,
                  ")");
}

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

std::vector<std::string_view> PreTokenizer::split(std::string_view text, bool keep_gaps) const {
  std::vector<std::string_view> pieces;
  if (text.empty()) return pieces;
  UErrorCode status = U_ZERO_ERROR;
  UText* utext = utext_openUTF8(nullptr, text.data(), static_cast<int64_t>(text.size()), &status);
  std::unique_ptr<icu::RegexMatcher> matcher(compiled_->matcher(status));
  WICK_CHECK_KIND(Runtime, U_SUCCESS(status) && matcher, "ICU: cannot start a regex match (", u_errorName(status), ")");
  matcher->reset(utext);
  size_t last = 0;
  while (matcher->find(status) && U_SUCCESS(status)) {
    // Native indexes of a UTF-8 UText are byte offsets.
    auto begin = static_cast<size_t>(matcher->start64(status)), end = static_cast<size_t>(matcher->end64(status));
    if (keep_gaps && begin > last) pieces.push_back(text.substr(last, begin - last));
    if (end > begin) pieces.push_back(text.substr(begin, end - begin));
    last = end;
  }
  UErrorCode final_status = status;
  utext_close(utext);
  WICK_CHECK_KIND(Runtime, U_SUCCESS(final_status), "ICU: regex match failed (", u_errorName(final_status), ")");
  if (keep_gaps && last < text.size()) pieces.push_back(text.substr(last));
  return pieces;
}

std::string well_formed_utf8(std::string_view text) {
  bool ascii = true;
  for (char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(text);
  return clip::encode_utf8(clip::decode_utf8(text));
}

std::string nfc_utf8(std::string_view text) {
  bool ascii = true;
  for (char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(text);
  UErrorCode status = U_ZERO_ERROR;
  icu::UnicodeString normalized = nfc().normalize(
      icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size()))), status);
  WICK_CHECK_KIND(Runtime, U_SUCCESS(status), "ICU: NFC normalization failed (", u_errorName(status), ")");
  std::string out;
  normalized.toUTF8String(out);
  return out;
}

}  // namespace wick::bpe
