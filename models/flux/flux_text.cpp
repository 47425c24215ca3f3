#include "models/flux/flux_text.h"

#include <filesystem>
#include <utility>

#include "models/text/encoder_files.h"
#include "runtime/error.h"

namespace wick::flux {
namespace {

namespace fs = std::filesystem;

FluxTextEncoders make(clip::ClipTokenizer clip_tokenizer, std::string clip_tokenizer_source,
                      t5::T5Tokenizer t5_tokenizer, const std::string& clip_l, const std::string& t5,
                      const text::EncoderLoading& loading) {
  loading.compute_dtype();  // a dtype the encoders cannot run is an error now, not after loading
  FluxTextEncoders e{std::move(clip_tokenizer),
                     std::move(t5_tokenizer),
                     text::ClipEncoderSlot(clip_l, clip::ClipKind::L),
                     text::T5EncoderSlot(t5),
                     loading,
                     std::move(clip_tokenizer_source)};
  e.clip_l.check_tokenizer(e.clip_tokenizer, e.clip_tokenizer_source);
  e.t5.check_tokenizer(e.t5_tokenizer);
  return e;
}

}  // namespace

FluxTextEncoders FluxTextEncoders::from_pipeline(const std::string& folder, const text::EncoderLoading& loading) {
  const fs::path root(folder);
  WICK_CHECK_KIND(Data, fs::is_directory(root), "flux text encoders: ", folder, " is not a folder");
  const std::string tokenizer = (root / "tokenizer").string();
  return make(clip::ClipTokenizer::from_folder(tokenizer), tokenizer,
              t5::T5Tokenizer::open((root / "tokenizer_2").string()), (root / "text_encoder").string(),
              (root / "text_encoder_2").string(), loading);
}

FluxTextEncoders FluxTextEncoders::from_files(const text::TextEncoderFiles& files,
                                              const text::EncoderLoading& loading) {
  text::require_file(files.clip_l, "flux", "the CLIP-L weights (clip_l)");
  text::require_file(files.t5, "flux", "the T5 weights (t5)");
  text::require_file(files.clip_vocab, "flux", "the CLIP vocabulary (clip_vocab)");
  text::require_file(files.t5_tokenizer, "flux", "the T5 tokenizer (t5_tokenizer)");
  return make(text::load_clip_tokenizer(files.clip_vocab, "<|endoftext|>"), files.clip_vocab,
              t5::T5Tokenizer::open(files.t5_tokenizer), files.clip_l, files.t5, loading);
}

text::PromptEmbeddings encode_flux_prompts(const FluxTextEncoders& encoders, const std::vector<std::string>& prompts,
                                           const FluxPromptOptions& options) {
  text::check_prompt_request(prompts, options.batch_size, "encode_flux_prompts");
  WICK_CHECK(options.t5_length >= 1, "encode_flux_prompts: t5_length must be at least 1, got ", options.t5_length);
  const auto n = static_cast<int64_t>(prompts.size());
  const clip::TokenBatch clip_tokens = encoders.clip_tokenizer.encode_batch(prompts);
  const t5::T5Batch t5_tokens = encoders.t5_tokenizer.encode_batch(prompts, options.t5_length);
  const Tensor clip_ids = text::ids_tensor(clip_tokens.ids, n, clip_tokens.context_length);

  text::PromptEmbeddings out;
  // diffusers' _get_clip_prompt_embeds: CLIPTextModel(ids).pooler_output; _get_t5_prompt_embeds: T5(ids)[0].
  text::ClipRun clip = encoders.clip_l.encode(clip_ids, encoders.loading, options.batch_size);
  out.timings = {{"clip_l load", clip.load_seconds}, {"clip_l encode", clip.encode_seconds}};
  out.pooled = clip.pooled;
  clip = {};
  text::T5Run t5 = encoders.t5.encode(t5_tokens.ids, encoders.loading, options.batch_size);
  out.timings.insert(out.timings.end(), {{"t5 load", t5.load_seconds}, {"t5 encode", t5.encode_seconds}});
  out.context = t5.context;
  out.mask = t5_tokens.mask;
  out.tokens = {{"clip_l_ids", clip_ids}, {"t5_ids", t5_tokens.ids}, {"t5_mask", t5_tokens.mask}};

  text::PromptEncodingInfo& info = out.info;
  info.model = "flux";
  info.embeds_encoder = "t5-xxl";
  info.pooled_encoder = "clip-l";
  info.max_length = options.t5_length;
  info.clip_length = clip_tokens.context_length;
  info.t5_length = options.t5_length;
  info.clip_l_pad_id = encoders.clip_tokenizer.pad_id();
  info.t5_pad_id = t5::T5Tokenizer::kPadId;
  info.dtype = encoders.loading.compute_dtype();
  info.device = encoders.loading.device;
  info.clip_l_file = encoders.clip_l.source_path();
  info.t5_file = encoders.t5.source_path();
  return out;
}

void FluxTextEncoders::unload() const {
  clip_l.unload();
  t5.unload();
}

text::PromptSpec flux_prompt_spec() {
  return {.parts = text::encoder_parts({"clip_l", "t5", "clip_vocab", "t5_tokenizer"}),
          .options = {{.name = "t5_length", .type = OptionType::Int, .default_value = int64_t{512},
                       .range = ConfigRange::between(1, 4096), .help = "T5 tokens (512: dev; 256 for schnell)"}}};
}

std::unique_ptr<text::PromptEncoder> make_flux_prompt_encoder(const text::PromptEncoderRequest& request) {
  const text::PromptSpec spec = flux_prompt_spec();
  text::check_prompt_files(spec, request, "flux");
  const ModelOptions options = text::resolved_options(spec, request);
  FluxTextEncoders encoders = request.pipeline.empty()
                                  ? FluxTextEncoders::from_files(text::encoder_files(request), request.loading)
                                  : FluxTextEncoders::from_pipeline(request.pipeline, request.loading);
  return std::make_unique<text::EncoderSetPromptEncoder<FluxTextEncoders, FluxPromptOptions>>(
      std::move(encoders),
      FluxPromptOptions{.t5_length = options.get_int("t5_length"), .batch_size = request.batch_size},
      &encode_flux_prompts);
}

}  // namespace wick::flux
