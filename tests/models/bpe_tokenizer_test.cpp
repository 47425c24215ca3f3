// The byte-level BPE tokenizers (Qwen, Mistral Tekken) against the fixtures of tests/data/bpe (transformers
// 5.24.0 / tokenizers 0.23.3, mistral_common 1.13.1; see its README): ids equal to transformers' Qwen2Tokenizer
// on every corpus caption from vocab.json + merges.txt, from tokenizer.json and from Qwen-Image's folder; equal
// to mistral_common's Tekkenizer (typed special texts as text) and to transformers' converted Tekken tokenizer
// (typed special texts as tokens); and refusals of the other family's files and of malformed files. The
// pipelines' prompt layouts are in bpe_prompt_layouts_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unicode/uchar.h>
#include <unicode/uversion.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "models/bpe/pre_tokenizer.h"
#include "models/clip/clip_text_normalize.h"
#include "models/bpe/prompt_layouts.h"
#include "models/bpe/qwen_tokenizer.h"
#include "models/bpe/tekken_tokenizer.h"
#include "tests/models/bpe_test_util.h"

namespace wick::bpe {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using wick::testing::error_of;

// Every corpus caption through `encode` against one reference's rows; prints the first few that differ.
template <typename Encode>
size_t count_mismatches(const char* name, const Rows& expected, Encode encode, size_t show = 6) {
  const std::vector<Caption>& corpus = corpus_captions();
  EXPECT_EQ(expected.size(), corpus.size()) << name;
  size_t bad = 0;
  for (size_t i = 0; i < corpus.size() && i < expected.size(); ++i) {
    std::vector<int32_t> ids = encode(corpus[i].text);
    if (ids == expected[i]) continue;
    if (bad++ < show)
      std::printf("  %s #%zu [%s] %s\n    got  %s\n    want %s\n", name, i, corpus[i].kind.c_str(),
                  nlohmann::json(corpus[i].text).dump().c_str(), show_ids(ids).c_str(), show_ids(expected[i]).c_str());
  }
  std::printf("%s: %zu of %zu captions equal\n", name, corpus.size() - bad, corpus.size());
  return bad;
}

TEST(BpeTokenizer, QwenFolderMatchesTransformers) {
  QwenTokenizer qwen = QwenTokenizer::from_folder(bpe_data_dir() + "/qwen3");
  EXPECT_EQ(qwen.n_merges(), 6000);
  EXPECT_EQ(qwen.endoftext_id(), 151643);
  EXPECT_EQ(qwen.im_start_id(), 151644);
  EXPECT_EQ(qwen.im_end_id(), 151645);
  EXPECT_EQ(qwen.token_id("<think>"), 151667);
  EXPECT_EQ(qwen.token_id("Ġ"), 220);
  EXPECT_EQ(qwen.token_id("Ġc"), 272);
  EXPECT_EQ(qwen.token_id("Ġcat"), -1);  // 8251: past the 6,000 merges kept
  EXPECT_EQ(qwen.added_tokens().size(), 26u);
  EXPECT_EQ(qwen.encode("A cat"), (std::vector<int32_t>{32, 272, 266}));
  EXPECT_EQ(qwen.encode("<|im_start|>user\n"), (std::vector<int32_t>{151644, 872, 198}));
  EXPECT_EQ(count_mismatches("qwen3 (vocab.json + merges.txt)", expected_rows("qwen3"),
                             [&](const std::string& t) { return qwen.encode(t); }), 0u);
}

TEST(BpeTokenizer, QwenTokenizerJsonMatchesTransformers) {
  const std::string path = bpe_data_dir() + "/qwen3_tokenizer.json";
  QwenTokenizer from_file = QwenTokenizer::from_tokenizer_json(path);
  QwenTokenizer from_path = QwenTokenizer::from_folder(path);
  EXPECT_EQ(from_file.n_merges(), 6000);
  EXPECT_EQ(count_mismatches("qwen3 (tokenizer.json)", expected_rows("qwen3"),
                             [&](const std::string& t) { return from_file.encode(t); }), 0u);
  EXPECT_EQ(from_path.encode("x\r\ny 12"), from_file.encode("x\r\ny 12"));
  // A folder with tokenizer.json reads it (and not vocab.json + merges.txt).
  TempDir dir;
  fs::copy_file(path, dir.path() + "/tokenizer.json");
  EXPECT_EQ(QwenTokenizer::from_folder(dir.path()).source(), dir.path() + "/tokenizer.json");
}

TEST(BpeTokenizer, QwenImageFolderMatchesTransformers) {
  // Qwen-Image's folder: the same vocab.json + merges.txt, its own configs (added tokens end at 151664).
  TempDir dir = qwen_image_folder();
  QwenTokenizer qwen = QwenTokenizer::from_folder(dir.path());
  EXPECT_EQ(qwen.added_tokens().size(), 22u);
  EXPECT_EQ(qwen.token_id("<|image_pad|>"), 151655);
  EXPECT_EQ(count_mismatches("qwen_image", expected_rows("qwen_image"),
                             [&](const std::string& t) { return qwen.encode(t); }), 0u);
}

TEST(BpeTokenizer, QwenAddedTokensOutsideTheVocabulary) {
  // The real files keep the added tokens out of vocab.json / model.vocab (ids 0..151642 there): the ids then
  // come from tokenizer_config.json's added_tokens_decoder or tokenizer.json's added_tokens alone.
  TempDir dir;
  nlohmann::json vocab = read_json(bpe_data_dir() + "/qwen3/vocab.json");
  for (auto it = vocab.begin(); it != vocab.end();) it = it.value().get<int32_t>() >= 151643 ? vocab.erase(it) : std::next(it);
  write_json(dir.path() + "/vocab.json", vocab);
  for (const char* f : {"merges.txt", "tokenizer_config.json"})
    fs::copy_file(bpe_data_dir() + "/qwen3/" + f, dir.path() + "/" + f);
  nlohmann::json json = read_json(bpe_data_dir() + "/qwen3_tokenizer.json");
  json["model"]["vocab"] = vocab;
  write_json(dir.path() + "/tokenizer_only.json", json);
  QwenTokenizer folder = QwenTokenizer::from_folder(dir.path());
  QwenTokenizer from_json = QwenTokenizer::from_tokenizer_json(dir.path() + "/tokenizer_only.json");
  EXPECT_EQ(folder.token_id("<|im_end|>"), 151645);
  EXPECT_EQ(count_mismatches("qwen3 (added tokens outside vocab.json)", expected_rows("qwen3"),
                             [&](const std::string& t) { return folder.encode(t); }, 2), 0u);
  EXPECT_EQ(count_mismatches("qwen3 (added tokens outside model.vocab)", expected_rows("qwen3"),
                             [&](const std::string& t) { return from_json.encode(t); }, 2), 0u);
}

TEST(BpeTokenizer, ManyThreadsShareOneTokenizer) {
  QwenTokenizer qwen = QwenTokenizer::from_folder(bpe_data_dir() + "/qwen3");
  TekkenTokenizer tekken = TekkenTokenizer::from_file(bpe_data_dir() + "/tekken.json");
  const Rows qwen_rows = expected_rows("qwen3"), tekken_rows = expected_rows("tekken");
  const std::vector<Caption>& corpus = corpus_captions();
  std::vector<int> n_bad(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (size_t k = 0; k < corpus.size(); ++k) {
        size_t i = (k * 7 + static_cast<size_t>(t) * 555) % corpus.size();  // each thread its own order
        n_bad[t] += qwen.encode(corpus[i].text) != qwen_rows[i];
        n_bad[t] += tekken.encode(corpus[i].text) != tekken_rows[i];
      }
    });
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(n_bad, std::vector<int>(4, 0));
}

