// Text encoders not loaded until a call needs them: a path, the sizes read from the file's header, and
// running the encoder in batches, loading it first and freeing it after (unless asked to keep it). The
// per-model prompt encoders (models/flux/flux_text.h, models/sd3/sd3_text.h, models/sdxl/sdxl_text.h) hold
// these; they are the building blocks, not the entry point.
//
//   text::ClipEncoderSlot clip_l("FLUX.1-dev/text_encoder", clip::ClipKind::L);   // header only: no tensor read
//   clip_l.check_tokenizer(tokenizer, "FLUX.1-dev/tokenizer");                      // ids fit the embedding
//   text::ClipRun run = clip_l.encode(ids, {.device = Device::cuda()}, 8);         // loads, runs, frees
//   run.pooled;                                                                     // [N, width] bf16 on cuda
//   text::T5EncoderSlot t5("t5xxl_fp16.safetensors");
//   Tensor context = t5.encode(t5_ids, {.keep_loaded = true}, 8).context;          // kept for the next call
//   text::LlmEncoderSlot qwen3("qwen_3_4b.safetensors", {.output = llm::LlmOutput::hidden_state(-2),
//                                                         .family = llm::LlmFamily::Qwen3});   // header only
//   text::LlmRun r = qwen3.run({.device = Device::cuda()}, [&](llm::LlmEncoder& e) { return e.forward(ids); });
//
// Copies of a slot share the loaded encoder. encode() calls on one slot are serialized (a lock).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/clip/clip_text.h"
#include "models/clip/clip_tokenizer.h"
#include "models/clip/clip_weights.h"
#include "models/llm/llm_encoder.h"
#include "models/t5/t5_encoder.h"
#include "models/t5/t5_tokenizer.h"

namespace wick::text {

// Where and how encoders run.
struct EncoderLoading {
  Device device = Device::cpu();
  // Parameter and compute dtype, F32 or BF16 (T5 refuses F16). Unset: BF16 on CUDA, F32 on the CPU.
  std::optional<DType> dtype;
  // false: an encoder is loaded when a call needs it and freed when the call is done with it, so at most
  // one is in memory at a time. true: kept after the first call (sampling during training).
  bool keep_loaded = false;

  DType compute_dtype() const;  // dtype, or the device's default; WickError (Config) for F16 or an integer type
};

// The weight files and tokenizer sources of a model's text encoders given one by one (ComfyUI's layout:
// clip_l.safetensors, clip_g.safetensors, t5xxl_fp16.safetensors). "" = not given.
struct TextEncoderFiles {
  std::string clip_l, clip_g, t5;  // weights: a .safetensors file, an index, or a component folder
  // The CLIP vocabulary: a tokenizer folder (vocab.json + merges.txt, as diffusers' tokenizer/) or open_clip's
  // bpe_simple_vocab_16e6.txt.gz. CLIP-L pads it with "<|endoftext|>" (49407), bigG with "!" (0).
  std::string clip_vocab;
  std::string clip_g_vocab;  // bigG's own tokenizer folder, read as it is (its own pad); "": clip_vocab with pad "!"
  std::string t5_tokenizer;  // spiece.model, or a folder holding it
};

// A CLIP tokenizer from a tokenizer folder (from_folder) or, for any other path, open_clip's gz vocabulary
// (from_open_clip_bpe); `pad_token` overrides the folder's (the gz file's default is "<|endoftext|>").
clip::ClipTokenizer load_clip_tokenizer(const std::string& path, const std::optional<std::string>& pad_token);

// WickError (Config) "<model> text encoders: <what> is not given" when `path` is empty.
void require_file(const std::string& path, const char* model, const char* what);

// What a CLIP run returns, each [N, ...] in the loading dtype on the loading device.
struct ClipRun {
  Tensor penultimate;  // [N, L, width]: hidden_states[-2] (SDXL, SD3)
  Tensor pooled;       // [N, width]: final LayerNorm at the pooling position (Flux; SD3's CLIP-L unprojected)
  Tensor text_embeds;  // [N, projection]: text_projection(pooled); undefined without a projection
  double load_seconds = 0, encode_seconds = 0;
};

struct T5Run {
  Tensor context;  // [N, L, d_model]: last_hidden_state, every token attended (no mask: Flux, SD3)
  double load_seconds = 0, encode_seconds = 0;
};

class ClipEncoderSlot {
 public:
  // Opens the weights' header (a file, an index, a component folder, or a pipeline folder whose text_encoder/
  // (L) or text_encoder_2/ (G) holds them) and detects the format; no tensor is read. WickError (Data) naming
  // the file when it is not a CLIP text encoder (clip::detect_weight_format's message).
  ClipEncoderSlot(std::string path, clip::ClipKind kind);

