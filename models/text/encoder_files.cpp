#include "models/text/encoder_files.h"

#include <algorithm>
#include <utility>

#include "runtime/error.h"

namespace wick::text {
namespace {

const std::vector<PromptPart>& all_parts() {
  static const std::vector<PromptPart> parts = {
      {"clip_l", "CLIP-L weights (e.g. ComfyUI clip_l.safetensors)"},
      {"clip_g", "CLIP-G (bigG) weights (e.g. ComfyUI clip_g.safetensors)"},
      {"t5", "T5-XXL weights (e.g. t5xxl_fp16.safetensors)"},
      {"clip_vocab",
       "CLIP vocabulary: a tokenizer folder (vocab.json + merges.txt) or open_clip's bpe_simple_vocab_16e6.txt.gz"},
      {"clip_g_vocab", "bigG's own tokenizer folder (default: the CLIP vocabulary padded with \"!\")"},
      {"t5_tokenizer", "T5's spiece.model, or a folder holding it"},
  };
  return parts;
}

}  // namespace

std::vector<PromptPart> encoder_parts(const std::vector<std::string>& names) {
  std::vector<PromptPart> out;
  for (const PromptPart& part : all_parts())
    if (std::find(names.begin(), names.end(), part.name) != names.end()) out.push_back(part);
  WICK_CHECK_KIND(Usage, out.size() == names.size(), "encoder_parts: an unknown part among the ", names.size(),
                  " named");
  return out;
}

TextEncoderFiles encoder_files(const PromptEncoderRequest& request) {
  return {.clip_l = prompt_file(request, "clip_l"),
          .clip_g = prompt_file(request, "clip_g"),
          .t5 = prompt_file(request, "t5"),
          .clip_vocab = prompt_file(request, "clip_vocab"),
          .clip_g_vocab = prompt_file(request, "clip_g_vocab"),
          .t5_tokenizer = prompt_file(request, "t5_tokenizer")};
}

}  // namespace wick::text