TEST(BpeTokenizer, QwenDecodeRoundTrips) {
  QwenTokenizer qwen = QwenTokenizer::from_folder(bpe_data_dir() + "/qwen3");
  size_t n = 0;
  for (const Caption& c : corpus_captions()) {
    std::string nfc = nfc_utf8(well_formed_utf8(c.text));  // the tokenizer normalizes; decode gives that back
    if (qwen.decode(qwen.encode(c.text)) != nfc && n++ < 4) std::printf("  round trip: %s\n", c.text.c_str());
  }
  EXPECT_EQ(n, 0u);
}

TEST(BpeTokenizer, TekkenMatchesMistralCommon) {
  TekkenTokenizer tekken = TekkenTokenizer::from_file(bpe_data_dir() + "/tekken.json");
  EXPECT_EQ(tekken.n_special_tokens(), 1000);
  EXPECT_EQ(tekken.vocab_size(), 5000);
  EXPECT_EQ(tekken.bos_id(), 1);
  EXPECT_EQ(tekken.pad_id(), 11);
  EXPECT_EQ(tekken.special_id("[IMG]"), 10);
  EXPECT_EQ(tekken.special_id("[SYSTEM_PROMPT]"), 17);
  EXPECT_EQ(tekken.special_id("<SPECIAL_999>"), 999);
  EXPECT_EQ(count_mismatches("tekken (mistral_common)", expected_rows("tekken"),
                             [&](const std::string& t) { return tekken.encode(t); }), 0u);
  EXPECT_EQ(count_mismatches("tekken (transformers, special texts as tokens)", expected_rows("tekken_hf"),
                             [&](const std::string& t) { return tekken.encode(t, SpecialText::AsTokens); }), 0u);
  // Folder form; decode gives the text back.
  TempDir dir;
  fs::copy_file(bpe_data_dir() + "/tekken.json", dir.path() + "/tekken.json");
  TekkenTokenizer from_folder = TekkenTokenizer::from_file(dir.path());
  size_t bad = 0;
  for (const Caption& c : corpus_captions())
    bad += from_folder.decode(from_folder.encode(c.text)) != well_formed_utf8(c.text);
  EXPECT_EQ(bad, 0u);
}

