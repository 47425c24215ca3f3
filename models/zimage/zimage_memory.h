// A Z-Image training step's memory, counted from the code: what each block's autograd nodes keep for backward
// (models/memory/activation_memory.h), and the estimate of a run from a ZImageConfig alone, without weights.
//
//   ActivationProfile p = zimage_activation_profile(model.config(), shape, /*checkpointing=*/true,
//                                                   layer_training_of(model));
//   MemoryEstimate m = estimate_zimage_memory(ZImageConfig{}, {.network = "lora", .patterns = {"layers.*"}},
//                                             {.latent_height = 128, .latent_width = 128, .text_length = 512,
//                                              .compute_dtype = DType::BF16, .gradient_checkpointing = true});
//
// shape.text_length is the caption length of every sample (the longest caption of the batch); the image and
// caption tokens are padded to multiples of 32 as the model pads them.
#pragma once

#include "models/memory/activation_memory.h"
#include "models/memory/memory_estimate.h"
#include "models/memory/training_plan.h"
#include "models/zimage/zimage_config.h"

namespace wick::zimage {

// The segments of a ZImageTransformer::forward and its loss: "embedders" (t, image and caption embedders, the RoPE
// tables), "noise_refiner.N", "context_refiner.N", "layers.N", "final_layer" (with the flow-matching loss).
ActivationProfile zimage_activation_profile(const ZImageConfig& config, const ActivationShape& shape,
                                            bool checkpointing, const LayerTrainingOf& training);

// estimate_planned_memory (models/memory/training_plan.h) for a model of `config`, unbuilt: its parameter shapes in
// config.dtype, its blocks, this profile.
MemoryEstimate estimate_zimage_memory(const ZImageConfig& config, const TrainingPlan& plan, const MemoryInputs& in);

}  // namespace wick::zimage
