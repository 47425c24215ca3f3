// What the SDXL UNet takes from its two text encoders (diffusers' StableDiffusionXLPipeline.encode_prompt): CLIP-L's
// and bigG's penultimate hidden states joined along features, 77 x (768 + 1280 = 2048), and bigG's projected pooled
// vector (1280) as the pooled input of the added conditioning.
//
//   auto encoders = sdxl::SdxlTextEncoders::from_pipeline("stable-diffusion-xl-base-1.0");
//   text::PromptEmbeddings e = sdxl::encode_sdxl_prompts(encoders, {"a photo of a cat"});
//   e.context;   // [1, 77, 2048]   e.pooled: [1, 1280]
//   auto negative = sdxl::encode_sdxl_prompts(encoders, {""},
//                                             {.zeros_for_empty_prompt = encoders.force_zeros_for_empty_prompt});
//   // negative.context, negative.pooled: zeros (no encoder is loaded when every prompt is "")
//
// force_zeros_for_empty_prompt: diffusers gives zero embeddings for the negative prompt when none is given (SDXL
// base's model_index.json sets it; an explicit "" is encoded). Here it is a per-call option: with it, every prompt
// that is exactly "" gets a zero context and a zero pooled vector; without it, "" is encoded like any prompt.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/text/prompt_embeddings.h"
#include "models/text/prompt_encoder.h"
#include "models/text/text_encoder_slot.h"

namespace wick::sdxl {

struct SdxlTextEncoders {
  clip::ClipTokenizer clip_l_tokenizer;  // pads with "<|endoftext|>" (49407)
  clip::ClipTokenizer clip_g_tokenizer;  // pads with "!" (0) in SDXL's tokenizer_2/
  text::ClipEncoderSlot clip_l;
  text::ClipEncoderSlot clip_g;
  text::EncoderLoading loading;
  std::string clip_l_tokenizer_source, clip_g_tokenizer_source;
  // The pipeline's model_index.json force_zeros_for_empty_prompt (true when the file or the key is absent, diffusers'
  // default; SDXL base sets true, the refiner false). For callers to pass as SdxlPromptOptions::zeros_for_empty_prompt
  // when encoding a negative prompt.
  bool force_zeros_for_empty_prompt = true;

  // A diffusers pipeline folder: tokenizer/, tokenizer_2/ (read as they are), text_encoder/ (CLIP-L),
  // text_encoder_2/ (bigG), model_index.json if present. Headers only; each encoder loads when needed. WickError
  // (Data) naming the file for a missing or corrupt file, an encoder of another kind, a vocabulary larger than its
  // encoder's embedding, a bigG without text_projection, or a model_index.json that is not JSON.
  static SdxlTextEncoders from_pipeline(const std::string& folder, const text::EncoderLoading& loading = {});
  // Files one by one: clip_l, clip_g and clip_vocab are required; bigG's tokenizer is clip_g_vocab, else clip_vocab
  // padded with "!". force_zeros_for_empty_prompt stays true.
  static SdxlTextEncoders from_files(const text::TextEncoderFiles& files, const text::EncoderLoading& loading = {});
  // Frees every encoder kept loaded (loading.keep_loaded).
  void unload() const;
};

// A pipeline folder's model_index.json force_zeros_for_empty_prompt; true (diffusers' default, SDXL base's value)
// without the file or the key, or for folder "". WickError (Data) naming the file when it is not a JSON object or
// the value is not true or false.
bool pipeline_force_zeros(const std::string& folder);

struct SdxlPromptOptions {
  bool zeros_for_empty_prompt = false;  // "" -> zero context and pooled (see the header comment)
  int64_t batch_size = 8;
};

// prompts (N >= 1) -> context [N, 77, CLIP-L width + bigG width], pooled [N, bigG projection], mask [N, 77] (CLIP-L's
// or bigG's window), tokens clip_l_ids / clip_g_ids. Only the prompts that are not zeroed are encoded. CLIP-L then
// bigG, each freed after unless loading.keep_loaded.
text::PromptEmbeddings encode_sdxl_prompts(const SdxlTextEncoders& encoders, const std::vector<std::string>& prompts,
                                           const SdxlPromptOptions& options = {});

// What SDXL's prompt encoder takes (text::PromptSpec): clip_l, clip_g, clip_vocab, clip_g_vocab; option
// zeros_for_empty_prompt (false: "" is encoded like any prompt).
text::PromptSpec sdxl_prompt_spec();
// SdxlTextEncoders (from the pipeline folder, else the files) behind text::PromptEncoder (Architecture::
// make_prompt_encoder).
std::unique_ptr<text::PromptEncoder> make_sdxl_prompt_encoder(const text::PromptEncoderRequest& request);

}  // namespace wick::sdxl
