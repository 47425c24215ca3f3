// T5 encoder weights as the files name them: transformers' T5EncoderModel (a diffusers pipeline's
// text_encoder_3/ or text_encoder_2/, sharded with model.safetensors.index.json), ComfyUI's single files
// (t5xxl_fp16.safetensors and its fp32 / bf16 siblings), SD3 checkpoints that embed T5, and bare T5Stack
// state dicts without the "encoder." level.
//
//   WeightSource source = WeightSource::open("t5xxl_fp16.safetensors");
//   DetectedFormat format = t5::detect_weight_format(source);             // "transformers" or "t5_stack"
//   T5Config c = t5::config_from_shapes(mapped_shapes(source, format));   // transformers' names
//   load_mapped(*encoder, source, format);                                // f16 -> the model's bf16 / f32
//
// transformers: native names (shared.weight, encoder.block.N.layer.0.SelfAttention.q.weight, ...), with no
// prefix or under "text_encoders.t5xxl.transformer." (SD3 single-file checkpoints; their other tensors are not
// looked at); detected by encoder.block.0.layer.0.SelfAttention.q.weight. The embedding is shared.weight or,
// when a file lacks it, encoder.embed_tokens.weight; a file holding both (a tied copy) loads shared.weight and
// accepts the copy unread.
// t5_stack: the same tensors without "encoder." (block.N..., final_layer_norm.weight, embed_tokens.weight or
// shared.weight); detected by block.0.layer.0.SelfAttention.q.weight.
// wan: umT5 as Wan's own code names it (token_embedding, blocks.N.{norm1, attn.{q,k,v,o}, pos_embedding.embedding,
// norm2, ffn.gate.0 (the GELU branch, wi_0), ffn.fc1 (wi_1), ffn.fc2 (wo)}, norm), and Kijai's wrapper spelling
// (blocks.N.attention.*, final_norm); detected by blocks.0.norm1.weight and blocks.0.pos_embedding.embedding.weight.
// Wan's released models_t5_umt5-xxl-enc-bf16.pth is a pickle, which wick does not read: a safetensors file with
// these names (converted, or Kijai's) loads.
#pragma once

#include <vector>

#include "models/weights/key_map.h"

namespace wick::t5 {

const WeightFormat& transformers_format();
const WeightFormat& stack_format();
const WeightFormat& wan_format();
// {transformers, t5_stack, wan}, in detection order.
const std::vector<WeightFormat>& weight_formats();
// detect_format(source, weight_formats()).
DetectedFormat detect_weight_format(const WeightSource& source);

}  // namespace wick::t5
