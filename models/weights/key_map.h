// Key maps: loading weights saved under another naming (diffusers, a ComfyUI repack) into a model
// that keeps its authors' names, by declarative rules.
//
//   WeightFormat diffusers{.name = "diffusers",
//                          .detect_keys = {"transformer_blocks.0.attn.norm_added_k.weight"},
//                          .rules = {rename_layer("img_in", "x_embedder")},
//                          .blocks = {{.count_prefix = "transformer_blocks.",
//                                      .rules = {concat_layer("double_blocks.{N}.img_attn.qkv",
//                                                             {"transformer_blocks.{N}.attn.to_q", ...})}}}};
//   WeightSource source = WeightSource::open(path, "transformer");
//   DetectedFormat format = detect_format(source, {bfl, diffusers});   // which naming, which prefix
//   std::map<std::string, Shape> shapes = mapped_shapes(source, format); // model sizes before building
//   load_mapped(*model, source, format);                                 // every parameter, strict
//
// A rule makes one model ("target") tensor from source tensors: a rename, a concatenation along
// rows (axis 0: fused q, k, v [, mlp] weights or biases), a rename with the two halves of the
// rows swapped (adaLN (shift, scale) <-> (scale, shift)), one of n equal row blocks of a fused
// source (OpenCLIP's in_proj_weight [3·w, w] -> q, k, v), a 2-d transpose (OpenCLIP's
// text_projection [w, p], used as x @ P, -> a Linear weight [p, w]), a change of rank by trailing
// extent-1 axes (a Linear weight [C, C] <-> a 1x1 convolution weight [C, C, 1, 1]: diffusers' VAE
// attention vs LDM's), or the first of several names a file may use for one tensor (tied copies:
// T5's shared.weight / encoder.embed_tokens.weight).
// Targets without a rule map to themselves; a format may list source names it ignores (buffers such
// as position_ids).
// Rules are written once with "{N}" for a block index and expanded for every block the source has.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/module.h"
#include "models/weights/weight_source.h"

