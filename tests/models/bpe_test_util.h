// Fixture access shared by the byte-level BPE tests (tests/data/bpe; see its README): the caption corpus,
// the reference ids (expected.safetensors, prompt_layouts.safetensors), temporary folders and JSON files.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/bpe/prompt_layouts.h"
#include "models/bpe/qwen_tokenizer.h"
#include "runtime/safetensors.h"
#include "tests/error_of.h"
#include "tests/test_data.h"

namespace wick::bpe {

inline std::string bpe_data_dir() { return wick::testing::test_data_dir() + "/bpe"; }

struct Caption {
  std::string kind, text;
};
using Rows = std::vector<std::vector<int32_t>>;

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

inline std::string write_json(const std::string& path, const nlohmann::json& json) {
  std::ofstream(path, std::ios::binary) << json.dump();
  return path;
}

inline const std::vector<Caption>& corpus_captions() {
  static const std::vector<Caption> corpus = [] {
    std::vector<Caption> out;
    std::ifstream in(bpe_data_dir() + "/corpus.jsonl");
    EXPECT_TRUE(in.good()) << bpe_data_dir() << "/corpus.jsonl";
    for (std::string line; std::getline(in, line);) {
      nlohmann::json j = nlohmann::json::parse(line);
      out.push_back({j["kind"].get<std::string>(), j["text"].get<std::string>()});
    }
    return out;
  }();
  return corpus;
}

// A tensor of ids as int32: "tekken_ids" is stored as U16 (read as raw little-endian bytes), the rest as I32.
inline std::vector<int32_t> ids_of(const SafetensorsFile& file, const std::string& name) {
  Tensor t = file.get(name);
  const auto* bytes = static_cast<const uint8_t*>(t.data());
  const size_t width = name == "tekken_ids" ? 2 : 4;
  std::vector<int32_t> out(t.nbytes() / width);
  for (size_t i = 0; i < out.size(); ++i) {
    uint32_t v = 0;
    for (size_t k = 0; k < width; ++k) v |= uint32_t(bytes[width * i + k]) << (8 * k);
    out[i] = static_cast<int32_t>(v);
  }
  return out;
}

// Rows `name` of a file: NAME_ids concatenated, split by NAME_lengths.
inline Rows rows_of(const SafetensorsFile& file, const std::string& name) {
  std::vector<int32_t> ids = ids_of(file, name + "_ids"), lengths = ids_of(file, name + "_lengths");
  Rows rows;
  size_t at = 0;
  for (int32_t n : lengths) {
    rows.emplace_back(ids.begin() + static_cast<std::ptrdiff_t>(at), ids.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += static_cast<size_t>(n);
  }
  EXPECT_EQ(at, ids.size()) << name;
  return rows;
}

// A reference's ids for every corpus caption: qwen3 and tekken are stored whole; qwen_image and tekken_hf
// as the rows where they differ from qwen3 / tekken.
inline Rows expected_rows(const std::string& name) {
  SafetensorsFile file = SafetensorsFile::open(bpe_data_dir() + "/expected.safetensors");
  if (name == "qwen3" || name == "tekken") return rows_of(file, name);
  Rows rows = rows_of(file, name == "qwen_image" ? "qwen3" : "tekken");
  Rows changed = rows_of(file, name);
  std::vector<int32_t> where = ids_of(file, name + "_rows");
  EXPECT_EQ(where.size(), changed.size());
  for (size_t i = 0; i < where.size(); ++i) rows.at(static_cast<size_t>(where[i])) = changed[i];
  return rows;
}

inline std::string show_ids(const std::vector<int32_t>& ids, size_t n = 40) {
  std::string s;
  for (size_t i = 0; i < ids.size() && i < n; ++i) s += std::to_string(ids[i]) + " ";
  if (ids.size() > n) s += "... (" + std::to_string(ids.size()) + ")";
  return s;
}

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "wick_bpe_XXXXXX").string();
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    EXPECT_NE(mkdtemp(buffer.data()), nullptr);
    path_ = buffer.data();
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  TempDir(TempDir&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Qwen-Image's tokenizer folder: its configs (tests/data/bpe/qwen_image) with qwen3's vocab.json + merges.txt.
inline TempDir qwen_image_folder() {
  TempDir dir;
  for (const auto& entry : std::filesystem::directory_iterator(bpe_data_dir() + "/qwen_image"))
    std::filesystem::copy_file(entry.path(), dir.path() + "/" + entry.path().filename().string());
  for (const char* f : {"vocab.json", "merges.txt"})
    std::filesystem::copy_file(bpe_data_dir() + "/qwen3/" + f, dir.path() + "/" + f);
  return dir;
}

// The real (unpadded) ids of Z-Image's prompt layout.
inline std::vector<int32_t> zimage_ids(const QwenTokenizer& qwen, const std::string& prompt) {
  PromptTokens p = zimage_prompt(qwen, prompt);
  return std::vector<int32_t>(p.ids.begin(), p.ids.begin() + p.n_real());
}

}  // namespace wick::bpe
