// A Qwen-Image training step's memory, counted from the code: what each block's autograd nodes keep for backward
// (models/memory/activation_memory.h), and the estimate of a run from a QwenImageConfig alone, without weights.
//
//   ActivationProfile p = qwenimage_activation_profile(model.config(), shape, /*checkpointing=*/true,
//                                                      layer_training_of(model));
//   MemoryEstimate m = estimate_qwenimage_memory(QwenImageConfig{}, {.network = "lora", .patterns = {"transformer_blocks.*"}},
//                                                {.latent_height = 128, .latent_width = 128, .text_length = 256,
//                                                 .compute_dtype = DType::BF16, .gradient_checkpointing = true});
//
// shape.text_length is the text length of every sample (the batch's padded length); text-to-image (no Edit
// reference images).
#pragma once

#include "models/memory/activation_memory.h"
#include "models/memory/memory_estimate.h"
#include "models/memory/training_plan.h"
#include "models/qwenimage/qwenimage_config.h"

namespace wick::qwenimage {

// The segments of a QwenImageTransformer::forward and its loss: "embedders" (img_in, the timestep MLP, txt_norm and
// txt_in, the RoPE tables), "transformer_blocks.N", "norm_out" (with proj_out and the flow-matching loss).
ActivationProfile qwenimage_activation_profile(const QwenImageConfig& config, const ActivationShape& shape,
                                               bool checkpointing, const LayerTrainingOf& training);

// estimate_planned_memory (models/memory/training_plan.h) for a model of `config`, unbuilt: its parameter shapes in
// config.dtype, its blocks, this profile.
MemoryEstimate estimate_qwenimage_memory(const QwenImageConfig& config, const TrainingPlan& plan,
                                         const MemoryInputs& in);

}  // namespace wick::qwenimage