namespace wick {

enum class KeyRuleKind {
  Rename,      // target = source
  ConcatRows,  // target = concat(sources, axis 0), in the listed order
  SwapHalves,  // target = source with rows [n/2, n) first, then [0, n/2)
  FirstOf,     // target = the first listed source the file holds; any other listed source it also holds
               // is a tied copy: it must have the same shape and is accepted unread (not "unused")
  SplitRows,   // target = rows [part·n/n_parts, (part+1)·n/n_parts) of source (n rows)
  Transpose,   // target = source^T (2-d)
  Reshape,     // target = source with trailing extent-1 axes appended or dropped until it has `rank` axes
};

struct KeyRule {
  KeyRuleKind kind = KeyRuleKind::Rename;
  std::string target;                // model name; may hold "{N}"
  std::vector<std::string> sources;  // source names (without the accepted prefix); may hold "{N}"
  // Each suffix s makes one rule over `target.s` and `source.s`; empty: the names are whole tensor
  // names. Layers use {"weight", "bias"}: a suffix whose source tensors are all absent (no bias) is
  // dropped like any rule whose sources are all absent.
  std::vector<std::string> suffixes;
  int64_t part = 0;     // SplitRows: which block of rows, 0-based
  int64_t n_parts = 1;  // SplitRows: into how many equal blocks the source's rows split
  int64_t rank = 0;     // Reshape: the target's number of axes
};

// Tensor rules (whole names).
KeyRule rename(std::string target, std::string source);
KeyRule concat_rows(std::string target, std::vector<std::string> sources);
KeyRule swap_halves(std::string target, std::string source);
KeyRule first_of(std::string target, std::vector<std::string> sources);
KeyRule split_rows(std::string target, std::string source, int64_t part, int64_t n_parts);
KeyRule transposed(std::string target, std::string source);
KeyRule reshaped(std::string target, std::string source, int64_t rank);
// Layer rules: the same for `<module>.weight` and `<module>.bias`.
KeyRule rename_layer(std::string target_module, std::string source_module);
KeyRule concat_layer(std::string target_module, std::vector<std::string> source_modules);
KeyRule swap_halves_layer(std::string target_module, std::string source_module);
// rename_layer for each (model module, source module) pair, in order.
std::vector<KeyRule> layer_renames(const std::vector<std::pair<std::string, std::string>>& modules);
// `prefix` + each name ("transformer_blocks.{N}." + {"attn.to_q", ...}).
std::vector<std::string> prefixed(const std::string& prefix, const std::vector<std::string>& names);

// Rules written with "{N}", expanded for N = 0 .. n - 1 where n is 1 + the largest index N among the
// source names that start with `count_prefix` followed by "N." (0 blocks when none does).
struct BlockRules {
  std::string count_prefix;  // source-side, e.g. "transformer_blocks."
  std::vector<KeyRule> rules;
};

struct WeightFormat {
  std::string name;                          // "bfl", "diffusers"
  std::vector<std::string> detect_keys;      // all present (after one accepted prefix) = this format
  std::vector<std::string> prefixes = {""};  // accepted name prefixes, tried in order, then stripped
  std::vector<KeyRule> rules;                // rules outside blocks
  std::vector<BlockRules> blocks;            // per-block tables
  // Source names (without the prefix) that may be present and are never loaded nor reported as
  // unused: buffers and training-only scalars a checkpoint carries beside the weights.
  std::vector<std::string> ignored;
};

// A format as found in one source: which prefix its names carry. Names outside the prefix (a
// ComfyUI checkpoint's VAE and text encoders beside "model.diffusion_model.") are not part of it.
struct DetectedFormat {
  WeightFormat format;
  std::string prefix;
};

// The first format (in list order, each with its prefixes in order) whose detect keys are all in the
// source. None: WickError (Data) naming the source, each format with the keys it looked for, and some
// of the source's names.
DetectedFormat detect_format(const WeightSource& source, const std::vector<WeightFormat>& formats);

// Every rule expanded for this source: blocks counted, "{N}" and suffixes applied (whole names, no
// prefix), in table order, whether or not the source holds their tensors.
std::vector<KeyRule> expand_rules(const WeightSource& source, const DetectedFormat& format);
// 1 + the largest N among `names` that start with `prefix` + "N."; 0 when none does.
int64_t count_blocks(const std::vector<std::string>& names, const std::string& prefix);

// Target name -> shape of every tensor the source provides in the model's naming (rules applied,
// other names as they are, ignored names left out), read from the headers only. Throws WickError
// (Data) when a rule's sources are partly absent or do not combine (concat of differing widths, odd
// row count to swap, rows that do not split into n_parts, a transpose of a tensor that is not 2-d, a
// reshape that would drop an axis of extent > 1).
std::map<std::string, Shape> mapped_shapes(const WeightSource& source, const DetectedFormat& format);

struct LoadMappedOptions {
  bool trainable = false;  // loaded parameters are frozen unless set
  // Parameters that already hold their values and that the source may lack (the scale of a float8
  // weight stored without one: 1; models/weights/float8_weights.h).
  std::vector<std::string> prefilled = {};
};

struct LoadMappedReport {
  int64_t n_loaded = 0;
  int64_t n_zero_copy = 0;       // slots that view a file's mapping
  int64_t n_materialized = 0;    // slots built once (concat, swap, cast or device copy)
  int64_t n_outside_prefix = 0;  // source tensors outside the detected prefix, not looked at
  int64_t n_ignored = 0;         // source tensors the format ignores (WeightFormat::ignored)
};

// Fills every parameter slot of `module` from the source through the format's rules. A rename or a
// row split whose source dtype equals the slot's dtype, into a CPU slot, is a zero-copy view of the
// file's mapping; everything else is materialized once in the slot's dtype on the slot's device. Strict: missing
// targets, source tensors no slot used and shape (or dtype) mismatches are checked before any slot
// changes and reported together as one WickError (Data) naming the source, the format and prefix,
// the counts and up to ten of each (expected vs found shapes).
// F8_E4M3 sources (float8 checkpoints): into a U8 slot (a float8 Linear's codes, nn::Linear) as a
// zero-copy view of their bytes, under a rename only; into a floating slot decoded (scale 1).
LoadMappedReport load_mapped(Module& module, const WeightSource& source, const DetectedFormat& format,
                             const LoadMappedOptions& options = {});

}  // namespace wick
