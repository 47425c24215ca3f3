#include "models/text/text_encoder_slot.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <vector>

#include "engine/autograd/grad_mode.h"
#include "models/llm/llm_config.h"
#include "models/llm/llm_weights.h"
#include "models/t5/t5_weights.h"
#include "models/weights/key_map.h"
#include "models/weights/weight_source.h"
#include "runtime/error.h"
#include "runtime/ops/join.h"

namespace wick::text {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

const Shape& mapped_shape(const std::map<std::string, Shape>& shapes, const std::string& name,
                          const std::string& source) {
  auto it = shapes.find(name);
  WICK_CHECK_KIND(Data, it != shapes.end() && it->second.size() == 2, source, ": no 2-d tensor ", name);
  return it->second;
}

void check_ids(const Tensor& ids, int64_t batch_size, const char* who) {
  WICK_CHECK(ids.dim() == 2 && ids.size(0) >= 1 && (ids.dtype() == DType::I64 || ids.dtype() == DType::I32), who,
             ": ids must be [N, L] I32/I64 with N >= 1, got ", ids.describe());
  WICK_CHECK(batch_size >= 1, who, ": batch_size must be at least 1, got ", batch_size);
}

// Waits for the device so that a clock read after it measures the work.
void finish(Device device) { synchronize(current_stream(device)); }

Tensor join_rows(const std::vector<Tensor>& parts) {
  if (parts.empty() || !parts.front().defined()) return Tensor();
  return parts.size() == 1 ? parts.front() : concat(parts, 0);
}

// The pipeline subfolder holding T5, as T5Encoder::load picks it: SD3's text_encoder_3, else Flux's text_encoder_2.
std::string t5_subfolder_hint(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(fs::path(path) / "text_encoder_3", ec) ? "text_encoder_3" : "text_encoder_2";
}

// What a slot holds: its encoder while loaded, in which dtype and on which device, behind the slot's lock.
template <typename Model>
struct HeldEncoder {
  std::mutex mutex;
  std::shared_ptr<Model> model;
  DType dtype = DType::F32;
  Device device = Device::cpu();

  bool loaded() {
    std::lock_guard<std::mutex> lock(mutex);
    return model != nullptr;
  }
  void unload() {
    std::lock_guard<std::mutex> lock(mutex);
    model.reset();
  }
  // With the lock held: `load()` unless the encoder is loaded in `dtype` on `device` (the old one goes before the new
  // one arrives); the seconds it took.
  template <typename Load>
  double ensure(DType wanted, Device on, const Load& load) {
    const Clock::time_point start = Clock::now();
    if (!model || dtype != wanted || device != on) {
      model.reset();
      model = load();
      dtype = wanted;
      device = on;
      finish(on);
    }
    return seconds_since(start);
  }
};

// Frees the held encoder when a call ends (also by an exception) unless it is to be kept.
template <typename Model>
struct FreeUnlessKept {
  HeldEncoder<Model>& held;
  bool keep;
  ~FreeUnlessKept() {
    if (!keep) held.model.reset();
  }
};

}  // namespace

DType EncoderLoading::compute_dtype() const {
  const DType d = dtype ? *dtype : device.is_cuda() ? DType::BF16 : DType::F32;
  WICK_CHECK_KIND(Config, d == DType::F32 || d == DType::BF16, "text encoders: dtype ", dtype_name(d),
                  " is not supported: use f32 or bf16 (T5-XXL overflows f16)");
  return d;
}

void require_file(const std::string& path, const char* model, const char* what) {
  WICK_CHECK_KIND(Config, !path.empty(), model, " text encoders: ", what, " is not given");
}

clip::ClipTokenizer load_clip_tokenizer(const std::string& path, const std::optional<std::string>& pad_token) {
  std::error_code ec;
  clip::ClipTokenizerOptions options;
  options.pad_token = pad_token;
  return fs::is_directory(path, ec) ? clip::ClipTokenizer::from_folder(path, options)
                                    : clip::ClipTokenizer::from_open_clip_bpe(path, options);
}

// ---- CLIP ----

struct ClipEncoderSlot::Held : HeldEncoder<clip::ClipTextModel> {};