TEST(BpeTokenizer, TekkenSpecialTokensListInFile) {
  // Newer tekken.json files (Mistral-Small-3.x) list their special tokens; the ids follow the list.
  nlohmann::json json = read_json(bpe_data_dir() + "/tekken.json");
  const std::vector<std::string> names = {"<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]",
                                          "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]",
                                          "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]", "[PREFIX]", "[MIDDLE]",
                                          "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]",
                                          "[ARGS]", "[CALL_ID]"};
  nlohmann::json list = nlohmann::json::array();
  for (size_t rank = names.size(); rank-- > 0;)  // any order: ranks say where each goes
    list.push_back({{"rank", rank}, {"token_str", names[rank]}, {"is_control", true}});
  json["special_tokens"] = list;
  TempDir dir;
  write_json(dir.path() + "/tekken.json", json);
  TekkenTokenizer listed = TekkenTokenizer::from_file(dir.path() + "/tekken.json");
  TekkenTokenizer base = TekkenTokenizer::from_file(bpe_data_dir() + "/tekken.json");
  EXPECT_EQ(listed.special_id("[CALL_ID]"), 21);
  EXPECT_EQ(listed.special_id("<SPECIAL_22>"), 22);
  EXPECT_EQ(base.special_id("<SPECIAL_21>"), 21);
  EXPECT_EQ(listed.encode("[INST]a cat[/INST]", SpecialText::AsTokens),
            base.encode("[INST]a cat[/INST]", SpecialText::AsTokens));
}

TEST(BpeTokenizer, PreTokenizerPieces) {
  PreTokenizer qwen(kQwenPattern, "test");
  auto pieces = [&](const std::string& text) {
    std::vector<std::string> out;
    for (std::string_view p : qwen.split(text, true)) out.emplace_back(p);
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("don't"), (V{"don", "'t"}));
  EXPECT_EQ(pieces("DON'T"), (V{"DON", "'T"}));
  EXPECT_EQ(pieces(" 12345 "), (V{" ", "1", "2", "3", "4", "5", " "}));
  EXPECT_EQ(pieces("  two  spaces"), (V{" ", " two", " ", " spaces"}));
  EXPECT_EQ(pieces("a\n\nb"), (V{"a", "\n\n", "b"}));
  EXPECT_EQ(pieces("x\r\ny"), (V{"x", "\r\n", "y"}));
  // U+0085 and U+000B are \s for tokenizers (White_Space), not in ICU's \s: a run of them before a word
  // leaves its last one to the word.
  EXPECT_EQ(pieces("a\xC2\x85\xC2\x85" "b"), (V{"a", "\xC2\x85", "\xC2\x85" "b"}));
  EXPECT_EQ(pieces("a\x0B\x0B" "b"), (V{"a", "\x0B", "\x0B" "b"}));
  EXPECT_EQ(pieces("a\x0B\x0B"), (V{"a", "\x0B\x0B"}));
  EXPECT_THAT(error_of([] { PreTokenizer bad("(?<=", "bad.json"); }), HasSubstr("bad.json"));
}

