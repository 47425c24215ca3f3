#include "models/text/prompt_embeddings.h"

#include <algorithm>
#include <string>

#include "runtime/error.h"

namespace wick::text {

std::map<std::string, std::string> PromptEncodingInfo::metadata() const {
  std::map<std::string, std::string> m = {
      {"model", model},
      {"embeds_encoder", embeds_encoder},
      {"pooled_encoder", pooled_encoder},
      {"max_length", std::to_string(max_length)},
      {"clip_length", std::to_string(clip_length)},
      {"dtype", dtype_name(dtype)},
      {"device", device.str()},
  };
  if (t5_length > 0) {
    m["t5_length"] = std::to_string(t5_length);
    m["t5_mask_applied"] = t5_mask_applied ? "true" : "false";
  }
  if (clip_l_pad_id >= 0) m["clip_l_pad_id"] = std::to_string(clip_l_pad_id);
  if (clip_g_pad_id >= 0) m["clip_g_pad_id"] = std::to_string(clip_g_pad_id);
  if (t5_pad_id >= 0) m["t5_pad_id"] = std::to_string(t5_pad_id);
  if (!clip_l_pooled.empty()) m["clip_l_pooled"] = clip_l_pooled;
  if (zeros_for_empty_prompt) m["zeros_for_empty_prompt"] = *zeros_for_empty_prompt ? "true" : "false";
  if (!clip_l_file.empty()) m["clip_l_file"] = clip_l_file;
  if (!clip_g_file.empty()) m["clip_g_file"] = clip_g_file;
  if (!t5_file.empty()) m["t5_file"] = t5_file;
  if (!llm_file.empty()) m["llm_file"] = llm_file;
  return m;
}

Tensor ids_tensor(const std::vector<int32_t>& ids, int64_t n, int64_t length) {
  return Tensor::from_vector(std::vector<int64_t>(ids.begin(), ids.end()), {n, length});
}

Tensor union_mask(const Tensor& a, const Tensor& b) {
  WICK_CHECK(a.shape() == b.shape() && a.dim() == 2, "union_mask: masks ", a.describe(), " and ", b.describe(),
             " must be [N, L] of one shape");
  std::vector<int64_t> x = a.to_vector<int64_t>(), y = b.to_vector<int64_t>();
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::max(x[i], y[i]);
  return Tensor::from_vector(x, a.shape());
}

void check_prompt_request(const std::vector<std::string>& prompts, int64_t batch_size, const char* who) {
  WICK_CHECK(!prompts.empty(), who, ": no prompts to encode");
  WICK_CHECK(batch_size >= 1, who, ": batch_size must be at least 1, got ", batch_size);
}

}  // namespace wick::text