ClipEncoderSlot::ClipEncoderSlot(std::string path, clip::ClipKind kind)
    : kind_(kind), path_(std::move(path)), held_(std::make_shared<Held>()) {
  WeightSource source = WeightSource::open(path_, kind == clip::ClipKind::L ? "text_encoder" : "text_encoder_2");
  source_path_ = source.path();
  const DetectedFormat format = clip::detect_weight_format(source, kind);
  const std::map<std::string, Shape> shapes = mapped_shapes(source, format);
  // The sizes as load_clip_text will read them, so that a file it cannot build a model from fails here.
  const std::optional<clip::HfClipConfig> hf =
      format.prefix.empty() ? clip::read_hf_config(source) : std::optional<clip::HfClipConfig>();
  clip::config_from_shapes(shapes, hf ? hf->num_heads : 0, source_path_);
  const Shape& tokens = mapped_shape(shapes, "text_model.embeddings.token_embedding.weight", source_path_);
  vocab_rows_ = tokens[0];
  width_ = tokens[1];
  positions_ = mapped_shape(shapes, "text_model.embeddings.position_embedding.weight", source_path_)[0];
  if (shapes.count("text_projection.weight"))
    projection_dim_ = mapped_shape(shapes, "text_projection.weight", source_path_)[0];
}

void ClipEncoderSlot::check_tokenizer(const clip::ClipTokenizer& tokenizer, const std::string& tokenizer_source) const {
  WICK_CHECK_KIND(Data, tokenizer.vocab_size() <= vocab_rows_, tokenizer_source, ": the CLIP vocabulary has ",
                  tokenizer.vocab_size(), " tokens, but the ", clip::kind_name(kind_), " encoder ", source_path_,
                  " has a token embedding of ", vocab_rows_,
                  " rows: the tokenizer does not belong to this encoder");
  WICK_CHECK_KIND(Data, tokenizer.context_length() <= positions_, tokenizer_source, ": the CLIP window is ",
                  tokenizer.context_length(), " tokens, but the ", clip::kind_name(kind_), " encoder ", source_path_,
                  " has ", positions_, " positions");
}

bool ClipEncoderSlot::loaded() const { return held_->loaded(); }

void ClipEncoderSlot::unload() const { held_->unload(); }

ClipRun ClipEncoderSlot::encode(const Tensor& ids, const EncoderLoading& loading, int64_t batch_size) const {
  check_ids(ids, batch_size, clip::kind_name(kind_));
  const DType dtype = loading.compute_dtype();
  std::lock_guard<std::mutex> lock(held_->mutex);
  FreeUnlessKept<clip::ClipTextModel> release{*held_, loading.keep_loaded};
  ClipRun run;
  run.load_seconds = held_->ensure(dtype, loading.device, [&] {
    return clip::load_clip_text(path_, {.kind = kind_, .dtype = dtype, .device = loading.device}).model;
  });

  const Clock::time_point start = Clock::now();
  std::vector<Tensor> penultimate, pooled, text_embeds;
  const int64_t n = ids.size(0);
  for (int64_t first = 0; first < n; first += batch_size) {
    clip::ClipTextOutput out = held_->model->encode(ids.narrow(0, first, std::min(batch_size, n - first)).contiguous());
    penultimate.push_back(out.penultimate);
    pooled.push_back(out.pooled);
    text_embeds.push_back(out.text_embeds);
  }
  run.penultimate = join_rows(penultimate);
  run.pooled = join_rows(pooled);
  run.text_embeds = join_rows(text_embeds);
  finish(loading.device);
  run.encode_seconds = seconds_since(start);
  return run;
}

// ---- T5 ----

struct T5EncoderSlot::Held : HeldEncoder<t5::T5Encoder> {};

T5EncoderSlot::T5EncoderSlot(std::string path) : path_(std::move(path)), held_(std::make_shared<Held>()) {
  WeightSource source = WeightSource::open(path_, t5_subfolder_hint(path_));
  source_path_ = source.path();
  const std::map<std::string, Shape> shapes = mapped_shapes(source, t5::detect_weight_format(source));
  const Shape& shared = mapped_shape(shapes, "shared.weight", source_path_);
  vocab_rows_ = shared[0];
  d_model_ = shared[1];
}

