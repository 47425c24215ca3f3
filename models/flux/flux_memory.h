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

// The final layer of Flux's and FLUX.2's transformers (LastLayer: adaLN_modulation.1 on SiLU(vec), a LayerNorm of
// the last stream's image rows, linear) with the flow-matching loss on its prediction: the "final_layer" segment.
// `x` is the last stream (text and image rows) and whether it requires a gradient; vec_grad whether vec does.
struct FinalLayerSizes {
  int64_t batch = 0, img_rows = 0, hidden = 0, out_features = 0;
  DType dtype = DType::F32;
  Device device = Device::cpu();
};
ActivationSegment flux_final_layer_segment(const LayerTrainingOf& of, const FinalLayerSizes& sizes,
                                           const TokenStream& x, bool vec_grad);

// estimate_planned_memory (models/memory/training_plan.h) for a model of `config`, unbuilt: its parameter shapes in
// config.dtype, its blocks, this profile.
MemoryEstimate estimate_flux_memory(const FluxConfig& config, const TrainingPlan& plan, const MemoryInputs& in);

}  // namespace wick::flux
