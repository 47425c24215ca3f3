// The CLIP tokenizer against the fixtures of tests/data/clip_tokenizer (transformers 5.24.0, open_clip 3.3.0;
// see its README): ids equal to transformers' CLIPTokenizer on every corpus caption with CLIP-L's and bigG's
// padding, equal to open_clip wherever ftfy leaves the caption unchanged, the model-folder path equal to the
// gz path, the window (truncation, padding, mask, EOS position), every code point's normalization and class
// against tokenizers', and errors for bad files. ClipTokenizer.Speed prints captions/s on one core.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unicode/uchar.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/clip/clip_text_normalize.h"
#include "models/clip/clip_tokenizer.h"
#include "runtime/safetensors.h"
#include "tests/error_of.h"
#include "tests/test_data.h"

namespace wick::clip {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using wick::testing::error_of;

std::string data_dir() { return wick::testing::test_data_dir() + "/clip_tokenizer"; }
std::string bpe_path() { return data_dir() + "/bpe_simple_vocab_16e6.txt.gz"; }

struct Caption {
  std::string kind, text;
};

// One reference's windows: the unpadded prefix [BOS, content..., EOS] of each caption.
using Windows = std::vector<std::vector<int32_t>>;

struct Fixtures {
  std::vector<Caption> corpus;
  std::map<std::string, Windows> windows;  // "transformers", "transformers_bigg", "open_clip"
  std::vector<uint8_t> ftfy_changes;
};

std::vector<uint8_t> bytes_of(const SafetensorsFile& file, const std::string& name) {
  Tensor t = file.get(name);
  const auto* p = static_cast<const uint8_t*>(t.data());
  return std::vector<uint8_t>(p, p + t.nbytes());
}

const Fixtures& fixtures() {
  static const Fixtures f = [] {
    Fixtures out;
    std::ifstream in(data_dir() + "/corpus.jsonl");
    EXPECT_TRUE(in.good()) << data_dir() << "/corpus.jsonl";
    for (std::string line; std::getline(in, line);) {
      nlohmann::json j = nlohmann::json::parse(line);
      out.corpus.push_back({j["kind"].get<std::string>(), j["text"].get<std::string>()});
    }
    SafetensorsFile file = SafetensorsFile::open(data_dir() + "/expected.safetensors");
    for (const std::string name : {"transformers", "transformers_bigg", "open_clip"}) {
      std::vector<uint8_t> ids = bytes_of(file, name + "_ids"), lengths = bytes_of(file, name + "_lengths");
      EXPECT_EQ(lengths.size(), out.corpus.size()) << name;
      Windows windows;
      size_t at = 0;
      for (uint8_t n : lengths) {
        std::vector<int32_t> w(n);
        for (int k = 0; k < n; ++k, ++at) w[k] = ids[2 * at] | (ids[2 * at + 1] << 8);  // u16 little-endian
        windows.push_back(std::move(w));
      }
      EXPECT_EQ(2 * at, ids.size()) << name;
      out.windows[name] = std::move(windows);
    }
    out.ftfy_changes = bytes_of(file, "ftfy_changes");
    return out;
  }();
  return f;
}

// "" when the window equals the reference prefix padded with pad_id; else what differs.
std::string compare_window(const TokenWindow& w, const std::vector<int32_t>& expected, int32_t pad_id) {
  std::vector<int32_t> want(expected);
  want.resize(w.ids.size(), pad_id);
  std::vector<int32_t> mask(w.ids.size(), 0);
  std::fill(mask.begin(), mask.begin() + static_cast<int64_t>(expected.size()), 1);
  auto show = [](const std::vector<int32_t>& v, size_t n) {
    std::string s;
    for (size_t i = 0; i < std::min(n, v.size()); ++i) s += std::to_string(v[i]) + " ";
    return s;
  };
  if (w.ids != want) return "ids " + show(w.ids, expected.size() + 1) + "\n   want " + show(want, expected.size() + 1);
  if (w.attention_mask != mask) return "attention mask";
  if (w.eos_position != static_cast<int64_t>(expected.size()) - 1) return "eos_position";
  return "";
}

// Every corpus caption through `tokenizer` against one reference; returns the indices that differ.
std::vector<size_t> mismatches(const ClipTokenizer& tokenizer, const std::string& reference, size_t show = 8) {
  const Fixtures& f = fixtures();
  std::vector<size_t> bad;
  for (size_t i = 0; i < f.corpus.size(); ++i) {
    std::string diff = compare_window(tokenizer.encode_window(f.corpus[i].text), f.windows.at(reference)[i],
                                      tokenizer.pad_id());
    if (diff.empty()) continue;
    if (bad.size() < show)
      std::printf("  %s #%zu [%s] %s\n   %s\n", reference.c_str(), i, f.corpus[i].kind.c_str(),
                  nlohmann::json(f.corpus[i].text).dump().c_str(), diff.c_str());
    bad.push_back(i);
  }
  return bad;
}

TEST(ClipTokenizer, OpenClipVocabulary) {
  ClipTokenizer t = ClipTokenizer::from_open_clip_bpe(bpe_path());
  EXPECT_EQ(t.vocab_size(), 49408);
  EXPECT_EQ(t.n_merges(), 48894);
  EXPECT_EQ(t.bos_id(), 49406);
  EXPECT_EQ(t.eos_id(), 49407);
  EXPECT_EQ(t.pad_id(), 49407);
  EXPECT_EQ(t.context_length(), 77);
  EXPECT_EQ(t.token_id("!"), 0);
  EXPECT_EQ(t.token_id("!</w>"), 256);
  EXPECT_EQ(t.token(320), "a</w>");
  EXPECT_EQ(t.token(49406), "<|startoftext|>");
  EXPECT_EQ(t.encode("a photo of a cat"), (std::vector<int32_t>{320, 1125, 539, 320, 2368}));
  EXPECT_EQ(ClipTokenizer::from_open_clip_bpe(bpe_path(), {.pad_token = "!"}).pad_id(), 0);
}

TEST(ClipTokenizer, TransformersParityClipL) {
  ClipTokenizer t = ClipTokenizer::from_open_clip_bpe(bpe_path());
  std::vector<size_t> bad = mismatches(t, "transformers");
  std::printf("transformers CLIP-L (pad 49407): %zu of %zu captions equal\n", fixtures().corpus.size() - bad.size(),
              fixtures().corpus.size());
  EXPECT_TRUE(bad.empty());
}

TEST(ClipTokenizer, TransformersParityBigG) {
  ClipTokenizer t = ClipTokenizer::from_open_clip_bpe(bpe_path(), {.pad_token = "!"});
  std::vector<size_t> bad = mismatches(t, "transformers_bigg");
  std::printf("transformers bigG (pad \"!\" = 0): %zu of %zu captions equal\n", fixtures().corpus.size() - bad.size(),
              fixtures().corpus.size());
  EXPECT_TRUE(bad.empty());
}

// Reference::OpenClip equals open_clip on every caption ftfy.fix_text leaves unchanged; the rest are counted
// by kind, next to how often transformers and open_clip themselves disagree.
TEST(ClipTokenizer, OpenClipParity) {
  const Fixtures& f = fixtures();
  ClipTokenizer t = ClipTokenizer::from_open_clip_bpe(bpe_path(), {.pad_token = "!", .reference = Reference::OpenClip});
  std::vector<size_t> bad = mismatches(t, "open_clip", 0);
  size_t n_plain = 0, n_bad_plain = 0, n_references_differ = 0;
  std::map<std::string, int> ftfy_kinds, references_kinds;
  for (size_t i = 0; i < f.corpus.size(); ++i) {
    n_plain += !f.ftfy_changes[i];
    if (f.windows.at("transformers")[i] != f.windows.at("open_clip")[i])
      ++n_references_differ, ++references_kinds[f.corpus[i].kind];
  }
  for (size_t i : bad) {
    if (f.ftfy_changes[i]) {
      ++ftfy_kinds[f.corpus[i].kind];
    } else {
      ++n_bad_plain;
      ADD_FAILURE() << "open_clip differs on a caption ftfy leaves unchanged: #" << i << " "
                    << nlohmann::json(f.corpus[i].text).dump();
    }
  }
  auto list = [](const std::map<std::string, int>& m) {
    std::string s;
    for (const auto& [k, n] : m) s += k + " " + std::to_string(n) + ", ";
    return s;
  };
  std::printf("open_clip: equal on %zu of %zu captions ftfy leaves unchanged; on the %zu it changes, %zu differ (%s)\n",
              n_plain - n_bad_plain, n_plain, f.corpus.size() - n_plain, bad.size() - n_bad_plain,
              list(ftfy_kinds).c_str());
  std::printf("transformers vs open_clip themselves: %zu of %zu differ (%.1f%%: %s)\n", n_references_differ,
              f.corpus.size(), 100.0 * double(n_references_differ) / double(f.corpus.size()),
              list(references_kinds).c_str());
  EXPECT_EQ(n_bad_plain, 0u);
}

// vocab.json + merges.txt written from the gz file (as transformers' folders hold them) give the same ids.
std::string write_hf_files(const fs::path& dir) {
  fs::create_directories(dir);
  ClipTokenizer gz = ClipTokenizer::from_open_clip_bpe(bpe_path());
  nlohmann::json vocab = nlohmann::json::object();
  for (int32_t id = 0; id < gz.vocab_size(); ++id) vocab[gz.token(id)] = id;
  std::ofstream(dir / "vocab.json") << vocab.dump();
  gzFile in = gzopen(bpe_path().c_str(), "rb");
  std::string text;
  char buffer[1 << 16];
  for (int n; (n = gzread(in, buffer, sizeof buffer)) > 0;) text.append(buffer, static_cast<size_t>(n));
  gzclose(in);
  std::ofstream merges(dir / "merges.txt");
  merges << "#version: 0.2\n";
  size_t begin = text.find('\n') + 1;
  for (int i = 0; i < 48894; ++i) {
    size_t end = text.find('\n', begin);
    merges << text.substr(begin, end - begin) << "\n";
    begin = end + 1;
  }
  return dir.string();
}

fs::path temp_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("wick_clip_tokenizer_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(ClipTokenizer, FolderEqualsGz) {
  const fs::path dir = temp_dir("folder");
  write_hf_files(dir);
  ClipTokenizer folder = ClipTokenizer::from_folder(dir.string());
  ClipTokenizer gz = ClipTokenizer::from_open_clip_bpe(bpe_path());
  EXPECT_EQ(folder.vocab_size(), gz.vocab_size());
  EXPECT_EQ(folder.n_merges(), gz.n_merges());
  EXPECT_EQ(folder.pad_id(), 49407);
  size_t n_equal = 0;
  for (const Caption& c : fixtures().corpus) n_equal += folder.encode_window(c.text).ids == gz.encode_window(c.text).ids;
  EXPECT_EQ(n_equal, fixtures().corpus.size());
  EXPECT_TRUE(mismatches(folder, "transformers").empty());
  fs::remove_all(dir);
}

// SDXL's tokenizer/ and tokenizer_2/ config files, a transformers 5 added_tokens_decoder, no config, and
// model_max_length 64: pad id, window length, and which typed special tokens count (the "normalized" flags).
TEST(ClipTokenizer, FolderConfigs) {
  std::ifstream in(data_dir() + "/folder_cases.json");
  nlohmann::json cases = nlohmann::json::parse(in);
  const fs::path base = temp_dir("configs");
  write_hf_files(base / "vocab");
  for (const auto& [name, variant] : cases["variants"].items()) {
    SCOPED_TRACE(name);
    const fs::path dir = base / name;
    fs::create_directories(dir);
    fs::copy_file(base / "vocab" / "vocab.json", dir / "vocab.json");
    fs::copy_file(base / "vocab" / "merges.txt", dir / "merges.txt");
    for (const auto& [file, content] : variant["files"].items()) std::ofstream(dir / file) << content.dump(2);
    ClipTokenizer t = ClipTokenizer::from_folder(dir.string());
    EXPECT_EQ(t.pad_id(), variant["pad_id"].get<int32_t>());
    EXPECT_EQ(t.context_length(), variant["context_length"].get<int64_t>());
    for (size_t i = 0; i < cases["captions"].size(); ++i) {
      TokenWindow w = t.encode_window(cases["captions"][i].get<std::string>());
      EXPECT_EQ(w.ids, variant["ids"][i].get<std::vector<int32_t>>()) << cases["captions"][i];
      EXPECT_EQ(w.attention_mask, variant["attention_mask"][i].get<std::vector<int32_t>>()) << cases["captions"][i];
    }
  }
  fs::remove_all(base);
}

TEST(ClipTokenizer, Window) {
  ClipTokenizer t = ClipTokenizer::from_open_clip_bpe(bpe_path());
  TokenWindow empty = t.encode_window("");
  EXPECT_EQ(empty.ids[0], 49406);
  EXPECT_EQ(empty.ids[1], 49407);
  EXPECT_EQ(empty.eos_position, 1);
  EXPECT_EQ(empty.attention_mask[1], 1);
  EXPECT_EQ(empty.attention_mask[2], 0);
  std::string long_caption;
  for (int i = 0; i < 100; ++i) long_caption += "cat ";
  TokenWindow w = t.encode_window(long_caption);
  EXPECT_EQ(w.n_content_tokens, 100);
  EXPECT_TRUE(w.truncated());
  EXPECT_EQ(w.eos_position, 76);
  EXPECT_EQ(w.ids[75], 2368);  // the 75th "cat"
  EXPECT_EQ(w.ids[76], 49407);
  EXPECT_EQ(std::count(w.attention_mask.begin(), w.attention_mask.end(), 1), 77);
  // The EOS typed in a caption: transformers and open_clip pool at the first EOS id.
  TokenWindow typed = t.encode_window("a <|endoftext|> b");
  EXPECT_EQ(typed.ids[2], 49407);
  EXPECT_EQ(typed.pool_position, 2);
  EXPECT_EQ(typed.eos_position, 4);
  // bigG padding, a shorter window.
  ClipTokenizer g = ClipTokenizer::from_open_clip_bpe(bpe_path(), {.pad_token = "!", .context_length = 8});
  TokenWindow s = g.encode_window("wow!!! a photo of a cat");
  EXPECT_EQ(s.ids, (std::vector<int32_t>{49406, 2781, 0, 0, 0, 320, 1125, 49407}));
  TokenWindow p = g.encode_window("cat");
  EXPECT_EQ(p.ids, (std::vector<int32_t>{49406, 2368, 49407, 0, 0, 0, 0, 0}));
  EXPECT_EQ(p.attention_mask, (std::vector<int32_t>{1, 1, 1, 0, 0, 0, 0, 0}));
  TokenBatch batch = g.encode_batch({"cat", "wow!!! a photo of a cat"});
  EXPECT_EQ(batch.n, 2);
  EXPECT_EQ(std::vector<int32_t>(batch.ids.begin() + 8, batch.ids.end()), s.ids);
  EXPECT_EQ(batch.eos_positions, (std::vector<int64_t>{2, 7}));
  EXPECT_EQ(t.decode(t.encode_window("A photo of a CAT, 8k!").ids), "a photo of a cat , 8 k !");
}

TEST(ClipTokenizer, IllFormedUtf8) {
  std::ifstream in(data_dir() + "/replaced_utf8.json");
  nlohmann::json pairs = nlohmann::json::parse(in);
  ClipTokenizer t = ClipTokenizer::from_open_clip_bpe(bpe_path());
  for (const nlohmann::json& pair : pairs) {
    std::string hex = pair[0].get<std::string>(), raw;
    for (size_t i = 0; i < hex.size(); i += 2) raw.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    EXPECT_EQ(t.encode(raw), t.encode(pair[1].get<std::string>())) << hex;
    EXPECT_EQ(encode_utf8(decode_utf8(raw)), pair[1].get<std::string>()) << hex;
  }
}

TEST(ClipTokenizer, HtmlUnescapeLikePython) {
  std::ifstream in(data_dir() + "/html_unescape.json");
  nlohmann::json pairs = nlohmann::json::parse(in);
  int n_equal = 0;
  for (const nlohmann::json& pair : pairs) {
    std::string got = encode_utf8(html_unescape(decode_utf8(pair[0].get<std::string>())));
    n_equal += got == pair[1].get<std::string>();
    EXPECT_EQ(got, pair[1].get<std::string>()) << nlohmann::json(pair[0]).dump();
  }
  std::printf("html.unescape: %d of %zu cases equal\n", n_equal, pairs.size());
}

std::vector<std::pair<int32_t, int32_t>> ranges_of(const SafetensorsFile& file, const std::string& name) {
  Tensor t = file.get(name);
  const int32_t* p = t.data_as<int32_t>();
  std::vector<std::pair<int32_t, int32_t>> out;
  for (int64_t i = 0; i < t.size(0); ++i) out.push_back({p[2 * i], p[2 * i + 1]});
  return out;
}

// Every code point alone through transformers' normalizer, and its pre-token class, against tokenizers'
// (Rust std and unicode-normalization for case and NFC, Oniguruma for \p{L} \p{N} \s). The two Unicode
// versions differ only on code points ICU 72 (Unicode 15.0) has not assigned; those are counted.
TEST(ClipTokenizer, EveryCodePointLikeTokenizers) {
  SafetensorsFile file = SafetensorsFile::open(data_dir() + "/unicode_sweep.safetensors");
  Tensor cps = file.get("normalized_cps"), offsets = file.get("normalized_offsets"), values = file.get("normalized_values");
  std::map<char32_t, std::u32string> changed;
  for (int64_t i = 0; i < cps.numel(); ++i) {
    std::u32string out;
    for (int32_t k = offsets.data_as<int32_t>()[i]; k < offsets.data_as<int32_t>()[i + 1]; ++k)
      out.push_back(static_cast<char32_t>(values.data_as<int32_t>()[k]));
    changed[static_cast<char32_t>(cps.data_as<int32_t>()[i])] = out;
  }
  std::vector<std::vector<std::pair<int32_t, int32_t>>> classes = {
      ranges_of(file, "letter_ranges"), ranges_of(file, "number_ranges"), ranges_of(file, "space_ranges")};
  auto reference_class = [&](char32_t c) {
    for (size_t k = 0; k < classes.size(); ++k)
      for (const auto& [lo, hi] : classes[k])
        if (int32_t(c) >= lo && int32_t(c) <= hi) return static_cast<CharClass>(k);
    return CharClass::Other;
  };
  int n_checked = 0, n_unassigned_differ = 0, n_assigned_differ = 0;
  std::vector<char32_t> sample;
  std::vector<std::pair<char32_t, char32_t>> unassigned_ranges;  // runs of differing code points, gaps of <= 1 closed
  for (char32_t c = 0; c < 0x110000; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    ++n_checked;
    auto it = changed.find(c);
    std::u32string want = it == changed.end() ? std::u32string(1, c) : it->second;
    bool same = normalize_like_transformers(std::u32string(1, c)) == want && char_class(c) == reference_class(c);
    if (same) continue;
    if (u_charType(static_cast<UChar32>(c)) == U_UNASSIGNED) {
      ++n_unassigned_differ;
      if (!unassigned_ranges.empty() && unassigned_ranges.back().second + 1 >= c) unassigned_ranges.back().second = c;
      else unassigned_ranges.push_back({c, c});
    } else {
      ++n_assigned_differ;
      if (sample.size() < 10) sample.push_back(c);
    }
  }
  for (char32_t c : sample) std::printf("  U+%04X differs\n", unsigned(c));
  std::string runs;
  for (const auto& [lo, hi] : unassigned_ranges) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, " %X-%X", unsigned(lo), unsigned(hi));
    runs += buffer;
  }
  std::printf("differing code points unassigned in ICU, in runs:%s\n", runs.c_str());
  std::printf("%d code points: %d differ from tokenizers, all unassigned in ICU %s (Unicode %s); %d assigned differ\n",
              n_checked, n_unassigned_differ, U_ICU_VERSION, U_UNICODE_VERSION, n_assigned_differ);
  EXPECT_EQ(n_assigned_differ, 0);
}

