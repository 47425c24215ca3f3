// CLIP text encoder weights: the files and names they come in, the model sizes read from them, and
// loading a frozen clip::ClipTextModel from any of them.
//
//   auto l = clip::load_clip_text("sdxl-base", {.kind = clip::ClipKind::L});          // text_encoder/
//   auto g = clip::load_clip_text("sdxl-base", {.kind = clip::ClipKind::G});          // text_encoder_2/
//   auto g2 = clip::load_clip_text("sd_xl_base_1.0.safetensors", {.kind = clip::ClipKind::G});  // OpenCLIP names
//   auto l2 = clip::load_clip_text("clip_l.safetensors", {.dtype = DType::BF16});     // ComfyUI text encoder
//   clip::ClipTextOutput out = l.model->encode(ids);
//
// Formats (each tried in this order, each with its name prefixes in order):
//   transformers  HF names under "text_model." (+ "text_projection.weight"): diffusers' text_encoder/
//                 and text_encoder_2/ folders (model.safetensors or sharded with an index) and
//                 ComfyUI's clip_l.safetensors / clip_g.safetensors (prefix ""); inside single files:
//                 L under "conditioner.embedders.0.transformer." (SDXL), "text_encoders.clip_l.transformer."
//                 (SD3), "cond_stage_model.transformer." (SD1.x); G under "text_encoders.clip_g.transformer."
//                 (SD3). Ignores text_model.embeddings.position_ids and logit_scale.
//   transformers_flat  the same without "text_model." (transformers >= 5.6 saves CLIPTextModel so).
//   openclip      OpenCLIP / OpenAI names: token_embedding.weight, positional_embedding,
//                 transformer.resblocks.N.{ln_1, attn.in_proj_weight / in_proj_bias (q, k, v row
//                 thirds), attn.out_proj, ln_2, mlp.c_fc, mlp.c_proj}, ln_final, text_projection [w, p]
//                 (transposed into text_projection.weight [p, w]); G under "conditioner.embedders.1.model."
//                 (SDXL base), "conditioner.embedders.0.model." (SDXL refiner), "cond_stage_model.model."
//                 (SD2.x) or no prefix; L without a prefix only. Ignores logit_scale.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/clip/clip_text.h"
#include "models/weights/key_map.h"

namespace wick::clip {

// Which of a pipeline's CLIP text encoders: L = OpenAI CLIP-L/14 (Flux, SD1.x, SDXL's and SD3's first
// encoder; diffusers' text_encoder/), G = OpenCLIP bigG/14 (SDXL's and SD3's second; text_encoder_2/).
// It picks the subfolder, the prefixes inside single files, and the defaults a file without a
// config.json gets (L: quick_gelu, G: gelu).
enum class ClipKind { L, G };
const char* kind_name(ClipKind kind);  // "CLIP-L", "CLIP-G (bigG)"

// The kind whose real model has exactly these sizes (width and layers: 768 x 12 -> L, 1280 x 32 -> G),
// or nothing (tiny test models, ViT-H, others).
std::optional<ClipKind> known_kind(const ClipTextConfig& config);

// The formats tried for `kind`, in detection order (transformers, transformers_flat, openclip).
const std::vector<WeightFormat>& weight_formats(ClipKind kind);
// detect_format(source, weight_formats(kind)); WickError (Data) listing what was looked for, and
// saying so when the source holds the other kind under a prefix only that kind has.
DetectedFormat detect_weight_format(const WeightSource& source, ClipKind kind);

// What a transformers config.json (model_type "clip_text_model") says; fields it lacks take
// transformers 5.x's CLIPTextConfig defaults (hidden_act quick_gelu, eos_token_id 49407).
struct HfClipConfig {
  std::string path;
  // 0: not in the file. (projection_dim is not read: the projection's presence and size come from
  // text_projection.weight; CLIPTextModel configs carry an unused projection_dim too.)
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_layers = 0, num_heads = 0,
          max_position_embeddings = 0;
  std::string hidden_act = "quick_gelu";
  int64_t eos_token_id = 49407;
  double layer_norm_eps = 1e-5;
};
// The config.json beside the weights of `source` when it is a transformers CLIP text config, else
// nothing (no file, or a file of another model_type). WickError (Data) when it is not JSON or a field
// has the wrong type.
std::optional<HfClipConfig> read_hf_config(const WeightSource& source);

// Sizes from tensor shapes in the model's (transformers') names, e.g. mapped_shapes(source, format):
// vocab and width from the token embedding, positions from the position embedding, the layer count
// from text_model.encoder.layers.N, the MLP width from layer 0's fc1, projection_dim from
// text_projection.weight (0 when absent). Heads: `num_heads` when > 0, else width / 64 (CLIP-L 768 ->
// 12, bigG 1280 -> 20), a WickError (Config) asking for num_heads when the width is not a multiple of
// 64. Activation and pooling keep the defaults. A missing tensor is a WickError (Data) naming it.
// `source_name` (a path) goes into the messages.
ClipTextConfig config_from_shapes(const std::map<std::string, Shape>& shapes, int64_t num_heads = 0,
                                  const std::string& source_name = "");

struct ClipLoadOptions {
  ClipKind kind = ClipKind::L;
  DType dtype = DType::F32;  // parameter and compute dtype (weights are cast once when they differ)
  Device device = Device::cpu();
  std::string activation;  // "": config.json's hidden_act, else the kind's (L quick_gelu, G gelu)
  int64_t num_heads = 0;   // 0: config.json's num_attention_heads, else width / 64
  // Unset: from config.json's eos_token_id (2 -> Argmax, as transformers' legacy rule; any other id ->
  // FirstEos of that id), else Argmax (what SAI's and ComfyUI's CLIP code and real configs give).
  std::optional<ClipPooling> pooling;
  int64_t eos_token_id = 49407;  // the id FirstEos looks for when the pooling is given here
};

struct LoadedClipText {
  std::shared_ptr<ClipTextModel> model;
  DetectedFormat format;
  std::string source_path;  // the file or index read
  std::string config_json;  // the config.json used, or "" when none was
  LoadMappedReport report;
};

// Opens `path` (a safetensors file, an index, a component folder or a pipeline folder whose
// text_encoder/ (L) or text_encoder_2/ (G) holds the weights), detects the format, reads the sizes
// from the shapes (checked against config.json when one is used: only with no name prefix), builds
// the model and loads every parameter strictly (load_mapped: frozen, zero-copy where the file's dtype
// is `dtype`). Errors are WickError (Data) naming the file and the tensors, or (Config) for options.
// A file whose sizes are exactly the other kind's real model (768 wide x 12 layers for L, 1280 x 32
// for G) loaded as the wrong kind without an explicit activation is a WickError (Data) saying so.
LoadedClipText load_clip_text(const std::string& path, const ClipLoadOptions& options = {});

}  // namespace wick::clip
