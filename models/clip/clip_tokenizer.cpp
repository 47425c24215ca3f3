#include "models/clip/clip_tokenizer.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <climits>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "models/bpe/byte_level_bpe.h"
#include "models/clip/clip_text_normalize.h"
#include "runtime/error.h"

namespace wick::clip {
namespace {

namespace fs = std::filesystem;

// GPT-2's reversible byte -> character map, shared with the Qwen and Tekken tokenizers (models/bpe/byte_level_bpe.h).
using bpe::gpt2_byte_to_unicode;

// The 256 byte symbols in open_clip's vocabulary order: the printable bytes first, then the rest.
std::vector<int> byte_symbol_order() {
  std::vector<int> order;
  for (int pass = 0; pass < 2; ++pass)
    for (int b = 0; b < 256; ++b)
      if ((gpt2_byte_to_unicode()[b] < 256) == (pass == 0)) order.push_back(b);
  return order;
}

std::string byte_symbol(int b) { return encode_utf8(std::u32string(1, gpt2_byte_to_unicode()[b])); }

std::string read_gzip(const std::string& path) {
  WICK_CHECK_KIND(Data, fs::is_regular_file(path), "CLIP tokenizer: ", path, ": no such file (open_clip's "
                  "bpe_simple_vocab_16e6.txt.gz, in the open_clip package folder or tests/data/clip_tokenizer)");
  gzFile file = gzopen(path.c_str(), "rb");
  WICK_CHECK_KIND(Data, file != nullptr, "CLIP tokenizer: ", path, ": cannot open");
  std::string bytes;
  std::vector<char> chunk(1 << 20);
  while (true) {
    int n = gzread(file, chunk.data(), static_cast<unsigned>(chunk.size()));
    int code = Z_OK;
    const char* message = gzerror(file, &code);
    if (n < 0 || (code != Z_OK && code != Z_STREAM_END)) {  // a cut stream: Z_BUF_ERROR at its end
      std::string text = message ? message : "";
      gzclose(file);
      WICK_FAIL(Data, "CLIP tokenizer: ", path, ": corrupt gzip data (", text, ")");
    }
    if (n == 0) break;
    bytes.append(chunk.data(), static_cast<size_t>(n));
  }
  bool direct = gzdirect(file) == 1;
  gzclose(file);
  WICK_CHECK_KIND(Data, !direct, "CLIP tokenizer: ", path, ": not gzip data (expected open_clip's "
                  "bpe_simple_vocab_16e6.txt.gz)");
  return bytes;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  WICK_CHECK_KIND(Data, in.good(), "CLIP tokenizer: ", path.string(), ": cannot open");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

nlohmann::json read_json(const fs::path& path) {
  nlohmann::json json = nlohmann::json::parse(read_text(path), nullptr, /*allow_exceptions=*/false);
  WICK_CHECK_KIND(Data, !json.is_discarded() && json.is_object(), "CLIP tokenizer: ", path.string(),
                  ": not a JSON object");
  return json;
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(begin, end - begin);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    begin = end + 1;
  }
  return lines;
}

// "a b" -> (a, b); anything else is an error naming the file and line (1-based).
std::pair<std::string, std::string> parse_merge(std::string_view line, const std::string& path, size_t line_number) {
  size_t space = line.find(' ');
  bool ok = space != std::string_view::npos && space > 0 && space + 1 < line.size() &&
            line.find(' ', space + 1) == std::string_view::npos;
  WICK_CHECK_KIND(Data, ok, "CLIP tokenizer: ", path, ":", line_number, ": expected a merge \"LEFT RIGHT\", got \"",
                  std::string(line.substr(0, 80)), "\"");
  return {std::string(line.substr(0, space)), std::string(line.substr(space + 1))};
}

// One named special-token entry of a tokenizer_config.json / special_tokens_map.json: a string, an
// AddedToken object ({"content", "normalized", ...}) or null.
struct NamedToken {
  std::optional<std::string> content;
  bool normalized = false;
};

// `special`: the token's "special" flag when the object does not give one (transformers forces it on for
// special_tokens_map.json's entries); "normalized" defaults to !special, as tokenizers' AddedToken.
NamedToken parse_named_token(const nlohmann::json& value, std::optional<bool> forced_special, const std::string& path,
                             const std::string& key) {
  NamedToken token;
  if (value.is_null()) return token;
  if (value.is_string()) {
    token.content = value.get<std::string>();
    return token;
  }
  WICK_CHECK_KIND(Data, value.is_object() && value.contains("content") && value["content"].is_string(),
                  "CLIP tokenizer: ", path, ": ", key, " is neither a string nor a token object with \"content\"");
  token.content = value["content"].get<std::string>();
  bool special = forced_special ? *forced_special : value.value("special", false);
  token.normalized = value.contains("normalized") && value["normalized"].is_boolean() ? value["normalized"].get<bool>()
                                                                                     : !special;
  for (const char* flag : {"lstrip", "rstrip", "single_word"})
    WICK_CHECK_KIND(Data, !value.value(flag, false), "CLIP tokenizer: ", path, ": ", key, " sets \"", flag,
                    "\", which wick's CLIP tokenizer does not support");
  return token;
}

const char* const kRoles[] = {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"};

}  // namespace

void ClipTokenizer::build(std::unordered_map<std::string, int32_t> vocab,
                          const std::vector<std::pair<std::string, std::string>>& merges, const std::string& source) {
  id_to_token_.assign(vocab.size(), std::string());
  std::vector<bool> seen(vocab.size(), false);
  for (const auto& [token, id] : vocab) {
    WICK_CHECK_KIND(Data, id >= 0 && static_cast<size_t>(id) < vocab.size() && !seen[id], "CLIP tokenizer: ", source,
                    ": token ids are not 0..", vocab.size() - 1, " each once (\"", token, "\" has id ", id, ")");
    seen[id] = true;
    id_to_token_[id] = token;
  }
  token_to_id_ = std::move(vocab);
  for (int b = 0; b < 256; ++b) {
    std::string symbol = byte_symbol(b);
    byte_id_[b] = token_id(symbol);
    byte_end_id_[b] = token_id(symbol + "</w>");
    WICK_CHECK_KIND(Data, byte_id_[b] >= 0 && byte_end_id_[b] >= 0, "CLIP tokenizer: ", source,
                    ": the vocabulary lacks the byte symbol \"", symbol, "\" or \"", symbol,
                    "</w>\" (not a CLIP byte-level BPE vocabulary)");
  }
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    int32_t a = token_id(left), b = token_id(right), merged = token_id(left + right);
    WICK_CHECK_KIND(Data, a >= 0 && b >= 0 && merged >= 0, "CLIP tokenizer: ", source, ": merge ", rank + 1, " \"", left,
                    " ", right, "\": ", (a < 0 ? left : b < 0 ? right : left + right), " is not in the vocabulary");
    uint64_t key = (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
    merges_.emplace(key, Merge{static_cast<int32_t>(rank), merged});  // a repeated pair keeps its first rank
  }
}

void ClipTokenizer::finish(const std::string& source, const std::string& bos, const std::string& eos,
                           const std::string& pad, const std::vector<SpecialToken>& flagged, int64_t context_length) {
  auto id_of = [&](const std::string& token, const char* role) {
    int32_t id = token_id(token);
    WICK_CHECK_KIND(Data, id >= 0, "CLIP tokenizer: ", source, ": the ", role, " token \"", token,
                    "\" is not in the vocabulary");
    return id;
  };
  bos_id_ = id_of(bos, "BOS");
  eos_id_ = id_of(eos, "EOS");
  pad_id_ = id_of(pad, "padding");
  WICK_CHECK(context_length >= 2, "CLIP tokenizer: context length ", context_length, " leaves no room for BOS and EOS");
  context_length_ = context_length;
  special_tokens_ = flagged;
  for (const SpecialToken& s : special_tokens_) {
    (s.normalized ? normalized_specials_ : raw_specials_).push_back(decode_utf8(s.content));
    if (s.normalized) normalized_special_ids_.push_back(s.id); else raw_special_ids_.push_back(s.id);
  }
}

ClipTokenizer ClipTokenizer::from_open_clip_bpe(const std::string& gz_path, const ClipTokenizerOptions& options) {
  constexpr size_t kMerges = 49152 - 256 - 2;  // open_clip: lines 1 .. 48894
  std::string text = read_gzip(gz_path);
  std::vector<std::string_view> lines = split_lines(text);
  // Line 0 is a header: '"bpe_simple_vocab_16e6.txt#version: 0.2' in open_clip's file.
  WICK_CHECK_KIND(Data, !lines.empty() && lines[0].find("#version") != std::string_view::npos, "CLIP tokenizer: ",
                  gz_path, ": the first line is not a \"#version\" header (not open_clip's BPE merges file)");
  WICK_CHECK_KIND(Data, lines.size() > kMerges, "CLIP tokenizer: ", gz_path, ": ", lines.size() - 1,
                  " merge lines, open_clip's vocabulary takes the first ", kMerges);
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(kMerges);
  for (size_t i = 1; i <= kMerges; ++i) merges.push_back(parse_merge(lines[i], gz_path, i + 1));

  std::vector<std::string> tokens;
  for (int b : byte_symbol_order()) tokens.push_back(byte_symbol(b));
  for (int b : byte_symbol_order()) tokens.push_back(byte_symbol(b) + "</w>");
  for (const auto& [left, right] : merges) tokens.push_back(left + right);
  tokens.push_back("<|startoftext|>");
  tokens.push_back("<|endoftext|>");
  std::unordered_map<std::string, int32_t> vocab;
  for (size_t i = 0; i < tokens.size(); ++i)
    WICK_CHECK_KIND(Data, vocab.emplace(tokens[i], static_cast<int32_t>(i)).second, "CLIP tokenizer: ", gz_path,
                    ": the vocabulary entry \"", tokens[i], "\" (id ", i, ") appears twice");

  ClipTokenizer tokenizer;
  tokenizer.reference_ = options.reference;
  tokenizer.build(std::move(vocab), merges, gz_path);
  std::string pad = options.pad_token.value_or("<|endoftext|>");
  std::vector<SpecialToken> specials = {{"<|startoftext|>", 49406, false}, {"<|endoftext|>", 49407, false}};
  if (pad != specials[0].content && pad != specials[1].content) {
    int32_t pad_id = tokenizer.token_id(pad);
    WICK_CHECK_KIND(Data, pad_id >= 0, "CLIP tokenizer: ", gz_path, ": the padding token \"", pad,
                    "\" is not in the vocabulary");
    specials.push_back({pad, pad_id, false});
  }
  tokenizer.finish(gz_path, "<|startoftext|>", "<|endoftext|>", pad, specials, options.context_length.value_or(77));
  return tokenizer;
}

ClipTokenizer ClipTokenizer::from_folder(const std::string& folder, const ClipTokenizerOptions& options) {
  const fs::path dir(folder);
  WICK_CHECK_KIND(Data, fs::is_directory(dir), "CLIP tokenizer: ", folder, ": no such folder (expected a model's "
                  "tokenizer folder with vocab.json and merges.txt)");
  const fs::path vocab_path = dir / "vocab.json", merges_path = dir / "merges.txt";
  for (const fs::path& p : {vocab_path, merges_path})
    WICK_CHECK_KIND(Data, fs::is_regular_file(p), "CLIP tokenizer: ", p.string(), ": no such file (a CLIP tokenizer "
                    "folder has vocab.json and merges.txt)");

  nlohmann::json vocab_json = read_json(vocab_path);
  std::unordered_map<std::string, int32_t> vocab;
  vocab.reserve(vocab_json.size());
  for (const auto& [token, id] : vocab_json.items()) {
    WICK_CHECK_KIND(Data, id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < INT32_MAX,
                    "CLIP tokenizer: ", vocab_path.string(), ": the id of \"", token, "\" is not a token id");
    vocab.emplace(token, id.get<int32_t>());
  }
  std::string merges_text = read_text(merges_path);
  std::vector<std::string_view> lines = split_lines(merges_text);
  std::vector<std::pair<std::string, std::string>> merges;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].empty() || (i == 0 && lines[i].rfind("#version", 0) == 0)) continue;
    merges.push_back(parse_merge(lines[i], merges_path.string(), i + 1));
  }

  ClipTokenizer tokenizer;
  tokenizer.reference_ = options.reference;
  tokenizer.build(std::move(vocab), merges, vocab_path.string() + " + merges.txt");

  // Special tokens as transformers 5 reads them: tokenizer_config.json's roles; its
  // added_tokens_decoder when present, else special_tokens_map.json over the roles; CLIPTokenizer's
  // defaults for roles left unset. Each role's content is then a special token, whose "normalized"
  // flag comes from the last role (bos, eos, unk, sep, pad, cls, mask) that names it.
  const fs::path config_path = dir / "tokenizer_config.json", map_path = dir / "special_tokens_map.json";
  std::map<std::string, NamedToken> roles;
  std::vector<SpecialToken> decoder_tokens;
  int64_t context_length = 77;
  if (fs::is_regular_file(config_path)) {
    nlohmann::json config = read_json(config_path);
    for (const char* role : kRoles)
      if (config.contains(role)) roles[role] = parse_named_token(config[role], std::nullopt, config_path.string(), role);
    if (config.contains("model_max_length") && config["model_max_length"].is_number()) {
      double max_length = config["model_max_length"].get<double>();
      if (max_length >= 2 && max_length < 1e6) context_length = static_cast<int64_t>(max_length);
    }
    if (config.contains("added_tokens_decoder") && config["added_tokens_decoder"].is_object()) {
      for (const auto& [id_text, entry] : config["added_tokens_decoder"].items()) {
        NamedToken token = parse_named_token(entry, std::nullopt, config_path.string(), "added_tokens_decoder." + id_text);
        bool numeric = !id_text.empty() && id_text.size() < 10 &&
                       std::all_of(id_text.begin(), id_text.end(), [](char c) { return c >= '0' && c <= '9'; });
        WICK_CHECK_KIND(Data, numeric, "CLIP tokenizer: ", config_path.string(), ": added_tokens_decoder key \"", id_text,
                        "\" is not a token id");
        decoder_tokens.push_back({*token.content, static_cast<int32_t>(std::stol(id_text)), token.normalized});
      }
      for (auto& [role, token] : roles)
        for (const SpecialToken& d : decoder_tokens)
          if (token.content == d.content) token.normalized = d.normalized;
    } else if (fs::is_regular_file(map_path)) {
      nlohmann::json map = read_json(map_path);
      for (const char* role : kRoles)
        if (map.contains(role) && !map[role].is_null())
          roles[role] = parse_named_token(map[role], true, map_path.string(), role);  // special forced on
    }
  }
  for (const char* role : {"bos_token", "eos_token", "unk_token", "pad_token"})
    if (!roles[role].content)
      roles[role].content = std::string(role[0] == 'b' ? "<|startoftext|>" : "<|endoftext|>");
  if (options.pad_token) roles["pad_token"] = NamedToken{*options.pad_token, false};

  std::vector<SpecialToken> specials;
  auto add_special = [&](const std::string& content, int32_t id, bool normalized) {
    for (SpecialToken& s : specials)
      if (s.content == content) {
        s.normalized = normalized;
        return;
      }
    specials.push_back({content, id, normalized});
  };
  for (const SpecialToken& d : decoder_tokens) {
    WICK_CHECK_KIND(Data, tokenizer.token_id(d.content) == d.id, "CLIP tokenizer: ", config_path.string(),
                    ": added token \"", d.content, "\" has id ", d.id, " but vocab.json gives ",
                    tokenizer.token_id(d.content));
    add_special(d.content, d.id, d.normalized);
  }
  for (const char* role : kRoles) {
    const NamedToken& token = roles[role];
    if (!token.content) continue;
    int32_t id = tokenizer.token_id(*token.content);
    WICK_CHECK_KIND(Data, id >= 0, "CLIP tokenizer: ", folder, ": the ", role, " \"", *token.content,
                    "\" is not in vocab.json");
    add_special(*token.content, id, token.normalized);
  }
  tokenizer.finish(folder, *roles["bos_token"].content, *roles["eos_token"].content, *roles["pad_token"].content,
                   specials, options.context_length.value_or(context_length));
  return tokenizer;
}

