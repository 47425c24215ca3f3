#include "models/bpe/tekken_tokenizer.h"

#include <climits>
#include <filesystem>

#include "models/bpe/bpe_files.h"
#include "runtime/error.h"

namespace wick::bpe {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const char* const kWhat = "Tekken tokenizer";

// mistral_common's Tekkenizer.DEPRECATED_SPECIAL_TOKENS: the special tokens of a tekken.json without a
// "special_tokens" list, in rank order.
const char* const kDefaultSpecials[] = {
    "<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]", "[PREFIX]", "[MIDDLE]",
    "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]"};

bool decode_base64(std::string_view text, std::string& out) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (text.size() % 4 != 0) return false;
  for (size_t i = 0; i < text.size(); i += 4) {
    int v[4];
    int n_pad = 0;
    for (int k = 0; k < 4; ++k) {
      char c = text[i + k];
      if (c == '=' && i + 4 == text.size() && k >= 2) {
        v[k] = 0;
        ++n_pad;
      } else {
        if (n_pad > 0 || (v[k] = value(c)) < 0) return false;
      }
    }
    uint32_t bits = (uint32_t(v[0]) << 18) | (uint32_t(v[1]) << 12) | (uint32_t(v[2]) << 6) | uint32_t(v[3]);
    out.push_back(static_cast<char>(bits >> 16));
    if (n_pad < 2) out.push_back(static_cast<char>((bits >> 8) & 0xFF));
    if (n_pad < 1) out.push_back(static_cast<char>(bits & 0xFF));
  }
  return true;
}

int64_t config_int(const Json& config, const char* key, const std::string& path) {
  WICK_CHECK_KIND(Data, config.contains(key) && config[key].is_number_integer() && config[key].get<int64_t>() >= 0 &&
                  config[key].get<int64_t>() < INT32_MAX, kWhat, ": ", path, ": config.", key,
                  " is missing or not a count");
  return config[key].get<int64_t>();
}

// The special tokens' texts in rank order: the file's "special_tokens" list, else mistral_common's defaults.
std::vector<std::string> special_texts_of(const Json& json, const std::string& path) {
  std::vector<std::string> special_texts;
  if (json.contains("special_tokens")) {
    const Json& list = json["special_tokens"];
    WICK_CHECK_KIND(Data, list.is_array(), kWhat, ": ", path, ": special_tokens is not a list");
    special_texts.assign(list.size(), std::string());
    for (const Json& entry : list) {
      bool ok = entry.is_object() && entry.contains("rank") && entry["rank"].is_number_integer() &&
                entry["rank"].get<int64_t>() >= 0 && entry["rank"].get<int64_t>() < static_cast<int64_t>(list.size()) &&
                entry.contains("token_str") && entry["token_str"].is_string();
      WICK_CHECK_KIND(Data, ok, kWhat, ": ", path, ": a special_tokens entry is not {\"rank\", \"token_str\"} with "
                      "ranks 0..", list.size() - 1);
      std::string& slot = special_texts[entry["rank"].get<size_t>()];
      WICK_CHECK_KIND(Data, slot.empty(), kWhat, ": ", path, ": special token rank ", entry["rank"].get<int64_t>(),
                      " appears twice");
      slot = entry["token_str"].get<std::string>();
    }
  } else {
    special_texts.assign(std::begin(kDefaultSpecials), std::end(kDefaultSpecials));
  }
  return special_texts;
}

}  // namespace

