// QwenTokenizer's loaders: a tokenizers tokenizer.json, or a folder's vocab.json + merges.txt with the
// added tokens of tokenizer_config.json / added_tokens.json (the transformers layout Qwen ships).
#include <climits>
#include <filesystem>
#include <map>

#include "models/bpe/bpe_files.h"
#include "models/bpe/qwen_tokenizer.h"
#include "runtime/error.h"

namespace wick::bpe {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const char* const kWhat = "Qwen tokenizer";

void refuse_other_family(const Json& json, const std::string& path, TokenizerFamily expected) {
  TokenizerFamily family = family_of(json);
  if (family == expected) return;
  if (family == TokenizerFamily::Tekken)
    WICK_FAIL(Data, kWhat, ": ", path, " is a Mistral Tekken tokenizer (tekken.json), not a Qwen byte-level BPE "
              "tokenizer: load it as a Tekken tokenizer (FLUX.2 dev's text encoder)");
  WICK_FAIL(Data, kWhat, ": ", path, " is ", family_name(family), ", expected ", family_name(expected));
}

std::unordered_map<std::string, int32_t> parse_vocab(const Json& vocab, const std::string& path) {
  std::unordered_map<std::string, int32_t> out;
  out.reserve(vocab.size());
  for (const auto& [spelling, id] : vocab.items()) {
    WICK_CHECK_KIND(Data, id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < INT32_MAX, kWhat,
                    ": ", path, ": the id of \"", spelling, "\" is not a token id");
    out.emplace(spelling, id.get<int32_t>());
  }
  return out;
}

// "LEFT RIGHT" -> (LEFT, RIGHT); anything else is an error naming the file and the merge (1-based).
std::pair<std::string, std::string> parse_merge(std::string_view line, const std::string& path, size_t number) {
  size_t space = line.find(' ');
  bool ok = space != std::string_view::npos && space > 0 && space + 1 < line.size() &&
            line.find(' ', space + 1) == std::string_view::npos;
  WICK_CHECK_KIND(Data, ok, kWhat, ": ", path, ":", number, ": expected a merge \"LEFT RIGHT\", got \"",
                  std::string(line.substr(0, 80)), "\"");
  return {std::string(line.substr(0, space)), std::string(line.substr(space + 1))};
}

std::vector<std::pair<std::string, std::string>> parse_merges_txt(const std::string& text, const std::string& path) {
  std::vector<std::pair<std::string, std::string>> merges;
  size_t begin = 0, number = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + begin, end - begin);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    ++number;
    if (!line.empty() && !(number == 1 && line.rfind("#version", 0) == 0)) merges.push_back(parse_merge(line, path, number));
    begin = end + 1;
  }
  return merges;
}

AddedToken parse_added_token(const Json& entry, int64_t id, const std::string& path) {
  WICK_CHECK_KIND(Data, entry.is_object() && entry.contains("content") && entry["content"].is_string(), kWhat, ": ",
                  path, ": added token ", id, " has no \"content\"");
  WICK_CHECK_KIND(Data, id >= 0 && id < INT32_MAX, kWhat, ": ", path, ": added token id ", id, " is not a token id");
  AddedToken token{entry["content"].get<std::string>(), static_cast<int32_t>(id), entry.value("special", true)};
  for (const char* flag : {"lstrip", "rstrip", "single_word", "normalized"})
    WICK_CHECK_KIND(Data, !(entry.contains(flag) && entry[flag].is_boolean() && entry[flag].get<bool>()), kWhat, ": ",
                    path, ": added token \"", token.content, "\" sets \"", flag,
                    "\", which wick's byte-level BPE tokenizer does not support (Qwen's set none)");
  WICK_CHECK_KIND(Data, !token.content.empty(), kWhat, ": ", path, ": added token ", id, " is empty");
  return token;
}

// Adds `token`, or checks that an entry of the same content has the same id.
void add_token(std::map<std::string, AddedToken>& added, const AddedToken& token, const std::string& path) {
  auto [it, inserted] = added.emplace(token.content, token);
  WICK_CHECK_KIND(Data, inserted || it->second.id == token.id, kWhat, ": ", path, ": added token \"", token.content,
                  "\" has id ", token.id, " here and ", it->second.id, " elsewhere");
}

std::vector<AddedToken> checked_added(const std::map<std::string, AddedToken>& added,
                                      const std::unordered_map<std::string, int32_t>& vocab, const std::string& path) {
  std::vector<AddedToken> out;
  for (const auto& [content, token] : added) {
    auto it = vocab.find(content);
    WICK_CHECK_KIND(Data, it == vocab.end() || it->second == token.id, kWhat, ": ", path, ": added token \"", content,
                    "\" has id ", token.id, " but the vocabulary gives ", it == vocab.end() ? -1 : it->second);
    out.push_back(token);
  }
  return out;
}

