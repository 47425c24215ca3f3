#include "models/sd3/sd3_text.h"

#include <filesystem>
#include <utility>

#include "models/text/encoder_files.h"
#include "runtime/error.h"
#include "runtime/ops/join.h"

namespace wick::sd3 {
namespace {

namespace fs = std::filesystem;

Sd3TextEncoders make(clip::ClipTokenizer clip_l_tokenizer, std::string clip_l_source,
                     clip::ClipTokenizer clip_g_tokenizer, std::string clip_g_source, t5::T5Tokenizer t5_tokenizer,
                     const std::string& clip_l, const std::string& clip_g, const std::string& t5,
                     const text::EncoderLoading& loading) {
  loading.compute_dtype();
  Sd3TextEncoders e{std::move(clip_l_tokenizer),
                    std::move(clip_g_tokenizer),
                    std::move(t5_tokenizer),
                    text::ClipEncoderSlot(clip_l, clip::ClipKind::L),
                    text::ClipEncoderSlot(clip_g, clip::ClipKind::G),
                    text::T5EncoderSlot(t5),
                    loading,
                    std::move(clip_l_source),
                    std::move(clip_g_source)};
  e.clip_l.check_tokenizer(e.clip_l_tokenizer, e.clip_l_tokenizer_source);
  e.clip_g.check_tokenizer(e.clip_g_tokenizer, e.clip_g_tokenizer_source);
  e.t5.check_tokenizer(e.t5_tokenizer);
  WICK_CHECK_KIND(Data, e.clip_g.projection_dim() > 0, "sd3 text encoders: ", e.clip_g.source_path(),
                  " has no text_projection.weight, which SD3 pools bigG with: is it a CLIP-G (bigG) text encoder?");
  WICK_CHECK_KIND(Data, e.clip_l.width() + e.clip_g.width() <= e.t5.d_model(), "sd3 text encoders: the CLIP widths ",
                  e.clip_l.width(), " (", e.clip_l.source_path(), ") + ", e.clip_g.width(), " (",
                  e.clip_g.source_path(), ") exceed the T5 width ", e.t5.d_model(), " (", e.t5.source_path(),
                  ") they are padded to: are these SD3's encoders?");
  return e;
}

}  // namespace

const char* clip_l_pooled_name(ClipLPooled choice) {
  return choice == ClipLPooled::Projected ? "projected" : "unprojected";
}

ClipLPooled parse_clip_l_pooled(const std::string& name) {
  if (name == "projected") return ClipLPooled::Projected;
  if (name == "unprojected") return ClipLPooled::Unprojected;
  WICK_FAIL(Config, "sd3: CLIP-L pooled '", name, "' is not one of: projected (diffusers, kohya), unprojected (SAI, "
            "ComfyUI)");
}

Sd3TextEncoders Sd3TextEncoders::from_pipeline(const std::string& folder, const text::EncoderLoading& loading) {
  const fs::path root(folder);
  WICK_CHECK_KIND(Data, fs::is_directory(root), "sd3 text encoders: ", folder, " is not a folder");
  const std::string tokenizer = (root / "tokenizer").string(), tokenizer_2 = (root / "tokenizer_2").string();
  return make(clip::ClipTokenizer::from_folder(tokenizer), tokenizer, clip::ClipTokenizer::from_folder(tokenizer_2),
              tokenizer_2, t5::T5Tokenizer::open((root / "tokenizer_3").string()), (root / "text_encoder").string(),
              (root / "text_encoder_2").string(), (root / "text_encoder_3").string(), loading);
}

Sd3TextEncoders Sd3TextEncoders::from_files(const text::TextEncoderFiles& files, const text::EncoderLoading& loading) {
  text::require_file(files.clip_l, "sd3", "the CLIP-L weights (clip_l)");
  text::require_file(files.clip_g, "sd3", "the CLIP-G weights (clip_g)");
  text::require_file(files.t5, "sd3", "the T5 weights (t5)");
  text::require_file(files.clip_vocab, "sd3", "the CLIP vocabulary (clip_vocab)");
  text::require_file(files.t5_tokenizer, "sd3", "the T5 tokenizer (t5_tokenizer)");
  const bool own_g = !files.clip_g_vocab.empty();
  return make(text::load_clip_tokenizer(files.clip_vocab, "<|endoftext|>"), files.clip_vocab,
              own_g ? text::load_clip_tokenizer(files.clip_g_vocab, std::nullopt)
                    : text::load_clip_tokenizer(files.clip_vocab, "!"),
              own_g ? files.clip_g_vocab : files.clip_vocab, t5::T5Tokenizer::open(files.t5_tokenizer), files.clip_l,
              files.clip_g, files.t5, loading);
}

text::PromptEmbeddings encode_sd3_prompts(const Sd3TextEncoders& encoders, const std::vector<std::string>& prompts,
                                          const Sd3PromptOptions& options) {
  text::check_prompt_request(prompts, options.batch_size, "encode_sd3_prompts");
  WICK_CHECK(options.t5_length >= 1, "encode_sd3_prompts: t5_length must be at least 1, got ", options.t5_length);
  const bool projected = options.clip_l_pooled == ClipLPooled::Projected;
  WICK_CHECK_KIND(Data, !projected || encoders.clip_l.projection_dim() > 0, "sd3: ", encoders.clip_l.source_path(),
                  " has no text_projection.weight, so CLIP-L's pooled vector cannot be projected as diffusers does; "
                  "use the unprojected pooled vector (SAI, ComfyUI) or a CLIP-L file with its projection");
  const auto n = static_cast<int64_t>(prompts.size());
  const clip::TokenBatch l_tokens = encoders.clip_l_tokenizer.encode_batch(prompts);
  const clip::TokenBatch g_tokens = encoders.clip_g_tokenizer.encode_batch(prompts);
  WICK_CHECK_KIND(Data, l_tokens.context_length == g_tokens.context_length,
                  "sd3: the CLIP tokenizers' windows differ (", encoders.clip_l_tokenizer_source, ": ",
                  l_tokens.context_length, ", ", encoders.clip_g_tokenizer_source, ": ", g_tokens.context_length, ")");
  const t5::T5Batch t5_tokens = encoders.t5_tokenizer.encode_batch(prompts, options.t5_length);
  const Tensor l_ids = text::ids_tensor(l_tokens.ids, n, l_tokens.context_length);
  const Tensor g_ids = text::ids_tensor(g_tokens.ids, n, g_tokens.context_length);

  text::PromptEmbeddings out;
  // diffusers' _get_clip_prompt_embeds (clip_skip None): hidden_states[-2] and output[0] (text_embeds).
  text::ClipRun l = encoders.clip_l.encode(l_ids, encoders.loading, options.batch_size);
  out.timings = {{"clip_l load", l.load_seconds}, {"clip_l encode", l.encode_seconds}};
  text::ClipRun g = encoders.clip_g.encode(g_ids, encoders.loading, options.batch_size);
  out.timings.insert(out.timings.end(), {{"clip_g load", g.load_seconds}, {"clip_g encode", g.encode_seconds}});
  text::T5Run t5 = encoders.t5.encode(t5_tokens.ids, encoders.loading, options.batch_size);
  out.timings.insert(out.timings.end(), {{"t5 load", t5.load_seconds}, {"t5 encode", t5.encode_seconds}});

  // cat(L, G) on features, zero-padded on the right to T5's width, then T5's tokens after the 77 CLIP ones.
  const int64_t clip_width = l.penultimate.size(2) + g.penultimate.size(2);
  const Tensor clip_context =
      pad(concat({l.penultimate, g.penultimate}, 2), {0, t5.context.size(2) - clip_width});
  out.context = concat({clip_context, t5.context}, 1);
  out.pooled = concat({projected ? l.text_embeds : l.pooled, g.text_embeds}, 1);
  const Tensor clip_mask = text::union_mask(text::ids_tensor(l_tokens.attention_mask, n, l_tokens.context_length),
                                            text::ids_tensor(g_tokens.attention_mask, n, g_tokens.context_length));
  out.mask = concat({clip_mask, t5_tokens.mask}, 1);
  out.tokens = {{"clip_l_ids", l_ids}, {"clip_g_ids", g_ids}, {"t5_ids", t5_tokens.ids}, {"t5_mask", t5_tokens.mask}};

  text::PromptEncodingInfo& info = out.info;
  info.model = "sd3";
  info.embeds_encoder = "clip-l+clip-g penultimate, t5-xxl";
  info.pooled_encoder = projected ? "clip-l projected+clip-g projected" : "clip-l+clip-g projected";
  info.max_length = options.t5_length;
  info.clip_length = l_tokens.context_length;
  info.t5_length = options.t5_length;
  info.clip_l_pad_id = encoders.clip_l_tokenizer.pad_id();
  info.clip_g_pad_id = encoders.clip_g_tokenizer.pad_id();
  info.t5_pad_id = t5::T5Tokenizer::kPadId;
  info.clip_l_pooled = clip_l_pooled_name(options.clip_l_pooled);
  info.dtype = encoders.loading.compute_dtype();
  info.device = encoders.loading.device;
  info.clip_l_file = encoders.clip_l.source_path();
  info.clip_g_file = encoders.clip_g.source_path();
  info.t5_file = encoders.t5.source_path();
  return out;
}

void Sd3TextEncoders::unload() const {
  clip_l.unload();
  clip_g.unload();
  t5.unload();
}

text::PromptSpec sd3_prompt_spec() {
  return {.parts = text::encoder_parts({"clip_l", "clip_g", "t5", "clip_vocab", "clip_g_vocab", "t5_tokenizer"}),
          .options = {{.name = "t5_length", .type = OptionType::Int, .default_value = int64_t{256},
                       .range = ConfigRange::between(1, 4096), .help = "T5 tokens"},
                      {.name = "clip_l_pooled", .type = OptionType::String, .default_value = std::string("projected"),
                       .choices = {"projected", "unprojected"},
                       .help = "CLIP-L's pooled vector projected (diffusers, kohya) or unprojected (SAI, ComfyUI)"}}};
}

std::unique_ptr<text::PromptEncoder> make_sd3_prompt_encoder(const text::PromptEncoderRequest& request) {
  const text::PromptSpec spec = sd3_prompt_spec();
  text::check_prompt_files(spec, request, "sd3");
  const ModelOptions options = text::resolved_options(spec, request);
  const Sd3PromptOptions prompt_options{.t5_length = options.get_int("t5_length"),
                                        .clip_l_pooled = parse_clip_l_pooled(options.get_string("clip_l_pooled")),
                                        .batch_size = request.batch_size};
  Sd3TextEncoders encoders = request.pipeline.empty()
                                 ? Sd3TextEncoders::from_files(text::encoder_files(request), request.loading)
                                 : Sd3TextEncoders::from_pipeline(request.pipeline, request.loading);
  return std::make_unique<text::EncoderSetPromptEncoder<Sd3TextEncoders, Sd3PromptOptions>>(
      std::move(encoders), prompt_options, &encode_sd3_prompts);
}

}  // namespace wick::sd3
