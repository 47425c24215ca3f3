#include "models/sdxl/sdxl_text.h"

#include <filesystem>
#include <fstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "models/text/encoder_files.h"
#include "runtime/error.h"
#include "runtime/ops/copy.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/join.h"

namespace wick::sdxl {
namespace {

namespace fs = std::filesystem;

SdxlTextEncoders make(clip::ClipTokenizer clip_l_tokenizer, std::string clip_l_source,
                      clip::ClipTokenizer clip_g_tokenizer, std::string clip_g_source, const std::string& clip_l,
                      const std::string& clip_g, const text::EncoderLoading& loading, bool force_zeros) {
  loading.compute_dtype();
  SdxlTextEncoders e{std::move(clip_l_tokenizer),
                     std::move(clip_g_tokenizer),
                     text::ClipEncoderSlot(clip_l, clip::ClipKind::L),
                     text::ClipEncoderSlot(clip_g, clip::ClipKind::G),
                     loading,
                     std::move(clip_l_source),
                     std::move(clip_g_source),
                     force_zeros};
  e.clip_l.check_tokenizer(e.clip_l_tokenizer, e.clip_l_tokenizer_source);
  e.clip_g.check_tokenizer(e.clip_g_tokenizer, e.clip_g_tokenizer_source);
  WICK_CHECK_KIND(Data, e.clip_g.projection_dim() > 0, "sdxl text encoders: ", e.clip_g.source_path(),
                  " has no text_projection.weight, which SDXL's pooled vector is made with: is it a CLIP-G (bigG) "
                  "text encoder?");
  return e;
}

// Rows `rows` of a row-major [n, length] id buffer, as an I64 [rows, length] tensor.
Tensor select_rows(const std::vector<int32_t>& ids, int64_t length, const std::vector<int64_t>& rows) {
  std::vector<int32_t> picked;
  for (int64_t r : rows) picked.insert(picked.end(), ids.begin() + r * length, ids.begin() + (r + 1) * length);
  return text::ids_tensor(picked, static_cast<int64_t>(rows.size()), length);
}

// [n, ...] zeros with rows[k] = part row k.
Tensor scatter_rows(const Tensor& part, int64_t n, const std::vector<int64_t>& rows) {
  if (static_cast<int64_t>(rows.size()) == n) return part;
  Shape shape = part.shape();
  shape[0] = n;
  Tensor out = zeros(shape, part.dtype(), part.device());
  for (size_t k = 0; k < rows.size(); ++k) copy_into(out.select(0, rows[k]), part.select(0, static_cast<int64_t>(k)));
  return out;
}

}  // namespace

bool pipeline_force_zeros(const std::string& folder) {
  if (folder.empty()) return true;
  const fs::path path = fs::path(folder) / "model_index.json";
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return true;
  std::ifstream in(path);
  nlohmann::json json = nlohmann::json::parse(in, nullptr, false);
  WICK_CHECK_KIND(Data, !json.is_discarded() && json.is_object(), path.string(), ": not a JSON object");
  if (!json.contains("force_zeros_for_empty_prompt")) return true;
  WICK_CHECK_KIND(Data, json["force_zeros_for_empty_prompt"].is_boolean(), path.string(),
                  ": force_zeros_for_empty_prompt is not true or false");
  return json["force_zeros_for_empty_prompt"].get<bool>();
}

SdxlTextEncoders SdxlTextEncoders::from_pipeline(const std::string& folder, const text::EncoderLoading& loading) {
  const fs::path root(folder);
  WICK_CHECK_KIND(Data, fs::is_directory(root), "sdxl text encoders: ", folder, " is not a folder");
  const std::string tokenizer = (root / "tokenizer").string(), tokenizer_2 = (root / "tokenizer_2").string();
  return make(clip::ClipTokenizer::from_folder(tokenizer), tokenizer, clip::ClipTokenizer::from_folder(tokenizer_2),
              tokenizer_2, (root / "text_encoder").string(), (root / "text_encoder_2").string(), loading,
              pipeline_force_zeros(folder));
}

SdxlTextEncoders SdxlTextEncoders::from_files(const text::TextEncoderFiles& files,
                                              const text::EncoderLoading& loading) {
  text::require_file(files.clip_l, "sdxl", "the CLIP-L weights (clip_l)");
  text::require_file(files.clip_g, "sdxl", "the CLIP-G weights (clip_g)");
  text::require_file(files.clip_vocab, "sdxl", "the CLIP vocabulary (clip_vocab)");
  const bool own_g = !files.clip_g_vocab.empty();
  return make(text::load_clip_tokenizer(files.clip_vocab, "<|endoftext|>"), files.clip_vocab,
              own_g ? text::load_clip_tokenizer(files.clip_g_vocab, std::nullopt)
                    : text::load_clip_tokenizer(files.clip_vocab, "!"),
              own_g ? files.clip_g_vocab : files.clip_vocab, files.clip_l, files.clip_g, loading, true);
}

text::PromptEmbeddings encode_sdxl_prompts(const SdxlTextEncoders& encoders, const std::vector<std::string>& prompts,
                                           const SdxlPromptOptions& options) {
  text::check_prompt_request(prompts, options.batch_size, "encode_sdxl_prompts");
  const auto n = static_cast<int64_t>(prompts.size());
  const clip::TokenBatch l_tokens = encoders.clip_l_tokenizer.encode_batch(prompts);
  const clip::TokenBatch g_tokens = encoders.clip_g_tokenizer.encode_batch(prompts);
  const int64_t length = l_tokens.context_length;
  WICK_CHECK_KIND(Data, length == g_tokens.context_length, "sdxl: the CLIP tokenizers' windows differ (",
                  encoders.clip_l_tokenizer_source, ": ", length, ", ", encoders.clip_g_tokenizer_source, ": ",
                  g_tokens.context_length, ")");
  std::vector<int64_t> encoded;  // the prompts that are run through the encoders
  for (int64_t i = 0; i < n; ++i)
    if (!(options.zeros_for_empty_prompt && prompts[static_cast<size_t>(i)].empty())) encoded.push_back(i);

  text::PromptEmbeddings out;
  const DType dtype = encoders.loading.compute_dtype();
  const Device device = encoders.loading.device;
  if (encoded.empty()) {
    out.context = zeros({n, length, encoders.clip_l.width() + encoders.clip_g.width()}, dtype, device);
    out.pooled = zeros({n, encoders.clip_g.projection_dim()}, dtype, device);
  } else {
    // diffusers' encode_prompt: hidden_states[-2] of each encoder (clip_skip None), joined on features; the pooled
    // vector is text_encoder_2's output[0] (text_embeds).
    text::ClipRun l = encoders.clip_l.encode(select_rows(l_tokens.ids, length, encoded), encoders.loading,
                                             options.batch_size);
    out.timings = {{"clip_l load", l.load_seconds}, {"clip_l encode", l.encode_seconds}};
    text::ClipRun g = encoders.clip_g.encode(select_rows(g_tokens.ids, length, encoded), encoders.loading,
                                             options.batch_size);
    out.timings.insert(out.timings.end(), {{"clip_g load", g.load_seconds}, {"clip_g encode", g.encode_seconds}});
    out.context = scatter_rows(concat({l.penultimate, g.penultimate}, 2), n, encoded);
    out.pooled = scatter_rows(g.text_embeds, n, encoded);
  }
  const Tensor l_ids = text::ids_tensor(l_tokens.ids, n, length), g_ids = text::ids_tensor(g_tokens.ids, n, length);
  out.mask = text::union_mask(text::ids_tensor(l_tokens.attention_mask, n, length),
                              text::ids_tensor(g_tokens.attention_mask, n, length));
  out.tokens = {{"clip_l_ids", l_ids}, {"clip_g_ids", g_ids}};

  text::PromptEncodingInfo& info = out.info;
  info.model = "sdxl";
  info.embeds_encoder = "clip-l+clip-g penultimate";
  info.pooled_encoder = "clip-g projected";
  info.max_length = length;
  info.clip_length = length;
  info.clip_l_pad_id = encoders.clip_l_tokenizer.pad_id();
  info.clip_g_pad_id = encoders.clip_g_tokenizer.pad_id();
  info.zeros_for_empty_prompt = options.zeros_for_empty_prompt;
  info.dtype = dtype;
  info.device = device;
  info.clip_l_file = encoders.clip_l.source_path();
  info.clip_g_file = encoders.clip_g.source_path();
  return out;
}

void SdxlTextEncoders::unload() const {
  clip_l.unload();
  clip_g.unload();
}

text::PromptSpec sdxl_prompt_spec() {
  return {.parts = text::encoder_parts({"clip_l", "clip_g", "clip_vocab", "clip_g_vocab"}),
          .options = {{.name = "zeros_for_empty_prompt", .type = OptionType::Bool, .default_value = false,
                       .help = "\"\" prompts get zero embeddings (diffusers' force_zeros_for_empty_prompt)"}}};
}

std::unique_ptr<text::PromptEncoder> make_sdxl_prompt_encoder(const text::PromptEncoderRequest& request) {
  const text::PromptSpec spec = sdxl_prompt_spec();
  text::check_prompt_files(spec, request, "sdxl");
  const ModelOptions options = text::resolved_options(spec, request);
  SdxlTextEncoders encoders = request.pipeline.empty()
                                  ? SdxlTextEncoders::from_files(text::encoder_files(request), request.loading)
                                  : SdxlTextEncoders::from_pipeline(request.pipeline, request.loading);
  return std::make_unique<text::EncoderSetPromptEncoder<SdxlTextEncoders, SdxlPromptOptions>>(
      std::move(encoders),
      SdxlPromptOptions{.zeros_for_empty_prompt = options.get_bool("zeros_for_empty_prompt"),
                        .batch_size = request.batch_size},
      &encode_sdxl_prompts);
}

}  // namespace wick::sdxl
