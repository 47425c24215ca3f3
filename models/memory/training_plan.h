// The memory of a training run for a model that is not built (no weights: the full-size numbers of
// docs/training.md "Memory"), from its parameter shapes and its activation profile alone. What each
// architecture's estimate_<arch>_memory is made of; the architecture supplies only the profile.
//
//   TrainingPlan lora{.network = "lora", .patterns = {"double_blocks.*"}, .rank = 16};
//   std::vector<ParameterInfo> p = planned_parameters(shapes, DType::BF16, lora);   // + lora_down / lora_up
//   MemoryEstimate m = estimate_planned_memory({.shapes = shapes, .dtype = DType::BF16, .block_paths = blocks},
//                                              lora, profile_of, inputs);
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "models/memory/activation_memory.h"
#include "models/memory/memory_estimate.h"

namespace wick {

// What trains: network lora | dora (adapters of `rank` on every 2-d `.weight` whose module path matches one of
// `patterns`, f32, the rest frozen) or full (every parameter, in the model's dtype).
struct TrainingPlan {
  std::string network = "lora";
  std::vector<std::string> patterns = {};
  int64_t rank = 16;
};

// A model that is not built: every parameter's shape by name, the weights' dtype, its repeated blocks (what
// block swapping streams, DiffusionModel::block_paths).
struct PlannedModel {
  std::map<std::string, Shape> shapes;
  DType dtype = DType::BF16;
  std::vector<std::string> block_paths;
};

// The parameters `plan` gives the model: each shape (trainable when full), then after each adapted weight its
// lora_down [rank, in], lora_up [out, rank] (and dora_scale [1, in] for dora), f32 and trainable.
std::vector<ParameterInfo> planned_parameters(const std::map<std::string, Shape>& shapes, DType dtype,
                                              const TrainingPlan& plan);
// How each layer trains under `plan` (activation_memory.h), for the profile.
LayerTrainingOf planned_layer_training(const std::map<std::string, Shape>& shapes, const TrainingPlan& plan);

// The architecture's activation profile of its model for a step's shape (models/memory/activation_memory.h).
using ProfileOf = std::function<ActivationProfile(const ActivationShape& shape, bool checkpointing,
                                                  const LayerTrainingOf& training)>;

// estimate_training_memory for `model` trained as `plan`: in.compute_dtype is the activations' dtype, model.dtype
// the weights'; the profile is taken for in's batch, latent and text sizes on in.device, with and without
// gradient checkpointing; in.block_paths defaults to the model's.
MemoryEstimate estimate_planned_memory(const PlannedModel& model, const TrainingPlan& plan, const ProfileOf& profile_of,
                                       const MemoryInputs& in);

}  // namespace wick
