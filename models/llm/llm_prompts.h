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
//   auto mistral = llm::LlmEncoder::load(dev_te, {.output = llm::flux2_dev_text_output()});
//   Tensor dev = llm::flux2_dev_prompt_embeds(tekken, *mistral, {"A cat"});             // [1, 512, 3 x 5120]
//   auto qwen25 = llm::LlmEncoder::load(qwen_image_te, {.output = llm::qwen_image_text_output()});
//   llm::QwenImagePromptEmbeds q = llm::qwen_image_prompt_embeds(qwen25_tokenizer, *qwen25, {"A cat", ""});
//   // q.embeds [2, 7, 3584] (rows past a prompt's own length are 0), q.mask [2, 7] I64: 1 1 ... / 1 1 1 1 1 0 0
//
// Loading the encoder with the output these functions take builds only the layers they need (Z-Image: 35 of
// Qwen3-4B's 36, no final norm; klein: 27).
#pragma once

#include <string>
#include <vector>

#include "models/bpe/qwen_tokenizer.h"
#include "models/bpe/tekken_tokenizer.h"
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

// FLUX.2 dev (Flux2Pipeline._get_mistral_3_small_prompt_embeds): hidden_states[10], [20], [30].
LlmOutput flux2_dev_text_output();

// FLUX.2 dev's context: Mistral on "<s>[SYSTEM_PROMPT]{system}[/SYSTEM_PROMPT][INST]{prompt}[/INST]"
// (bpe::flux2_dev_prompt: "[IMG]" removed), left-padded with <pad> to max_length, the attention mask given;
// hidden_states 10 | 20 | 30 per token: [B, max_length, 3 x hidden], the padding rows included (a padding query has
// no key to attend: its rows are x + mlp(norm(x)) per layer, as torch's SDPA gives). Throws as zimage_prompt_embeds
// ((Data) unless the encoder is a Mistral model).
Tensor flux2_dev_prompt_embeds(const bpe::TekkenTokenizer& tokenizer, LlmEncoder& encoder,
                               const std::vector<std::string>& prompts, int64_t max_length = 512);

// Qwen-Image (QwenImagePipeline._get_qwen_prompt_embeds): hidden_states[-1], the last hidden state with the final
// norm.
LlmOutput qwen_image_text_output();

struct QwenImagePromptEmbeds {
  Tensor embeds;  // [B, L, hidden] in the encoder's dtype: prompt i's rows first, then 0
  Tensor mask;    // [B, L] I64 on the CPU: 1 on prompt i's rows; L = the longest prompt's rows
};

// Qwen-Image's text conditioning (QwenImagePipeline.encode_prompt): Qwen2.5-VL's language model on the pipeline's
// system template (bpe::qwen_image_prompt: truncated to 1024 + 34 tokens), the last hidden state with the final norm,
// padding removed, the first 34 rows (the system block and "<|im_start|>user\n") dropped, at most
// max_sequence_length rows kept, then zero-padded to the batch's longest with a mask. Each prompt runs alone and
// only up to its last kept token (the model is causal). Throws as zimage_prompt_embeds ((Data) unless the encoder is
// a Qwen2 model; (Config) for max_sequence_length < 1 or > 1024, which the pipeline refuses).
QwenImagePromptEmbeds qwen_image_prompt_embeds(const bpe::QwenTokenizer& tokenizer, LlmEncoder& encoder,
                                               const std::vector<std::string>& prompts,
                                               int64_t max_sequence_length = 512);

}  // namespace wick::llm