// tokenizer.json's model.merges: "LEFT RIGHT" strings (tokenizers < 0.20) or [LEFT, RIGHT] pairs.
std::vector<std::pair<std::string, std::string>> parse_merges_json(const Json& list, const std::string& path) {
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(list.size());
  for (const Json& merge : list) {
    if (merge.is_string()) {
      merges.push_back(parse_merge(merge.get<std::string>(), path, merges.size() + 1));
    } else {
      WICK_CHECK_KIND(Data, merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string(),
                      kWhat, ": ", path, ": merge ", merges.size() + 1, " is neither \"LEFT RIGHT\" nor [LEFT, RIGHT]");
      merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
    }
  }
  return merges;
}

// tokenizer.json's added_tokens: [{"id", "content", "special", ...}].
std::map<std::string, AddedToken> parse_added_tokens_json(const Json& json, const std::string& path) {
  std::map<std::string, AddedToken> added;
  if (!json.contains("added_tokens")) return added;
  WICK_CHECK_KIND(Data, json["added_tokens"].is_array(), kWhat, ": ", path, ": added_tokens is not a list");
  for (const Json& entry : json["added_tokens"]) {
    WICK_CHECK_KIND(Data, entry.is_object() && entry.contains("id") && entry["id"].is_number_integer(), kWhat, ": ",
                    path, ": an added token has no integer \"id\"");
    add_token(added, parse_added_token(entry, entry["id"].get<int64_t>(), path), path);
  }
  return added;
}

// tokenizers' normalizer: none, NFC, or a Sequence of NFC.
bool parse_normalizer(const Json& normalizer, const std::string& path) {
  if (normalizer.is_null()) return false;
  std::string type = normalizer.value("type", "");
  if (type == "NFC") return true;
  if (type == "Sequence" && normalizer.contains("normalizers") && normalizer["normalizers"].is_array()) {
    bool nfc = false;
    for (const Json& inner : normalizer["normalizers"]) nfc = parse_normalizer(inner, path) || nfc;
    return nfc;
  }
  WICK_FAIL(Data, kWhat, ": ", path, ": normalizer \"", type, "\" is not supported (Qwen's is NFC)");
}

// tokenizers' pre_tokenizer: Sequence[Split(Regex, Isolated), ByteLevel(use_regex=false)]. Returns the regex.
std::string parse_pre_tokenizer(const Json& pre, const std::string& path) {
  std::string pattern;
  bool byte_level = false;
  auto one = [&](const Json& p) {
    std::string type = p.value("type", "");
    if (type == "Split") {
      bool regex = p.contains("pattern") && p["pattern"].is_object() && p["pattern"].contains("Regex") &&
                   p["pattern"]["Regex"].is_string();
      WICK_CHECK_KIND(Data, regex && p.value("behavior", "") == "Isolated" && !p.value("invert", false), kWhat, ": ",
                      path, ": only a Split pre-tokenizer with a Regex pattern, behavior Isolated and no invert is "
                      "supported (Qwen's)");
      pattern = p["pattern"]["Regex"].get<std::string>();
    } else if (type == "ByteLevel") {
      WICK_CHECK_KIND(Data, !p.value("use_regex", true) && !p.value("add_prefix_space", false), kWhat, ": ", path,
                      ": a ByteLevel pre-tokenizer with use_regex or add_prefix_space is not supported (GPT-2's, not "
                      "Qwen's)");
      byte_level = true;
    } else {
      WICK_FAIL(Data, kWhat, ": ", path, ": pre-tokenizer \"", type, "\" is not supported");
    }
  };
  WICK_CHECK_KIND(Data, pre.is_object(), kWhat, ": ", path, ": no pre_tokenizer");
  if (pre.value("type", "") == "Sequence" && pre.contains("pretokenizers") && pre["pretokenizers"].is_array()) {
    for (const Json& p : pre["pretokenizers"]) one(p);
  } else {
    one(pre);
  }
  WICK_CHECK_KIND(Data, byte_level && !pattern.empty(), kWhat, ": ", path, ": the pre-tokenizer is not a regex split "
                  "followed by ByteLevel (not a Qwen byte-level BPE tokenizer)");
  return pattern;
}

}  // namespace

QwenTokenizer QwenTokenizer::from_tokenizer_json(const std::string& path) {
  Json json = read_json_object(path, kWhat);
  refuse_other_family(json, path, TokenizerFamily::HuggingFace);
  const Json& model = json["model"];
  WICK_CHECK_KIND(Data, model.value("type", "") == "BPE", kWhat, ": ", path, ": model type \"",
                  model.value("type", ""), "\" is not BPE (not a Qwen tokenizer)");
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"})
    WICK_CHECK_KIND(Data, !model.contains(affix) || model[affix].is_null() || model[affix] == "", kWhat, ": ", path,
                    ": the BPE model sets ", affix, " (a CLIP-style vocabulary, not Qwen's)");
  WICK_CHECK_KIND(Data, !model.value("byte_fallback", false), kWhat, ": ", path,
                  ": byte_fallback BPE is not supported (not a Qwen tokenizer)");
  WICK_CHECK_KIND(Data, model.contains("vocab") && model["vocab"].is_object() && model.contains("merges") &&
                  model["merges"].is_array(), kWhat, ": ", path, ": the BPE model has no vocab object or merges list");
  std::unordered_map<std::string, int32_t> vocab = parse_vocab(model["vocab"], path);
  std::vector<std::pair<std::string, std::string>> merges = parse_merges_json(model["merges"], path);
  std::map<std::string, AddedToken> added = parse_added_tokens_json(json, path);

  QwenTokenizer tokenizer;
  tokenizer.source_ = path;
  tokenizer.nfc_ = parse_normalizer(json.value("normalizer", Json()), path);
  tokenizer.pre_tokenizer_ = std::make_unique<PreTokenizer>(parse_pre_tokenizer(json["pre_tokenizer"], path), path);
  tokenizer.added_ = AddedTokens(checked_added(added, vocab, path));
  bool ignore_merges = model.contains("ignore_merges") && model["ignore_merges"].is_boolean() &&
                       model["ignore_merges"].get<bool>();
  tokenizer.bpe_ = std::make_unique<ByteLevelBpe>(std::move(vocab), merges, ignore_merges, path);
  tokenizer.finish();
  return tokenizer;
}