int32_t ClipTokenizer::token_id(const std::string& token) const {
  auto it = token_to_id_.find(token);
  return it == token_to_id_.end() ? -1 : it->second;
}

const std::string& ClipTokenizer::token(int32_t id) const {
  WICK_CHECK(id >= 0 && id < vocab_size(), "CLIP tokenizer: token id ", id, " is outside the vocabulary of ",
             vocab_size());
  return id_to_token_[id];
}

// BPE of one pre-token: its bytes as symbols, the last with </w>, then repeatedly the adjacent pair of
// lowest merge rank, merged at every (non-overlapping, left to right) occurrence, as OpenAI's CLIP.
void ClipTokenizer::append_word(std::string_view word, std::vector<int32_t>& out) const {
  {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    auto it = cache_->words.find(std::string(word));
    if (it != cache_->words.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> symbols(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    uint8_t b = static_cast<uint8_t>(word[i]);
    symbols[i] = i + 1 == word.size() ? byte_end_id_[b] : byte_id_[b];
  }
  std::vector<int32_t> merged;
  while (symbols.size() > 1) {
    int32_t best_rank = INT32_MAX;
    uint64_t best_key = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      uint64_t key = (uint64_t(uint32_t(symbols[i])) << 32) | uint32_t(symbols[i + 1]);
      auto it = merges_.find(key);
      if (it != merges_.end() && it->second.rank < best_rank) best_rank = it->second.rank, best_key = key;
    }
    if (best_rank == INT32_MAX) break;
    const Merge& merge = merges_.at(best_key);
    int32_t left = static_cast<int32_t>(best_key >> 32), right = static_cast<int32_t>(best_key & 0xFFFFFFFFu);
    merged.clear();
    for (size_t i = 0; i < symbols.size();) {
      if (i + 1 < symbols.size() && symbols[i] == left && symbols[i + 1] == right) {
        merged.push_back(merge.merged_id);
        i += 2;
      } else {
        merged.push_back(symbols[i++]);
      }
    }
    symbols.swap(merged);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
  std::lock_guard<std::mutex> lock(cache_->mutex);
  if (cache_->words.size() >= (1u << 16)) cache_->words.clear();  // bounded: captions repeat few words
  cache_->words.emplace(std::string(word), std::move(symbols));
}

// transformers' pre-tokenizer: its pattern (with the literals "<|startoftext|>" and "<|endoftext|>" first,
// so that such a literal ends a punctuation run), then ByteLevel's GPT-2 pattern on each piece, which
// splits a literal into "<|", the letters, "|>" and leaves every other piece whole.
void ClipTokenizer::append_text(std::u32string_view text, std::vector<int32_t>& out) const {
  static const std::vector<std::u32string> literals = {U"<|startoftext|>", U"<|endoftext|>"};
  for (std::u32string_view piece : split_pre_tokens(text, literals, /*ignore_case=*/false)) {
    if (piece != literals[0] && piece != literals[1]) {
      append_word(encode_utf8(piece), out);
      continue;
    }
    for (size_t begin = 0, end; begin < piece.size(); begin = end) {
      bool letters = char_class(piece[begin]) == CharClass::Letter;
      for (end = begin + 1; end < piece.size() && (char_class(piece[end]) == CharClass::Letter) == letters;) ++end;
      append_word(encode_utf8(piece.substr(begin, end - begin)), out);
    }
  }
}

namespace {

// Calls on_text(segment) for the text between matches and on_special(id) for each match, taking at
// each position the longest of `specials` that starts there (leftmost-longest, as tokenizers' added
// vocabulary does).
template <typename OnText, typename OnSpecial>
void split_on_specials(std::u32string_view text, const std::vector<std::u32string>& specials,
                       const std::vector<int32_t>& ids, OnText on_text, OnSpecial on_special) {
  size_t begin = 0;
  for (size_t i = 0; i < text.size();) {
    size_t best = specials.size(), best_length = 0;
    for (size_t s = 0; s < specials.size(); ++s) {
      const std::u32string& special = specials[s];
      if (special.size() > best_length && text.compare(i, special.size(), special) == 0)
        best = s, best_length = special.size();
    }
    if (best == specials.size()) {
      ++i;
      continue;
    }
    if (i > begin) on_text(text.substr(begin, i - begin));
    on_special(ids[best]);
    i += best_length;
    begin = i;
  }
  if (begin < text.size()) on_text(text.substr(begin));
}

}  // namespace

std::vector<int32_t> ClipTokenizer::encode(std::string_view text_utf8) const {
  std::vector<int32_t> out;
  std::u32string text = decode_utf8(text_utf8);
  if (reference_ == Reference::OpenClip) {
    static const std::vector<std::u32string> literals = {U"<start_of_text>", U"<end_of_text>"};
    std::u32string clean = clean_like_open_clip(text);
    for (std::u32string_view piece : split_pre_tokens(clean, literals, /*ignore_case=*/true)) {
      // open_clip's BPE cache holds the two exact strings; a case-folded match is BPE'd as a word.
      if (piece == literals[0]) out.push_back(bos_id_);
      else if (piece == literals[1]) out.push_back(eos_id_);
      else append_word(encode_utf8(piece), out);
    }
    return out;
  }
  auto push = [&](int32_t id) { out.push_back(id); };
  split_on_specials(text, raw_specials_, raw_special_ids_, [&](std::u32string_view segment) {
    std::u32string normalized = normalize_like_transformers(segment);
    split_on_specials(normalized, normalized_specials_, normalized_special_ids_,
                      [&](std::u32string_view rest) { append_text(rest, out); }, push);
  }, push);
  return out;
}

TokenWindow ClipTokenizer::encode_window(std::string_view text) const {
  std::vector<int32_t> content = encode(text);
  TokenWindow window;
  const int64_t length = context_length_;
  const int64_t kept = std::min<int64_t>(static_cast<int64_t>(content.size()), length - 2);
  window.ids.assign(length, pad_id_);
  window.attention_mask.assign(length, 0);
  window.ids[0] = bos_id_;
  std::copy(content.begin(), content.begin() + kept, window.ids.begin() + 1);
  window.ids[kept + 1] = eos_id_;
  std::fill(window.attention_mask.begin(), window.attention_mask.begin() + kept + 2, 1);
  window.eos_position = kept + 1;
  window.pool_position = std::find(window.ids.begin(), window.ids.end(), eos_id_) - window.ids.begin();
  window.n_content_tokens = static_cast<int64_t>(content.size());
  return window;
}

TokenBatch ClipTokenizer::encode_batch(const std::vector<std::string>& texts) const {
  TokenBatch batch;
  batch.n = static_cast<int64_t>(texts.size());
  batch.context_length = context_length_;
  batch.ids.reserve(texts.size() * context_length_);
  batch.attention_mask.reserve(texts.size() * context_length_);
  for (const std::string& text : texts) {
    TokenWindow w = encode_window(text);
    batch.ids.insert(batch.ids.end(), w.ids.begin(), w.ids.end());
    batch.attention_mask.insert(batch.attention_mask.end(), w.attention_mask.begin(), w.attention_mask.end());
    batch.eos_positions.push_back(w.eos_position);
    batch.pool_positions.push_back(w.pool_position);
  }
  return batch;
}

std::string ClipTokenizer::decode(const std::vector<int32_t>& ids) const {
  static const std::array<int, 512> unicode_to_byte = [] {
    std::array<int, 512> t{};
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[gpt2_byte_to_unicode()[b]] = b;
    return t;
  }();
  std::string joined;
  for (int32_t id : ids) {
    bool special = std::any_of(special_tokens_.begin(), special_tokens_.end(),
                               [&](const SpecialToken& s) { return s.id == id; });
    if (special || id == bos_id_ || id == eos_id_ || id == pad_id_) continue;
    joined += token(id);
  }
  std::string bytes;
  for (char32_t c : decode_utf8(joined))
    if (c < unicode_to_byte.size() && unicode_to_byte[c] >= 0) bytes.push_back(static_cast<char>(unicode_to_byte[c]));
  std::string text = encode_utf8(decode_utf8(bytes));  // ill-formed bytes -> U+FFFD
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, 4, "</w>") == 0) {
      out.push_back(' ');
      i += 4;
    } else {
      out.push_back(text[i++]);
    }
  }
  size_t first = out.find_first_not_of(' '), last = out.find_last_not_of(' ');
  return first == std::string::npos ? std::string() : out.substr(first, last - first + 1);
}

}  // namespace wick::clip