// The translated pattern's classes against tokenizers' (Oniguruma's) \p{L}, \p{N} and \s, from the CLIP
// tokenizer's sweep of every code point (tests/data/clip_tokenizer/unicode_sweep.safetensors): each class range's
// ends and their neighbours, and every 7th code point, through the Qwen pattern. A code point's class shows in
// its pieces: "ac" is one piece only for a letter; "cc" two only for a digit; "c!" one only for other.
TEST(BpeTokenizer, PatternClassesMatchTokenizers) {
  SafetensorsFile file = SafetensorsFile::open(wick::testing::test_data_dir() + "/clip_tokenizer/unicode_sweep.safetensors");
  const char* names[] = {"letter", "number", "space"};
  std::vector<std::vector<std::pair<int32_t, int32_t>>> classes;
  std::vector<char32_t> points;
  for (const char* name : names) {
    Tensor t = file.get(std::string(name) + "_ranges");
    const int32_t* r = t.data_as<int32_t>();
    classes.emplace_back();
    for (int64_t i = 0; i < t.numel() / 2; ++i) {
      classes.back().push_back({r[2 * i], r[2 * i + 1]});
      for (int32_t c : {r[2 * i] - 1, r[2 * i], r[2 * i + 1], r[2 * i + 1] + 1}) points.push_back(char32_t(c));
    }
  }
  for (char32_t c = 0x80; c < 0x110000; c += 7) points.push_back(c);
  auto reference = [&](char32_t c) {
    for (size_t k = 0; k < classes.size(); ++k)
      for (const auto& [lo, hi] : classes[k])
        if (int32_t(c) >= lo && int32_t(c) <= hi) return static_cast<int>(k);
    return 3;
  };
  PreTokenizer qwen(kQwenPattern, "test");
  auto n_pieces = [&](const std::string& text) { return qwen.split(text, true).size(); };
  int n_checked = 0, n_differ = 0;
  for (char32_t c : points) {
    if (c < 0x80 || (c >= 0xD800 && c <= 0xDFFF) || c >= 0x110000 || u_charType(UChar32(c)) == U_UNASSIGNED) continue;
    const std::string s = clip::encode_utf8(std::u32string(1, c));
    const int got = n_pieces("a" + s) == 1 ? 0 : n_pieces(s + s) == 2 ? 1 : n_pieces(s + "!") == 1 ? 3 : 2;
    ++n_checked;
    if (got != reference(c) && n_differ++ < 8) std::printf("  U+%04X: class %d, tokenizers %d\n", unsigned(c), got, reference(c));
  }
  std::printf("%d assigned code points (ICU %s): %d classed unlike tokenizers\n", n_checked, U_ICU_VERSION, n_differ);
  EXPECT_GT(n_checked, 30000);
  EXPECT_EQ(n_differ, 0);
}

// ------------------------------------------------------------------------------------------ refusals
WickError error_in(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const WickError& e) {
    return e;
  }
  ADD_FAILURE() << "no WickError thrown";
  return WickError(ErrorKind::Usage, "(no error thrown)");
}

void expect_data_error(const std::function<void()>& fn, const std::string& names, const std::string& says) {
  WickError e = error_in(fn);
  EXPECT_EQ(e.kind(), ErrorKind::Data) << e.what();
  EXPECT_THAT(e.what(), HasSubstr(names));
  EXPECT_THAT(e.what(), HasSubstr(says));
}

TEST(BpeTokenizer, RefusesTheOtherFamily) {
  const std::string tekken = bpe_data_dir() + "/tekken.json", qwen_json = bpe_data_dir() + "/qwen3_tokenizer.json";
  expect_data_error([&] { QwenTokenizer::from_folder(tekken); }, tekken, "Mistral Tekken");
  expect_data_error([&] { QwenTokenizer::from_tokenizer_json(tekken); }, tekken, "Mistral Tekken");
  expect_data_error([&] { TekkenTokenizer::from_file(qwen_json); }, qwen_json, "not a Mistral tekken.json");
  expect_data_error([&] { TekkenTokenizer::from_file(bpe_data_dir() + "/qwen3"); }, "qwen3", "no tekken.json");
  expect_data_error([&] { TekkenTokenizer::from_file(bpe_data_dir() + "/qwen3/vocab.json"); }, "vocab.json",
                    "not a Mistral tekken.json");
  TempDir dir;
  fs::copy_file(tekken, dir.path() + "/tekken.json");
  expect_data_error([&] { QwenTokenizer::from_folder(dir.path()); }, dir.path(), "Mistral Tekken");
  // A tekken.json saved as vocab.json.
  fs::copy_file(tekken, dir.path() + "/vocab.json");
  fs::copy_file(bpe_data_dir() + "/qwen3/merges.txt", dir.path() + "/merges.txt");
  expect_data_error([&] { QwenTokenizer::from_folder(dir.path()); }, "vocab.json", "Mistral Tekken");
}

