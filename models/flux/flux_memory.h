// A Flux training step's memory, counted from the code: what each block's autograd nodes keep for
// backward (models/activation_memory.h), and the estimate of a run from a FluxConfig alone, without
// weights (the full-size numbers in docs/training.md "Memory").
//
//   ActivationProfile p = flux_activation_profile(model.config(), shape, /*checkpointing=*/true,
//                                                 layer_training_of(model));
//   MemoryEstimate m = estimate_flux_memory(FluxConfig{}, {.network = "lora", .rank = 16},
//                                           {.latent_height = 128, .latent_width = 128, .text_length = 512,
//                                            .compute_dtype = DType::BF16, .gradient_checkpointing = true});
#pragma once

#include <string>
#include <vector>

#include "models/activation_memory.h"
#include "models/flux/flux_config.h"
#include "models/memory_estimate.h"

namespace wick::flux {

// The segments of a FluxTransformer::forward and its loss: "embedders", "double_blocks.N",
// "single_blocks.N", "final_layer" (with the flow-matching loss on the prediction).
ActivationProfile flux_activation_profile(const FluxConfig& config, const ActivationShape& shape, bool checkpointing,
                                          const LayerTrainingOf& training);

// What trains, for a model that is not built: network lora | dora (adapters of `rank` on every Linear
// whose module path matches one of `patterns`, f32, the rest frozen in config.dtype) or full (every
// parameter, in config.dtype).
struct FluxTrainingPlan {
  std::string network = "lora";
  std::vector<std::string> patterns = {"double_blocks.*", "single_blocks.*"};
  int64_t rank = 16;
};

// The parameters `plan` gives a model of `config` (parameter_shapes plus the adapters' factors).
std::vector<ParameterInfo> flux_parameters(const FluxConfig& config, const FluxTrainingPlan& plan);
LayerTrainingOf flux_layer_training(const FluxConfig& config, const FluxTrainingPlan& plan);

// estimate_training_memory for a Flux model of `config` trained as `plan` (in.compute_dtype is the
// dtype of the activations; config.dtype that of the weights).
MemoryEstimate estimate_flux_memory(const FluxConfig& config, const FluxTrainingPlan& plan, const MemoryInputs& in);

}  // namespace wick::flux
