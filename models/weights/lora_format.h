// LoRA / DoRA files in kohya and PEFT (diffusers) naming, for models whose layers fuse several of
// diffusers' layers (Flux's img_attn.qkv = diffusers' to_q, to_k, to_v).
//
//   LoraSet set = {{"double_blocks.0.img_attn.qkv", {.down = d, .up = u, .alpha = 8}}};  // model names
//   save_safetensors("kohya.safetensors", to_kohya(set));     // lora_unet_double_blocks_0_img_attn_qkv.*
//   LoraLayout layout = flux::lora_layout(sizes);              // which diffusers layers each module fuses
//   save_safetensors("peft.safetensors", to_peft(set, layout));  // transformer.transformer_blocks.0.attn.to_q.*
//   LoraFile file = read_lora_file("peft.safetensors");
//   LoraSet back = from_peft(file.tensors, layout, peft_scales(file.metadata));  // fused again, exact
//
// kohya: `lora_unet_<module path, '.' -> '_'>` + `.lora_down.weight` [r, in], `.lora_up.weight`
// [out, r], `.alpha` (0-d; scale = alpha / r; absent: alpha = r) and `.dora_scale` (DoRA).
// PEFT: `<peft prefix><diffusers module>.lora_A.weight` [r, in], `.lora_B.weight` [out_part, r], and
// for DoRA `.lora_magnitude_vector` [out_part]; the scale comes from the file's metadata
// (peft_scales) or is 1. to_peft bakes the scale alpha / r into lora_B (lora_A = lora_down
// unchanged, so the parts of one fused module share one lora_A) and writes no alpha.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor.h"

namespace wick {

// One module's adapter as plain tensors: delta W = (alpha / r) · up @ down.
struct LoraTensors {
  Tensor down;       // [r, in] ([r, in, kh, kw] for a convolution, kohya's LoCon; kohya files only)
  Tensor up;         // [out, r] ([out, r, 1, 1])
  double alpha = 0;  // scale = alpha / r
  // DoRA magnitude or undefined: [1, in] per input column (kohya/ComfyUI, wick's DoRALinear), or
  // [out] per output row (PEFT's lora_magnitude_vector).
  Tensor dora_scale;
  int64_t rank() const { return down.size(0); }
  double scale() const { return alpha / static_cast<double>(rank()); }
};
// Model module path ("double_blocks.0.img_attn.qkv") -> its adapter.
using LoraSet = std::map<std::string, LoraTensors>;

// ---- how a model's modules appear in diffusers/PEFT naming ----

struct LoraPart {
  std::string peft_module;   // diffusers module path, without the PEFT prefix ("transformer_blocks.0.attn.to_q")
  int64_t row_begin = 0;     // rows [row_begin, row_end) of the model module's weight;
  int64_t row_end = -1;      // -1: to the last row (a module that is one diffusers layer)
  bool swap_halves = false;  // the part's rows are stored with their two halves swapped
};
struct LoraModuleLayout {
  std::string module;           // the model's module path
  std::vector<LoraPart> parts;  // in row order, covering the rows
};
struct LoraLayout {
  std::string peft_prefix = "transformer.";
  std::vector<LoraModuleLayout> modules;
  // The entry for a model module path, or nullptr.
  const LoraModuleLayout* find(const std::string& module) const;
  std::vector<std::string> module_paths() const;
};

// Layout entries written once with "{N}" for a block index (block -1: a pattern without one):
// one entry per (model module, diffusers module) pair that is one layer in both...
void add_one_to_one(LoraLayout& layout, const std::vector<std::pair<std::string, std::string>>& modules,
                    int64_t block);
// ... and a fused model module whose rows are the diffusers modules `peft_block` + names[i], rows[i] rows each, in
// order (Flux's img_attn.qkv = attn.to_q | to_k | to_v).
LoraModuleLayout fused_layout(const std::string& module, const std::string& peft_block,
                              const std::vector<std::string>& names, const std::vector<int64_t>& rows);

// ---- kohya ----

// "lora_unet_" + the module path with '.' replaced by '_'.
std::string kohya_module_name(const std::string& module_path);
// The tensors of a kohya file: down, up (as given), alpha (0-d, in down's dtype) and dora_scale.
std::vector<std::pair<std::string, Tensor>> to_kohya(const LoraSet& set);
// Reads kohya tensors for the given model module paths. Keys of no listed module, or with a suffix
// other than the four, go to `unused` when given, else are a WickError (Data) listing them; so are
// a module with down but no up (or the reverse) and shapes that do not chain ([out, r] @ [r, in]).
LoraSet from_kohya(const std::map<std::string, Tensor>& tensors, const std::vector<std::string>& module_paths,
                   std::vector<std::string>* unused = nullptr);

// ---- PEFT / diffusers ----

// The scale of each PEFT module given its rank; 1 when empty.
using PeftScale = std::function<double(const std::string& peft_module, int64_t rank)>;
// The scales a diffusers-saved file declares in its "lora_adapter_metadata" (JSON with keys
// "<component>.r", ".lora_alpha", ".alpha_pattern", ".rank_pattern", ".use_rslora"): lora_alpha / r
// (or / sqrt(r) with use_rslora), alpha_pattern entries matching a module by its whole path or by a
// trailing ".<key>". `component` is the PEFT prefix without its dot. No such metadata: scale 1.
PeftScale peft_scales(const std::map<std::string, std::string>& metadata, const std::string& component = "transformer");

// Splits every adapter of `set` into its PEFT parts: lora_A.weight = down, lora_B.weight =
// (alpha / r) · up[part rows] (halves swapped where the part says so), computed in f32 and stored in
// up's dtype; an output-axis DoRA magnitude [out] gives each part's rows as lora_magnitude_vector.
// A module the layout lacks, or an input-axis dora_scale [1, in] (PEFT's magnitude is per output
// row), is a WickError (Usage).
std::vector<std::pair<std::string, Tensor>> to_peft(const LoraSet& set, const LoraLayout& layout);
// Regroups PEFT parts into the layout's modules with the scale baked in (alpha = rank, scale 1).
// When every present part's lora_A is identical (bitwise): rank r, up = the parts' scaled lora_B
// stacked by rows. Otherwise block-diagonal, rank = sum of the parts' ranks: down = the lora_A
// stacked by rows, up holds each part's scaled lora_B in its rows and columns, zeros elsewhere.
// Either way up @ down = sum over parts of scale · B @ A placed in the part's rows, exactly. Parts
// a module's file lacks contribute zero rows; a DoRA magnitude needs every part. Tensors ending in
// ".alpha" beside a module's lora_A give that module's alpha (scale alpha / r) over `scale`.
// Keys of no layout part go to `unused` when given, else are a WickError (Data) listing them; part
// shapes that disagree with the layout are a WickError (Data).
LoraSet from_peft(const std::map<std::string, Tensor>& tensors, const LoraLayout& layout, const PeftScale& scale = {},
                  std::vector<std::string>* unused = nullptr);

// ---- files ----

enum class LoraFileFormat { Kohya, Peft };
struct LoraFile {
  std::map<std::string, Tensor> tensors;  // zero-copy views of the file's mapping
  std::map<std::string, std::string> metadata;
  LoraFileFormat format = LoraFileFormat::Kohya;  // kohya when a key ends in ".lora_down.weight"
};
// Opens a LoRA safetensors file; neither kohya nor PEFT keys (".lora_A.weight"): WickError (Data).
LoraFile read_lora_file(const std::string& path);

}  // namespace wick