TEST(BpeTokenizer, RefusesQwenWithoutChatTokens) {
  // Without tokenizer_config.json the chat tokens are only vocabulary entries, never split off.
  TempDir dir;
  for (const char* f : {"vocab.json", "merges.txt"}) fs::copy_file(bpe_data_dir() + "/qwen3/" + f, dir.path() + "/" + f);
  expect_data_error([&] { QwenTokenizer::from_folder(dir.path()); }, "vocab.json", "<|endoftext|>");
  nlohmann::json json = read_json(bpe_data_dir() + "/qwen3_tokenizer.json");
  nlohmann::json kept = nlohmann::json::array();
  for (const auto& t : json["added_tokens"])
    if (t["content"] != "<|im_end|>") kept.push_back(t);
  json["added_tokens"] = kept;
  write_json(dir.path() + "/no_im_end.json", json);
  expect_data_error([&] { QwenTokenizer::from_tokenizer_json(dir.path() + "/no_im_end.json"); }, "no_im_end.json",
                    "<|im_end|>");
}

TEST(BpeTokenizer, RefusesMalformedFiles) {
  TempDir dir;
  const std::string d = dir.path();
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(d + "/" + name, std::ios::binary) << text;
    return d + "/" + name;
  };
  expect_data_error([&] { QwenTokenizer::from_folder(d + "/missing"); }, "missing", "no such file or folder");
  std::string cut = write("cut.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {");
  expect_data_error([&] { QwenTokenizer::from_tokenizer_json(cut); }, cut, "not a JSON object");
  expect_data_error([&] { TekkenTokenizer::from_file(cut); }, cut, "not a JSON object");

  nlohmann::json json = read_json(bpe_data_dir() + "/qwen3_tokenizer.json");
  nlohmann::json bad = json;
  bad["model"]["merges"][10] = "onlyone";
  expect_data_error([&] { QwenTokenizer::from_tokenizer_json(write_json(d + "/merge.json", bad)); }, "merge.json:11",
                    "LEFT RIGHT");
  bad = json;
  bad["model"]["vocab"].erase("Ġ");
  expect_data_error([&] { QwenTokenizer::from_tokenizer_json(write_json(d + "/byte.json", bad)); }, "byte.json",
                    "byte symbol");
  bad = json;
  bad["model"]["end_of_word_suffix"] = "</w>";
  expect_data_error([&] { QwenTokenizer::from_tokenizer_json(write_json(d + "/clip.json", bad)); }, "clip.json",
                    "CLIP-style");
  bad = json;
  bad["normalizer"] = {{"type", "Lowercase"}};
  expect_data_error([&] { QwenTokenizer::from_tokenizer_json(write_json(d + "/lower.json", bad)); }, "lower.json",
                    "Lowercase");

  fs::create_directories(d + "/folder");
  for (const char* f : {"vocab.json", "tokenizer_config.json"})
    fs::copy_file(bpe_data_dir() + "/qwen3/" + f, d + "/folder/" + f);
  std::ofstream(d + "/folder/merges.txt") << "#version: 0.2\nĠ Ġ\nĠĠĠĠ\n";
  expect_data_error([&] { QwenTokenizer::from_folder(d + "/folder"); }, "merges.txt:3", "LEFT RIGHT");

  nlohmann::json tekken = read_json(bpe_data_dir() + "/tekken.json");
  nlohmann::json t = tekken;
  t["vocab"][300]["token_bytes"] = "@@@";
  expect_data_error([&] { TekkenTokenizer::from_file(write_json(d + "/b64.json", t)); }, "b64.json", "entry 300");
  t = tekken;
  t["config"]["default_vocab_size"] = 999999;
  expect_data_error([&] { TekkenTokenizer::from_file(write_json(d + "/size.json", t)); }, "size.json",
                    "default_vocab_size");
  t = tekken;
  std::swap(t["vocab"][65]["token_bytes"], t["vocab"][66]["token_bytes"]);
  expect_data_error([&] { TekkenTokenizer::from_file(write_json(d + "/order.json", t)); }, "order.json",
                    "rank 65 is not the byte 65");
  t = tekken;
  t["config"]["pattern"] = "[unclosed";
  expect_data_error([&] { TekkenTokenizer::from_file(write_json(d + "/pattern.json", t)); }, "pattern.json",
                    "does not compile");
}

