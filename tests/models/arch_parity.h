// The parity tests' row of an architecture (arch_parity_test.cpp holds the table and the tests every row runs;
// <arch>_test.cpp what only that architecture has): its tiny fixtures under tests/data/<arch>, how to load its model
// from them and run it on their inputs, the LoRA / DoRA fixtures, the tolerances and the lines the tests print.
//
//   const ParityArch& flux = parity_arch("flux");
//   LoadedModel dev = flux.load("dev_bfl.safetensors", DType::F32);      // zero-copy, frozen
//   SafetensorsFile inputs = flux.open("dev_case.safetensors");
//   Tensor out = flux.run(*dev.model, inputs, "", DType::F32, false);   // vs inputs.get("output")
//   LoraRun r = run_lora(flux, flux.lora_kinds[0], /*checkpointing=*/false);
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/architecture.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"
#include "runtime/tensor.h"

namespace wick::testing {

// A tiny model loaded from a fixture, and the one file its parameters view (null for a folder of shards).
struct LoadedModel {
  std::shared_ptr<void> source;  // the SafetensorsFile or WeightSource the parameters view (outlives the model)
  std::shared_ptr<DiffusionModel> model;
  const SafetensorsFile* file = nullptr;
};

// One model and inputs of the fixtures: `weights` (a file or folder) run on `inputs` at each of `latents` ("" for a
// case with one "latents" tensor; else "latents_<name>", compared with "output_<name>").
struct ParityCase {
  std::string label;  // in the printed line: "dev", "medium", "tiny_ldm.safetensors"
  std::string weights;
  std::string inputs;
  std::vector<std::string> latents;
  bool zero_copy = false;  // weights in one f32 file: the parameters view its mapping
};

// A PEFT adapter fixture: <inputs> holds "<prefix><path>.lora_down/.lora_up(/.magnitude)", "target", "output",
// "loss" and "grad.<prefix><path>.*" of PEFT's run.
struct LoraCase {
  std::string kind;  // lora | dora
  std::string inputs;
  size_t n_modules = 0;
  std::string label;  // the printed line's start: "[dev LoRA]", "[medium lora] vs PEFT:"
};

struct ParityArch {
  std::string name;      // the registry's name
  std::string fixtures;  // the folder under tests/data
  // The f32 forward against diffusers: its cases, the tolerance and the parameter checked for zero copy.
  std::vector<ParityCase> f32;
  double f32_tolerance = 0;
  std::string zero_copy_parameter;
  // The bf16 forward against diffusers' bf16 one and its f32 one: the cases, the tolerance (both), whether the f32
  // parameters with bf16 inputs compute in bf16 within it too, the f32 reference diffusers' bf16 is reported against,
  // and whether diffusers rounds the time (and guidance) to bf16 before embedding it (Flux: wick embeds the caller's
  // f32 values, so the bf16 arithmetic is compared with diffusers' rounded time and the line reports both).
  std::vector<ParityCase> bf16;
  double bf16_tolerance = 0;
  bool mixed_precision = false;
  std::string bf16_reference_f32 = "output";
  bool diffusers_rounds_time = false;
  // The files that hold exactly the model's parameters (config_from_shapes reads their shapes).
  std::vector<std::string> tiny_files;
  // LoRA / DoRA (rank 4, alpha 8; with `locon`, kohya's 3x3 convolutions at rank 2, alpha 1) against PEFT: the model
  // (from `lora_weights`), the fixtures, the module paths' prefix, the latents of the case, whether the fixture
  // records rank and alpha.
  std::string lora_weights;
  std::vector<LoraCase> lora_kinds;
  std::string lora_prefix;
  std::string lora_latents;
  bool lora_file_has_rank = false;
  bool locon = false;
  // Gradient checkpointing against none (LoRA): 0 for bitwise gradients, else their largest relative difference;
  // the printed line's start ("" prints none).
  double checkpointing_tolerance = 0;
  std::string checkpointing_label;

  // ---- the architecture's calls ----
  std::function<LoadedModel(const std::string& path, DType dtype)> load_path;
  // The model on the case's inputs (latents, context and pooled cast to dtype; time and guidance f32, or rounded
  // as diffusers' bf16 forward rounds them when diffusers_time).
  std::function<Tensor(DiffusionModel&, const SafetensorsFile& inputs, const std::string& latents, DType dtype,
                       bool diffusers_time)>
      run;
  // What the LoRA fixture's loss compares with "target" (Flux: the packed output).
  std::function<Tensor(const Tensor& output)> loss_input;
  // The shapes of a tiny file as config_from_shapes reads them, the model config's parameter_shapes, and those of a
  // model built from that config.
  std::function<std::vector<std::map<std::string, Shape>>(const std::string& path)> shapes;

  std::string path(const std::string& file) const;  // tests/data/<fixtures>/<file>
  LoadedModel load(const std::string& weights, DType dtype = DType::F32) const {
    return load_path(path(weights), dtype);
  }
  SafetensorsFile open(const std::string& file) const { return SafetensorsFile::open(path(file)); }
};

// The row of a registered architecture.
const ParityArch& parity_arch(const std::string& name);

// A LoRA fixture's run: the adapters set from the fixture, forward, MSE loss against its target, backward.
struct LoraRun {
  double loss = 0;
  std::vector<std::pair<std::string, Tensor>> grads;  // <path>.lora_down / .lora_up (/ .magnitude) per module path
  Tensor output;
  double forward_backward_ms = 0;
};
LoraRun run_lora(const ParityArch& arch, const LoraCase& lora, bool checkpointing);

// The key of `name` for latents `latents`: "output" for "", else "output_<latents>".
inline std::string case_key(const std::string& name, const std::string& latents) {
  return latents.empty() ? name : name + "_" + latents;
}

// config_from_shapes' message for broken `shapes` (it must throw an error of `kind`: Data for weights that do not fit,
// Config for a `model:` key's hint that does not); the shapes with one removed or changed.
std::string shape_map_error(const std::function<void(const std::map<std::string, Shape>&)>& config_from_shapes,
                            const std::map<std::string, Shape>& shapes, ErrorKind kind = ErrorKind::Data);
std::map<std::string, Shape> without(std::map<std::string, Shape> shapes, const std::string& name);
std::map<std::string, Shape> with(std::map<std::string, Shape> shapes, const std::string& name, Shape shape);

}  // namespace wick::testing
