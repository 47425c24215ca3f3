#include "models/qwenimage/qwenimage_text.h"

#include <filesystem>
#include <utility>

#include "models/llm/llm_prompts.h"
#include "runtime/error.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/join.h"

namespace wick::qwenimage {
namespace {

namespace fs = std::filesystem;

QwenImageTextEncoder make(const std::string& text_encoder, const std::string& tokenizer,
                          const text::EncoderLoading& loading) {
  loading.compute_dtype();  // a dtype the encoder cannot run is an error now, not after loading
  auto qwen = std::make_shared<const bpe::QwenTokenizer>(
      fs::is_directory(tokenizer) ? bpe::QwenTokenizer::from_folder(tokenizer)
                                  : bpe::QwenTokenizer::from_tokenizer_json(tokenizer));
  return {std::move(qwen),
          text::LlmEncoderSlot(text_encoder,
                               {.output = llm::qwen_image_text_output(), .family = llm::LlmFamily::Qwen2}),
          loading};
}

}  // namespace

QwenImageTextEncoder QwenImageTextEncoder::from_pipeline(const std::string& folder,
                                                         const text::EncoderLoading& loading) {
  const fs::path root(folder);
  WICK_CHECK_KIND(Data, fs::is_directory(root), "Qwen-Image text encoder: ", folder, " is not a folder");
  return make((root / "text_encoder").string(), (root / "tokenizer").string(), loading);
}

QwenImageTextEncoder QwenImageTextEncoder::from_files(const std::string& text_encoder, const std::string& tokenizer,
                                                      const text::EncoderLoading& loading) {
  text::require_file(text_encoder, "qwenimage", "Qwen2.5-VL's weights (text_encoder)");
  text::require_file(tokenizer, "qwenimage", "Qwen2.5-VL's tokenizer (tokenizer)");
  return make(text_encoder, tokenizer, loading);
}

text::PromptEmbeddings encode_qwenimage_prompts(const QwenImageTextEncoder& encoder,
                                                const std::vector<std::string>& prompts,
                                                const QwenImagePromptOptions& options) {
  text::check_prompt_request(prompts, options.batch_size, "encode_qwenimage_prompts");
  WICK_CHECK_KIND(Config, options.max_length >= 1 && options.max_length <= 1024,
                  "encode_qwenimage_prompts: max_length must be 1 to 1024 (the pipeline's limit), got ",
                  options.max_length);
  const auto n = static_cast<int64_t>(prompts.size());
  const int64_t length = options.max_length;
  Tensor mask;
  text::LlmRun run = encoder.qwen25.run(encoder.loading, [&](llm::LlmEncoder& qwen25) {
    llm::QwenImagePromptEmbeds e = llm::qwen_image_prompt_embeds(*encoder.tokenizer, qwen25, prompts, length);
    mask = e.mask;
    return std::vector<Tensor>{e.embeds};
  });
  // [N, longest, D] -> [N, max_length, D]: zero rows and a zero mask after the longest prompt's rows.
  Tensor context = run.outputs.front();
  const int64_t longest = context.size(1);
  if (longest < length) {
    context = concat({context, zeros({n, length - longest, context.size(2)}, context.dtype(), context.device())}, 1);
    mask = concat({mask, zeros({n, length - longest}, mask.dtype(), mask.device())}, 1);
  }

  text::PromptEmbeddings out;
  out.timings = {{"qwen2.5-vl load", run.load_seconds}, {"qwen2.5-vl encode", run.encode_seconds}};
  out.context = context;
  out.mask = mask.to(DType::I64).to(encoder.loading.device);
  out.pooled = zeros({n, 0}, context.dtype(), context.device());

  text::PromptEncodingInfo& info = out.info;
  info.model = "qwenimage";
  info.embeds_encoder = kTextEmbedsEncoder;
  info.pooled_encoder = "none";
  info.max_length = length;
  info.dtype = encoder.loading.compute_dtype();
  info.device = encoder.loading.device;
  info.llm_file = encoder.qwen25.source_path();
  return out;
}

text::PromptSpec qwenimage_prompt_spec() {
  return {.parts = {{"text_encoder", "Qwen2.5-VL-7B's weights (ComfyUI qwen_2.5_vl_7b.safetensors, or a text_encoder/ "
                                     "folder)"},
                    {"tokenizer", "Qwen2.5-VL's tokenizer: a tokenizer/ folder or its tokenizer.json"}},
          .options = {{.name = "max_length", .aliases = {"max_sequence_length"}, .type = OptionType::Int,
                       .default_value = int64_t{512}, .range = ConfigRange::between(1, 1024),
                       .help = "caption rows kept after the template's 34 (the pipeline's max_sequence_length, 512); "
                               "longer captions are cut"}}};
}

std::unique_ptr<text::PromptEncoder> make_qwenimage_prompt_encoder(const text::PromptEncoderRequest& request) {
  const text::PromptSpec spec = qwenimage_prompt_spec();
  text::check_prompt_files(spec, request, "qwenimage");
  const ModelOptions options = text::resolved_options(spec, request);
  QwenImageTextEncoder encoder =
      request.pipeline.empty()
          ? QwenImageTextEncoder::from_files(text::prompt_file(request, "text_encoder"),
                                             text::prompt_file(request, "tokenizer"), request.loading)
          : QwenImageTextEncoder::from_pipeline(request.pipeline, request.loading);
  return std::make_unique<text::EncoderSetPromptEncoder<QwenImageTextEncoder, QwenImagePromptOptions>>(
      std::move(encoder),
      QwenImagePromptOptions{.max_length = options.get_int("max_length"), .batch_size = request.batch_size},
      &encode_qwenimage_prompts);
}

}  // namespace wick::qwenimage
