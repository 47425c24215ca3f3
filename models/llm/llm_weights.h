// Language-model text encoder weights as the files name them. One naming (transformers' Qwen3Model /
// Qwen2Model / MistralModel: embed_tokens.weight, layers.N.self_attn.q_proj.weight, ..., norm.weight) under the
// prefixes the published files put before it:
//   "model.language_model."  transformers 5's Qwen2.5-VL and Mistral3 (Mistral Small 3.x) in memory
//   "language_model.model."  Mistral3 repositories as published (mistralai/Mistral-Small-3.x-24B-*), transformers 4
//   "model."                 Qwen3ForCausalLM (Qwen/Qwen3-4B), Qwen2.5-VL repositories as published (model.* +
//                            visual.*), and ComfyUI's single files (qwen_3_4b.safetensors, qwen_2.5_vl_7b*.safetensors,
//                            the FLUX.2 Mistral files): ComfyUI's Llama2_ module keeps these names
//   ""                       a bare Qwen3Model / Qwen2Model / MistralModel state dict
// Names outside the prefix (visual.*, model.vision_tower.*, model.multi_modal_projector.*, lm_head.weight) are not
// looked at; lm_head.weight inside the prefix is ignored. Sharded folders (model.safetensors.index.json) and single
// files load alike (WeightSource); f32 / bf16 / f16 files load into either model dtype; float8 files (F8_E4M3
// Linear weights, with or without ComfyUI's `.weight_scale` / `.scale_weight`) through
// models/weights/float8_weights.h.
//
//   WeightSource source = WeightSource::open("Qwen3-4B");                    // sharded folder
//   DetectedFormat format = llm::detect_weight_format(source);               // prefix "model."
//   DetectedFormat partial = llm::skipping_layers(source, format, 30, false); // layers 30.. and norm unread
#pragma once

#include <cstdint>

#include "models/weights/key_map.h"

namespace wick::llm {

// The one naming with its prefixes, in detection order; detected by layers.0.input_layernorm.weight.
const WeightFormat& weight_format();
// detect_format(source, {weight_format()}).
DetectedFormat detect_weight_format(const WeightSource& source);

// `format` with the tensors of layers >= n_layers (and norm.weight unless final_norm, and lm_head.weight) added to
// its ignored names, so that a model built with only the first n_layers loads from the whole file without
// reading (or mapping into the model) the rest.
DetectedFormat skipping_layers(const WeightSource& source, const DetectedFormat& format, int64_t n_layers,
                               bool final_norm);

}  // namespace wick::llm
