#include "models/text/stored_prompts.h"

#include <algorithm>
#include <map>

#include "engine/data/captions.h"
#include "runtime/error.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/index.h"
#include "runtime/ops/join.h"

namespace wick::text {

std::string prompt_text(const std::string& prompt, const std::string& trigger_word) {
  return apply_trigger(prompt, trigger_word, /*prepend=*/false);
}

PromptPlan plan_prompts(const std::vector<std::string>& texts,
                        const std::function<std::optional<int64_t>(const std::string&)>& stored_row) {
  PromptPlan plan;
  std::map<std::string, int64_t> place_of;
  for (const std::string& text : texts) {
    auto [at, added] = place_of.emplace(text, static_cast<int64_t>(plan.source_row.size()));
    if (added) {
      if (std::optional<int64_t> row = stored_row(text)) {
        plan.source_row.push_back(*row);
      } else {
        plan.source_row.push_back(-1 - static_cast<int64_t>(plan.to_encode.size()));
        plan.to_encode.push_back(text);
      }
    }
    plan.rows.push_back(at->second);
  }
  return plan;
}

PromptRows gather_prompts(const PromptPlan& plan, const SamplePrompts* stored, const PromptEmbeddings& encoded) {
  std::vector<Tensor> context_rows, pooled_rows, mask_rows;
  for (int64_t row : plan.source_row) {
    const bool from_store = row >= 0;
    WICK_CHECK(!from_store || stored != nullptr, "gather_prompts: a stored row without stored prompts");
    const Tensor& context = from_store ? stored->embeds : encoded.context;
    const Tensor& pooled = from_store ? stored->pooled : encoded.pooled;
    const Tensor& mask = from_store ? stored->mask : encoded.mask;
    const int64_t at = from_store ? row : -1 - row;
    context_rows.push_back(context.narrow(0, at, 1).to(DType::F32).to(Device::cpu()));
    pooled_rows.push_back(pooled.narrow(0, at, 1).to(DType::F32).to(Device::cpu()));
    mask_rows.push_back(mask.defined() ? mask.narrow(0, at, 1).to(Device::cpu()).to(DType::F32)
                                       : ones({1, context.size(1)}, DType::F32));
  }
  const Tensor index =
      Tensor::from_vector<int64_t>(plan.rows, {static_cast<int64_t>(plan.rows.size())}, Device::cpu());
  return {.context = index_select(concat(context_rows, 0), 0, index),
          .pooled = index_select(concat(pooled_rows, 0), 0, index),
          .mask = index_select(concat(mask_rows, 0), 0, index)};
}

std::vector<std::string> texts_not_stored(const std::vector<std::string>& prompts, const std::string& trigger_word,
                                          const std::optional<SamplePrompts>& stored) {
  std::vector<std::string> out;
  for (const std::string& prompt : prompts) {
    const std::string text = prompt_text(prompt, trigger_word);
    if (!stored || std::find(stored->captions.begin(), stored->captions.end(), text) == stored->captions.end())
      out.push_back(text);
  }
  return out;
}

std::string quoted_captions(const SamplePrompts& stored) {
  std::string out;
  for (const std::string& caption : stored.captions) out += (out.empty() ? "\"" : ", \"") + caption + "\"";
  return out;
}

}  // namespace wick::text
