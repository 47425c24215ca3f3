// What a DiT training step keeps for backward, counted from models/dit/dit.cpp and the ops' saved
// tensors (models/memory/activation_memory.h); DiT::activation_profile returns it.
//
//   ActivationProfile p = dit_activation_profile(dit.config(), shape, /*checkpointing=*/false,
//                                                layer_training_of(dit));
#pragma once

#include "models/memory/activation_memory.h"
#include "models/dit/dit.h"

namespace wick {

// Segments "embedders", "blocks.N", "final_layer" (with the flow-matching loss).
ActivationProfile dit_activation_profile(const DiTConfig& config, const ActivationShape& shape, bool checkpointing,
                                         const LayerTrainingOf& training);

}  // namespace wick