TEST(ClipTokenizer, BadFiles) {
  const fs::path dir = temp_dir("bad");
  EXPECT_THAT(error_of([&] { ClipTokenizer::from_open_clip_bpe((dir / "missing.txt.gz").string()); }),
              HasSubstr("missing.txt.gz: no such file"));
  std::ofstream(dir / "plain.txt.gz") << "#version: 0.2\na b\n";
  EXPECT_THAT(error_of([&] { ClipTokenizer::from_open_clip_bpe((dir / "plain.txt.gz").string()); }),
              HasSubstr("plain.txt.gz: not gzip data"));
  {  // the real file cut short: a gzip stream without its end
    std::ifstream real(bpe_path(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(real)), std::istreambuf_iterator<char>());
    std::ofstream(dir / "cut.txt.gz", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  EXPECT_THAT(error_of([&] { ClipTokenizer::from_open_clip_bpe((dir / "cut.txt.gz").string()); }),
              HasSubstr("cut.txt.gz: corrupt gzip data"));
  gzFile short_file = gzopen((dir / "short.txt.gz").c_str(), "wb");
  gzputs(short_file, "#version: 0.2\nt h\nth e</w>\n");
  gzclose(short_file);
  EXPECT_THAT(error_of([&] { ClipTokenizer::from_open_clip_bpe((dir / "short.txt.gz").string()); }),
              HasSubstr("short.txt.gz: 3 merge lines, open_clip's vocabulary takes the first 48894"));
  try {
    ClipTokenizer::from_open_clip_bpe((dir / "short.txt.gz").string());
  } catch (const WickError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Data);
  }

  const fs::path folder = dir / "folder";
  EXPECT_THAT(error_of([&] { ClipTokenizer::from_folder(folder.string()); }), HasSubstr("no such folder"));
  write_hf_files(folder);
  const std::string merges = (folder / "merges.txt").string(), vocab = (folder / "vocab.json").string();
  fs::rename(merges, merges + ".bak");
  EXPECT_THAT(error_of([&] { ClipTokenizer::from_folder(folder.string()); }), HasSubstr("merges.txt: no such file"));
  fs::rename(merges + ".bak", merges);
  std::ofstream(merges, std::ios::app) << "bad merge line\n";
  EXPECT_THAT(error_of([&] { ClipTokenizer::from_folder(folder.string()); }),
              HasSubstr("merges.txt:48896: expected a merge \"LEFT RIGHT\", got \"bad merge line\""));
  write_hf_files(folder);
  std::ofstream(merges, std::ios::app) << "ZZ QQ\n";
  EXPECT_THAT(error_of([&] { ClipTokenizer::from_folder(folder.string()); }),
              HasSubstr("merge 48895 \"ZZ QQ\": ZZ is not in the vocabulary"));
  write_hf_files(folder);
  std::string json_text;
  {
    std::ifstream in(vocab);
    json_text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::ofstream(vocab) << json_text.substr(0, json_text.size() / 2);
  EXPECT_THAT(error_of([&] { ClipTokenizer::from_folder(folder.string()); }), HasSubstr("vocab.json: not a JSON object"));
  {  // a vocabulary without the special tokens
    nlohmann::json j = nlohmann::json::parse(json_text);
    j.erase("<|startoftext|>");
    j.erase("<|endoftext|>");
    std::ofstream(vocab) << j.dump();
  }
  EXPECT_THAT(error_of([&] { ClipTokenizer::from_folder(folder.string()); }),
              HasSubstr("the bos_token \"<|startoftext|>\" is not in vocab.json"));
  std::ofstream(vocab) << json_text;
  std::ofstream(folder / "tokenizer_config.json") << R"({"pad_token": "<pad>"})";
  EXPECT_THAT(error_of([&] { ClipTokenizer::from_folder(folder.string()); }),
              HasSubstr("the pad_token \"<pad>\" is not in vocab.json"));
  std::ofstream(folder / "tokenizer_config.json") << R"({"pad_token": {"content": "!", "lstrip": true}})";
  EXPECT_THAT(error_of([&] { ClipTokenizer::from_folder(folder.string()); }),
              HasSubstr("pad_token sets \"lstrip\", which wick's CLIP tokenizer does not support"));
  std::ofstream(folder / "tokenizer_config.json") << "{";
  EXPECT_THAT(error_of([&] { ClipTokenizer::from_folder(folder.string()); }),
              HasSubstr("tokenizer_config.json: not a JSON object"));
  fs::remove_all(dir);
}

// Captions per second on this thread over the whole corpus: a cold pass (empty BPE cache) and a warm one.
TEST(ClipTokenizer, Speed) {
  const std::vector<Caption>& corpus = fixtures().corpus;
  ClipTokenizer t = ClipTokenizer::from_open_clip_bpe(bpe_path());
  for (const char* pass : {"cold", "warm", "warm"}) {
    auto start = std::chrono::steady_clock::now();
    int64_t n_tokens = 0;
    for (const Caption& c : corpus) n_tokens += t.encode_window(c.text).eos_position;
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("CLIP tokenizer, %s cache: %.0f captions/s, %.0f tokens/s on one thread (%zu captions)\n", pass,
                double(corpus.size()) / seconds, double(n_tokens) / seconds, corpus.size());
  }
  auto start = std::chrono::steady_clock::now();
  ClipTokenizer::from_open_clip_bpe(bpe_path());
  std::printf("CLIP tokenizer: loading the gz vocabulary takes %.0f ms\n",
              1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace
}  // namespace wick::clip