QwenTokenizer QwenTokenizer::from_vocab_and_merges(const std::string& folder) {
  const fs::path dir(folder);
  const std::string vocab_path = (dir / "vocab.json").string(), merges_path = (dir / "merges.txt").string();
  Json vocab_json = read_json_object(vocab_path, kWhat);
  refuse_other_family(vocab_json, vocab_path, TokenizerFamily::VocabJson);
  std::unordered_map<std::string, int32_t> vocab = parse_vocab(vocab_json, vocab_path);
  std::vector<std::pair<std::string, std::string>> merges =
      parse_merges_txt(read_file_text(merges_path, kWhat), merges_path);

  // transformers reads added tokens from tokenizer_config.json's added_tokens_decoder and added_tokens.json.
  std::map<std::string, AddedToken> added;
  const std::string config_path = (dir / "tokenizer_config.json").string();
  if (fs::is_regular_file(config_path)) {
    Json config = read_json_object(config_path, kWhat);
    if (config.contains("added_tokens_decoder")) {
      WICK_CHECK_KIND(Data, config["added_tokens_decoder"].is_object(), kWhat, ": ", config_path,
                      ": added_tokens_decoder is not an object");
      for (const auto& [id_text, entry] : config["added_tokens_decoder"].items()) {
        bool numeric = !id_text.empty() && id_text.size() < 10 &&
                       id_text.find_first_not_of("0123456789") == std::string::npos;
        WICK_CHECK_KIND(Data, numeric, kWhat, ": ", config_path, ": added_tokens_decoder key \"", id_text,
                        "\" is not a token id");
        add_token(added, parse_added_token(entry, std::stoll(id_text), config_path), config_path);
      }
    }
  }
  const std::string added_path = (dir / "added_tokens.json").string();
  if (fs::is_regular_file(added_path)) {
    Json json = read_json_object(added_path, kWhat);
    for (const auto& [content, id] : json.items()) {
      WICK_CHECK_KIND(Data, id.is_number_integer(), kWhat, ": ", added_path, ": the id of \"", content,
                      "\" is not an integer");
      Json entry = {{"content", content}};
      add_token(added, parse_added_token(entry, id.get<int64_t>(), added_path), added_path);
    }
  }

  QwenTokenizer tokenizer;
  tokenizer.source_ = vocab_path + " + merges.txt";
  tokenizer.nfc_ = true;
  tokenizer.pre_tokenizer_ = std::make_unique<PreTokenizer>(kQwenPattern, vocab_path);
  tokenizer.added_ = AddedTokens(checked_added(added, vocab, folder));
  tokenizer.bpe_ = std::make_unique<ByteLevelBpe>(std::move(vocab), merges, /*ignore_merges=*/false, vocab_path);
  tokenizer.finish();
  return tokenizer;
}

QwenTokenizer QwenTokenizer::from_folder(const std::string& path) {
  if (fs::is_regular_file(path)) {
    Json json = read_json_object(path, kWhat);
    refuse_other_family(json, path, TokenizerFamily::HuggingFace);
    return from_tokenizer_json(path);
  }
  WICK_CHECK_KIND(Data, fs::is_directory(path), kWhat, ": ", path, ": no such file or folder (expected a tokenizer "
                  "folder with tokenizer.json or vocab.json + merges.txt)");
  const fs::path dir(path);
  if (fs::is_regular_file(dir / "tokenizer.json")) return from_tokenizer_json((dir / "tokenizer.json").string());
  if (fs::is_regular_file(dir / "vocab.json") || fs::is_regular_file(dir / "merges.txt"))
    return from_vocab_and_merges(path);
  WICK_CHECK_KIND(Data, !fs::is_regular_file(dir / "tekken.json"), kWhat, ": ", path, " holds a Mistral Tekken "
                  "tokenizer (tekken.json), not a Qwen byte-level BPE tokenizer");
  WICK_FAIL(Data, kWhat, ": ", path, ": no tokenizer.json and no vocab.json + merges.txt");
}

}  // namespace wick::bpe
