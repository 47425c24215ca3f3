// The T5 tokenizer (models/t5/t5_tokenizer.h, libsentencepiece) against python sentencepiece 0.2.3 on the
// fixture corpus of tests/reference/make_t5_fixtures.py (tests/data/t5: a tiny trained T5-layout Unigram model,
// 1000 pieces, and 2,278 captions: generated ones, adversarial ones with control characters, NFKC forms,
// combining marks, emoji, typed special tokens, the empty string, and 40 long ones).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/t5/t5_tokenizer.h"
#include "tests/error_of.h"
#include "tests/test_data.h"

namespace wick::t5 {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using wick::testing::error_of;

std::string data_path(const std::string& name) { return wick::testing::test_data_dir() + "/t5/" + name; }

struct Corpus {
  std::vector<std::string> captions;
  std::vector<std::vector<int32_t>> spm_ids;  // python sentencepiece, no EOS
};

const Corpus& corpus() {
  static const Corpus loaded = [] {
    std::ifstream in(data_path("tokenizer_cases.json"));
    nlohmann::json json = nlohmann::json::parse(in);
    Corpus c;
    c.captions = json.at("captions").get<std::vector<std::string>>();
    c.spm_ids = json.at("spm_ids").get<std::vector<std::vector<int32_t>>>();
    return c;
  }();
  return loaded;
}

fs::path scratch(const std::string& name) {
  fs::path dir = fs::path(::testing::TempDir()) / ("wick_t5_tokenizer_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(T5Tokenizer, PiecesEqualSentencePieceOnEveryCaption) {
  const Corpus& c = corpus();
  ASSERT_EQ(c.captions.size(), c.spm_ids.size());
  ASSERT_GE(c.captions.size(), 2000u);
  T5Tokenizer tokenizer = T5Tokenizer::open(data_path("spiece.model"));
  size_t n_different = 0, n_unk = 0, n_empty = 0;
  for (size_t i = 0; i < c.captions.size(); ++i) {
    std::vector<int32_t> got = tokenizer.pieces(c.captions[i]);
    n_unk += std::count(got.begin(), got.end(), T5Tokenizer::kUnkId) > 0;
    n_empty += got.empty();
    if (got != c.spm_ids[i] && ++n_different <= 5)
      ADD_FAILURE() << "caption " << i << " (" << nlohmann::json(c.captions[i]).dump() << "): "
                    << ::testing::PrintToString(got) << " vs sentencepiece " << ::testing::PrintToString(c.spm_ids[i]);
  }
  EXPECT_EQ(n_different, 0u) << "of " << c.captions.size() << " captions";
  // The corpus does reach the cases it is meant to: unknown characters and captions with no piece at all.
  EXPECT_GE(n_unk, 50u);
  EXPECT_GE(n_empty, 5u);
}

TEST(T5Tokenizer, EosTruncationAndPaddingAt256And77) {
  const Corpus& c = corpus();
  T5Tokenizer tokenizer = T5Tokenizer::open(data_path("spiece.model"));
  for (int64_t length : {256, 77}) {
    SCOPED_TRACE(length);
    size_t n_truncated = 0, n_different = 0;
    for (size_t i = 0; i < c.captions.size(); ++i) {
      // Expected, written out: the first length - 1 pieces, EOS 1, then PAD 0; mask 1 up to and with the EOS.
      const std::vector<int32_t>& pieces = c.spm_ids[i];
      const size_t kept = std::min(pieces.size(), static_cast<size_t>(length - 1));
      n_truncated += kept < pieces.size();
      std::vector<int64_t> ids(pieces.begin(), pieces.begin() + static_cast<std::ptrdiff_t>(kept));
      ids.push_back(1);
      std::vector<int64_t> mask(ids.size(), 1);
      ids.resize(static_cast<size_t>(length), 0);
      mask.resize(static_cast<size_t>(length), 0);
      T5Tokens got = tokenizer.encode(c.captions[i], length);
      if ((got.ids != ids || got.mask != mask) && ++n_different <= 3) ADD_FAILURE() << "caption " << i;
    }
    EXPECT_EQ(n_different, 0u);
    EXPECT_GE(n_truncated, 20u);  // long captions are cut at both lengths
  }
}

TEST(T5Tokenizer, LayoutEdgeCases) {
  struct Case {
    std::vector<int32_t> pieces;
    int64_t max_length;
    std::vector<int64_t> ids, mask;
  };
  const std::vector<Case> cases = {
      {{}, 1, {1}, {1}},                            // only EOS
      {{5, 6, 7}, 1, {1}, {1}},                     // everything truncated but EOS
      {{}, 4, {1, 0, 0, 0}, {1, 0, 0, 0}},          // empty text: EOS then padding
      {{5, 6, 7}, 4, {5, 6, 7, 1}, {1, 1, 1, 1}},   // exactly fits
      {{5, 6, 7, 8}, 4, {5, 6, 7, 1}, {1, 1, 1, 1}},  // one piece too many: the last piece goes, EOS stays
      {{5, 6}, 5, {5, 6, 1, 0, 0}, {1, 1, 1, 0, 0}},
  };
  for (const Case& c : cases) {
    T5Tokens got = t5_layout(c.pieces, c.max_length);
    EXPECT_EQ(got.ids, c.ids);
    EXPECT_EQ(got.mask, c.mask);
  }
  EXPECT_THAT(error_of([] { t5_layout({5}, 0); }), HasSubstr("max_length must be at least 1"));
}

TEST(T5Tokenizer, BatchTensorsAndSpecialIds) {
  T5Tokenizer tokenizer = T5Tokenizer::open(data_path("spiece.model"));
  const std::vector<std::string> texts = {corpus().captions[0], "", corpus().captions[1]};
  T5Batch batch = tokenizer.encode_batch(texts, 77);
  EXPECT_EQ(batch.ids.shape(), (Shape{3, 77}));
  EXPECT_EQ(batch.mask.shape(), (Shape{3, 77}));
  EXPECT_EQ(batch.ids.dtype(), DType::I64);
  EXPECT_EQ(batch.mask.dtype(), DType::I64);
  const std::vector<int64_t> ids = batch.ids.to_vector<int64_t>(), mask = batch.mask.to_vector<int64_t>();
  for (size_t b = 0; b < texts.size(); ++b) {
    T5Tokens one = tokenizer.encode(texts[b], 77);
    EXPECT_EQ(std::vector<int64_t>(ids.begin() + 77 * b, ids.begin() + 77 * (b + 1)), one.ids);
    EXPECT_EQ(std::vector<int64_t>(mask.begin() + 77 * b, mask.begin() + 77 * (b + 1)), one.mask);
  }
  EXPECT_EQ(ids[77], 1);  // the empty text: EOS first
  EXPECT_EQ(mask[78], 0);
  EXPECT_THAT(error_of([&] { tokenizer.encode_batch({}, 77); }), HasSubstr("at least one text"));

  EXPECT_EQ(tokenizer.vocab_size(), 1000);
  EXPECT_EQ(tokenizer.piece(0), "<pad>");
  EXPECT_EQ(tokenizer.piece(1), "</s>");
  EXPECT_EQ(tokenizer.piece(2), "<unk>");
  // transformers' sentinels: <extra_id_0> is the last of the 100 ids after the pieces.
  EXPECT_EQ(tokenizer.extra_id(0), 1099);
  EXPECT_EQ(tokenizer.extra_id(99), 1000);
  EXPECT_THAT(error_of([&] { tokenizer.extra_id(100); }), HasSubstr("<extra_id_100> does not exist"));
  EXPECT_THAT(error_of([&] { tokenizer.piece(1000); }), HasSubstr("id 1000 is not a piece"));
  // Invalid UTF-8 (a Latin-1 caption file): each bad byte is one unknown character, as python sentencepiece 0.2.3
  // gives for the same bytes (sp.encode(b"caf\xe9 cat") = [35, 993, 998, 986, 2, 189]).
  EXPECT_EQ(tokenizer.pieces("caf\xe9 cat"), (std::vector<int32_t>{35, 993, 998, 986, 2, 189}));
  // Typed special tokens are text to SentencePiece: "</s>" is several ordinary pieces, never id 1.
  std::vector<int32_t> typed = tokenizer.pieces("a cat </s>");
  EXPECT_GT(typed.size(), 2u);
  EXPECT_EQ(std::count(typed.begin(), typed.end(), 1), 0);
}

TEST(T5Tokenizer, FindsTheModelInFoldersAndPipelines) {
  const fs::path model = data_path("spiece.model");
  const std::vector<int32_t> expected = T5Tokenizer::open(model.string()).pieces("a photo of a cat");
  struct Case {
    const char* name;
    std::vector<std::string> copies;  // where spiece.model is copied, relative to the folder
    std::string found;                // the file open() should pick, relative to the folder
  };
  const std::vector<Case> cases = {
      {"plain_folder", {"spiece.model"}, "spiece.model"},
      {"flux_pipeline", {"tokenizer_2/spiece.model"}, "tokenizer_2/spiece.model"},
      {"sd3_pipeline", {"tokenizer_3/spiece.model", "tokenizer_2/spiece.model"}, "tokenizer_3/spiece.model"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const fs::path dir = scratch(c.name);
    for (const std::string& copy : c.copies) {
      fs::create_directories((dir / copy).parent_path());
      fs::copy_file(model, dir / copy);
    }
    T5Tokenizer tokenizer = T5Tokenizer::open(dir.string());
    EXPECT_EQ(tokenizer.path(), (dir / c.found).string());
    EXPECT_EQ(tokenizer.pieces("a photo of a cat"), expected);
  }
}

TEST(T5Tokenizer, BadFilesAreDataErrorsNamingTheFile) {
  auto kind_and_message = [](const std::string& path) -> std::pair<ErrorKind, std::string> {
    try {
      T5Tokenizer::open(path);
    } catch (const WickError& e) {
      return {e.kind(), e.what()};
    }
    ADD_FAILURE() << "no error for " << path;
    return {ErrorKind::Usage, ""};
  };
  const fs::path dir = scratch("bad");
  const fs::path missing = dir / "nothing_here.model";
  const fs::path garbage = dir / "garbage.model";
  std::ofstream(garbage) << "this is not a protobuf";
  const fs::path truncated = dir / "truncated.model";
  {
    std::ifstream in(data_path("spiece.model"), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(truncated, std::ios::binary) << bytes.substr(0, bytes.size() / 3);
  }
  const fs::path empty_folder = scratch("empty_folder");
  const fs::path fast_only = scratch("fast_only");
  fs::create_directories(fast_only / "tokenizer_2");
  std::ofstream(fast_only / "tokenizer_2" / "tokenizer.json") << "{}";

  struct Case {
    std::string path;
    std::string says;
  };
  const std::vector<Case> cases = {
      {missing.string(), missing.string() + " does not exist"},
      {garbage.string(), garbage.string() + " is not a SentencePiece model libsentencepiece can read"},
      {truncated.string(), truncated.string() + " is not a SentencePiece model libsentencepiece can read"},
      {data_path("not_t5_ids.model"), "has pad / EOS / unk ids -1 / 2 / 0, not T5's 0 / 1 / 2"},
      {empty_folder.string(), "no spiece.model in " + empty_folder.string() + " nor in its tokenizer_3/ or tokenizer_2/"},
      {fast_only.string(), "there is a tokenizer.json"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path);
    auto [kind, message] = kind_and_message(c.path);
    EXPECT_EQ(kind, ErrorKind::Data);
    EXPECT_THAT(message, HasSubstr(c.says));
  }
}

}  // namespace
}  // namespace wick::t5
