// An SDXL UNet training step's memory, counted from the code: what each input, middle and output block's autograd
// nodes keep for backward (models/memory/activation_memory.h).
//
//   ActivationProfile p =
//       sdxl_activation_profile(unet.config(), shape, /*checkpointing=*/true, layer_training_of(unet));
#pragma once

#include "models/memory/activation_memory.h"
#include "models/sdxl/sdxl_config.h"

namespace wick::sdxl {

// The segments of Unet::forward and its loss: "embedders", "input_blocks.N", "middle_block", "output_blocks.N",
// "out" (with the loss on the prediction).
ActivationProfile sdxl_activation_profile(const UnetConfig& config, const ActivationShape& shape, bool checkpointing,
                                          const LayerTrainingOf& training);

}  // namespace wick::sdxl