// ------------------------------------------------------------------------------------------ full files
// MODELS2.md's checks on the full vocabularies, when WICK_BPE_FULL_DIR names a folder with qwen3/ (Qwen3's
// vocab.json, merges.txt, tokenizer_config.json), qwen_image/ (Qwen-Image's tokenizer folder) and tekken.json
// (mistral_common's tekken_240911.json): section 4's ids, and the layouts of sections 1.4, 2.4 and B4.
TEST(BpeTokenizer, FullVocabularies) {
  const char* dir = std::getenv("WICK_BPE_FULL_DIR");
  if (!dir) GTEST_SKIP() << "WICK_BPE_FULL_DIR is not set: the full Qwen3 and Tekken vocabularies are not checked";
  nlohmann::json checks = read_json(bpe_data_dir() + "/full_vocab_checks.json");
  auto start = std::chrono::steady_clock::now();
  QwenTokenizer qwen = QwenTokenizer::from_folder(std::string(dir) + "/qwen3");
  auto loaded_qwen = std::chrono::steady_clock::now();
  TekkenTokenizer tekken = TekkenTokenizer::from_file(std::string(dir) + "/tekken.json");
  auto loaded_tekken = std::chrono::steady_clock::now();
  QwenTokenizer qwen25 = QwenTokenizer::from_folder(std::string(dir) + "/qwen_image");
  std::printf("loading: Qwen3 folder %.0f ms, tekken.json %.0f ms\n",
              std::chrono::duration<double, std::milli>(loaded_qwen - start).count(),
              std::chrono::duration<double, std::milli>(loaded_tekken - loaded_qwen).count());
  EXPECT_EQ(qwen.n_merges(), 151387);
  EXPECT_EQ(tekken.vocab_size(), 131072);
  size_t qwen_tokens = 0, tekken_tokens = 0;
  auto encode_start = std::chrono::steady_clock::now();
  for (const Caption& c : corpus_captions()) qwen_tokens += qwen.encode(c.text).size();
  auto qwen_done = std::chrono::steady_clock::now();
  for (const Caption& c : corpus_captions()) tekken_tokens += tekken.encode(c.text).size();
  auto tekken_done = std::chrono::steady_clock::now();
  std::printf("full vocabularies, one thread, empty cache: Qwen %.0f captions/s (%zu tokens), Tekken %.0f (%zu)\n",
              corpus_captions().size() / std::chrono::duration<double>(qwen_done - encode_start).count(), qwen_tokens,
              corpus_captions().size() / std::chrono::duration<double>(tekken_done - qwen_done).count(), tekken_tokens);
  for (const auto& [text, ids] : checks["qwen"].items()) {
    std::vector<int32_t> got = text.rfind("zimage:", 0) == 0 ? zimage_ids(qwen, text.substr(7)) : qwen.encode(text);
    EXPECT_EQ(got, ids.get<std::vector<int32_t>>()) << text;
    if (text.rfind("zimage:", 0) != 0) {
      EXPECT_EQ(qwen25.encode(text), ids.get<std::vector<int32_t>>()) << text;
    }
  }
  for (const auto& [text, ids] : checks["tekken"].items())
    EXPECT_EQ(tekken.encode(text), ids.get<std::vector<int32_t>>()) << text;
  // Every corpus caption, when the fixture script wrote the full tokenizers' ids there (--full-expected).
  const std::string full_expected = std::string(dir) + "/full_expected.json";
  if (fs::is_regular_file(full_expected)) {
    nlohmann::json expected = read_json(full_expected);
    EXPECT_EQ(count_mismatches("qwen3 (full)", expected["qwen3"].get<Rows>(),
                               [&](const std::string& t) { return qwen.encode(t); }), 0u);
    EXPECT_EQ(count_mismatches("qwen_image (full)", expected["qwen_image"].get<Rows>(),
                               [&](const std::string& t) { return qwen25.encode(t); }), 0u);
    EXPECT_EQ(count_mismatches("tekken (full)", expected["tekken"].get<Rows>(),
                               [&](const std::string& t) { return tekken.encode(t); }), 0u);
    // The layouts' real ids with the full vocabularies (the padding is checked with the committed fixtures).
    const nlohmann::json& lay = expected["layouts"];
    auto prompts = lay["prompts"].get<std::vector<std::string>>();
    auto real = [](const PromptTokens& p) {
      auto begin = p.ids.begin() + (p.pad_left ? static_cast<std::ptrdiff_t>(p.ids.size()) - p.n_real() : 0);
      return std::vector<int32_t>(begin, begin + p.n_real());
    };
    const std::vector<std::pair<const char*, std::function<PromptTokens(const std::string&)>>> made = {
        {"zimage", [&](const std::string& p) { return zimage_prompt(qwen, p); }},
        {"klein", [&](const std::string& p) { return flux2_klein_prompt(qwen, p); }},
        {"qwenimage", [&](const std::string& p) { return qwen_image_prompt(qwen25, p); }},
        {"qwenimage_edit", [&](const std::string& p) { return qwen_image_edit_prompt(qwen25, p, 16); }},
        {"qwenimage_edit_plus", [&](const std::string& p) { return qwen_image_edit_plus_prompt(qwen25, p, {16, 8}); }},
        {"flux2", [&](const std::string& p) { return flux2_dev_prompt(tekken, p); }}};
    for (const auto& [name, make] : made) {
      Rows rows = lay[name].get<Rows>();
      size_t bad = 0;
      for (size_t i = 0; i < rows.size(); ++i) bad += real(make(prompts[i])) != rows[i];
      std::printf("%s (full): %zu of %zu prompts equal\n", name, rows.size() - bad, rows.size());
      EXPECT_EQ(bad, 0u) << name;
    }
  } else {
    std::printf("no %s: the corpus is not checked on the full vocabularies\n", full_expected.c_str());
  }
  EXPECT_EQ(zimage_prompt(qwen, "").n_real(), 8);  // MODELS2 1.4
  // MODELS2 2.4: "A cat" -> 41 ids; the 34 dropped are the system block and "<|im_start|>user\n".
  PromptTokens q = qwen_image_prompt(qwen25, "A cat");
  EXPECT_EQ(q.ids.size(), 41u);
  EXPECT_EQ(std::vector<int32_t>(q.ids.begin() + 31, q.ids.begin() + 37),
            (std::vector<int32_t>{151644, 872, 198, 32, 8251, 151645}));
  EXPECT_EQ(q.n_kept(), 7);
  EXPECT_EQ(qwen_image_prompt(qwen25, "").n_kept(), 5);
  // Edit: 61 system ids + "<|im_start|>user\n" dropped; the vision block is kept.
  PromptTokens e = qwen_image_edit_prompt(qwen25, "A cat", 4);
  EXPECT_EQ(e.ids[60], 198);
  EXPECT_EQ(e.ids[61], 151644);
  EXPECT_EQ(e.ids[64], 151652);
  PromptTokens f = flux2_dev_prompt(tekken, "A cat");
  EXPECT_EQ(std::vector<int32_t>(f.ids.end() - 3, f.ids.end()), (std::vector<int32_t>{1065, 7990, 4}));
}

TEST(BpeTokenizer, Speed) {
  QwenTokenizer qwen = QwenTokenizer::from_folder(bpe_data_dir() + "/qwen3");
  TekkenTokenizer tekken = TekkenTokenizer::from_file(bpe_data_dir() + "/tekken.json");
  const std::vector<Caption>& corpus = corpus_captions();
  auto rate = [&](const std::function<size_t(const std::string&)>& encode) {
    auto start = std::chrono::steady_clock::now();
    size_t n_tokens = 0;
    for (const Caption& c : corpus) n_tokens += encode(c.text);
    EXPECT_GT(n_tokens, 0u);
    return corpus.size() / std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  auto q = [&](const std::string& t) { return qwen.encode(t).size(); };
  auto k = [&](const std::string& t) { return tekken.encode(t).size(); };
  double qwen_cold = rate(q), qwen_warm = rate(q), tekken_cold = rate(k), tekken_warm = rate(k);
  std::printf("one thread, %zu captions: Qwen %.0f captions/s (empty cache) %.0f (warm); Tekken %.0f / %.0f\n",
              corpus.size(), qwen_cold, qwen_warm, tekken_cold, tekken_warm);
}

}  // namespace
}  // namespace wick::bpe
