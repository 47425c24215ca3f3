#include "models/t5/t5_tokenizer.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <string_view>

#include "models/t5/unigram_model.h"
#include "runtime/error.h"

namespace fs = std::filesystem;

namespace wick::t5 {
namespace {

const char* const kModelFile = "spiece.model";
// Pipeline subfolders that hold T5's tokenizer, in search order: SD3's third tokenizer, Flux's second.
const char* const kTokenizerFolders[] = {"tokenizer_3", "tokenizer_2"};

// The spiece.model that `path` names (see T5Tokenizer::open).
std::string find_model_file(const std::string& path) {
  std::error_code ec;
  const fs::path given(path);
  WICK_CHECK_KIND(Data, fs::exists(given, ec), "t5 tokenizer: ", path,
                  " does not exist (a spiece.model file, or a folder holding one or a tokenizer_3/ or tokenizer_2/ "
                  "subfolder with one)");
  if (!fs::is_directory(given, ec)) return path;
  if (fs::is_regular_file(given / kModelFile, ec)) return (given / kModelFile).string();
  for (const char* folder : kTokenizerFolders)
    if (fs::is_regular_file(given / folder / kModelFile, ec)) return (given / folder / kModelFile).string();
  const bool fast_only = fs::is_regular_file(given / "tokenizer.json", ec) ||
                         fs::is_regular_file(given / "tokenizer_3" / "tokenizer.json", ec) ||
                         fs::is_regular_file(given / "tokenizer_2" / "tokenizer.json", ec);
  WICK_FAIL(Data, "t5 tokenizer: no ", kModelFile, " in ", path, " nor in its tokenizer_3/ or tokenizer_2/",
            fast_only ? " (there is a tokenizer.json: wick reads the SentencePiece model, which T5 repositories "
                        "ship beside it as spiece.model)"
                      : "");
}

}  // namespace

// libsentencepiece normalises (nmt_nfkc map, whitespace to "▁", extra spaces dropped, dummy prefix); the pieces
// come from UnigramModel, transformers' fast tokenizer's segmentation; typed special tokens are split out first.
struct T5Tokenizer::Processor {
  sentencepiece::SentencePieceProcessor sp;
  std::unique_ptr<UnigramModel> model;
  std::vector<std::pair<std::string, int32_t>> special;  // text typed in a caption -> id, as transformers adds them
  std::array<bool, 256> special_first_byte{};             // the bytes a special token can start with

  // Every piece with its score, in id order, and whether the model has byte pieces (byte fallback).
  std::vector<UnigramPiece> read_pieces(bool& has_bytes) const {
    std::vector<UnigramPiece> pieces(static_cast<size_t>(sp.GetPieceSize()));
    has_bytes = false;
    for (int id = 0; id < sp.GetPieceSize(); ++id) {
      pieces[static_cast<size_t>(id)] = {sp.IdToPiece(id), sp.GetScore(id)};
      has_bytes = has_bytes || sp.IsByte(id);
    }
    return pieces;
  }

  // The control and unknown pieces ("<pad>", "</s>", "<unk>") and transformers' 100 sentinels "<extra_id_k>"
  // (vocab_size + 99 - k unless the model has the piece).
  void add_special_tokens() {
    for (int id = 0; id < sp.GetPieceSize(); ++id)
      if (sp.IsControl(id) || sp.IsUnknown(id)) special.emplace_back(sp.IdToPiece(id), id);
    for (int k = 0; k < kExtraIds; ++k) {
      const std::string text = "<extra_id_" + std::to_string(k) + ">";
      const int id = sp.PieceToId(text);
      special.emplace_back(text, id != sp.unk_id() ? id : sp.GetPieceSize() + kExtraIds - 1 - k);
    }
    for (const auto& token : special)
      if (!token.first.empty()) special_first_byte[static_cast<uint8_t>(token.first[0])] = true;
  }

  // The special token typed at `text[at]` (the longest that matches), or nullptr.
  const std::pair<std::string, int32_t>* special_at(std::string_view text, size_t at) const {
    const std::pair<std::string, int32_t>* found = nullptr;
    for (const auto& token : special)
      if (text.substr(at).starts_with(token.first) && (found == nullptr || token.first.size() > found->first.size()))
        found = &token;
    return found;
  }

  // libsentencepiece's normalised form of `text`: the concatenated text of its pieces.
  std::string normalise(std::string_view text) const {
    const sentencepiece::ImmutableSentencePieceText spt = sp.EncodeAsImmutableProto(text);
    std::string out;
    for (size_t i = 0; i < spt.pieces_size(); ++i) out += spt.pieces(static_cast<int>(i)).piece();
    return out;
  }

