// Reading the byte-level BPE tokenizers' files (internal to models/bpe/): whole files, JSON objects,
// and which tokenizer family a JSON file belongs to, so that a file of the other family is refused
// with a message that names it.
//
//   nlohmann::json json = read_json_object(path, "Qwen tokenizer");   // WickError (Data) naming path
//   if (family_of(json) == TokenizerFamily::Tekken) ...
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace wick::bpe {

enum class TokenizerFamily {
  HuggingFace,  // a tokenizers tokenizer.json: {"model": {...}, "added_tokens": [...], ...}
  Tekken,       // a Mistral tekken.json: {"config": {"pattern", ...}, "vocab": [{"rank", "token_bytes"}...]}
  VocabJson,    // a flat {"spelling": id, ...} map (vocab.json)
  Other,
};

TokenizerFamily family_of(const nlohmann::json& json);
const char* family_name(TokenizerFamily family);

// The bytes of a file; `what` starts the error message ("Qwen tokenizer", "Tekken tokenizer").
std::string read_file_text(const std::string& path, const std::string& what);
// A file that must hold one JSON object.
nlohmann::json read_json_object(const std::string& path, const std::string& what);

}  // namespace wick::bpe
