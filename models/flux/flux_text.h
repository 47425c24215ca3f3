// What Flux.1 takes from its text encoders (diffusers' FluxPipeline.encode_prompt, BFL's conditioner): T5's
// last_hidden_state over t5_length tokens, no mask (the padding is attended to), as the context, and CLIP-L's pooled
// output (unprojected, 768) as the pooled vector.
//
//   auto encoders = flux::FluxTextEncoders::from_pipeline("FLUX.1-dev", {.device = Device::cuda()});   // bf16
//   text::PromptEmbeddings e = flux::encode_flux_prompts(encoders, {"a photo of a cat"}, {.t5_length = 512});
//   e.context;   // [1, 512, 4096]      e.pooled: [1, 768]      e.info.max_length: 512
//   auto comfy = flux::FluxTextEncoders::from_files({.clip_l = "clip_l.safetensors", .t5 = "t5xxl_fp16.safetensors",
//                                                    .clip_vocab = "bpe_simple_vocab_16e6.txt.gz",
//                                                    .t5_tokenizer = "spiece.model"});
//
// The T5 length changes every output (the padding is attended to): dev 512, schnell 256 in BFL, diffusers and
// kohya; train and sample with the same (PromptEncodingInfo::max_length is the dataset's text_max_length).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/text/prompt_embeddings.h"
#include "models/text/prompt_encoder.h"
#include "models/text/text_encoder_slot.h"

namespace wick::flux {

struct FluxTextEncoders {
  clip::ClipTokenizer clip_tokenizer;  // CLIP-L's: pads with "<|endoftext|>" (49407), window 77
  t5::T5Tokenizer t5_tokenizer;
  text::ClipEncoderSlot clip_l;
  text::T5EncoderSlot t5;
  text::EncoderLoading loading;
  std::string clip_tokenizer_source;  // the folder or gz file the CLIP vocabulary came from

  // A diffusers pipeline folder: tokenizer/ (CLIP-L, read as it is), tokenizer_2/spiece.model, text_encoder/
  // (CLIP-L), text_encoder_2/ (T5). Only headers are read here; each encoder loads when encoding needs it.
  // WickError (Data) naming the file: a missing or corrupt tokenizer or weights file, an encoder of another kind,
  // a vocabulary larger than its encoder's embedding.
  static FluxTextEncoders from_pipeline(const std::string& folder, const text::EncoderLoading& loading = {});
  // Files one by one: clip_l, t5, clip_vocab (padded with "<|endoftext|>") and t5_tokenizer are required
  // (WickError (Config) naming the missing one); the same checks as from_pipeline.
  static FluxTextEncoders from_files(const text::TextEncoderFiles& files, const text::EncoderLoading& loading = {});
  // Frees every encoder kept loaded (loading.keep_loaded).
  void unload() const;
};

struct FluxPromptOptions {
  int64_t t5_length = 512;  // dev 512, schnell 256 (diffusers' max_sequence_length)
  int64_t batch_size = 8;   // sequences per encoder call
};

// prompts (N >= 1, UTF-8, "" allowed) -> context [N, t5_length, T5 width] (T5-XXL: 4096), pooled [N, CLIP-L width]
// (768), mask [N, t5_length] (T5's), tokens clip_l_ids / t5_ids / t5_mask; in encoders.loading's dtype on its
// device. CLIP-L runs first, then T5; each is freed after its pass unless loading.keep_loaded.
text::PromptEmbeddings encode_flux_prompts(const FluxTextEncoders& encoders, const std::vector<std::string>& prompts,
                                           const FluxPromptOptions& options = {});

// What Flux's prompt encoder takes (text::PromptSpec): clip_l, t5, clip_vocab, t5_tokenizer; option t5_length (512,
// dev's; 256 for schnell).
text::PromptSpec flux_prompt_spec();
// FluxTextEncoders (from the pipeline folder, else the files) behind text::PromptEncoder, encoding with the
// request's t5_length and batch size (Architecture::make_prompt_encoder).
std::unique_ptr<text::PromptEncoder> make_flux_prompt_encoder(const text::PromptEncoderRequest& request);

}  // namespace wick::flux
