// An SD3 / SD3.5 training step's memory, counted from the code: what each joint block's autograd nodes
// keep for backward (models/memory/activation_memory.h), and the estimate of a run from an Sd3Config alone,
// without weights (the full-size numbers in docs/training.md "Memory").
//
//   ActivationProfile p = sd3_activation_profile(model.config(), shape, /*checkpointing=*/true,
//                                                layer_training_of(model));
//   MemoryEstimate m = estimate_sd3_memory(Sd3Config::large(),
//                                          {.network = "lora", .patterns = {"joint_blocks.*"}, .rank = 16},
//                                          {.latent_height = 128, .latent_width = 128, .text_length = 333,
//                                           .compute_dtype = DType::BF16, .gradient_checkpointing = true});
#pragma once

#include <string>
#include <vector>

#include "models/memory/activation_memory.h"
#include "models/memory/memory_estimate.h"
#include "models/memory/training_plan.h"
#include "models/sd3/sd3_config.h"

namespace wick::sd3 {

// The segments of an MMDiT::forward and its loss: "embedders", "joint_blocks.N", "final_layer" (with
// the flow-matching loss on the prediction).
ActivationProfile sd3_activation_profile(const Sd3Config& config, const ActivationShape& shape, bool checkpointing,
                                         const LayerTrainingOf& training);

// estimate_planned_memory (models/memory/training_plan.h) for a model of `config`, unbuilt: its parameter shapes in
// config.dtype, its blocks, this profile.
MemoryEstimate estimate_sd3_memory(const Sd3Config& config, const TrainingPlan& plan, const MemoryInputs& in);

}  // namespace wick::sd3
