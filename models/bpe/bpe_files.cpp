#include "models/bpe/bpe_files.h"

#include <filesystem>
#include <fstream>

#include "runtime/error.h"

namespace wick::bpe {

TokenizerFamily family_of(const nlohmann::json& json) {
  if (!json.is_object()) return TokenizerFamily::Other;
  if (json.contains("model") && json["model"].is_object()) return TokenizerFamily::HuggingFace;
  if (json.contains("config") && json["config"].is_object() && json.contains("vocab") && json["vocab"].is_array())
    return TokenizerFamily::Tekken;
  if (!json.empty() && json.begin().value().is_number_integer()) return TokenizerFamily::VocabJson;
  return TokenizerFamily::Other;
}

const char* family_name(TokenizerFamily family) {
  switch (family) {
    case TokenizerFamily::HuggingFace: return "a Hugging Face tokenizer.json";
    case TokenizerFamily::Tekken: return "a Mistral Tekken tokenizer (tekken.json)";
    case TokenizerFamily::VocabJson: return "a vocab.json";
    case TokenizerFamily::Other: break;
  }
  return "not a tokenizer file";
}

std::string read_file_text(const std::string& path, const std::string& what) {
  WICK_CHECK_KIND(Data, std::filesystem::is_regular_file(path), what, ": ", path, ": no such file");
  std::ifstream in(path, std::ios::binary);
  WICK_CHECK_KIND(Data, in.good(), what, ": ", path, ": cannot open");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

nlohmann::json read_json_object(const std::string& path, const std::string& what) {
  nlohmann::json json = nlohmann::json::parse(read_file_text(path, what), nullptr, /*allow_exceptions=*/false);
  WICK_CHECK_KIND(Data, !json.is_discarded() && json.is_object(), what, ": ", path, ": not a JSON object");
  return json;
}

}  // namespace wick::bpe
