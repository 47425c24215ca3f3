#include "models/t5/t5_tokenizer.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <filesystem>
#include <string_view>

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

struct T5Tokenizer::Processor {
  sentencepiece::SentencePieceProcessor sp;
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
  return T5Tokenizer(std::move(processor), file);
}

std::vector<int32_t> T5Tokenizer::pieces(const std::string& text) const {
  std::vector<int> ids;
  const sentencepiece::util::Status status = processor_->sp.Encode(std::string_view(text), &ids);
  WICK_CHECK_KIND(Data, status.ok(), "t5 tokenizer: ", path_, " cannot encode a text of ", text.size(),
                  " bytes: ", status.ToString());
  return std::vector<int32_t>(ids.begin(), ids.end());
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
