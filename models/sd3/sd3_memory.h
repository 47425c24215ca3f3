// An SD3 / SD3.5 training step's memory, counted from the code: what each joint block's autograd nodes
// keep for backward (models/activation_memory.h), and the estimate of a run from an Sd3Config alone,
// without weights (the full-size numbers in docs/training.md "Memory").
//
//   ActivationProfile p = sd3_activation_profile(model.config(), shape, /*checkpointing=*/true,
//                                                layer_training_of(model));
//   MemoryEstimate m = estimate_sd3_memory(Sd3Config::large(), {.network = "lora", .rank = 16},
//                                          {.latent_height = 128, .latent_width = 128, .text_length = 333,
//                                           .compute_dtype = DType::BF16, .gradient_checkpointing = true});
#pragma once

#include <string>
#include <vector>

#include "models/activation_memory.h"
#include "models/memory_estimate.h"
#include "models/sd3/sd3_config.h"

namespace wick::sd3 {

// The segments of an MMDiT::forward and its loss: "embedders", "joint_blocks.N", "final_layer" (with
// the flow-matching loss on the prediction).
ActivationProfile sd3_activation_profile(const Sd3Config& config, const ActivationShape& shape, bool checkpointing,
                                         const LayerTrainingOf& training);

// What trains, for a model that is not built: network lora | dora (adapters of `rank` on every Linear
// whose module path matches one of `patterns`, f32, the rest frozen in config.dtype) or full (every
// parameter, in config.dtype).
struct Sd3TrainingPlan {
  std::string network = "lora";
  std::vector<std::string> patterns = {"joint_blocks.*"};
  int64_t rank = 16;
};

// The parameters `plan` gives a model of `config` (parameter_shapes plus the adapters' factors).
std::vector<ParameterInfo> sd3_parameters(const Sd3Config& config, const Sd3TrainingPlan& plan);
LayerTrainingOf sd3_layer_training(const Sd3Config& config, const Sd3TrainingPlan& plan);

// estimate_training_memory for an MMDiT of `config` trained as `plan` (in.compute_dtype is the dtype
// of the activations; config.dtype that of the weights).
MemoryEstimate estimate_sd3_memory(const Sd3Config& config, const Sd3TrainingPlan& plan, const MemoryInputs& in);

}  // namespace wick::sd3
