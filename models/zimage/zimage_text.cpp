#include "models/zimage/zimage_text.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "models/bpe/prompt_layouts.h"
#include "models/llm/llm_prompts.h"
#include "runtime/error.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/join.h"

namespace wick::zimage {
namespace {

namespace fs = std::filesystem;

ZImageTextEncoder make(const std::string& text_encoder, const std::string& tokenizer,
                       const text::EncoderLoading& loading) {
  loading.compute_dtype();  // a dtype the encoder cannot run is an error now, not after loading
  auto qwen = std::make_shared<const bpe::QwenTokenizer>(
      fs::is_directory(tokenizer) ? bpe::QwenTokenizer::from_folder(tokenizer)
                                  : bpe::QwenTokenizer::from_tokenizer_json(tokenizer));
  return {std::move(qwen),
          text::LlmEncoderSlot(text_encoder, {.output = llm::zimage_text_output(), .family = llm::LlmFamily::Qwen3}),
          loading};
}

// rows [L_i, D] -> [N, length, D] with row i's L_i rows first, then zeros.
Tensor padded(const std::vector<Tensor>& rows, int64_t length) {
  std::vector<Tensor> out;
  out.reserve(rows.size());
  for (const Tensor& r : rows) {
    const int64_t n = std::min(r.size(0), length);
    Tensor row = r.narrow(0, 0, n);
    if (n < length) row = concat({row, zeros({length - n, r.size(1)}, r.dtype(), r.device())}, 0);
    out.push_back(row.unsqueeze(0));
  }
  return concat(out, 0);
}

}  // namespace

ZImageTextEncoder ZImageTextEncoder::from_pipeline(const std::string& folder, const text::EncoderLoading& loading) {
  const fs::path root(folder);
  WICK_CHECK_KIND(Data, fs::is_directory(root), "Z-Image text encoder: ", folder, " is not a folder");
  return make((root / "text_encoder").string(), (root / "tokenizer").string(), loading);
}

ZImageTextEncoder ZImageTextEncoder::from_files(const std::string& text_encoder, const std::string& tokenizer,
                                                const text::EncoderLoading& loading) {
  text::require_file(text_encoder, "zimage", "Qwen3's weights (text_encoder)");
  text::require_file(tokenizer, "zimage", "Qwen3's tokenizer (tokenizer)");
  return make(text_encoder, tokenizer, loading);
}

text::PromptEmbeddings encode_zimage_prompts(const ZImageTextEncoder& encoder, const std::vector<std::string>& prompts,
                                             const ZImagePromptOptions& options) {
  text::check_prompt_request(prompts, options.batch_size, "encode_zimage_prompts");
  WICK_CHECK(options.max_length >= 1, "encode_zimage_prompts: max_length must be at least 1, got ",
             options.max_length);
  const auto n = static_cast<int64_t>(prompts.size());
  const int64_t length = options.max_length;
  std::vector<int32_t> ids, mask;
  for (const std::string& prompt : prompts) {
    const bpe::PromptTokens t = bpe::zimage_prompt(*encoder.tokenizer, prompt, length);
    ids.insert(ids.end(), t.ids.begin(), t.ids.end());
    mask.insert(mask.end(), t.mask.begin(), t.mask.end());
  }
  text::LlmRun run = encoder.qwen3.run(encoder.loading, [&](llm::LlmEncoder& qwen3) {
    return llm::zimage_prompt_embeds(*encoder.tokenizer, qwen3, prompts, length);
  });

  text::PromptEmbeddings out;
  out.timings = {{"qwen3 load", run.load_seconds}, {"qwen3 encode", run.encode_seconds}};
  out.context = padded(run.outputs, length);
  out.mask = text::ids_tensor(mask, n, length);
  out.pooled = zeros({n, 0}, out.context.dtype(), out.context.device());
  out.tokens = {{"qwen_ids", text::ids_tensor(ids, n, length)}, {"qwen_mask", out.mask}};

  text::PromptEncodingInfo& info = out.info;
  info.model = "zimage";
  info.embeds_encoder = kTextEmbedsEncoder;
  info.pooled_encoder = "none";
  info.max_length = length;
  info.dtype = encoder.loading.compute_dtype();
  info.device = encoder.loading.device;
  info.llm_file = encoder.qwen3.source_path();
  return out;
}

text::PromptSpec zimage_prompt_spec() {
  return {.parts = {{"text_encoder", "Qwen3-4B's weights (ComfyUI qwen_3_4b.safetensors, or a text_encoder/ folder)"},
                    {"tokenizer", "Qwen3's tokenizer: a tokenizer/ folder or its tokenizer.json"}},
          .options = {{.name = "max_length", .aliases = {"max_sequence_length"}, .type = OptionType::Int,
                       .default_value = int64_t{512}, .range = ConfigRange::between(1, 4096),
                       .help = "Qwen3 tokens of a caption's chat template (the pipeline's 512); longer ones are cut"}}};
}

std::unique_ptr<text::PromptEncoder> make_zimage_prompt_encoder(const text::PromptEncoderRequest& request) {
  const text::PromptSpec spec = zimage_prompt_spec();
  text::check_prompt_files(spec, request, "zimage");
  const ModelOptions options = text::resolved_options(spec, request);
  ZImageTextEncoder encoder =
      request.pipeline.empty()
          ? ZImageTextEncoder::from_files(text::prompt_file(request, "text_encoder"),
                                          text::prompt_file(request, "tokenizer"), request.loading)
          : ZImageTextEncoder::from_pipeline(request.pipeline, request.loading);
  return std::make_unique<text::EncoderSetPromptEncoder<ZImageTextEncoder, ZImagePromptOptions>>(
      std::move(encoder),
      ZImagePromptOptions{.max_length = options.get_int("max_length"), .batch_size = request.batch_size},
      &encode_zimage_prompts);
}

}  // namespace wick::zimage
