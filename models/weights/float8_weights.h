// Float8 frozen weights in a model: reading float8 checkpoints (F8_E4M3 Linear weights, as in the
// flux1-dev-fp8 files users share and ComfyUI's "scaled fp8" files), and quantizing a loaded base
// (model.quantize: float8). The layers keep their names; only their storage changes (nn::Linear's
// float8 mode: U8 codes + `weight_scale`).
//
//   DetectedFormat format = flux::detect_weight_format(source);
//   Float8Source f8 = prepare_float8_layers(*model, source, format);   // before loading
//   load_mapped(*model, source, f8.format, {.prefilled = f8.prefilled});
//   Float8Report r = quantize_linears(*model, {"double_blocks.*", "single_blocks.*"}, Float8Scaling::PerRow);
//
// What a float8 file may hold for a Linear at module path P (source names, after the format's
// prefix such as ComfyUI's "model.diffusion_model."):
//   P.weight        F8_E4M3 [out, in]            the codes (zero-copy views of the mapping)
//   P.scale_weight  f32 [] or [1] (or [out])     ComfyUI's legacy scaled fp8 (marker tensor `scaled_fp8`);
//   P.weight_scale  f32 [] or [1] (or [out])     ComfyUI's newer quantized layout (P.comfy_quant,
//                                                metadata _quantization_metadata)
//   neither                                      a plain cast (Kijai's / Comfy-Org's flux1-dev-fp8): scale 1
// value = e4m3(code) * scale, as ComfyUI dequantizes (in f32 here). Activation scales (P.scale_input,
// P.input_scale), the `scaled_fp8` marker and P.comfy_quant are accepted and not used: wick multiplies
// in the compute dtype. F8_E4M3 tensors of other layers (norm scales, biases) are decoded into the
// model's dtype. Refused (Data): F8 weights that a key rule combines (concatenated diffusers q/k/v),
// and scale tensors no float8 Linear takes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/module.h"
#include "models/weights/key_map.h"
#include "runtime/ops/float8.h"

namespace wick {

struct Float8Source {
  DetectedFormat format;               // the detected format with the scale renames and ignored names added
  std::vector<std::string> prefilled;  // weight_scale slots the file lacks (scale 1): LoadMappedOptions
  std::vector<std::string> layers;     // module paths of the Linears the file stores as float8
};

// Turns every Linear of `model` whose weight the source holds as F8_E4M3 into a float8 Linear
// (nn::Linear::expect_float8, scales shaped as the file's) and extends `format` so that load_mapped
// fills codes and scales. A source without F8_E4M3 tensors leaves the model and the format as they are.
Float8Source prepare_float8_layers(Module& model, const WeightSource& source, const DetectedFormat& format);

struct Float8Report {
  std::vector<std::string> quantized;  // module paths quantized now
  int64_t n_already = 0;               // matching Linears that were float8 already (from the file)
  int64_t bytes_before = 0;            // their weights' bytes before
  int64_t bytes_after = 0;             // codes + scales after
};

// Quantizes every frozen floating Linear whose module path matches one of `patterns` (glob), in
// place (nn::Linear::quantize_float8). Must run before adapters wrap the Linears.
Float8Report quantize_linears(Module& model, const std::vector<std::string>& patterns, Float8Scaling scaling);

// True for the tensors a float8 file holds beside a Linear's codes (P.weight_scale, P.scale_weight,
// P.input_scale, P.scale_input, P.comfy_quant) and for ComfyUI's `scaled_fp8` marker: not parameters
// of the model's shape, so shape-reading code (an architecture's config_from_shapes) skips them.
bool is_float8_companion(const std::string& name);

// Float8 Linears in the model (wrapped by adapters or not); has_float8_layers: at least one.
int64_t count_float8_layers(const Module& model);
bool has_float8_layers(const Module& model);

}  // namespace wick
