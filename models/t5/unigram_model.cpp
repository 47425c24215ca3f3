#include "models/t5/unigram_model.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "runtime/error.h"

namespace wick::t5 {
namespace {

// The penalty below the lowest piece score that an unknown character gets (sentencepiece's kUnkPenalty).
constexpr double kUnknownPenalty = 10.0;
const std::string_view kWordStart = "\xe2\x96\x81";  // "▁", U+2581

// The byte length of the UTF-8 character that starts with `lead` (1 for a byte that cannot start one), at most
// `left`.
size_t char_length(uint8_t lead, size_t left) {
  const size_t length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xe ? 3 : (lead >> 3) == 0x1e ? 4 : 1;
  return std::min(length, left);
}

// The code point of the `length`-byte character at `p` (length from char_length).
char32_t code_point(const char* p, size_t length) {
  const auto byte = [&](size_t i) { return static_cast<char32_t>(static_cast<uint8_t>(p[i])); };
  switch (length) {
    case 2: return ((byte(0) & 0x1f) << 6) | (byte(1) & 0x3f);
    case 3: return ((byte(0) & 0x0f) << 12) | ((byte(1) & 0x3f) << 6) | (byte(2) & 0x3f);
    case 4: return ((byte(0) & 0x07) << 18) | ((byte(1) & 0x3f) << 12) | ((byte(2) & 0x3f) << 6) | (byte(3) & 0x3f);
    default: return byte(0);
  }
}

// Unicode's White_Space property (what Rust's char::is_whitespace and tokenizers' WhitespaceSplit test).
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

}  // namespace

UnigramModel::UnigramModel(const std::vector<UnigramPiece>& pieces, int32_t unk_id, bool byte_fallback)
    : unk_id_(unk_id) {
  WICK_CHECK_KIND(Data, unk_id >= 0 && static_cast<size_t>(unk_id) < pieces.size(), "unigram model: unknown id ",
                  unk_id, " is not one of its ", pieces.size(), " pieces");
  scores_.reserve(pieces.size());
  double min_score = std::numeric_limits<double>::infinity();
  for (const UnigramPiece& piece : pieces) {
    scores_.push_back(piece.score);
    min_score = std::min(min_score, static_cast<double>(piece.score));
  }
  unk_score_ = min_score - kUnknownPenalty;
  build_trie(pieces);
  if (byte_fallback) {
    byte_ids_.assign(256, -1);
    for (int byte = 0; byte < 256; ++byte) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", byte);
      int32_t node = 0;
      for (const char* c = name; *c != 0 && node >= 0; ++c) node = child(node, static_cast<uint8_t>(*c));
      if (node >= 0) byte_ids_[static_cast<size_t>(byte)] = node_piece_[static_cast<size_t>(node)];
    }
  }
}

void UnigramModel::build_trie(const std::vector<UnigramPiece>& pieces) {
  // Insert the texts in byte order: each adds nodes below its common prefix with the one before, so every node's
  // children are created in byte order, and a counting sort by parent makes the edge lists contiguous.
  std::vector<int32_t> order(pieces.size());
  for (size_t id = 0; id < order.size(); ++id) order[id] = static_cast<int32_t>(id);
  std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) {
    return pieces[static_cast<size_t>(x)].text < pieces[static_cast<size_t>(y)].text;
  });
  struct Edge {
    int32_t parent;
    uint8_t byte;
  };
  std::vector<Edge> edges;           // edges[k]: the edge into node k + 1
  std::vector<int32_t> path = {0};   // path[i]: the node spelling the first i bytes of `previous`
  std::string_view previous;
  node_piece_.assign(1, -1);
  for (int32_t id : order) {
    const std::string_view text = pieces[static_cast<size_t>(id)].text;
    if (text.empty()) continue;
    size_t common = 0;
    while (common < text.size() && common < previous.size() && text[common] == previous[common]) ++common;
    path.resize(common + 1);
    for (size_t i = common; i < text.size(); ++i) {
      edges.push_back({path.back(), static_cast<uint8_t>(text[i])});
      path.push_back(static_cast<int32_t>(node_piece_.size()));
      node_piece_.push_back(-1);
    }
    node_piece_[static_cast<size_t>(path.back())] = id;  // a repeated text: the last id, as in tokenizers
    previous = text;
  }
  edge_begin_.assign(node_piece_.size() + 1, 0);
  for (const Edge& edge : edges) ++edge_begin_[static_cast<size_t>(edge.parent) + 1];
  for (size_t k = 1; k < edge_begin_.size(); ++k) edge_begin_[k] += edge_begin_[k - 1];
  edge_byte_.resize(edges.size());
  edge_child_.resize(edges.size());
  std::vector<uint32_t> next(edge_begin_.begin(), edge_begin_.end() - 1);
  for (size_t k = 0; k < edges.size(); ++k) {
    const uint32_t slot = next[static_cast<size_t>(edges[k].parent)]++;
    edge_byte_[slot] = edges[k].byte;
    edge_child_[slot] = static_cast<int32_t>(k + 1);
  }
}

