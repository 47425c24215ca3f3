// A FLUX.2 training step's memory, counted from the code: what each block's autograd nodes keep for
// backward (models/memory/activation_memory.h), and the estimate of a run from a Flux2Config alone,
// without weights.
//
//   ActivationProfile p = flux2_activation_profile(model.config(), shape, /*checkpointing=*/true,
//                                                  layer_training_of(model));
//   MemoryEstimate m = estimate_flux2_memory(flux2::klein_4b_config(),
//                                            {.network = "lora", .patterns = {"double_blocks.*", "single_blocks.*"}},
//                                            {.latent_height = 64, .latent_width = 64, .text_length = 512,
//                                             .compute_dtype = DType::BF16, .gradient_checkpointing = true});
//
// ActivationShape's latent_height / latent_width are the model's (patchified) latents: one token each.
#pragma once

#include "models/flux2/flux2_config.h"
#include "models/memory/activation_memory.h"
#include "models/memory/memory_estimate.h"
#include "models/memory/training_plan.h"

namespace wick::flux2 {

// The segments of a Flux2Transformer::forward and its loss: "embedders" (with the three shared
// modulations), "double_blocks.N", "single_blocks.N", "final_layer" (with the flow-matching loss).
ActivationProfile flux2_activation_profile(const Flux2Config& config, const ActivationShape& shape, bool checkpointing,
                                           const LayerTrainingOf& training);

// estimate_planned_memory (models/memory/training_plan.h) for a model of `config`, unbuilt: its parameter shapes in
// config.dtype, its blocks, this profile.
MemoryEstimate estimate_flux2_memory(const Flux2Config& config, const TrainingPlan& plan, const MemoryInputs& in);

}  // namespace wick::flux2
