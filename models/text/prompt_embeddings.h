// What a model's prompt encoder returns (encode_flux_prompts, encode_sd3_prompts, encode_sdxl_prompts) and the
// record of how it was made, to be stored with cached embeddings.
//
//   text::PromptEmbeddings e = flux::encode_flux_prompts(encoders, {"a photo of a cat"}, {.t5_length = 512});
//   e.context;                       // [1, 512, 4096]   e.pooled: [1, 768]
//   e.info.embeds_encoder;           // "t5-xxl" -> the dataset's root attribute text_embeds_encoder
//   e.info.max_length;               // 512      -> text_max_length
//   save_safetensors(path, tensors, e.info.metadata());   // every choice, as strings
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor.h"

namespace wick::text {

// How the embeddings were made: what a cache must record so that training and sampling use the same.
struct PromptEncodingInfo {
  std::string model;           // the architecture that encoded them ("flux")
  std::string embeds_encoder;  // the dataset's text_embeds_encoder: what `context` is
  std::string pooled_encoder;  // the dataset's text_pooled_encoder: what `pooled` is
  // The dataset's text_max_length: the T5 length for Flux and SD3 (SD3's context has 77 + it tokens), 77 for SDXL.
  int64_t max_length = 0;
  int64_t clip_length = 0;  // CLIP window (77)
  int64_t t5_length = 0;    // 0: no T5 (SDXL)
  int64_t clip_l_pad_id = -1, clip_g_pad_id = -1, t5_pad_id = -1;  // -1: that tokenizer is not used
  bool t5_mask_applied = false;  // T5 attends to its padding (no model here passes the mask)
  std::string clip_l_pooled;     // SD3: "projected" (diffusers, kohya) or "unprojected" (SAI, ComfyUI); else ""
  std::optional<bool> zeros_for_empty_prompt;  // SDXL: whether "" prompts got zero context and pooled (unset: none)
  DType dtype = DType::F32;
  Device device = Device::cpu();
  std::string clip_l_file, clip_g_file, t5_file;  // the weights read ("" when not used)
  std::string llm_file;                           // a language-model text encoder's weights ("" when not used)

  // Every field as safetensors metadata strings, under the keys named as the fields ("model", "embeds_encoder",
  // ..., "clip_l_file"); fields of encoders not used are left out.
  std::map<std::string, std::string> metadata() const;
};

struct PromptEmbeddings {
  Tensor context;  // [N, L, D]: the sequence the denoiser cross-attends to, in info.dtype on info.device
  Tensor pooled;   // [N, P]
  // [N, L] I64: 1 on tokens (BOS/EOS included), 0 on padding, position by position of `context` (for the
  // dataset's text/mask; no model applies it). Where CLIP-L and bigG are joined along features, 1 where either is.
  Tensor mask;
  // The tokenizers' output, CPU I64: "clip_l_ids" [N, 77], "clip_g_ids" [N, 77], "t5_ids" [N, T5 length],
  // "t5_mask" [N, T5 length], those of the encoders used.
  std::vector<std::pair<std::string, Tensor>> tokens;
  // Seconds spent per step, in order ("clip_l load", "clip_l encode", "t5 load", "t5 encode", ...).
  std::vector<std::pair<std::string, double>> timings;
  PromptEncodingInfo info;
};

// A row-major [n, length] I32 id buffer as an I64 CPU tensor.
Tensor ids_tensor(const std::vector<int32_t>& ids, int64_t n, int64_t length);
// max(a, b) of two [N, L] integer masks, as an I64 CPU tensor (CLIP-L's and bigG's windows differ where bigG's
// tokenizer splits "!" apart).
Tensor union_mask(const Tensor& a, const Tensor& b);
// WickError (Usage) naming `who` for no prompts or batch_size < 1.
void check_prompt_request(const std::vector<std::string>& prompts, int64_t batch_size, const char* who);

}  // namespace wick::text