  static constexpr int kExtraIds = 100;
};

T5Tokenizer::T5Tokenizer(std::shared_ptr<const Processor> processor, std::string path)
    : processor_(std::move(processor)), path_(std::move(path)) {}

T5Tokenizer T5Tokenizer::open(const std::string& path) {
  const std::string file = find_model_file(path);
  auto processor = std::make_shared<Processor>();
  const sentencepiece::util::Status status = processor->sp.Load(file);
  WICK_CHECK_KIND(Data, status.ok(), "t5 tokenizer: ", file,
                  " is not a SentencePiece model libsentencepiece can read: ", status.ToString());
  const sentencepiece::SentencePieceProcessor& sp = processor->sp;
  WICK_CHECK_KIND(Data, sp.pad_id() == kPadId && sp.eos_id() == kEosId && sp.unk_id() == kUnkId, "t5 tokenizer: ",
                  file, " has pad / EOS / unk ids ", sp.pad_id(), " / ", sp.eos_id(), " / ", sp.unk_id(),
                  ", not T5's 0 / 1 / 2 (not a T5 spiece.model?)");
  bool has_bytes = false;
  const std::vector<UnigramPiece> pieces = processor->read_pieces(has_bytes);
  processor->model = std::make_unique<UnigramModel>(pieces, kUnkId, has_bytes);
  processor->add_special_tokens();
  return T5Tokenizer(std::move(processor), file);
}

std::vector<int32_t> T5Tokenizer::pieces(const std::string& text) const {
  const Processor& processor = *processor_;
  std::vector<int32_t> ids;
  auto encode_segment = [&](size_t begin, size_t end) {
    if (begin >= end) return;
    const std::string normalised = processor.normalise(std::string_view(text).substr(begin, end - begin));
    const std::vector<int32_t> segment = processor.model->encode(normalised);
    ids.insert(ids.end(), segment.begin(), segment.end());
  };
  size_t segment_begin = 0;
  for (size_t at = 0; at < text.size(); ++at) {
    if (!processor.special_first_byte[static_cast<uint8_t>(text[at])]) continue;
    const std::pair<std::string, int32_t>* special = processor.special_at(text, at);
    if (special == nullptr) continue;
    encode_segment(segment_begin, at);
    ids.push_back(special->second);
    segment_begin = at + special->first.size();
    at = segment_begin - 1;
  }
  encode_segment(segment_begin, text.size());
  return ids;
}

T5Tokens T5Tokenizer::encode(const std::string& text, int64_t max_length) const {
  return t5_layout(pieces(text), max_length);
}

T5Batch T5Tokenizer::encode_batch(const std::vector<std::string>& texts, int64_t max_length) const {
  WICK_CHECK(!texts.empty(), "t5 tokenizer: encode_batch needs at least one text");
  const int64_t n = static_cast<int64_t>(texts.size());
  std::vector<int64_t> ids, mask;
  ids.reserve(static_cast<size_t>(n * std::max<int64_t>(max_length, 0)));
  mask.reserve(ids.capacity());
  for (const std::string& text : texts) {
    T5Tokens one = encode(text, max_length);
    ids.insert(ids.end(), one.ids.begin(), one.ids.end());
    mask.insert(mask.end(), one.mask.begin(), one.mask.end());
  }
  return {Tensor::from_vector(ids, {n, max_length}), Tensor::from_vector(mask, {n, max_length})};
}

int64_t T5Tokenizer::vocab_size() const { return processor_->sp.GetPieceSize(); }

int64_t T5Tokenizer::extra_id(int64_t k, int64_t n_extra) const {
  WICK_CHECK(n_extra > 0 && k >= 0 && k < n_extra, "t5 tokenizer: <extra_id_", k, "> does not exist with ", n_extra,
             " extra ids");
  return vocab_size() + n_extra - 1 - k;
}

std::string T5Tokenizer::piece(int32_t id) const {
  WICK_CHECK(id >= 0 && id < vocab_size(), "t5 tokenizer: id ", id, " is not a piece of ", path_, " (", vocab_size(),
             " pieces)");
  return processor_->sp.IdToPiece(id);
}

T5Tokens t5_layout(const std::vector<int32_t>& pieces, int64_t max_length) {
  WICK_CHECK(max_length >= 1, "t5 tokenizer: max_length must be at least 1 (room for EOS), got ", max_length);
  const size_t length = static_cast<size_t>(max_length);
  const size_t n_kept = std::min(pieces.size(), length - 1);
  T5Tokens out{.ids = std::vector<int64_t>(length, T5Tokenizer::kPadId), .mask = std::vector<int64_t>(length, 0)};
  std::copy(pieces.begin(), pieces.begin() + static_cast<std::ptrdiff_t>(n_kept), out.ids.begin());
  out.ids[n_kept] = T5Tokenizer::kEosId;
  std::fill(out.mask.begin(), out.mask.begin() + static_cast<std::ptrdiff_t>(n_kept + 1), 1);
  return out;
}

}  // namespace wick::t5
