// A Flux training step's memory, counted from the code: what each block's autograd nodes keep for
// backward (models/memory/activation_memory.h), and the estimate of a run from a FluxConfig alone, without
// weights (the full-size numbers in docs/training.md "Memory").
//
//   ActivationProfile p = flux_activation_profile(model.config(), shape, /*checkpointing=*/true,
//                                                 layer_training_of(model));
//   MemoryEstimate m = estimate_flux_memory(FluxConfig{},
//                                           {.network = "lora", .patterns = {"double_blocks.*", "single_blocks.*"}},
//                                           {.latent_height = 128, .latent_width = 128, .text_length = 512,
//                                            .compute_dtype = DType::BF16, .gradient_checkpointing = true});
#pragma once

#include <string>
#include <vector>

#include "models/flux/flux_config.h"
#include "models/memory/activation_memory.h"
#include "models/memory/memory_estimate.h"
#include "models/memory/training_plan.h"

namespace wick::flux {

// The segments of a FluxTransformer::forward and its loss: "embedders", "double_blocks.N",
// "single_blocks.N", "final_layer" (with the flow-matching loss on the prediction).
ActivationProfile flux_activation_profile(const FluxConfig& config, const ActivationShape& shape, bool checkpointing,
                                          const LayerTrainingOf& training);

// estimate_planned_memory (models/memory/training_plan.h) for a model of `config`, unbuilt: its parameter shapes in
// config.dtype, its blocks, this profile.
MemoryEstimate estimate_flux_memory(const FluxConfig& config, const TrainingPlan& plan, const MemoryInputs& in);

}  // namespace wick::flux
