// A sampler's prompt embeddings for one call: the rows a dataset stored (/sample_prompts: the config's sample
// prompts, encoded when the dataset was made) where a text is one of its captions, the model's encoder for the
// rest, each distinct text once. What the Flux, SD3 and SDXL samplers share.
//
//   PromptPlan plan = plan_prompts(texts, [&](const std::string& t) { return stored_row(t); });  // nullopt: encode
//   if (!plan.to_encode.empty() && !encoders) WICK_FAIL(Config, ..., quoted_captions(*stored), ...);
//   PromptEmbeddings encoded = encode(plan.to_encode);            // nothing when every text is stored
//   auto [context, pooled, mask] = gather_prompts(plan, stored, encoded);  // f32 on the CPU, one row per text
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/data/latent_dataset.h"
#include "models/text/prompt_embeddings.h"
#include "runtime/tensor.h"

namespace wick::text {

// What a prompt says once the trigger word is put in: "[trigger]" and "[name]" replaced, the ends trimmed (as
// `wick dataset encode` writes the sample prompts it stores). What the encoders get and the stored captions match.
std::string prompt_text(const std::string& prompt, const std::string& trigger_word);

struct PromptPlan {
  std::vector<int64_t> rows;            // per text: the place of its distinct text
  std::vector<int64_t> source_row;      // per distinct text: its stored row (>= 0), or -1 - its place in to_encode
  std::vector<std::string> to_encode;   // the distinct texts no stored row holds, in order of first use
};

// stored_row(text): the stored row of `text`, or nullopt when it must be encoded.
PromptPlan plan_prompts(const std::vector<std::string>& texts,
                        const std::function<std::optional<int64_t>(const std::string&)>& stored_row);

// The rows of a plan's texts, f32 on the CPU.
struct PromptRows {
  Tensor context;  // [N, L, D]
  Tensor pooled;   // [N, P]
  Tensor mask;     // [N, L]: 1 on tokens, 0 on padding (the dataset's text/mask, the encoder's mask)
};
// The rows of the plan's texts: stored rows from `stored` (null when the plan has none), the others from `encoded`
// (made from plan.to_encode, in its order).
PromptRows gather_prompts(const PromptPlan& plan, const SamplePrompts* stored, const PromptEmbeddings& encoded);

// The texts of a sample grid (each prompt with the trigger word put in) that `stored` does not hold, in order;
// all of them without stored prompts. Empty: the sampler needs no text encoder.
std::vector<std::string> texts_not_stored(const std::vector<std::string>& prompts, const std::string& trigger_word,
                                          const std::optional<SamplePrompts>& stored);

// The stored captions as `"a", "b"`, for messages.
std::string quoted_captions(const SamplePrompts& stored);

}  // namespace wick::text