void T5EncoderSlot::check_tokenizer(const t5::T5Tokenizer& tokenizer) const {
  WICK_CHECK_KIND(Data, tokenizer.vocab_size() <= vocab_rows_, tokenizer.path(), ": the SentencePiece model has ",
                  tokenizer.vocab_size(), " pieces, but the T5 encoder ", source_path_, " has an embedding of ",
                  vocab_rows_, " rows: the tokenizer does not belong to this encoder");
}

bool T5EncoderSlot::loaded() const { return held_->loaded(); }

void T5EncoderSlot::unload() const { held_->unload(); }

T5Run T5EncoderSlot::encode(const Tensor& ids, const EncoderLoading& loading, int64_t batch_size) const {
  check_ids(ids, batch_size, "T5");
  const DType dtype = loading.compute_dtype();
  std::lock_guard<std::mutex> lock(held_->mutex);
  FreeUnlessKept<t5::T5Encoder> release{*held_, loading.keep_loaded};
  T5Run run;
  run.load_seconds = held_->ensure(dtype, loading.device, [&] {
    return t5::T5Encoder::load(path_, {.dtype = dtype, .device = loading.device});
  });

  const Clock::time_point start = Clock::now();
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> parts;
  const int64_t n = ids.size(0);
  for (int64_t first = 0; first < n; first += batch_size)
    parts.push_back(held_->model->forward(ids.narrow(0, first, std::min(batch_size, n - first)).contiguous()));
  run.context = join_rows(parts);
  finish(loading.device);
  run.encode_seconds = seconds_since(start);
  return run;
}

struct LlmEncoderSlot::Held : HeldEncoder<llm::LlmEncoder> {};

LlmEncoderSlot::LlmEncoderSlot(std::string path, llm::LlmLoadOptions options)
    : path_(std::move(path)), options_(std::move(options)), held_(std::make_shared<Held>()) {
  std::error_code ec;
  const std::string weights = fs::is_directory(fs::path(path_) / "text_encoder", ec)
                                  ? (fs::path(path_) / "text_encoder").string()
                                  : path_;
  WeightSource source = WeightSource::open(weights);
  source_path_ = source.path();
  llm::LlmShapeHints hints = llm::read_config_json(source.path());
  hints.family = options_.family;
  if (options_.head_dim > 0) hints.head_dim = options_.head_dim;
  config_ = llm::config_from_shapes(mapped_shapes(source, llm::detect_weight_format(source)), source.path(), hints);
  WICK_CHECK_KIND(Data, options_.required_hidden_size <= 0 || config_.hidden_size == options_.required_hidden_size,
                  "language model weights ", source_path_, ": embed_tokens.weight gives hidden size ",
                  config_.hidden_size, " (a ", llm::family_name(config_.family), " model of ", config_.n_layers,
                  " layers) but ", options_.required_hidden_size, " is required");
  options_.output.resolve(config_.n_layers, config_.truncated);  // an output the file cannot give fails now
  path_ = weights;
}

bool LlmEncoderSlot::loaded() const { return held_->loaded(); }

void LlmEncoderSlot::unload() const { held_->unload(); }

LlmRun LlmEncoderSlot::run(const EncoderLoading& loading,
                           const std::function<std::vector<Tensor>(llm::LlmEncoder&)>& fn) const {
  const DType dtype = loading.compute_dtype();
  std::lock_guard<std::mutex> lock(held_->mutex);
  FreeUnlessKept<llm::LlmEncoder> release{*held_, loading.keep_loaded};
  LlmRun out;
  out.load_seconds = held_->ensure(dtype, loading.device, [&] {
    llm::LlmLoadOptions options = options_;
    options.dtype = dtype;
    options.device = loading.device;
    return llm::LlmEncoder::load(path_, options);
  });
  const Clock::time_point start = Clock::now();
  autograd::NoGradGuard no_grad;
  out.outputs = fn(*held_->model);
  finish(loading.device);
  out.encode_seconds = seconds_since(start);
  return out;
}

}  // namespace wick::text
