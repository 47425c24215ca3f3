// The prompt embeddings each diffusion pipeline hands its transformer, made from a language-model text encoder:
// the pipeline's token layout (models/bpe/prompt_layouts.h: chat template, truncation, padding) run through the
// encoder (llm_encoder.h), with the hidden states, padding rows and dropped tokens as diffusers 0.42's
// encode_prompt of that pipeline takes them. tests/data/llm_prompts holds diffusers' own outputs.
//
//   auto qwen3 = llm::LlmEncoder::load("qwen_3_4b.safetensors", {.output = llm::zimage_text_output()});
//   autograd::NoGradGuard no_grad;
//   std::vector<Tensor> caps = llm::zimage_prompt_embeds(tokenizer, *qwen3, {"A cat", ""});
//   // caps[0]: [10, 2560], caps[1]: [8, 2560] (the template rows of the real vocabulary, no padding)
//   auto klein = llm::LlmEncoder::load(folder, {.output = llm::flux2_klein_text_output()});
//   Tensor context = llm::flux2_klein_prompt_embeds(tokenizer, *klein, {"A cat"});   // [1, 512, 3 x 2560]
//
// Loading the encoder with the output these functions take builds only the layers they need (Z-Image: 35 of
// Qwen3-4B's 36, no final norm; klein: 27).
#pragma once

#include <string>
#include <vector>

#include "models/bpe/qwen_tokenizer.h"
#include "models/llm/llm_encoder.h"
#include "runtime/tensor.h"

namespace wick::llm {

// Z-Image (ZImagePipeline._encode_prompt): hidden_states[-2], the output of the next-to-last decoder layer
// without the final norm.
LlmOutput zimage_text_output();

// Z-Image's caption features: for each prompt, Qwen3's hidden_states[-2] on its chat-template tokens
// (bpe::zimage_prompt, truncated to max_length), the padding rows dropped: [L_i, hidden] in the encoder's dtype
// on its device, L_i = the prompt's real tokens (template included). Causal attention with right padding leaves
// the real rows as a padded batch gives them, so each prompt runs unpadded. Throws WickError (Config) for no
// prompts or max_length < 1, (Data) when the encoder is not a Qwen3 model.
std::vector<Tensor> zimage_prompt_embeds(const bpe::QwenTokenizer& tokenizer, LlmEncoder& encoder,
                                         const std::vector<std::string>& prompts, int64_t max_length = 512);

// FLUX.2 klein (Flux2KleinPipeline._get_qwen3_prompt_embeds): hidden_states[9], [18], [27] (raw layer outputs).
LlmOutput flux2_klein_text_output();

// FLUX.2 klein's context: Qwen3 on the chat template with an empty think block (bpe::flux2_klein_prompt),
// right-padded with <|endoftext|> to max_length, the attention mask given; hidden_states 9 | 18 | 27 concatenated
// per token: [B, max_length, 3 x hidden] in the encoder's dtype, the padding rows included (the transformer sees
// them; they attend to the real tokens). Throws as zimage_prompt_embeds.
Tensor flux2_klein_prompt_embeds(const bpe::QwenTokenizer& tokenizer, LlmEncoder& encoder,
                                 const std::vector<std::string>& prompts, int64_t max_length = 512);

}  // namespace wick::llm
