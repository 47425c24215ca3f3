// UnigramModel (models/t5/unigram_model.h) on a hand-made vocabulary whose scores are small integers and halves, so
// that sums are exact and paths of equal score are true ties. The expected ids are those of the Rust tokenizers
// library (0.23.3) for the same vocabulary: Tokenizer(models.Unigram(vocab, unk_id=0, byte_fallback)) with
// pre_tokenizers.Sequence([WhitespaceSplit(), Metaspace("▁", prepend_scheme="always", split=True)]), the
// pipeline transformers' fast T5Tokenizer runs after its normaliser.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/t5/unigram_model.h"
#include "tests/error_of.h"

namespace wick::t5 {
namespace {

const std::vector<UnigramPiece>& pieces() {
  static const std::vector<UnigramPiece> list = {
      {"<unk>", 0},       {"</s>", 0},      {"\u2581", -1},  {"a", -1},       {"aa", -2},      {"\u2581a", -1},
      {"b", -3},          {"\u2581b", -2.5}, {"ab", -3.5},   {"<0x41>", -5},  {"<0xC3>", -5},  {"<0xA9>", -5},
  };
  return list;
}

TEST(UnigramModel, SegmentsAsTokenizers) {
  struct Case {
    const char* text;
    std::vector<int32_t> ids, ids_byte_fallback;
  };
  const std::vector<Case> cases = {
      // Ties: "▁a a a" = "▁a aa" = -3 and "▁a a aa" = "▁a aa a" = -4; the last piece starting first wins.
      {"aaa", {5, 4}, {5, 4}},
      {"aaaa", {5, 3, 4}, {5, 3, 4}},
      {"ab ba", {5, 6, 7, 3}, {5, 6, 7, 3}},  // words are segmented apart: "▁b" starts the second
      {"aAa", {5, 0, 3}, {5, 9, 3}},          // unknown "A": <unk>, or its byte piece
      {"a\u00e9a", {5, 0, 3}, {5, 10, 11, 3}},  // "é" is two bytes
      {"aAAa", {5, 0, 3}, {5, 9, 9, 3}},      // adjacent unknown characters fuse into one <unk>
      {"xyz", {2, 0}, {2, 0}},                // no <0x78> piece: <unk> even with byte fallback
      {"a\u2581\u2581b", {5, 2, 7}, {5, 2, 7}},  // every "▁" starts a word; a lone "▁" is one
      {"a</s>b", {5, 1, 6}, {5, 1, 6}},       // control pieces match like any other
      {"a\u0085b", {5, 7}, {5, 7}},           // U+0085 is White_Space: a word boundary
      {"", {}, {}},
      {" \t\n", {}, {}},
  };
  const UnigramModel plain(pieces(), 0), bytes(pieces(), 0, /*byte_fallback=*/true);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    EXPECT_EQ(plain.encode(c.text), c.ids);
    EXPECT_EQ(bytes.encode(c.text), c.ids_byte_fallback);
  }
  EXPECT_EQ(plain.size(), 12);
}

TEST(UnigramModel, RejectsAnUnknownIdOutsideThePieces) {
  EXPECT_NE(wick::testing::error_of([] { UnigramModel(pieces(), 12); }).find("unknown id 12 is not one of its 12"),
            std::string::npos);
}

}  // namespace
}  // namespace wick::t5