TekkenTokenizer TekkenTokenizer::from_file(const std::string& given) {
  std::string path = given;
  if (fs::is_directory(given)) {
    path = (fs::path(given) / "tekken.json").string();
    WICK_CHECK_KIND(Data, fs::is_regular_file(path), kWhat, ": ", given, ": no tekken.json in this folder",
                    fs::is_regular_file(fs::path(given) / "vocab.json") || fs::is_regular_file(fs::path(given) /
                    "tokenizer.json") ? " (it holds a Hugging Face tokenizer: a Qwen byte-level BPE tokenizer?)" : "");
  }
  Json json = read_json_object(path, kWhat);
  TokenizerFamily family = family_of(json);
  WICK_CHECK_KIND(Data, family == TokenizerFamily::Tekken, kWhat, ": ", path, " is ", family_name(family),
                  ", not a Mistral tekken.json", family == TokenizerFamily::Other ? "" :
                  " (a Qwen byte-level BPE tokenizer? load it as one)");
  const Json& config = json["config"];
  WICK_CHECK_KIND(Data, config.contains("pattern") && config["pattern"].is_string(), kWhat, ": ", path,
                  ": config.pattern is missing");
  const int64_t n_special = config_int(config, "default_num_special_tokens", path);
  const int64_t vocab_size = config_int(config, "default_vocab_size", path);
  const Json& vocab = json["vocab"];
  WICK_CHECK_KIND(Data, vocab_size > n_special && vocab_size - n_special <= static_cast<int64_t>(vocab.size()) &&
                  vocab_size - n_special >= 256, kWhat, ": ", path, ": default_vocab_size ", vocab_size,
                  " minus ", n_special, " special tokens does not fit the ", vocab.size(), " vocabulary entries");

  TekkenTokenizer tokenizer;
  tokenizer.source_ = path;
  tokenizer.version_ = config.value("version", "");
  tokenizer.n_special_ = static_cast<int32_t>(n_special);
  const int64_t n_ranks = vocab_size - n_special;
  tokenizer.rank_bytes_.reserve(n_ranks);
  tokenizer.ranks_.reserve(n_ranks);
  for (int64_t rank = 0; rank < n_ranks; ++rank) {
    const Json& entry = vocab[rank];
    std::string bytes;
    bool ok = entry.is_object() && entry.contains("rank") && entry["rank"] == rank && entry.contains("token_bytes") &&
              entry["token_bytes"].is_string() && decode_base64(entry["token_bytes"].get<std::string>(), bytes) &&
              !bytes.empty();
    WICK_CHECK_KIND(Data, ok, kWhat, ": ", path, ": vocab entry ", rank, " is not {\"rank\": ", rank,
                    ", \"token_bytes\": BASE64}");
    WICK_CHECK_KIND(Data, rank >= 256 || (bytes.size() == 1 && static_cast<unsigned char>(bytes[0]) == rank), kWhat,
                    ": ", path, ": rank ", rank, " is not the byte ", rank, " (a Tekken vocabulary starts with the 256 "
                    "bytes)");
    WICK_CHECK_KIND(Data, tokenizer.ranks_.emplace(bytes, static_cast<int32_t>(rank)).second, kWhat, ": ", path,
                    ": vocab entry ", rank, " repeats an earlier token");
    tokenizer.rank_bytes_.push_back(std::move(bytes));
  }

  std::vector<std::string> special_texts = special_texts_of(json, path);
  WICK_CHECK_KIND(Data, static_cast<int64_t>(special_texts.size()) <= n_special, kWhat, ": ", path, ": ",
                  special_texts.size(), " special tokens but default_num_special_tokens is ", n_special);
  std::vector<AddedToken> specials;
  for (int64_t id = 0; id < n_special; ++id) {
    std::string text = id < static_cast<int64_t>(special_texts.size()) ? special_texts[id]
                                                                        : "<SPECIAL_" + std::to_string(id) + ">";
    specials.push_back({std::move(text), static_cast<int32_t>(id), true});
  }
  tokenizer.specials_ = AddedTokens(std::move(specials));
  tokenizer.bos_id_ = tokenizer.specials_.id_of("<s>");
  tokenizer.pad_id_ = tokenizer.specials_.id_of("<pad>");
  WICK_CHECK_KIND(Data, tokenizer.bos_id_ >= 0 && tokenizer.pad_id_ >= 0, kWhat, ": ", path,
                  ": no \"<s>\" or \"<pad>\" special token");
  tokenizer.pre_tokenizer_ = std::make_unique<PreTokenizer>(config["pattern"].get<std::string>(), path);
  return tokenizer;
}

int32_t TekkenTokenizer::rank_of(std::string_view bytes) const {
  auto it = ranks_.find(std::string(bytes));
  return it == ranks_.end() ? -1 : it->second;
}

// tiktoken's byte-pair merge: a piece that is a token is that token; otherwise, starting from single
// bytes, the adjacent pair whose concatenation has the lowest rank is merged (the leftmost on a tie),
// until no concatenation is a token.
void TekkenTokenizer::append_word(std::string_view bytes, std::vector<int32_t>& out) const {
  if (bytes.empty()) return;
  int32_t whole = rank_of(bytes);
  if (whole >= 0) {
    out.push_back(whole + n_special_);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    auto it = cache_->words.find(std::string(bytes));
    if (it != cache_->words.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<size_t> starts(bytes.size() + 1);  // part i is bytes[starts[i], starts[i + 1])
  for (size_t i = 0; i <= bytes.size(); ++i) starts[i] = i;
  while (starts.size() > 2) {
    int32_t best_rank = INT32_MAX;
    size_t best = 0;
    for (size_t i = 0; i + 2 < starts.size(); ++i) {
      int32_t rank = rank_of(bytes.substr(starts[i], starts[i + 2] - starts[i]));
      if (rank >= 0 && rank < best_rank) best_rank = rank, best = i;
    }
    if (best_rank == INT32_MAX) break;
    starts.erase(starts.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < starts.size(); ++i)
    ids.push_back(rank_of(bytes.substr(starts[i], starts[i + 1] - starts[i])) + n_special_);
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cache_->mutex);
  if (cache_->words.size() >= (1u << 16)) cache_->words.clear();
  cache_->words.emplace(std::string(bytes), std::move(ids));
}

std::vector<int32_t> TekkenTokenizer::encode(std::string_view text_utf8, SpecialText special) const {
  std::vector<int32_t> out;
  const std::string text = well_formed_utf8(text_utf8);
  auto encode_text = [&](std::string_view segment) {
    for (std::string_view piece : pre_tokenizer_->split(segment, /*keep_gaps=*/false)) append_word(piece, out);
  };
  if (special == SpecialText::AsText) encode_text(text);
  else specials_.split(text, encode_text, [&](int32_t id) { out.push_back(id); });
  return out;
}

std::string TekkenTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string bytes;
  for (int32_t id : ids) {
    WICK_CHECK(id >= 0 && id < vocab_size(), "Tekken tokenizer: token id ", id, " is outside the vocabulary of ",
               vocab_size(), " (", source_, ")");
    if (id < n_special_) bytes += specials_.tokens()[id].content;
    else bytes += rank_bytes_[id - n_special_];
  }
  return well_formed_utf8(bytes);
}

}  // namespace wick::bpe