  clip::ClipKind kind() const { return kind_; }
  const std::string& path() const { return path_; }                // as given
  const std::string& source_path() const { return source_path_; }  // the file or index holding the weights
  int64_t vocab_rows() const { return vocab_rows_; }
  int64_t positions() const { return positions_; }
  int64_t width() const { return width_; }
  int64_t projection_dim() const { return projection_dim_; }  // 0: no text_projection

  // WickError (Data) naming `tokenizer_source` and the weights when the tokenizer's ids do not all fit the
  // token embedding (vocab_size > rows) or its window is longer than the position embedding.
  void check_tokenizer(const clip::ClipTokenizer& tokenizer, const std::string& tokenizer_source) const;
  // ids [N, L] I32/I64 (CPU) -> the encoder's outputs, run batch_size sequences at a time and joined.
  ClipRun encode(const Tensor& ids, const EncoderLoading& loading, int64_t batch_size) const;
  bool loaded() const;
  void unload() const;  // frees a kept encoder

 private:
  struct Held;
  clip::ClipKind kind_;
  std::string path_, source_path_;
  int64_t vocab_rows_ = 0, positions_ = 0, width_ = 0, projection_dim_ = 0;
  std::shared_ptr<Held> held_;
};

class T5EncoderSlot {
 public:
  // Opens the weights' header (a file, an index, a component folder, or a pipeline folder: text_encoder_3/, else
  // text_encoder_2/) and detects the naming; no tensor is read. WickError (Data) naming the file when it is not
  // a T5 encoder.
  explicit T5EncoderSlot(std::string path);

  const std::string& path() const { return path_; }
  const std::string& source_path() const { return source_path_; }
  int64_t vocab_rows() const { return vocab_rows_; }
  int64_t d_model() const { return d_model_; }

  // WickError (Data) naming both files when the SentencePiece model has more pieces than the embedding has rows.
  void check_tokenizer(const t5::T5Tokenizer& tokenizer) const;
  // ids [N, L] I32/I64 (CPU) -> last_hidden_state without a mask, batch_size sequences at a time.
  T5Run encode(const Tensor& ids, const EncoderLoading& loading, int64_t batch_size) const;
  bool loaded() const;
  void unload() const;

 private:
  struct Held;
  std::string path_, source_path_;
  int64_t vocab_rows_ = 0, d_model_ = 0;
  std::shared_ptr<Held> held_;
};

// What an LlmEncoderSlot run returns.
struct LlmRun {
  std::vector<Tensor> outputs;  // what the function returned
  double load_seconds = 0, encode_seconds = 0;
};

// A language model used as a text encoder (models/llm/llm_encoder.h), loaded when a run needs it: Z-Image's Qwen3,
// FLUX.2's Qwen3 or Mistral, Qwen-Image's Qwen2.5-VL. Only the layers `options.output` needs are loaded.
class LlmEncoderSlot {
 public:
  // Opens the weights' header (a file, an index, a component folder; a pipeline folder's text_encoder/) and reads
  // the sizes and the family; no tensor is read. WickError (Data) naming the file when it is not a language model
  // of options.family (when set) or its hidden size is not options.required_hidden_size (when > 0).
  // options.dtype and options.device are replaced by the run's loading.
  LlmEncoderSlot(std::string path, llm::LlmLoadOptions options);
  const std::string& path() const { return path_; }
  const std::string& source_path() const { return source_path_; }
  const llm::LlmConfig& config() const { return config_; }  // as the header gives it (dtype and device not set)
  // `fn(encoder)` with the encoder loaded in loading's dtype on its device (no gradients), its tensors collected; the
  // encoder freed afterwards unless loading.keep_loaded.
  LlmRun run(const EncoderLoading& loading, const std::function<std::vector<Tensor>(llm::LlmEncoder&)>& fn) const;
  bool loaded() const;
  void unload() const;

 private:
  struct Held;
  std::string path_, source_path_;
  llm::LlmLoadOptions options_;
  llm::LlmConfig config_;
  std::shared_ptr<Held> held_;
};

}  // namespace wick::text