int32_t UnigramModel::child(int32_t node, uint8_t byte) const {
  const auto first = edge_byte_.begin() + edge_begin_[static_cast<size_t>(node)];
  const auto last = edge_byte_.begin() + edge_begin_[static_cast<size_t>(node) + 1];
  const auto it = std::lower_bound(first, last, byte);
  return it != last && *it == byte ? edge_child_[static_cast<size_t>(it - edge_byte_.begin())] : -1;
}

std::vector<int32_t> UnigramModel::encode(std::string_view text) const {
  std::vector<int32_t> out;
  std::string prefixed;
  auto flush = [&](size_t begin, size_t end) {
    if (begin >= end) return;
    const std::string_view word = text.substr(begin, end - begin);
    if (word.starts_with(kWordStart)) return encode_word(word, out);
    prefixed.assign(kWordStart);
    prefixed.append(word);
    encode_word(prefixed, out);
  };
  size_t word_begin = 0;
  for (size_t at = 0; at < text.size();) {
    const size_t length = char_length(static_cast<uint8_t>(text[at]), text.size() - at);
    const char32_t c = code_point(text.data() + at, length);
    if (c == 0x2581 || is_white_space(c)) {
      flush(word_begin, at);
      word_begin = c == 0x2581 ? at : at + length;  // "▁" opens the next word; white space is dropped
    }
    at += length;
  }
  flush(word_begin, text.size());
  return out;
}

void UnigramModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  struct Best {
    double score = 0;
    int32_t start = -1;  // where the last piece of the best path ending here starts; -1: none yet
    int32_t id = -1;
  };
  const size_t n = word.size();
  std::vector<Best> best(n + 1);
  auto offer = [&](size_t start, size_t end, int32_t id, double score) {
    Best& target = best[end];
    if (target.start < 0 || score > target.score) target = {score, static_cast<int32_t>(start), id};
  };
  for (size_t start = 0; start < n;) {
    const size_t length = char_length(static_cast<uint8_t>(word[start]), n - start);
    const double here = best[start].score;
    bool covers_one_char = false;
    int32_t node = 0;
    for (size_t at = start; at < n; ++at) {
      node = child(node, static_cast<uint8_t>(word[at]));
      if (node < 0) break;
      const int32_t id = node_piece_[static_cast<size_t>(node)];
      if (id < 0) continue;
      offer(start, at + 1, id, scores_[static_cast<size_t>(id)] + here);
      covers_one_char = covers_one_char || at + 1 - start == length;
    }
    if (!covers_one_char) offer(start, start + length, unk_id_, unk_score_ + here);
    start += length;
  }
  // Back from the end; adjacent unknown tokens fuse into one: [unknown_begin, unknown_end) while one is open.
  const size_t first = out.size();
  size_t unknown_begin = 0, unknown_end = 0;
  for (size_t end = n; end > 0;) {
    const Best& node = best[end];
    const size_t start = static_cast<size_t>(node.start);
    if (node.id == unk_id_) {
      if (unknown_begin == unknown_end) unknown_end = end;
      unknown_begin = start;
    } else {
      if (unknown_begin < unknown_end) append_unknown(word.substr(unknown_begin, unknown_end - unknown_begin), out);
      unknown_begin = unknown_end = 0;
      out.push_back(node.id);
    }
    end = start;
  }
  if (unknown_begin < unknown_end) append_unknown(word.substr(unknown_begin, unknown_end - unknown_begin), out);
  std::reverse(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
}

void UnigramModel::append_unknown(std::string_view token, std::vector<int32_t>& out) const {
  // A fused token that spells a piece is that piece (tokenizers looks the text up); else its bytes' <0xXX> pieces
  // when byte fallback is on and each exists; else unknown. Pushed in reverse: encode_word builds back to front.
  int32_t node = 0;
  for (size_t i = 0; i < token.size() && node >= 0; ++i) node = child(node, static_cast<uint8_t>(token[i]));
  if (node >= 0 && node_piece_[static_cast<size_t>(node)] >= 0) {
    out.push_back(node_piece_[static_cast<size_t>(node)]);
  } else if (!byte_ids_.empty() && std::all_of(token.begin(), token.end(),
                                                 [&](char c) { return byte_ids_[static_cast<uint8_t>(c)] >= 0; })) {
    for (size_t i = token.size(); i > 0; --i) out.push_back(byte_ids_[static_cast<uint8_t>(token[i - 1])]);
  } else {
    out.push_back(unk_id_);
  }
}

}  // namespace wick::t5
