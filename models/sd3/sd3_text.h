// What SD3 / SD3.5 take from their three text encoders (diffusers' StableDiffusion3Pipeline.encode_prompt): CLIP-L's
// and bigG's penultimate hidden states joined along features (768 + 1280 = 2048), zero-padded to T5's width (4096),
// then T5's last_hidden_state (no mask) appended along the sequence: 77 + t5_length tokens. Pooled: CLIP-L's pooled
// vector and bigG's projected one joined (768 + 1280 = 2048).
//
//   auto encoders = sd3::Sd3TextEncoders::from_pipeline("stable-diffusion-3.5-large", {.device = Device::cuda()});
//   text::PromptEmbeddings e = sd3::encode_sd3_prompts(encoders, {"a photo of a cat", ""});
//   e.context;   // [2, 77 + 256, 4096]   e.pooled: [2, 2048]   ("" is encoded: SD3's negative prompt)
//   sd3::encode_sd3_prompts(encoders, prompts, {.clip_l_pooled = sd3::ClipLPooled::Unprojected});  // SAI, ComfyUI
//
// CLIP-L's pooled vector (MODELS.md 0.6): diffusers and kohya pass it through CLIP-L's text_projection (SD3's
// text_encoder is a CLIPTextModelWithProjection); SAI's sd3_infer.py and ComfyUI use it unprojected. They agree only
// if the shipped projection is the identity. The default is diffusers'; the choice is recorded (info.clip_l_pooled).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/text/prompt_embeddings.h"
#include "models/text/prompt_encoder.h"
#include "models/text/text_encoder_slot.h"

namespace wick::sd3 {

enum class ClipLPooled {
  Projected,    // text_projection(pooled): diffusers, kohya (needs text_projection.weight in the CLIP-L file)
  Unprojected,  // pooled as it is: SAI's reference code, ComfyUI
};
const char* clip_l_pooled_name(ClipLPooled choice);  // "projected", "unprojected"
// "projected" / "unprojected"; WickError (Config) listing them otherwise.
ClipLPooled parse_clip_l_pooled(const std::string& name);

struct Sd3TextEncoders {
  clip::ClipTokenizer clip_l_tokenizer;  // pads with "<|endoftext|>" (49407)
  clip::ClipTokenizer clip_g_tokenizer;  // pads with "!" (0) in diffusers' tokenizer_2/, SAI and ComfyUI
  t5::T5Tokenizer t5_tokenizer;
  text::ClipEncoderSlot clip_l;
  text::ClipEncoderSlot clip_g;
  text::T5EncoderSlot t5;
  text::EncoderLoading loading;
  std::string clip_l_tokenizer_source, clip_g_tokenizer_source;

  // A diffusers pipeline folder: tokenizer/, tokenizer_2/ (read as they are), tokenizer_3/spiece.model,
  // text_encoder/ (CLIP-L), text_encoder_2/ (bigG), text_encoder_3/ (T5). Headers only; each encoder loads when
  // needed. WickError (Data) naming the file for a missing or corrupt file, an encoder of another kind, a
  // vocabulary larger than its encoder's embedding, a bigG without text_projection, or CLIP widths adding up to
  // more than T5's.
  static Sd3TextEncoders from_pipeline(const std::string& folder, const text::EncoderLoading& loading = {});
  // Files one by one (ComfyUI: clip_l.safetensors, clip_g.safetensors, t5xxl_fp16.safetensors): clip_l, clip_g,
  // t5, clip_vocab and t5_tokenizer are required; bigG's tokenizer is clip_g_vocab, else clip_vocab padded with "!".
  static Sd3TextEncoders from_files(const text::TextEncoderFiles& files, const text::EncoderLoading& loading = {});
  // Frees every encoder kept loaded (loading.keep_loaded).
  void unload() const;
};

struct Sd3PromptOptions {
  int64_t t5_length = 256;  // diffusers' and kohya's max_sequence_length
  ClipLPooled clip_l_pooled = ClipLPooled::Projected;
  int64_t batch_size = 8;
};

// prompts (N >= 1; SD3 encodes "" like any prompt) -> context [N, 77 + t5_length, T5 width], pooled
// [N, CLIP-L width or projection + bigG projection], mask [N, 77 + t5_length] (CLIP-L's or bigG's window, then
// T5's), tokens clip_l_ids / clip_g_ids / t5_ids / t5_mask. Projected with a CLIP-L that has no text_projection is a
// WickError (Data) naming the file. CLIP-L, bigG and T5 run in turn, each freed after unless loading.keep_loaded.
text::PromptEmbeddings encode_sd3_prompts(const Sd3TextEncoders& encoders, const std::vector<std::string>& prompts,
                                          const Sd3PromptOptions& options = {});

// What SD3's prompt encoder takes (text::PromptSpec): clip_l, clip_g, t5, clip_vocab, clip_g_vocab, t5_tokenizer;
// options t5_length (256) and clip_l_pooled (projected | unprojected).
text::PromptSpec sd3_prompt_spec();
// Sd3TextEncoders (from the pipeline folder, else the files) behind text::PromptEncoder (Architecture::
// make_prompt_encoder).
std::unique_ptr<text::PromptEncoder> make_sd3_prompt_encoder(const text::PromptEncoderRequest& request);

}  // namespace wick::sd3
